"""compression=tfcomp.Auto(): construction, the exchange's switches, the averaged
profile every worker plans from, and the whole loop (profile, plan, switch, check,
fall back, resume) with real workers of both engines."""
import dataclasses
import os
import pathlib
import types

import numpy as np
import pytest
import tensorflow as tf

import tfcomp
from tfcomp.analysis.model.profile import Profile
from tfcomp.auto.phases import AUDIT, DENSE, PLANNED, PROFILING
from tfcomp.exchange.step import Exchange
from tfcomp.state.variables import CompressionState
from tfcomp.testing import Emulator
from tests.cluster.horovod_cluster import horovodrun
from tests.cluster.local_cluster import run_workers
from tests.cluster.slow_link import emulated_link
from tests.workers.workload import assert_identical_weights
from tests.stacks import HOROVOD, KERAS2_ON_PINNED, PINNED, stacks

pytestmark = KERAS2_ON_PINNED

# A measured profile (tests/data/README.md).
PROFILE = pathlib.Path(__file__).resolve().parents[1] / "data" / "recorded_resnet50_profile.json"


# --- construction ---------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, message", [
    ({"candidates": [tfcomp.NoCompression()]}, "dense is always an option"),
    ({"candidates": []}, "at least one candidate"),
    ({"candidates": [tfcomp.FP16(), tfcomp.FP16]}, "candidates must differ"),
    ({"candidates": ["FP16"]}, "compression must be a tfcomp compressor"),
    ({"network": 1.0}, "network must be None"),
    ({"profile_steps": 0}, "profile_steps must be an integer >= 1"),
    ({"check_steps": 0}, "check_steps must be an integer >= 1"),
    ({"check_steps": 3, "rounds": 4}, r"rounds must be an integer in \[1, check_steps=3\]"),
    ({"rounds": 0}, "rounds must be an integer in"),
    ({"replan_every": 1}, "replan_every must be None or an integer >= 2"),
    ({"audit_steps": 2, "rounds": 4}, r"audit_steps must be 0 or an integer >= rounds=4"),
    ({"audit_steps": -1}, "audit_steps must be 0 or an integer"),
    ({"drift": 0}, "drift must be > 0"),
    ({"margin": 1.0}, "margin must be a fraction"),
    ({"margin": -0.01}, "margin must be a fraction"),
])
def test_bad_arguments_are_refused_in_one_line(kwargs, message):
    with pytest.raises(ValueError, match=message) as raised:
        tfcomp.Auto(**kwargs)
    assert "\n" not in str(raised.value)


def test_an_auto_runs_dense_until_it_decides_and_then_its_plan():
    auto = tfcomp.Auto([tfcomp.PowerSGD(2), tfcomp.EFSignSGD()])
    exchange = Exchange(auto, min_compress_elements=1)
    assert auto.phase == PROFILING and isinstance(exchange.compressor, tfcomp.NoCompression)
    assert exchange.config()["compressor"]["name"] == "Auto"
    auto.decide(PLANNED, {"a": "PowerSGD(matrix_approximation_rank=2)", "b": "EFSignSGD()"})
    assert exchange.is_plan
    assert isinstance(exchange.plan((64, 32), tf.float32, 2, "a"), tfcomp.PowerSGD)
    assert isinstance(exchange.plan((64, 32), tf.float32, 2, "b"), tfcomp.EFSignSGD)
    assert isinstance(exchange.plan((64, 32), tf.float32, 2, "c"), tfcomp.NoCompression)
    auto.decide(DENSE, reason="test")
    assert isinstance(exchange.compressor, tfcomp.NoCompression)
    assert [h["phase"] for h in auto.history] == [PLANNED, DENSE]
    with pytest.raises(ValueError, match="not candidates"):
        auto.decide(PLANNED, {"a": "TopK(ratio=0.1)"})


