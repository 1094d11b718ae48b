"""`python -m tfcomp.analysis profile`: payloads per gradient as the cost model's
closed forms give them, codec timings, and a profile recorded from a real Timeline
trace that predict reads back (tests/benchmarks/test_profile_worker.py: on two real
workers, as the benchmarks record their profiles)."""
import gzip
import io
import json

import numpy as np
import pytest
import tensorflow as tf

import tfcomp
from tfcomp.compressors import registry
from tfcomp.analysis.cli import main as cli
from tfcomp.costs import network as costs
from tfcomp.analysis.measure import link_probe
from tfcomp.analysis.measure import codecs as measure
from tfcomp.costs.network import HALF_ALLREDUCE
from tfcomp.analysis.cli.predict import predict
from tfcomp.analysis.model.profile import Profile
from tfcomp.callbacks import Timeline
from tests.stacks import NO_KERAS

pytestmark = NO_KERAS


@pytest.mark.parametrize("compressor, shape, expected", [
    (tfcomp.FP16(), (64, 32), costs.fp16_transfers(64 * 32)),
    (tfcomp.EFSignSGD(), (64, 32), costs.sign_transfers(64 * 32, with_scale=True)),
    (tfcomp.SignSGD(), (50, 50), costs.sign_transfers(2500)),
    (tfcomp.SignSGD(), (1000,), costs.dense_transfers(1000)),  # the exchange sends vectors dense
    (tfcomp.FP16(), (16, 16), costs.dense_transfers(256)),  # and tensors under 1024 elements
    (tfcomp.TopK(ratio=0.01), (100, 100), costs.sparse_transfers(100 * 100, 0.01)),
    (tfcomp.PowerSGD(4), (64, 32), costs.powersgd_transfers(64, 32, 4)),
    (tfcomp.ACPSGD(4), (3, 3, 16, 32), costs.acpsgd_transfers(3 * 3 * 16, 32, 4)),
    (tfcomp.PowerSGD(4), (32,), costs.dense_transfers(32)),  # a vector: not taken, sent dense
])
def test_transfers_follow_the_cost_models_forms(compressor, shape, expected):
    got = measure.transfers(compressor, shape)
    assert [(t.collective, t.half) for t in got] == [(t.collective, t.half) for t in expected]
    assert [t.nbytes for t in got] == pytest.approx([t.nbytes for t in expected], rel=1e-6)


def test_a_float16_gradient_sent_dense_is_a_float16_allreduce():
    assert measure.transfers(tfcomp.PowerSGD(2), (32,), tf.float16) == (costs.Transfer("allreduce", 64, half=True),)
    assert not measure.transfers(tfcomp.PowerSGD(2), (32,), tf.float32)[0].half


def test_the_float16_allreduce_extra_is_what_the_probe_timed_beyond_float32_never_below_0():
    samples = {"allreduce": [[4096, 1e-4], [65536, 4e-4], [1 << 20, 4e-3]],
               HALF_ALLREDUCE: [[4096, 0.9e-4], [65536, 9e-4], [1 << 20, 12e-3]]}
    extra = link_probe.half_extra(samples)
    assert list(extra.sizes) == [4096, 65536, 1 << 20]
    assert list(extra.seconds) == pytest.approx([0.0, 5e-4, 8e-3])
    assert link_probe.half_extra({"allreduce": samples["allreduce"]}) is None  # a probe saved before
    with pytest.raises(ValueError, match="none of the float32"):
        link_probe.half_extra({"allreduce": [[10, 1e-4]], HALF_ALLREDUCE: [[20, 1e-4]]})


def test_codec_times_are_measured_and_zero_where_the_compressor_does_not_apply():
    for compressor in (tfcomp.EFSignSGD(), tfcomp.PowerSGD(2), tfcomp.DGC(ratio=0.01)):
        encode, decode = measure.codec_seconds(compressor, (1024, 1024), runs=5)
        # A 4 MiB gradient: both sides touch every byte (grappler once left the timestamps 1 us apart).
        assert 5e-5 < encode < 1 and 5e-5 < decode < 1, (compressor, encode, decode)
    assert measure.codec_seconds(tfcomp.PowerSGD(2), (128,), runs=3) == (0.0, 0.0)
    assert measure.codec_seconds(tfcomp.FP16(), (512,), runs=3) == (0.0, 0.0)  # FP16 takes it; the exchange not


