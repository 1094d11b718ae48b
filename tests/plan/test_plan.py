"""tfcomp.Plan: a compressor per tensor, in the exchange, the engines and checkpoints."""
import json
import pathlib
import re

import numpy as np
import pytest
import tensorflow as tf

import tfcomp
from tfcomp.engines import agreement
from tfcomp.compressors.registry import parse_compressor
from tfcomp.exchange.step import FINITE_FLAG_BYTES, Exchange
from tfcomp.state.variables import state_of
from tfcomp.testing import Emulator
from tfcomp.keras.optimizers import bind_exchange
from tests.cluster.horovod_cluster import horovodrun
from tests.cluster.local_cluster import run_workers
from tests.workers.workload import PLAN_MIN_COMPRESS_ELEMENTS, assert_identical_weights, mixed_plan
from tests.stacks import EVERY_STACK, HOROVOD

pytestmark = [pytest.mark.usefixtures("compress_from_the_first_step"), EVERY_STACK]  # what compression does, from step 0

K = 2
# Two PowerSGD tensors of one shape (batched together), an EFSignSGD tensor of
# that shape too (not batched with them), ACPSGD (two phases) beside one-phase
# compressors, TopK, a tensor sent dense by the plan and a 1-D one the plan
# maps to EFSignSGD (dense by the eligibility rules).
SHAPES = {"low/kernel:0": (64, 48), "low_twin/kernel:0": (64, 48), "sign/kernel:0": (64, 48),
          "sign/bias:0": (48,), "acp/kernel:0": (48, 40), "topk/kernel:0": (50, 40), "dense/kernel:0": (40, 30)}
NAMES = list(SHAPES)
GROUPS = [(tfcomp.PowerSGD(2), ["low/kernel:0", "low_twin/kernel:0"]),
          (tfcomp.EFSignSGD(), ["sign/kernel:0", "sign/bias:0"]), (tfcomp.ACPSGD(2), ["acp/kernel:0"]),
          (tfcomp.TopK(0.05), ["topk/kernel:0"]), (None, ["dense/kernel:0"])]


def plan():
    return tfcomp.Plan({"low*/kernel:0": GROUPS[0][0], "sign/*": GROUPS[1][0], "acp/*": GROUPS[2][0],
                        "topk/kernel:0": GROUPS[3][0], "dense/kernel:0": None})


def gradients(step, names):
    rng = np.random.default_rng(step)
    per_worker = [{n: rng.standard_normal(s).astype(np.float32) for n, s in SHAPES.items()} for _ in range(K)]
    return [[tf.constant(worker[n]) for n in names] for worker in per_worker]


def shapes_of(names):
    return [(SHAPES[n], tf.float32) for n in names]


# --- the Plan itself ---------------------------------------------------------------------------------

@pytest.mark.parametrize("choices, default, message", [
    ([("a", None)], None, "choices must be a dict"),
    ({"": tfcomp.FP16()}, None, "keys must be non-empty strings"),
    ({3: tfcomp.FP16()}, None, r"keys must be non-empty strings \(tensor names or fnmatch patterns\), got 3"),
    ({"a": "topk"}, None, "the value for 'a' must be a tfcomp compressor class or instance, or None"),
    ({"a": tfcomp.FP16}, "fp16", "default must be a tfcomp compressor"),
])
def test_bad_plans_are_refused_in_one_line(choices, default, message):
    with pytest.raises(ValueError, match=message) as raised:
        tfcomp.Plan(choices, default=default)
    assert "\n" not in str(raised.value)


def test_exact_names_beat_patterns_and_the_first_matching_pattern_wins():
    power, sign, fp16 = tfcomp.PowerSGD(4), tfcomp.EFSignSGD(), tfcomp.FP16()
    p = tfcomp.Plan({"dense*": sign, "dense_1*": power, "dense_1/kernel:0": tfcomp.TopK(0.1), "emb*": None},
                    default=fp16)
    assert isinstance(p.choose("dense_1/kernel:0"), tfcomp.TopK)  # exact, though two patterns come first
    assert p.choose("dense_1/bias:0") is sign  # "dense*" comes before "dense_1*"
    assert p.choose("Dense/kernel:0") is fp16  # case-sensitive
    assert isinstance(p.choose("emb/embeddings:0"), tfcomp.NoCompression)
    assert p.choose("conv/kernel:0") is fp16
    assert isinstance(tfcomp.Plan({}).choose("anything"), tfcomp.NoCompression)  # default None: dense