def test_a_compressed_trial_is_kept_only_by_its_margin_over_dense():
    assert tfcomp.Auto().margin == 0.05
    auto = tfcomp.Auto(margin=0.1)
    assert auto.beats_dense(0.9) and auto.beats_dense(0.5)
    assert not auto.beats_dense(0.91) and not auto.beats_dense(1.0) and not auto.beats_dense(1.01)
    assert tfcomp.Auto(margin=0).beats_dense(1.0)  # margin 0: ties go to the compressed trial
    assert auto.config()["margin"] == 0.1 != tfcomp.Auto().config()["margin"]  # workers must agree on it


def test_one_auto_per_exchange_and_no_tensor_selection():
    auto = tfcomp.Auto()
    Exchange(auto)
    with pytest.raises(ValueError, match="already decides for another"):
        Exchange(auto)
    with pytest.raises(ValueError, match="tensor selection does not apply to tfcomp.Auto"):
        Exchange(tfcomp.Auto(), selection=tfcomp.exchange.selection.EfficiencyAwareSelection())
    with pytest.raises(ValueError, match="only an exchange under a controller .tfcomp.Auto."):
        Exchange(tfcomp.FP16()).use(tfcomp.NoCompression())


def test_without_its_callback_auto_refuses_the_first_step():
    emu = Emulator(2, tfcomp.Auto())
    grads = [[tf.ones((64, 32))] for _ in range(2)]
    with pytest.raises(ValueError, match=r"callbacks=\[auto.callback\(\)\]"):
        emu.step(grads, ["a"])


def test_a_checkpoint_made_with_other_candidates_is_refused():
    auto = tfcomp.Auto([tfcomp.FP16()])
    with pytest.raises(ValueError, match="Resume with the same candidates"):
        auto.restore({"phase": PLANNED, "choices": {}, "decision": {}, "candidates": ["EFSignSGD()"]})
    auto.restore({"phase": PROFILING, "choices": {}, "decision": {}, "candidates": ["FP16()"]})
    assert auto.phase == PROFILING and not auto.history  # nothing decided yet: profile again


def test_the_decision_round_trips_through_a_checkpoint(tmp_path):
    auto = tfcomp.Auto([tfcomp.FP16(), tfcomp.PowerSGD(2)])
    Exchange(auto)
    auto.decide(PLANNED, {"dense/kernel:0": "PowerSGD(matrix_approximation_rank=2)"}, dense_ms=10.0, plan_ms=5.0)
    owner = tf.Module()
    auto.attach(owner)
    path = tf.train.Checkpoint(owner=owner).write(str(tmp_path / "ckpt"))
    resumed = tfcomp.Auto([tfcomp.FP16(), tfcomp.PowerSGD(2)])
    exchange = Exchange(resumed)
    owner = tf.Module()
    tf.train.Checkpoint(owner=owner).read(path)
    resumed.attach(owner)  # what bind_optimizer does on the first traced step
    assert resumed.phase == PLANNED and resumed.choices == auto.choices
    assert resumed.decision["plan_ms"] == 5.0 and resumed.history[-1]["restored"]
    assert isinstance(exchange.plan((64, 64), tf.float32, 2, "dense/kernel:0"), tfcomp.PowerSGD)


# --- what it plans from ------------------------------------------------------------------------------