def test_compressor_specs_are_parsed_or_refused():
    powersgd = registry.parse_compressor("PowerSGD:rank=3")
    assert isinstance(powersgd, tfcomp.PowerSGD) and powersgd.matrix_approximation_rank == 3
    assert registry.parse_compressor("DGC:ratio=0.001").ratio == 0.001
    with pytest.raises(ValueError, match="no tfcomp compressor 'Zip'"):
        registry.parse_compressor("Zip")
    with pytest.raises(ValueError, match="name=value"):
        registry.parse_compressor("DGC:0.1")
    with pytest.raises(ValueError, match="'TopK:rnak=2'"):
        registry.parse_compressor("TopK:rnak=2")


def test_under_sgd_the_compressors_are_measured_with_the_velocity_they_take_over():
    measured = measure.under_sgd({"DGC": tfcomp.DGC(0.01), "EFSignSGD": tfcomp.EFSignSGD(),
                                  "PowerSGD": tfcomp.PowerSGD(2), "TopK:n": tfcomp.TopK(0.1, momentum=None)}, 0.9)
    for spec in ("DGC", "EFSignSGD"):
        assert measured[spec].momentum == 0.9
        assert {"velocity", "handed_off"} <= set(measured[spec].state_specs((64, 64), tf.float32)), spec
    assert "velocity" not in measured["TopK:n"].state_specs((64, 64), tf.float32)  # momentum=None stays so
    assert isinstance(measured["PowerSGD"], tfcomp.PowerSGD)
    assert measure.under_sgd({"DGC": tfcomp.DGC(0.01)}, 0.0)["DGC"].momentum == "auto"  # SGD without momentum
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        measure.under_sgd({"DGC": tfcomp.DGC(0.01)}, 1.0)


def _trace(tmp_path):
    """A Timeline trace of a small MLP's training steps."""
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([tf.keras.Input((32,)), tf.keras.layers.Dense(256, activation="relu"),
                                 tf.keras.layers.Dense(10)])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.01, momentum=0.9),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    timeline = Timeline(tmp_path / "timeline", start_step=2, num_steps=5, worker="worker0")
    x = np.random.default_rng(0).standard_normal((256, 32)).astype(np.float32)
    model.fit(x, np.arange(256) % 10, batch_size=32, epochs=1, verbose=0, callbacks=[timeline])
    return tmp_path / "timeline" / "worker0.trace.json", model


def _probe(workers=2, gbps=1.0, alpha=1e-4):
    """Samples of a link of this bandwidth and latency, as the probe writes them."""
    bw = gbps * 1e9 / 8
    return {"rank": 0, "workers": workers,
            "allreduce": [[n, 2 * (workers - 1) * (alpha + n / workers / bw)] for n in (4096, 65536, 1 << 20)],
            "allgather": [[n, 2 * alpha + (workers - 1) * n / bw] for n in (4096, 65536, 1 << 20)]}


def run_cli(*args):
    out, err = io.StringIO(), io.StringIO()
    return cli.main(["tfcomp.analysis", *args], out, err), out.getvalue(), err.getvalue()


def test_a_profile_recorded_from_a_timeline_predicts(tmp_path):
    trace, model = _trace(tmp_path)
    probe = tmp_path / "probe.json"
    probe.write_text(json.dumps(_probe()))
    code, out, err = run_cli("profile", f"--timeline={trace}", f"--link_probe={probe}", "--runs=3",
                             "--compressors=EFSignSGD,PowerSGD:rank=2", f"--output={tmp_path / 'p.json'}", "--name=mlp")
    assert code == 0, err
    assert "saved" in out
    profile = Profile.load(tmp_path / "p.json")
    assert profile.model.name == "mlp"
    assert sorted(g.nbytes for g in profile.model.gradients) == sorted(
        float(v.shape.num_elements() * 4) for v in model.trainable_variables)
    assert profile.model.forward_s > 0 and profile.model.backward_s > 0 and profile.model.apply_s > 0
    assert 8 * profile.allreduce.bandwidth_bytes_per_s / 1e9 == pytest.approx(1.0, rel=1e-3)
    assert profile.allreduce.alpha_s == pytest.approx(1e-4, rel=1e-3)
    assert sorted(profile.compressors) == ["EFSignSGD", "PowerSGD:rank=2"]
    scan = profile.finite_scan.points()  # the exchange's finite check, from 4 KiB to the largest gradient
    assert scan[0][0] == 4096 and scan[-1][0] >= max(g.nbytes for g in profile.model.gradients)
    assert all(seconds > 0 for _, seconds in scan)
    results = predict(profile, 2, ["EFSignSGD", "PowerSGD:rank=2"])
    assert all(r.iteration_s >= profile.model.single_step_s for r in results.values())


