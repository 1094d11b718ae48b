"""Efficiency-aware tensor selection (DRAGONN Eq. 1) and dense warm-up."""
import json

import numpy as np
import pytest
import tensorflow as tf

import tfcomp
from tfcomp.compressors import Collective, Compressor, PayloadSpec
from tfcomp.exchange import selection
from tfcomp.exchange.step import Exchange
from tfcomp.costs.network import Network
from tfcomp.exchange.selection import (PROFILE_SIZES, CompressionProfile, EfficiencyAwareSelection, compressed_seconds,
                                       dense_seconds)
from tfcomp.testing import Emulator
from tfcomp.keras.optimizers import bind_exchange
from tests.stacks import NO_KERAS

pytestmark = [pytest.mark.usefixtures("compress_from_the_first_step"), NO_KERAS]  # what compression does, from step 0

NET = Network(bandwidth_gbps=8.0, latency_us=100.0)  # 1e9 bytes/s, 1e-4 s


class Gathered(Compressor):
    """A stand-in compressor that allgathers gamma of the dense bytes."""

    def __init__(self, gamma):
        self.gamma = gamma

    def payload_specs(self, shape, dtype):
        nbytes = int(self.gamma * tf.TensorShape(shape).num_elements() * tf.as_dtype(dtype).size)
        return [[PayloadSpec((nbytes,), tf.uint8, Collective.ALLGATHER)]]


def test_ring_allreduce_and_allgather_costs():
    assert NET.collective_seconds(Collective.ALLREDUCE, 1e6, 4) == pytest.approx(2 * 3 * (1e-4 + 1e6 / 4e9))
    # tfcomp.costs.network's allgather (Agarwal et al., Appendix B): 2 alpha + b (K-1) / B.
    assert NET.collective_seconds(Collective.ALLGATHER, 1e6, 4) == pytest.approx(2e-4 + 3 * 1e6 / 1e9)
    assert NET.collective_seconds(Collective.ALLREDUCE, 1e6, 1) == 0.0


@pytest.mark.parametrize("k", [2, 4, 16])
@pytest.mark.parametrize("gamma", [0.001, 0.01, 0.25])
def test_saving_has_the_2_over_k_form(k, gamma):
    """T_full - T_spr = 2(K-2) alpha + (K-1)(2/K - gamma) dA/B under tfcomp.costs.network's
    ring allreduce and allgather (the one network model). DRAGONN's paper prints 1/K."""
    shape, d_a = (1000, 250), 1000 * 250 * 4
    saved = dense_seconds(shape, tf.float32, k, NET) - compressed_seconds(Gathered(gamma), shape, tf.float32, k, NET)
    assert saved == pytest.approx(2 * (k - 2) * 1e-4 + (k - 1) * (2 / k - gamma) * d_a / 1e9, rel=1e-6)


# Compression costs a fixed overhead (op launches) plus a pass over the tensor.
PROFILE = CompressionProfile([1024, 1 << 22], [5e-4, 4e-3])


def test_selection_follows_size_bandwidth_and_compression_time():
    """Compress iff T_comp(d) < T_full(d) - T_spr(d) (the saving grows with K: 2(K-2) alpha)."""
    compressor = Gathered(0.002)
    selection = EfficiencyAwareSelection(NET)
    selection.set_profile(compressor, PROFILE)
    assert not selection.worth_compressing(compressor, (32, 32), tf.float32, 2)  # saves ~1e-4 s, costs 5e-4
    assert selection.worth_compressing(compressor, (32, 32), tf.float32, 16)  # 15 latencies saved
    assert selection.worth_compressing(compressor, (2048, 2048), tf.float32, 2)  # 16 MB over 8 Gbit/s
    fast_net = EfficiencyAwareSelection(Network(bandwidth_gbps=400.0, latency_us=1.0))
    fast_net.set_profile(compressor, PROFILE)
    assert not fast_net.worth_compressing(compressor, (2048, 2048), tf.float32, 2)
    slow = EfficiencyAwareSelection(NET)
    slow.set_profile(compressor, CompressionProfile([1024, 1 << 22], [1.0, 1.0]))
    assert not slow.worth_compressing(compressor, (2048, 2048), tf.float32, 2)