def test_keras2_names_match_the_keras3_paths_that_end_in_them():
    """Keras 3 names a variable by its path ("sequential/dense/kernel:0"), which ends in its
    Keras 2 name: one plan chooses the same on both, and only at a "/"."""
    plan_of_names = plan()
    for compressor, names in GROUPS:
        for name in names:
            for keras3 in (f"sequential/{name}", f"outer/inner/{name}"):
                assert plan_of_names.choose(keras3) is plan_of_names.choose(name), keras3
    power, sign, fp16 = tfcomp.PowerSGD(4), tfcomp.EFSignSGD(), tfcomp.FP16()
    p = tfcomp.Plan({"dense*": sign, "dense_1/kernel:0": power}, default=fp16)
    assert p.choose("sequential/dense_1/kernel:0") is power  # an exact end still beats a pattern
    assert p.choose("sequential/dense_1/bias:0") is sign
    assert p.choose("sequential/xdense_1/kernel:0") is fp16  # an end starts after a "/", not inside a part
    exact = tfcomp.Plan({"dense_1/kernel:0": power}, default=fp16)
    assert exact.choose("dense_1/kernel:0/extra") is fp16  # the key matches an end, not a beginning
    assert p.unmatched(["sequential/dense_1/kernel:0"]) == []
    assert p.unmatched(["sequential/conv/kernel:0"]) == ["dense*", "dense_1/kernel:0"]


def test_classes_are_instantiated_and_equal_compressors_shared():
    p = tfcomp.Plan({"a": tfcomp.EFSignSGD, "b": tfcomp.EFSignSGD(), "c": tfcomp.PowerSGD(2), "d": tfcomp.PowerSGD(4)})
    assert isinstance(p.choose("a"), tfcomp.EFSignSGD) and p.choose("a") is p.choose("b")
    assert p.choose("c") is not p.choose("d")


def test_none_means_dense_in_the_exchange_and_eligibility_still_applies():
    ex = Exchange(tfcomp.Plan({"big": None, "bias": tfcomp.EFSignSGD()}, default=tfcomp.EFSignSGD()))
    assert isinstance(ex.plan((512, 512), tf.float32, K, "big"), tfcomp.NoCompression)
    assert isinstance(ex.plan((4096,), tf.float32, K, "bias"), tfcomp.NoCompression)  # 1-D
    assert isinstance(ex.plan((16, 16), tf.float32, K, "small"), tfcomp.NoCompression)  # < 1024 elements
    assert isinstance(ex.plan((512, 512), tf.float32, K, "other"), tfcomp.EFSignSGD)
    with pytest.raises(ValueError, match="by tensor name"):
        ex.plan((512, 512), tf.float32, K)


def test_repr_and_config_keep_the_order_given():
    p = tfcomp.Plan({"z*": tfcomp.PowerSGD(2), "a": None}, default=tfcomp.FP16())
    assert repr(p) == "Plan({'z*': PowerSGD(matrix_approximation_rank=2), 'a': None}, default=FP16())"
    config = p.config()
    assert [key for key, _ in config["choices"]] == ["z*", "a"]
    assert config["choices"][0][1]["matrix_approximation_rank"] == 2 and config["choices"][1][1] is None
    assert config["default"] == {"name": "FP16"}


