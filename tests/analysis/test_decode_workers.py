"""Decode that grows with the workers (issue 41): an allgathered payload comes back once
per worker and decoding handles every copy (Agarwal et al. note SignSGD's decode is
linear in the workers), so the model prices decode linearly in the worker count it
predicts for, from the worker count the profile measured decode at and the measured
per-copy cost (CompressorProfile.decode_s). Hand-made profiles; one measurement on a
fabricated allgather result (TensorFlow, skipped without it)."""
import json

import numpy as np
import pytest

from tfcomp.analysis.model import planner
from tfcomp.analysis.model import whatif
from tfcomp.analysis.model.profile import CompressorProfile, GradientProfile, ModelProfile, Profile
from tfcomp.analysis.model.simulator import simulate_profile
from tfcomp.costs.network import ALLGATHER, ALLREDUCE, Link, Transfer
from tfcomp.costs.tables import SizeTable
from tests.stacks import NO_KERAS

pytestmark = NO_KERAS

MB = 1e6
DECODE_S = 2e-3  # measured at 4 workers
PER_WORKER_S = 4e-4  # each further worker's copy


def const(seconds):
    return SizeTable([(1, seconds), (1e12, seconds)])


def hand_made(decode_workers=4, per_worker=const(PER_WORKER_S)):
    """Two 4 MB gradients ready when the backward pass ends; Sign allgathers 1/32 of them, Low
    allreduces 1/32 (its decode does not see the workers); both decode in DECODE_S at 4 workers."""
    grads = [GradientProfile("a", 4 * MB, 0.05), GradientProfile("b", 4 * MB, 0.05)]
    model = ModelProfile("hand", 0.02, 0.05, 0.001, grads)
    compressors = {
        "Sign": CompressorProfile("Sign", const(1e-3), const(DECODE_S),
                                  {g.name: (Transfer(ALLGATHER, g.nbytes / 32),) for g in grads},
                                  decode_workers=decode_workers, decode_per_worker=per_worker),
        "Low": CompressorProfile("Low", const(1e-3), const(DECODE_S),
                                 {g.name: (Transfer(ALLREDUCE, g.nbytes / 32),) for g in grads},
                                 decode_workers=decode_workers, decode_per_worker=per_worker),
    }
    return Profile(model, Link.from_gbit(10, 2e-5), Link.from_gbit(10, 2e-5), SizeTable.zero(), compressors)


@pytest.mark.parametrize("workers", [1, 2, 4, 16, 96])
def test_an_allgathered_payloads_decode_is_linear_in_the_workers_from_the_measured_per_copy_cost(workers):
    profile = hand_made()
    sign = simulate_profile(profile, workers, compressor="Sign")
    expected = DECODE_S + (workers - 4) * PER_WORKER_S  # per gradient, through the measured point
    assert sign.decode_s == pytest.approx(2 * max(0.0, expected))
    assert simulate_profile(profile, workers, compressor="Low").decode_s == pytest.approx(2 * DECODE_S)


def test_without_a_measured_per_copy_cost_the_whole_decode_is_taken_per_copy():
    profile = hand_made(per_worker=None)
    for workers in (2, 4, 16, 96):
        assert simulate_profile(profile, workers, compressor="Sign").decode_s == pytest.approx(
            2 * DECODE_S * workers / 4)
    # 96 workers decode 24 times what 4 did: the SignSGD case the issue quotes from Agarwal et al.
    assert profile.compressors["Sign"].decode_s(4 * MB, profile.compressors["Sign"].payloads["a"], 96) == \
        pytest.approx(24 * DECODE_S)


def test_a_profile_that_does_not_say_where_decode_was_measured_keeps_it_as_measured():
    profile = hand_made(decode_workers=None, per_worker=None)
    for workers in (2, 96):
        assert simulate_profile(profile, workers, compressor="Sign").decode_s == pytest.approx(2 * DECODE_S)


def test_the_step_time_grows_with_the_decode():
    profile = hand_made()
    flat = hand_made(decode_workers=None, per_worker=None)
    for workers in (8, 64):
        grown = simulate_profile(profile, workers, compressor="Sign")
        as_measured = simulate_profile(flat, workers, compressor="Sign")
        extra = 2 * (workers - 4) * PER_WORKER_S  # both gradients' decode, after the last collective
        assert grown.iteration_s == pytest.approx(as_measured.iteration_s + extra, rel=1e-9)