def test_the_averaged_profile_is_every_workers_mean_in_one_order():
    """Two workers' profiles of one model (the second one's numbers doubled, its gradients,
    all ready at backward end, listed in another order): both get the mean, gradients in
    the order given."""
    loaded = Profile.load(PROFILE)
    mine = dataclasses.replace(loaded, model=loaded.model.ready_at_backward_end())
    data = mine.to_dict()
    data["model"]["forward_s"] *= 2
    data["links"]["allreduce"]["bandwidth_bytes_per_s"] *= 2
    for name in data["compressors"]:
        data["compressors"][name]["encode"] = [[size, 2 * s] for size, s in data["compressors"][name]["encode"]]
    data["model"]["gradients"].reverse()
    theirs = Profile.from_dict(data)
    order = sorted(g.name for g in mine.model.gradients)
    sent = {}  # what each worker puts into the collective
    for who, profile in (("mine", mine), ("theirs", theirs)):
        profile.averaged(lambda values, who=who: sent.setdefault(who, values), order=order)
    assert len(sent["mine"]) == len(sent["theirs"])
    averaged = [(a + b) / 2 for a, b in zip(sent["mine"], sent["theirs"])]
    results = [p.averaged(lambda _: averaged, order=order) for p in (mine, theirs)]
    assert results[0].to_dict() == results[1].to_dict()
    result = results[0]
    assert result.model.forward_s == pytest.approx(1.5 * mine.model.forward_s)
    assert result.allreduce.bandwidth_bytes_per_s == pytest.approx(1.5 * mine.allreduce.bandwidth_bytes_per_s)
    assert result.allgather == mine.allgather
    for name, compressor in mine.compressors.items():
        np.testing.assert_allclose(np.array(result.compressors[name].encode.points()),
                                   np.array(compressor.encode.points()) * [1.0, 1.5])
        assert result.compressors[name].payloads == compressor.payloads
    assert [g.name for g in result.model.gradients] == order
    assert {g.name: g.nbytes for g in result.model.gradients} == {g.name: g.nbytes for g in mine.model.gradients}


def test_state_grows_and_remakes_variables_when_the_compressor_changes():
    state = CompressionState(name="auto_state_test")
    state.tensor_state("w", {})  # dense while profiling
    grown = state.tensor_state("w", {"residual": ((4, 3), tf.float32), "velocity": ((4, 3), tf.float32)})
    assert set(grown) == {"residual", "velocity"}
    grown["residual"].assign(tf.ones((4, 3)))
    again = state.tensor_state("w", {"residual": ((4, 3), tf.float32)})
    assert again["residual"] is grown["residual"]  # kept where the shape still fits
    remade = state.tensor_state("w", {"residual": ((4, 3), tf.float32), "p": ((4, 2), tf.float32)})
    assert remade["p"].shape == (4, 2)
    state.tensor_state("w", {"p": ((4, 1), tf.float32)})
    assert state.get("w")["p"].shape == (4, 1)
    state.zero()
    assert not np.any(state.get("w")["residual"].numpy())


def test_state_stands_again_for_the_variables_a_train_function_traced_before_reads():
    state = CompressionState(name="auto_state_reuse_test")
    first = state.tensor_state("w", {"p": ((4, 2), tf.float32)})["p"]
    traced_first = state.in_use()
    second = state.tensor_state("w", {"p": ((4, 1), tf.float32)})["p"]  # another rank: a new variable
    assert second is not first and traced_first["w"]["p"] is first
    first.assign(tf.ones((4, 2)))
    state.use(traced_first)  # back to the first function: zero() and checkpoints reach its variable
    assert state.get("w")["p"] is first
    state.zero()
    assert not np.any(first.numpy())
    state.tensor_state("w", {"p": ((4, 1), tf.float32)})  # remade again: the kept snapshot is not changed
    assert traced_first["w"]["p"] is first


def test_after_a_new_trace_only_what_it_reads_is_saved_and_zero_still_reaches_every_variable(tmp_path):
    """tfcomp.Auto traces each trial anew (begin_trace): a checkpoint then carries the state the
    running function reads, not a replaced trial's, and restores into it."""
    state = CompressionState(name="auto_state_trace_test")
    state.build({"w": {"handed_off": ((4, 3), tf.float32), "residual": ((4, 3), tf.float32)},
                 "v": {"p": ((3, 2), tf.float32)}})
    replaced = state.get("w")["handed_off"]
    state.begin_trace()
    state.build({"w": {"residual": ((4, 3), tf.float32)}})
    assert {key: set(states) for key, states in state.in_use().items()} == {"w": {"residual"}}
    for variable in (replaced, state.get("w")["residual"]):
        variable.assign(tf.fill((4, 3), 2.0))
    path = tf.train.Checkpoint(state=state).write(str(tmp_path / "kept"))
    saved = {name for name, _ in tf.train.list_variables(path)}
    assert any("residual" in name for name in saved) and not any("handed_off" in name or "--p" in name
                                                                  for name in saved), saved
    restored = CompressionState(name="auto_state_trace_test")
    restored.build({"w": {"residual": ((4, 3), tf.float32)}})
    tf.train.Checkpoint(state=restored).read(path).assert_consumed()
    np.testing.assert_array_equal(restored.get("w")["residual"].numpy(), np.full((4, 3), 2.0))
    state.zero()  # a switch zeroes every variable made, the replaced trial's too
    assert not np.any(replaced.numpy())