def test_table_says_what_each_tensor_runs_with_and_sends():
    p = tfcomp.Plan({"dense/kernel:0": tfcomp.PowerSGD(4), "nothing*": None}, default=tfcomp.EFSignSGD())
    text = p.table([((256, 128), tf.float32), ((128,), tf.float32), ((64, 10), tf.float32)],
                   ["dense/kernel:0", "dense/bias:0", "out/kernel:0"], K)
    lines = text.splitlines()
    assert lines[0].split() == ["tensor", "shape", "MiB", "runs", "with", "sent/step"]
    row = dict((line.split()[0], line) for line in lines[2:])
    assert "PowerSGD()" in row["dense/kernel:0"]  # at its defaults: rank 4
    assert row["dense/kernel:0"].endswith(f"{4 * 4 * (256 + 128):,} B")  # P and Q
    assert "dense (EFSignSGD(): 1-D)" in row["dense/bias:0"] and row["dense/bias:0"].endswith("512 B")
    assert "dense (EFSignSGD(): under 1024 elements)" in row["out/kernel:0"]
    assert row["out/kernel:0"].endswith("2,560 B")
    assert row["total"].endswith(f"{4 * 4 * 384 + 512 + 2560:,} B")
    assert lines[-1] == "keys that match no tensor: nothing*"


# --- the exchange ---------------------------------------------------------------------------------

def test_selection_is_off_under_a_plan_and_refused_when_asked_for():
    assert Exchange(tfcomp.Plan({}, default=tfcomp.DRAGONN(0.01))).selection is None
    assert Exchange(tfcomp.Plan({}), selection=False).selection is None
    with pytest.raises(ValueError, match="tensor selection does not apply to a tfcomp.Plan"):
        Exchange(tfcomp.Plan({}), selection=tfcomp.exchange.selection.EfficiencyAwareSelection())


def test_warmup_is_the_longest_of_the_plans_compressors():
    p = tfcomp.Plan({"a": tfcomp.PowerSGD(2, start_powerSGD_iter=5), "b": tfcomp.EFSignSGD()})
    assert Exchange(p, warmup_steps=3).warmup_steps == 5
    assert Exchange(p, warmup_steps=7).warmup_steps == 7


def test_same_shape_tensors_batch_only_with_the_same_compressor():
    units = Exchange(plan(), min_compress_elements=1).units(shapes_of(NAMES), NAMES, K)
    by_name = {name: type(c).__name__ for _, name, c in units}
    assert by_name == {"low/kernel:0+low_twin/kernel:0": "PowerSGD", "sign/kernel:0": "EFSignSGD",
                       "sign/bias:0": "NoCompression", "acp/kernel:0": "ACPSGD", "topk/kernel:0": "TopK",
                       "dense/kernel:0": "NoCompression"}


def test_payload_bytes_are_the_sum_of_each_tensors_compressor():
    ex = Exchange(plan(), min_compress_elements=1)
    expected = FINITE_FLAG_BYTES
    for compressor, names in GROUPS:
        alone = Exchange(compressor, min_compress_elements=1, selection=False, check_finite=False)
        expected += alone.payload_bytes(shapes_of(names), K)
    assert ex.payload_bytes(shapes_of(NAMES), K, NAMES) == expected
    with pytest.raises(ValueError, match="needs the tensors' names"):
        ex.payload_bytes(shapes_of(NAMES), K)


def run_steps(compression, names, steps, optimizer):
    emu = Emulator(K, compression, min_compress_elements=1, selection=False)
    bind_exchange(emu.exchange, optimizer)
    outputs = [emu.step(gradients(step, names), names) for step in range(steps)]
    return emu, outputs


def test_each_tensor_gets_exactly_what_its_compressor_alone_gives():
    """Bitwise, on both workers, over 4 steps (both ACPSGD phases twice), with
    momentum taken over where the compressor does that (bound per compressor)."""
    optimizer = tf.keras.optimizers.SGD(0.1, momentum=0.9)
    emu, outputs = run_steps(plan(), NAMES, 4, optimizer)
    sign = emu.exchange.compressor.choose("sign/kernel:0")
    assert sign.momentum == 0.9 and set(emu.states[0].get("sign/kernel:0")) == {"residual", "velocity",
                                                                                 "handed_off"}
    for compressor, names in GROUPS:
        alone, alone_outputs = run_steps(compressor, names, 4, optimizer)
        for step in range(4):
            for rank in range(K):
                for name, expected in zip(names, alone_outputs[step][rank]):
                    got = outputs[step][rank][NAMES.index(name)]
                    np.testing.assert_array_equal(got.numpy(), expected.numpy(), err_msg=f"{name} step {step}")
        units = [name for _, name, _ in alone.exchange.units(shapes_of(names), names, K)]
        for rank in range(K):
            assert int(emu.states[rank].step.numpy()) == int(alone.states[rank].step.numpy()) == 4
            for unit in units:
                ours, theirs = emu.states[rank].get(unit) or {}, alone.states[rank].get(unit) or {}
                assert set(ours) == set(theirs), unit
                for key in theirs:
                    np.testing.assert_array_equal(ours[key].numpy(), theirs[key].numpy(), err_msg=f"{unit} {key}")


