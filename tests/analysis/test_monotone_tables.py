"""Cost tables made monotone where physics says so (issue 41): a vector add, an encode,
a decode or a scan of more bytes never takes less time, so the model answers from the
isotonic fit of the measured points (SizeTable.monotone), and more compression never
lowers the predicted scaling factor. Property-based (Hypothesis). No TensorFlow."""
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from tfcomp.analysis.model.fusion_policies import BucketFusion, CycleFusion
from tfcomp.analysis.model.profile import CompressorProfile, GradientProfile, ModelProfile, Profile
from tfcomp.analysis.model.simulator import (CollectiveCosts, TensorCompression, finite_check_costs, simulate,
                                              simulate_profile)
from tfcomp.costs.network import ALLGATHER, ALLREDUCE, Link, Transfer
from tfcomp.costs.tables import SizeTable, isotonic
from tests.stacks import NO_KERAS

pytestmark = NO_KERAS

MIB = 2**20

seconds = st.floats(0, 1e-2, allow_subnormal=False)


@st.composite
def measured_tables(draw, max_points=8):
    """A table as measured: sizes increasing, times noisy (falling in places)."""
    sizes = sorted(draw(st.sets(st.integers(1, 10**9), min_size=1, max_size=max_points)))
    return SizeTable([(b, draw(seconds)) for b in sizes])


def minimax_fit(values):
    """The isotonic (least-squares, non-decreasing) fit by its closed form:
    fit[i] = max over j <= i of min over k >= i of mean(values[j..k])."""
    n = len(values)
    return [max(min(sum(values[j:k + 1]) / (k + 1 - j) for k in range(i, n)) for j in range(i + 1))
            for i in range(n)]


@given(st.lists(seconds, min_size=1, max_size=12))
def test_the_isotonic_fit_is_the_nearest_non_decreasing_sequence(values):
    fit = isotonic(values)
    assert len(fit) == len(values)
    assert all(b >= a for a, b in zip(fit, fit[1:]))
    assert fit == pytest.approx(minimax_fit(values), rel=1e-9, abs=1e-15)
    assert sum(fit) == pytest.approx(sum(values), rel=1e-9, abs=1e-15)  # pooling keeps each run's mean
    if all(b >= a for a, b in zip(values, values[1:])):
        assert fit == values


@given(measured_tables(), st.lists(st.floats(0, 2e9), min_size=2, max_size=20))
def test_a_monotone_table_answers_more_seconds_for_more_bytes_everywhere(table, queries):
    fitted = table.monotone()
    answers = [fitted(b) for b in sorted(queries)]  # below, between and beyond the measured sizes
    assert all(b >= a for a, b in zip(answers, answers[1:]))
    assert fitted.sizes == table.sizes and table.monotone() is fitted and fitted.monotone() is fitted
    if all(b >= a for a, b in zip(table.seconds, table.seconds[1:])):
        assert fitted is table  # already monotone: the measurements as they are
    assert table.points() == [[b, s] for b, s in zip(table.sizes, table.seconds)]  # the raw points are kept


def test_the_vector_add_table_below_2_6_kb_the_issue_found_falling():
    measured = SizeTable([(1024, 6e-6), (2662, 4e-6), (4096, 5e-6), (65536, 2e-5)], "AddEst")
    fitted = measured.monotone()
    assert fitted.seconds == pytest.approx([5e-6, 5e-6, 5e-6, 2e-5])
    costs = CollectiveCosts(4, Link.from_gbit(10), Link.from_gbit(10), measured)
    assert costs.addest.seconds == fitted.seconds  # the simulator prices vector adds from the fit
    assert [costs.addest(b) for b in (1024, 2000, 2662)] == pytest.approx([5e-6] * 3)