def test_profile_interpolates_log_log_and_extrapolates_linearly():
    profile = CompressionProfile([100, 10000], [1e-4, 1e-2])
    assert profile.time(50) == 1e-4
    assert profile.time(1000) == pytest.approx(1e-3)
    assert profile.time(20000) == pytest.approx(2e-2)


def test_profile_is_measured_and_cached(tmp_path):
    compressor = tfcomp.DRAGONN(ratio=0.01)
    measured = CompressionProfile.measure(compressor, sizes=(4096, 65536), runs=3)
    assert all(s > 0 for s in measured.seconds)
    first = CompressionProfile.cached(compressor, cache_dir=tmp_path)
    files = list((tmp_path / "profiles").iterdir())
    assert len(files) == 1 and files[0].suffix == ".json"
    assert json.loads(files[0].read_text())["seconds"] == first.seconds
    assert CompressionProfile.cached(compressor, cache_dir=tmp_path).seconds == first.seconds


def _flat_profile(seconds):
    return CompressionProfile(PROFILE_SIZES, [seconds] * len(PROFILE_SIZES))


def test_profile_cache_keeps_machines_apart(tmp_path, monkeypatch):
    """A home directory shared by two kinds of machine holds a profile for each."""
    measured = iter([_flat_profile(1e-3), _flat_profile(5e-3)])
    monkeypatch.setattr(CompressionProfile, "measure", classmethod(lambda cls, compressor: next(measured)))
    compressor = tfcomp.DRAGONN(ratio=0.01)
    for cpu, seconds in (("fast cpu", 1e-3), ("slow cpu", 5e-3), ("fast cpu", 1e-3)):
        monkeypatch.setattr("tfcomp.exchange.selection.machine", lambda cpu=cpu: {"cpu": cpu, "gpus": []})
        assert CompressionProfile.cached(compressor, cache_dir=tmp_path).seconds == _flat_profile(seconds).seconds
    assert len(list((tmp_path / "profiles").iterdir())) == 2


def test_profile_is_measured_again_when_the_codec_code_changes(tmp_path, monkeypatch):
    """A profile measured before an upgrade of the op library or the compressor is not trusted after it."""
    measured = iter([_flat_profile(5e-3), _flat_profile(1e-3)])
    monkeypatch.setattr(CompressionProfile, "measure", classmethod(lambda cls, compressor: next(measured)))
    compressor = tfcomp.DRAGONN(ratio=0.01)
    assert selection.codec_code(type(compressor)) == selection.codec_code(tfcomp.DRAGONN)
    assert selection.codec_code(tfcomp.DRAGONN) != selection.codec_code(tfcomp.EFSignSGD)
    for code, seconds in (("before", 5e-3), ("after", 1e-3), ("after", 1e-3)):
        monkeypatch.setattr(selection, "codec_code", lambda cls, code=code: code)
        assert CompressionProfile.cached(compressor, cache_dir=tmp_path).seconds == _flat_profile(seconds).seconds
    assert len(list((tmp_path / "profiles").iterdir())) == 2


def test_profile_keeps_the_fastest_run(monkeypatch):
    """A busy moment during the measurement slows some runs; the profile keeps the undisturbed time."""
    durations = iter([9.0, 2.0, 7.0, 3.0, 8.0] * 2)  # seconds per run, two sizes of five runs
    clock = {"now": 0.0, "started": False}

    def fake_perf_counter():
        if clock["started"]:
            clock["now"] += next(durations)
        clock["started"] = not clock["started"]
        return clock["now"]

    monkeypatch.setattr("tfcomp.exchange.selection.time.perf_counter", fake_perf_counter)
    profile = CompressionProfile.measure(tfcomp.DRAGONN(ratio=0.01), sizes=(4096, 65536), runs=5)
    assert profile.seconds == [2.0, 2.0]