def test_what_the_workers_send_matches_payload_bytes():
    emu, _ = run_steps(plan(), NAMES, 2, tf.keras.optimizers.SGD(0.1))  # ACPSGD sends P, then Q
    sent = sum(nbytes for _, nbytes in emu.traffic) / 2
    assert sent == emu.exchange.payload_bytes(shapes_of(NAMES), K, NAMES)


def test_momentum_auto_is_resolved_for_every_compressor_of_the_plan():
    p = tfcomp.Plan({"a": tfcomp.EFSignSGD(), "b": tfcomp.DGC(0.1), "c": tfcomp.PowerSGD(2)},
                    default=tfcomp.TopK(0.1, momentum=None))
    ex = Exchange(p, min_compress_elements=1)
    bind_exchange(ex, tf.keras.optimizers.SGD(0.1, momentum=0.9))
    assert ex.configured is p and ex.compressor is not p
    assert ex.compressor.choose("a").momentum == 0.9 and ex.compressor.choose("b").momentum == 0.9
    assert ex.compressor.choose("d").momentum is None  # taken as given
    assert p.choose("a").momentum == "auto"  # the user's plan is left as it was
    specs = ex.state_specs([((32, 32), tf.float32)] * 4, ["a", "b", "c", "d"], K)
    assert set(specs["a"]) == set(specs["b"]) == {"residual", "velocity", "handed_off"}
    assert set(specs["c"]) == {"p", "q", "residual"} and set(specs["d"]) == {"residual"}
    bind_exchange(ex, tf.keras.optimizers.SGD(0.1, momentum=0.9))  # the same again: fine
    with pytest.raises(ValueError, match="per optimizer"):
        bind_exchange(ex, tf.keras.optimizers.SGD(0.1, momentum=0.5))
    twice = Exchange(tfcomp.Plan({"a": tfcomp.EFSignSGD(momentum=0.9)}))
    with pytest.raises(ValueError, match="momentum=0"):
        bind_exchange(twice, tf.keras.optimizers.SGD(0.1, momentum=0.9))


def test_workers_with_different_plans_disagree_at_construction():
    ours = Exchange(tfcomp.Plan({"a": tfcomp.PowerSGD(4), "b": tfcomp.EFSignSGD()}))
    reordered = Exchange(tfcomp.Plan({"b": tfcomp.EFSignSGD(), "a": tfcomp.PowerSGD(4)}))
    same = Exchange(tfcomp.Plan({"a": tfcomp.PowerSGD(4), "b": tfcomp.EFSignSGD()}))
    mine = agreement.fingerprint(ours)[1]
    assert agreement.fingerprint(same)[1] == mine
    agreement.check_workers_agree(ours, lambda value: [value, agreement.fingerprint(same)[1]], 0)
    with pytest.raises(ValueError, match="workers disagree on the compression"):
        agreement.check_workers_agree(ours, lambda value: [value, agreement.fingerprint(reordered)[1]], 0)


# --- checkpoints ---------------------------------------------------------------------------------

def saved_state(tmp_path, compression, names, fill=1.0, record=True):
    """A checkpoint of an optimizer-like owner whose state was built for compression."""
    ex = Exchange(compression, min_compress_elements=1)
    owner = tf.Module()
    state = state_of(owner, ex.state_specs(shapes_of(names), names, K),
                     ex.choices(shapes_of(names), names) if record else None)
    for variables in state._tensors.values():  # pylint: disable=protected-access
        for v in variables.values():
            v.assign(tf.fill(v.shape, fill))
    return tf.train.Checkpoint(owner=owner).write(str(tmp_path / "ckpt"))