# --- real workers -----------------------------------------------------------------------------------

STEPS = 32
SLOW_LINK = "20mbit"  # dense exchange of the 1024-unit MLP's 300 KB: about 250 ms a step
# Planned for 100 kbit/s, run on loopback: at 1 Mbit/s a machine loaded enough to slow the
# candidate's measured encode tenfold had the planner keep dense, and nothing to fall back from.
FORCED_TO_LOSE = ["--slow_candidate", "--network_gbps=0.0001"]


def check_ok(codes, logs, expected=0):
    assert codes == [expected] * len(codes), "\n".join(log[-4000:] for log in logs)


@pytest.mark.skipif(os.geteuid() != 0, reason="the slow link is a network namespace shaped with tc: needs root")
def test_auto_keeps_the_fastest_measured_trial_and_a_resumed_run_keeps_it(tmp_path):
    """Profiling ends at step 8; dense and two trials (the plan, then the single compressor
    predicted fastest) run interleaved, 2 rounds of 2 timed steps each (after a first trace
    2 steps untimed, after a switch back 1): the fastest against dense is kept at step 27
    and backed up at 32; the run stops at 36 and resumes from the backup."""
    args = ["--hidden=1024", "--steps=48", "--trials=2", f"--backup_dir={tmp_path / 'backup'}"]
    with emulated_link(SLOW_LINK) as prefix:
        codes, logs, _ = run_workers("tests.workers.auto_worker", 2, [*args, "--interrupt_at=36"], tmp_path / "first",
                                     prefix=prefix)
        check_ok(codes, logs, expected=3)
        for log in logs:
            assert "tfcomp.Auto: keeping" in log, log[-4000:]
        codes, logs, resumed = run_workers("tests.workers.auto_worker", 2, args, tmp_path / "resumed", prefix=prefix)
        check_ok(codes, logs)
    for r in resumed:  # the checkpoint's decision taken up: no profiling, no trials, no switch
        (decision,) = r["history"]
        assert decision["restored"] and decision["phase"] == PLANNED
        trials = decision["trials"]
        assert [t["label"] for t in trials][0] == "plan" and len(trials) == 3 and trials[2]["label"] == DENSE, trials
        kept = min(trials[:2], key=lambda t: t["vs_dense"])  # each against dense's blocks of the same rounds
        assert decision["plan_ms"] == kept["ms"] and kept["vs_dense"] <= 0.95 and trials[2]["vs_dense"] == 1.0
        assert decision["dense_ms"] == trials[2]["ms"] and decision["settled_step"] == 28
        assert r["traces"] <= 2, r["traces"]  # Keras' first call of a train function (profiling adds a third)
        assert r["step"] == 48
    assert resumed[0]["choices"] and all(r["choices"] == resumed[0]["choices"] for r in resumed)
    assert resumed[0]["payload_bytes"] < resumed[0]["dense_bytes"] / 2
    assert_identical_weights(resumed)


# Auto's decisions are the same code under either Keras: Keras 3 runs its callback on 2 workers
# in test_auto_keeps_the_fastest_measured_trial_and_a_resumed_run_keeps_it.
SAME_CALLBACK_ON_KERAS3 = stacks(PINNED, why="the same callback as under Keras 2: Keras 3 runs it on 2 workers in "
                                 "test_auto_keeps_the_fastest_measured_trial_and_a_resumed_run_keeps_it")


@SAME_CALLBACK_ON_KERAS3
def test_auto_falls_back_to_dense_when_its_plan_loses(tmp_path):
    codes, logs, results = run_workers("tests.workers.auto_worker", 2, [*FORCED_TO_LOSE, f"--steps={STEPS}"], tmp_path)
    check_ok(codes, logs)
    assert_fell_back(results)