def test_the_planner_and_the_sweep_price_decode_at_their_worker_counts():
    profile = hand_made()
    for workers in (2, 16, 64):
        result = planner.plan(profile, workers)
        assert result.singles["Sign"] == pytest.approx(
            simulate_profile(profile, workers, compressor="Sign").iteration_s, rel=1e-12)
    swept = whatif.sweep(profile, [1.0, 10.0], [2, 16, 64], ["Sign", "Low"], compute_speedups=(1.0, 2.0))
    for s, speedup in enumerate((1.0, 2.0)):
        scaled = whatif.faster_compute(profile, speedup)
        assert scaled.compressors["Sign"].decode_per_worker(1) == pytest.approx(PER_WORKER_S / speedup)
        for w, workers in enumerate((2, 16, 64)):
            link = Link(2e-5, 10 * 1.25e8)
            expected = simulate_profile(scaled, workers, compressor="Sign", link=link).iteration_s
            assert swept.iteration_s[s, 1, w, 1] == pytest.approx(expected, rel=1e-12)


def test_the_profile_file_keeps_where_decode_was_measured(tmp_path):
    profile = hand_made()
    path = tmp_path / "profile.json"
    profile.save(path)
    data = json.loads(path.read_text())
    assert data["compressors"]["Sign"]["decode_workers"] == 4
    assert data["compressors"]["Sign"]["decode_per_worker"] == [[1, PER_WORKER_S], [1e12, PER_WORKER_S]]
    loaded = Profile.load(path).compressors["Sign"]
    assert loaded.decode_workers == 4 and loaded.decode_per_worker.points() == [[1, PER_WORKER_S], [1e12, PER_WORKER_S]]
    averaged = profile.averaged(lambda values: values)
    assert averaged.compressors["Sign"].decode_workers == 4
    del data["compressors"]["Sign"]["decode_workers"]
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="decode_per_worker needs decode_workers"):
        Profile.load(path)
    data["compressors"]["Sign"]["decode_workers"] = 2.5
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="decode_workers must be an integer >= 1"):
        Profile.load(path)


def test_the_per_copy_cost_is_the_least_squares_slope_and_never_negative():
    pytest.importorskip("tensorflow")
    from tfcomp.analysis.measure import codecs as measure  # pylint: disable=import-outside-toplevel
    assert measure.per_worker_slope([2, 4, 8], [3.0, 5.0, 9.0]) == pytest.approx(1.0)
    # One noisy timing moves the fit, not the whole slope: a pair (2, 4) alone would say 0.5, (4, 8) 1.5.
    assert measure.per_worker_slope([2, 4, 8], [3.0, 4.0, 10.0]) == pytest.approx(17 / 14)
    assert measure.per_worker_slope([2, 4, 8], [3.0, 2.0, 1.0]) == 0.0


def test_decode_is_timed_at_three_worker_counts_for_compressors_that_allgather():
    """measure.compressor_profile times decode on a fabricated allgather result of num_workers
    and of 2 and 4 times as many copies: the per-copy cost is the slope through the three."""
    pytest.importorskip("tensorflow")
    import tfcomp  # pylint: disable=import-outside-toplevel
    from tfcomp.analysis.measure import codecs as measure  # pylint: disable=import-outside-toplevel
    gradients = [("w", (256, 256), np.float32)]
    sign = measure.compressor_profile("SignSGD", tfcomp.SignSGD(), gradients, num_workers=2, runs=3)
    assert sign.decode_workers == 2 and sign.payloads["w"][0].collective == ALLGATHER
    assert sign.decode_per_worker is not None and sign.decode_per_worker.sizes == [256 * 256 * 4.0]
    assert sign.decode_per_worker.seconds[0] >= 0
    low = measure.compressor_profile("PowerSGD", tfcomp.PowerSGD(2), gradients, num_workers=2, runs=3)
    assert low.decode_workers == 2 and low.decode_per_worker is None  # allreduced: decode sees one sum