def resume(path, compression, names):
    """What an engine does on a resumed run: restore (deferred), then build and attach the state."""
    owner = tf.Module()
    tf.train.Checkpoint(owner=owner).read(path)
    ex = Exchange(compression, min_compress_elements=1)
    return state_of(owner, ex.state_specs(shapes_of(names), names, K), ex.choices(shapes_of(names), names))


NAMES_2 = ["low/kernel:0", "sign/kernel:0", "dense/kernel:0"]


def test_the_plan_is_saved_with_the_state_and_a_resume_under_it_restores(tmp_path):
    p = tfcomp.Plan({"low*": tfcomp.PowerSGD(2), "sign*": tfcomp.EFSignSGD()})
    path = saved_state(tmp_path, p, NAMES_2, fill=3.0)
    assert any("tfcomp_plan" in name for name, _ in tf.train.list_variables(path))
    state = resume(path, tfcomp.Plan({"low*": tfcomp.PowerSGD(2), "sign*": tfcomp.EFSignSGD()}), NAMES_2)
    for name in ("low/kernel:0", "sign/kernel:0"):
        np.testing.assert_array_equal(state.get(name)["residual"].numpy(), np.full(SHAPES[name], 3.0))


@pytest.mark.parametrize("resumed_with, differing", [
    # A tensor the checkpoint compressed with EFSignSGD, now PowerSGD (whose state has keys the checkpoint lacks).
    (tfcomp.Plan({"low*": tfcomp.PowerSGD(2), "sign*": tfcomp.PowerSGD(2)}), "sign/kernel:0"),
    (tfcomp.Plan({"low*": tfcomp.PowerSGD(4), "sign*": tfcomp.EFSignSGD()}), "low/kernel:0"),
    (tfcomp.Plan({"low*": tfcomp.PowerSGD(2), "sign*": tfcomp.EFSignSGD(), "dense*": tfcomp.FP16()}),
     "dense/kernel:0"),
    (tfcomp.EFSignSGD(), "low/kernel:0"),
])
def test_resuming_under_another_plan_names_the_first_differing_tensor(tmp_path, resumed_with, differing):
    p = tfcomp.Plan({"low*": tfcomp.PowerSGD(2), "sign*": tfcomp.EFSignSGD()})
    path = saved_state(tmp_path, p, NAMES_2)
    with pytest.raises(ValueError, match=f"for tensor '{differing}'; this run uses") as raised:
        resume(path, resumed_with, NAMES_2)
    assert "resume with the compression" in str(raised.value)


def test_checkpoints_without_a_plan_record_still_load(tmp_path):
    path = saved_state(tmp_path, tfcomp.EFSignSGD(), NAMES_2, fill=2.0, record=False)
    state = resume(path, tfcomp.EFSignSGD(), NAMES_2)
    np.testing.assert_array_equal(state.get("low/kernel:0")["residual"].numpy(), np.full(SHAPES["low/kernel:0"], 2.0))


# --- real engines ---------------------------------------------------------------------------------

PLAN_STEPS = 16
DENSE_BYTES = 4 * (64 * 64 + 64 + 64 * 10 + 10)


def expected_payload_bytes():
    names = ["dense/kernel:0", "dense/bias:0", "dense_1/kernel:0", "dense_1/bias:0"]
    shapes = [((64, 64), tf.float32), ((64,), tf.float32), ((64, 10), tf.float32), ((10,), tf.float32)]
    return Exchange(mixed_plan(), min_compress_elements=PLAN_MIN_COMPRESS_ELEMENTS).payload_bytes(shapes, K, names)


def assert_trained_with_the_plan(results):
    assert_identical_weights(results)
    losses = results[0]["losses"]
    assert losses[-1] < losses[0], losses
    assert results[0]["state_step"] == PLAN_STEPS
    assert results[0]["payload_bytes"] == expected_payload_bytes() < DENSE_BYTES


def test_a_plan_under_multi_worker_mirrored_strategy(tmp_path):
    args = ["--plan", f"--min_compress_elements={PLAN_MIN_COMPRESS_ELEMENTS}", f"--steps={PLAN_STEPS}",
            "--lr=0.2"]
    codes, logs, results = run_workers("tests.workers.mwms_worker", K, args, tmp_path)
    assert codes == [0] * K, "worker failed:\n" + "\n".join(log[-3000:] for log in logs)
    assert_trained_with_the_plan(results)