def test_exchange_turns_selection_on_for_sparsifiers_only():
    assert isinstance(Exchange(tfcomp.DRAGONN).selection, EfficiencyAwareSelection)
    assert Exchange(tfcomp.DRAGONN, selection=False).selection is None
    assert Exchange(tfcomp.SignSGD).selection is None


def test_exchange_sends_unprofitable_tensors_dense():
    compressor = tfcomp.DRAGONN(ratio=0.001)
    selection = EfficiencyAwareSelection(NET)
    selection.set_profile(compressor, PROFILE)
    ex = Exchange(compressor, selection=selection, min_compress_elements=1)
    assert isinstance(ex.plan((16, 16), tf.float32, 2), tfcomp.NoCompression)
    assert ex.plan((4096, 1024), tf.float32, 2) is compressor


def test_warmup_sends_dense_then_compresses():
    k = 2
    emu = Emulator(k, tfcomp.DRAGONN(ratio=0.01), min_compress_elements=1, selection=False, warmup_steps=2,
                  check_finite=False)  # payloads only
    rng = np.random.default_rng(0)
    for step in range(3):
        grads = [[tf.constant(rng.standard_normal((64, 64)).astype(np.float32))] for _ in range(k)]
        out = emu.step(grads, ["w"])[0][0].numpy()
        mean = np.mean([g[0].numpy() for g in grads], axis=0)
        if step < 2:
            np.testing.assert_allclose(out, mean, rtol=1e-6)
        else:
            assert np.count_nonzero(out) < 0.05 * out.size
    assert [kind for kind, _ in emu.traffic] == ["allreduce", "allreduce", "allgather"]
    assert int(emu.states[0].step.numpy()) == 3


@pytest.mark.parametrize("options, message", [
    ({"warmup_steps": -1}, "warmup_steps is the dense steps before compression starts"),
    ({"warmup_steps": "two epochs"}, "an integer >= 0 or 'epoch'"),
    ({"steps_per_epoch": 0}, "steps_per_epoch must be an integer >= 1 or None"),
])
def test_bad_warmup_is_rejected(options, message):
    with pytest.raises(ValueError, match=message):
        Exchange(tfcomp.DRAGONN, **options)


def test_bad_network_is_rejected():
    with pytest.raises(ValueError, match="bandwidth_gbps > 0"):
        Network(bandwidth_gbps=0)


def test_shared_profile_survives_the_optimizer_taking_over_momentum():
    """The workers share one compression profile at start; binding an SGD with
    momentum then resolves DGC's momentum="auto" into another configuration.
    Tensor selection must keep deciding from the shared profile: a worker that
    measured its own could plan other payloads than its peers (seen as mismatched
    collectives under MultiWorkerMirroredStrategy)."""
    selection = EfficiencyAwareSelection(NET)
    ex = Exchange(tfcomp.DGC(ratio=0.001), selection=selection, min_compress_elements=1)
    selection.set_profile(ex.compressor, PROFILE)
    selection.mark_shared()
    before = [type(ex.plan(shape, tf.float32, 2)).__name__ for shape in [(16, 16), (4096, 1024)]]
    bind_exchange(ex, tf.keras.optimizers.SGD(0.1, momentum=0.9))
    assert ex.compressor.config() != ex.configured.config()
    assert [type(ex.plan(shape, tf.float32, 2)).__name__ for shape in [(16, 16), (4096, 1024)]] == before
    assert before == ["NoCompression", "DGC"]


def test_shared_selection_refuses_an_unshared_compressor():
    selection = EfficiencyAwareSelection(NET)
    selection.set_profile(tfcomp.DGC(ratio=0.01), PROFILE)
    selection.mark_shared()
    with pytest.raises(RuntimeError, match="shared compression profiles"):
        selection.worth_compressing(tfcomp.DRAGONN(ratio=0.01), (64, 64), tf.float32, 2)