def test_encode_decode_and_the_finite_scan_are_read_from_the_fits():
    falling = SizeTable([(1e3, 4e-5), (1e4, 1e-5), (1e6, 3e-4)])
    grads = [GradientProfile("small", 1e3, 0.01), GradientProfile("larger", 1e4, 0.01)]
    model = ModelProfile("m", 0.01, 0.01, 0.0, grads)
    payload = {g.name: (Transfer(ALLREDUCE, g.nbytes / 10),) for g in grads}
    profile = Profile(model, Link.from_gbit(1), Link.from_gbit(1), SizeTable.zero(),
                      {"C": CompressorProfile("C", falling, falling, payload)}, finite_scan=falling)
    result = simulate_profile(profile, 2, compressor="C", fusion=BucketFusion(1))
    fit = falling.monotone()
    assert fit(1e3) == fit(1e4) == pytest.approx(2.5e-5)
    assert result.encode_s == pytest.approx(2 * 2.5e-5) and result.decode_s == pytest.approx(2 * 2.5e-5)
    dense = {g.name: TensorCompression.dense(g.nbytes) for g in grads}
    scanned, flag = finite_check_costs(profile, dense, 2, Link(0.0, 1e12))
    assert [scanned[g.name].encode_s for g in grads] == pytest.approx([2.5e-5, 2.5e-5])
    assert flag == pytest.approx(0.0, abs=1e-9)


@st.composite
def models(draw):
    count = draw(st.integers(1, 6))
    backward = draw(st.floats(0.001, 0.1))
    sizes = draw(st.lists(st.integers(1_000, 16 * MIB), min_size=count, max_size=count))
    ready = sorted(draw(st.lists(st.floats(0, backward), min_size=count, max_size=count)))
    return ModelProfile("m", draw(st.floats(0, 0.05)), backward, draw(st.floats(0, 0.01)),
                        [GradientProfile(f"g{i}", s, t) for i, (s, t) in enumerate(zip(sizes, ready))])


fusions = st.one_of(st.builds(BucketFusion, st.sampled_from([64e3, 1 * MIB, 25 * MIB])),
                    st.builds(CycleFusion, st.sampled_from([0.001, 0.005]), st.sampled_from([1 * MIB, 64 * MIB])))


@given(models(), measured_tables(), measured_tables(), measured_tables(), st.sampled_from([ALLREDUCE, ALLGATHER]),
       st.floats(1e-4, 1.0), st.floats(1e-4, 1.0), st.sampled_from([1, 2, 3, 8, 64]),
       st.sampled_from([0.1, 1, 10, 100]), st.floats(0, 1e-3), fusions, st.sampled_from(["cpu", "gpu"]),
       st.sampled_from([0.0, 0.0, 5e-3]))
def test_more_compression_never_lowers_the_predicted_scaling_factor(model, addest, encode, decode, collective, a, b,
                                                                     workers, gbit, alpha, fusion, device, burst):
    """Two compressors alike but for how many bytes they send: the one that sends fewer is
    never predicted slower, whatever the measured tables' noise."""
    fewer, more = min(a, b), max(a, b)
    assume(fewer < more)
    suffix = "@gpu" if device == "gpu" else ""
    compressors = {f"{name}{suffix}": CompressorProfile(
        f"{name}{suffix}", encode, decode, {g.name: (Transfer(collective, max(1.0, g.nbytes * fraction)),)
                                            for g in model.gradients}, decode_workers=2)
        for name, fraction in (("Fewer", fewer), ("More", more))}
    link = Link.from_gbit(gbit, alpha)
    profile = Profile(model, link, link, addest, compressors)
    faster = simulate_profile(profile, workers, compressor="Fewer" + suffix, fusion=fusion, burst_s=burst)
    slower = simulate_profile(profile, workers, compressor="More" + suffix, fusion=fusion, burst_s=burst)
    assert faster.scaling_factor >= slower.scaling_factor * (1 - 1e-12)


@given(models(), measured_tables(), st.floats(1.0, 1000.0), st.floats(1.0, 1000.0), st.sampled_from([2, 4, 64]),
       st.sampled_from([0.1, 1, 10, 100]), fusions)
def test_a_higher_compression_ratio_never_lowers_the_scaling_factor(model, addest, r1, r2, workers, gbit, fusion):
    """Zhang et al.'s what-if (dense gradients, the bandwidth term divided by the ratio)."""
    low, high = sorted((r1, r2))
    link = Link.from_gbit(gbit, 50e-6)
    f_low = simulate(model, workers, link, addest=addest, fusion=fusion, compression_ratio=low).scaling_factor
    f_high = simulate(model, workers, link, addest=addest, fusion=fusion, compression_ratio=high).scaling_factor
    assert f_high >= f_low * (1 - 1e-12)