@SAME_CALLBACK_ON_KERAS3
def test_auto_plans_again_when_the_step_time_drifts_also_after_keeping_dense(tmp_path):
    """Forced to lose, Auto keeps dense at step 20; from step 28 every step takes 100 ms more
    (as on a slower link, many times a step here): the first replan_every window that sees
    it sends Auto back to profiling, and it decides again. drift=3 (300%) so that a busy
    machine's noise (a 6 ms step measured at 17 ms) does not re-plan first."""
    codes, logs, results = run_workers("tests.workers.auto_worker", 2, [*FORCED_TO_LOSE, "--replan_every=8",
                                                                        "--drift=3", "--slow_from_step=28",
                                                                        "--steps=64"], tmp_path)
    check_ok(codes, logs)
    for r in results:
        history = r["history"]
        (kept_dense,) = [h for h in history if h["phase"] == DENSE and h["step"] <= 28]
        (drift,) = [h for h in history if h["phase"] == PROFILING]
        assert drift["reason"].startswith("drifted from") and 28 < drift["step"] <= 44, drift
        assert kept_dense["step"] < drift["step"]
        assert [h for h in history if h["step"] > drift["step"] and h["phase"] in (DENSE, PLANNED)], history
    decided = [[(h["phase"], h.get("step"), h.get("trial")) for h in r["history"]] for r in results]
    assert decided[0] == decided[1]  # the workers decide together
    assert_identical_weights(results)


@HOROVOD
def test_auto_under_horovod_falls_back_to_dense_when_its_plan_loses(tmp_path):
    code, log, results = horovodrun("tests.workers.auto_worker", 2, ["--engine=horovod", *FORCED_TO_LOSE,
                                                              f"--steps={STEPS}"], tmp_path)
    assert code == 0 and None not in results, log[-4000:]
    assert_fell_back(results)


@SAME_CALLBACK_ON_KERAS3
def test_auto_audits_its_choice_side_by_side_and_a_run_resumed_in_the_audit_goes_back_to_it(tmp_path):
    """Forced to lose, Auto falls back to dense at step 20; its audit then times dense and
    the single candidate (which runs as the plan did) interleaved, 4 steps each in 2 rounds,
    with the trials' train functions, and records what staying dense cost against the
    fastest. The backup at step 24 is taken in the audit's candidate block: a run resumed
    from it goes back to dense."""
    args = [*FORCED_TO_LOSE, "--audit_steps=4", f"--backup_dir={tmp_path / 'backup'}"]
    codes, logs, results = run_workers("tests.workers.auto_worker", 2, [*args, "--steps=32"], tmp_path / "first")
    check_ok(codes, logs)
    for r in results:
        *decisions, audit = r["history"]
        fell_back = decisions[-1]
        assert fell_back["phase"] == DENSE and audit["phase"] == AUDIT, r["history"]
        assert audit["started_step"] == fell_back["settled_step"] == 20
        trials = audit["trials"]
        assert [t["label"] for t in trials] == [DENSE, "SlowFP16()"] and trials[0]["vs_dense"] == 1.0
        assert trials[1]["vs_dense"] > 1.05  # measured afresh: the same loser as in the trials
        assert audit["kept"] == DENSE and audit["fastest"] == DENSE and audit["regret"] == 0.0
        assert audit["vs_dense"] == 1.0
        # 2 rounds: dense, the candidate | the candidate, dense; each switch back leaves one step untimed
        assert audit["step"] == 31 and audit["settled_step"] == 31
        assert r["phase"] == DENSE and not r["choices"] and r["step"] == 32  # the decision stands
        assert r["traces"] == decisions[1]["traces"] + 1  # the audit traced nothing the trials had not
    assert results[0]["history"][-1]["trials"] == results[1]["history"][-1]["trials"]  # every worker's mean
    assert_identical_weights(results)

    codes, logs, _ = run_workers("tests.workers.auto_worker", 2, [*args, "--steps=32", "--interrupt_at=28"],
                                 tmp_path / "stopped")
    check_ok(codes, logs, expected=3)
    codes, logs, resumed = run_workers("tests.workers.auto_worker", 2, [*args, "--steps=32"], tmp_path / "resumed")
    check_ok(codes, logs)
    for r, log in zip(resumed, logs):
        (restored,) = r["history"]
        assert restored["restored"] and restored["trial"] == "SlowFP16()" and restored["audit_of"]["phase"] == DENSE
        assert "resumed during its audit" in log, log[-4000:]
        assert r["phase"] == DENSE and not r["choices"] and r["step"] == 32
        assert r["payload_bytes"] == r["dense_bytes"]
    assert_identical_weights(resumed)