@HOROVOD
def test_a_plan_under_horovod(tmp_path):
    args = ["--plan", f"--min_compress_elements={PLAN_MIN_COMPRESS_ELEMENTS}", f"--steps={PLAN_STEPS}",
            "--lr=0.2"]
    code, log, results = horovodrun("tests.workers.horovod_worker", K, args, tmp_path)
    assert code == 0 and None not in results, f"horovodrun exited {code}:\n{log[-4000:]}"
    assert_trained_with_the_plan(results)


def test_resuming_a_plans_backup_under_another_compression_fails_naming_the_tensor(tmp_path):
    backup = tmp_path / "backup"
    options = [f"--min_compress_elements={PLAN_MIN_COMPRESS_ELEMENTS}", f"--steps={PLAN_STEPS}",
               f"--backup_dir={backup}"]
    codes, logs, _ = run_workers("tests.workers.mwms_worker", K, ["--plan", "--interrupt_at=12", *options],
                                 tmp_path / "interrupted")
    assert codes == [3] * K, logs
    codes, logs, _ = run_workers("tests.workers.mwms_worker", K, ["--compression=EFSignSGD", *options],
                                 tmp_path / "resumed", stop_on_failure_s=30)
    assert all(code != 0 for code in codes), codes
    for log in logs:  # the tensor as the engine names it: Keras 3 by its path ("sequential/dense/kernel:0")
        assert re.search(r"for tensor '(sequential/)?dense/kernel:0'; this run uses EFSignSGD\(", log), log[-3000:]


# --- plans from the planner ---------------------------------------------------------------------

# A measured profile (tests/data/README.md).
PROFILE = pathlib.Path(__file__).resolve().parents[1] / "data" / "recorded_resnet50_profile.json"


def planned(tmp_path, gbit):
    """What `python -m tfcomp.analysis plan --output` writes for a committed ResNet-50 profile."""
    from tfcomp.analysis.model import planner  # pylint: disable=import-outside-toplevel
    from tfcomp.costs.network import Link  # pylint: disable=import-outside-toplevel
    from tfcomp.analysis.model.profile import Profile  # pylint: disable=import-outside-toplevel
    result = planner.plan(Profile.load(PROFILE), 2, link=Link.from_gbit(gbit))
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(result.to_dict()))
    return result, path


@pytest.mark.parametrize("gbit", [0.1, 1.0])
def test_a_planners_plan_loads_with_every_gradients_choice(tmp_path, gbit):
    result, path = planned(tmp_path, gbit)
    loaded = tfcomp.Plan.load(path)
    compressed = {name: spec for name, spec in result.choices.items() if spec is not None}
    assert compressed, "the planner compressed nothing: the test would check nothing"
    for name, spec in result.choices.items():
        chosen = loaded.choose(name)
        if spec is None:
            assert isinstance(chosen, tfcomp.NoCompression), name
        else:
            assert chosen.config() == parse_compressor(spec).config(), (name, spec)
    assert isinstance(loaded.choose("a/tensor/the/profile/lacks:0"), tfcomp.NoCompression)


@pytest.mark.parametrize("content, message", [
    ("{not json", "cannot read"),
    (json.dumps({"format": "tfcomp.analysis.profile", "version": 1}), "is not a plan written by"),
    (json.dumps({"format": "tfcomp.analysis.plan", "version": 7, "choices": {}}), "plan format version 7"),
    (json.dumps({"format": "tfcomp.analysis.plan", "version": 1, "choices": {"a:0": "Zip:level=3"}}),
     "no tfcomp compressor 'Zip'"),
])
def test_plan_load_refuses_what_is_not_a_plan_in_one_line(tmp_path, content, message):
    path = tmp_path / "plan.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=message) as raised:
        tfcomp.Plan.load(path)
    assert "\n" not in str(raised.value)
    with pytest.raises(ValueError, match="cannot read"):
        tfcomp.Plan.load(tmp_path / "missing.json")