def test_with_a_saved_probe_only_the_launchers_rank_0_saves(tmp_path, monkeypatch):
    """Both workers once wrote the file at once (a saved probe names no rank) and left it corrupt."""
    trace, _ = _trace(tmp_path)
    probe = tmp_path / "probe.json"
    probe.write_text(json.dumps({k: v for k, v in _probe().items() if k != "rank"}))
    cases = [("horovod", {"HOROVOD_RANK": "1"}, False), ("horovod", {"HOROVOD_RANK": "0"}, True),
             ("tf.distribute", {"TF_CONFIG": json.dumps({"task": {"type": "worker", "index": 1}})}, False),
             ("tf.distribute", {"TF_CONFIG": json.dumps({"task": {"type": "worker", "index": 0}})}, True)]
    for i, (engine, env, saves) in enumerate(cases):
        for key in ("HOROVOD_RANK", "TF_CONFIG"):
            monkeypatch.delenv(key, raising=False)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        out = tmp_path / f"p{i}.json"
        code, _, err = run_cli("profile", f"--timeline={trace}", f"--link_probe={probe}", "--runs=1",
                               f"--engine={engine}", f"--output={out}")
        assert code == 0, err
        assert out.exists() == saves, (engine, env)
    assert not list(tmp_path.glob(".*.tmp"))  # saved through a temporary file, renamed into place


@pytest.mark.parametrize("args, message", [
    (["--output=x.json"], "--timeline and --output are required"),
    (["--timeline=/no/such.json", "--output=x.json"], "cannot read timeline"),
    (["--timeline={trace}", "--output=x.json", "--link_probe={probe}", "--compressors=Zip"], "no tfcomp compressor"),
    (["--timeline={trace}", "--output=x.json", "--link_probe={probe}", "--compressors=PowerSGD,PowerSGD:rank=4"],
     "a compressor is named twice (PowerSGD, PowerSGD:rank=4): PowerSGD, PowerSGD"),
    (["--timeline={trace}", "--output=x.json", "--link_probe=/no/probe.json"], "cannot read link probe"),
    (["--timeline={trace}", "--output=x.json", "--link_probe={probe}", "--compressors=DGC", "--sgd_momentum=-0.5"],
     "--sgd_momentum: a momentum in [0, 1)"),
])
def test_profile_user_errors_are_one_line(tmp_path, args, message):
    trace, _ = _trace(tmp_path)
    probe = tmp_path / "probe.json"
    probe.write_text(json.dumps(_probe()))
    code, _, err = run_cli("profile", *(a.format(trace=trace, probe=probe) for a in args))
    assert code == 1 and message in err and len(err.strip().splitlines()) == 1, err


def test_a_gzipped_timeline_gives_the_same_model(tmp_path):
    """benchmarks.e2e keeps its traces gzipped; profile --timeline reads them as they are."""
    trace, _ = _trace(tmp_path)
    zipped = tmp_path / "worker0.trace.json.gz"
    zipped.write_bytes(gzip.compress(trace.read_bytes()))
    probe = tmp_path / "probe.json"
    probe.write_text(json.dumps(_probe()))
    models = []
    for i, timeline in enumerate((trace, zipped)):
        code, _, err = run_cli("profile", f"--timeline={timeline}", f"--link_probe={probe}", "--runs=1",
                               f"--output={tmp_path / f'p{i}.json'}", "--name=mlp")
        assert code == 0, err
        models.append(Profile.load(tmp_path / f"p{i}.json").model)
    assert models[0] == models[1]