def assert_fell_back(results):
    for r in results:
        dense_first, planned, fell_back = r["history"]  # a trial's later blocks add no entry
        assert dense_first["trial"] == DENSE and dense_first["compressed"] == 0
        assert planned["phase"] == PLANNED and planned["trial"] == "plan" and planned["compressed"] >= 1
        assert fell_back["phase"] == DENSE and "faster than dense" in fell_back["reason"]
        # the reference is dense timed in the same rounds as the plan, not the profiled steps
        plan_trial, dense_trial = fell_back["trials"]
        assert (plan_trial["label"], dense_trial["label"]) == ("plan", DENSE)
        assert fell_back["dense_ms"] == dense_trial["ms"] and fell_back["plan_ms"] == plan_trial["ms"]
        assert plan_trial["vs_dense"] > 0.95 and dense_trial["vs_dense"] == 1.0
        # 2 rounds end on dense: falling back needs no switch
        assert fell_back["settled_step"] == fell_back["step"] + 12
        assert r["phase"] == DENSE and not r["choices"] and r["step"] == STEPS
        assert r["payload_bytes"] == r["dense_bytes"]  # dense, with no non-finite flag (nothing to protect)
        # Only the plan is traced: dense runs Keras' own train function, traced for profiling,
        # and the switches back to either are kept functions.
        assert r["traces"] == planned["traces"] + 1
    assert results[0]["history"] == results[1]["history"] or all(
        {k: v for k, v in a.items() if k != "profiling_s"} == {k: v for k, v in b.items() if k != "profiling_s"}
        for a, b in zip(results[0]["history"], results[1]["history"]))
    assert_identical_weights(results)


def test_trials_are_the_plan_then_the_fastest_predicted_singles_each_run_once():
    power, sign, fp16, topk = "PowerSGD(matrix_approximation_rank=2)", "EFSignSGD()", "FP16()", "TopK(ratio=0.01)"
    auto = tfcomp.Auto([tfcomp.PowerSGD(2), tfcomp.EFSignSGD(), tfcomp.FP16(), tfcomp.TopK(0.01)], trials=3)
    Exchange(auto)
    callback = auto.callback()
    gradients = [("big", (64, 64), tf.float32), ("bias", (64,), tf.float32), ("small", (16, 16), tf.float32)]
    # PowerSGD on every tensor is sent as the plan is (the bias and the small kernel go dense either way);
    # FP16 is predicted slower than dense.
    result = types.SimpleNamespace(choices={"big": power, "bias": None, "small": sign}, iteration_s=0.010,
                                   dense_s=0.050, singles={power: 0.011, sign: 0.020, fp16: 0.060, topk: 0.030})
    trials = callback._trials(result, gradients)  # pylint: disable=protected-access
    assert [(label, seconds) for label, _, seconds in trials] == [("plan", 0.010), (sign, 0.020), (topk, 0.030)]
    assert trials[1][1] == {"big": sign, "bias": sign, "small": sign}
    auto.trials = 1
    assert [label for label, _, _ in callback._trials(result, gradients)] == ["plan"]  # pylint: disable=protected-access
    nothing = types.SimpleNamespace(choices={"big": None, "bias": None, "small": None}, iteration_s=0.05, dense_s=0.05,
                                    singles={power: 0.06, sign: 0.07, fp16: 0.08, topk: 0.09})
    assert callback._trials(nothing, gradients) == []  # pylint: disable=protected-access
