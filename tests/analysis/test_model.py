"""tfcomp.analysis: the papers' invariants for Agarwal et al.'s closed-form model and
Zhang et al.'s what-if simulator, their agreement, and the profile format.
No TensorFlow: these run in about a second."""
import dataclasses
import json
import math
import os
import subprocess
import sys

import pytest

from tfcomp.costs import network as costs
from tfcomp.analysis.model import synthetic
from tfcomp.costs.network import ALLGATHER, ALLREDUCE, Link, Transfer
from tfcomp.analysis.model.fusion_policies import BucketFusion, CycleFusion
from tfcomp.analysis.model.profile import CompressorProfile, GradientProfile, ModelProfile, Profile
from tfcomp.analysis.model.simulator import (TensorCompression, compression_from_profile, finite_check_costs,
                                              simulate, simulate_profile)
from tfcomp.costs.tables import SizeTable
from tests.stacks import NO_KERAS

pytestmark = NO_KERAS

MB = 1e6
MIB = 2**20
TEN_GBIT = Link.from_gbit(10)


def resnet50_like(layers=50, backward_s=0.122, total_bytes=97.5 * MIB, first_ready_s=0.01):
    """A synthetic ResNet-50-sized model: equal gradients ready evenly through the backward pass."""
    step = (backward_s - first_ready_s) / (layers - 1)
    grads = [GradientProfile(f"layer{i}/kernel", total_bytes / layers, min(first_ready_s + i * step, backward_s))
             for i in range(layers)]
    return ModelProfile("resnet50_like", forward_s=0.04, backward_s=backward_s, apply_s=0.005, gradients=grads)


def one_gradient(nbytes, backward_s=0.1, ready_s=None):
    ready = backward_s if ready_s is None else ready_s
    return ModelProfile("one", forward_s=0.03, backward_s=backward_s, apply_s=0.002,
                        gradients=[GradientProfile("w", nbytes, ready)])


# --- Agarwal et al.'s closed forms (Table 1, Eq. (1), Section 4.1, Appendix B) ---

def test_ring_allreduce_reproduces_the_worked_example():
    assert costs.ring_allreduce(25e6, 64, Link(0.0, 1.25e9)) == pytest.approx(0.039375, rel=1e-12)
    assert costs.ring_allreduce(25e6, 64, Link(0.5e-3, 1.25e9)) == pytest.approx(0.102375, rel=1e-12)


def test_ring_bandwidth_term_grows_with_p_and_stays_below_2b_over_bw():
    link, b = Link(0.0, 1.25e9), 25e6
    times = [costs.ring_allreduce(b, p, link) for p in range(1, 1025)]
    assert times[0] == 0.0
    assert all(later > earlier for earlier, later in zip(times, times[1:]))
    assert max(times) < 2 * b / link.bandwidth_bytes_per_s
    assert costs.ring_allreduce(b, 10**6, link) == pytest.approx(2 * b / link.bandwidth_bytes_per_s, rel=1e-5)


def test_tree_grows_as_log_p_and_parameter_server_as_p_minus_1():
    link, n = Link(1e-4, 1.25e9), 10e6
    tree2, ps2 = costs.tree_allreduce(n, 2, link), costs.parameter_server(n, 2, link)
    for k in range(1, 11):
        assert costs.tree_allreduce(n, 2**k, link) == pytest.approx(k * tree2)
    bandwidth_ps = lambda p: costs.parameter_server(n, p, link) - 2 * link.alpha_s  # noqa: E731
    for p in (2, 3, 17, 64, 96):
        assert bandwidth_ps(p) == pytest.approx((p - 1) * bandwidth_ps(2))
    assert ps2 > 0


def test_allgather_cost_is_linear_in_p_and_overtakes_ring():
    link, g = Link(1e-4, 1.25e9), 3 * MB
    times = [costs.allgather(g, p, link) for p in range(2, 130)]
    steps = [b - a for a, b in zip(times, times[1:])]
    assert steps == pytest.approx([g / link.bandwidth_bytes_per_s] * len(steps))
    assert costs.allgather(g, 96, link) == pytest.approx(2 * link.alpha_s + g * 95 / link.bandwidth_bytes_per_s)
    # the same payload allgathered costs more than allreduced once p > 3, and the gap widens
    gaps = [costs.allgather(g, p, Link(0, 1.25e9)) - costs.ring_allreduce(g, p, Link(0, 1.25e9))
            for p in (4, 8, 16, 64)]
    assert gaps[0] > 0 and all(b > a for a, b in zip(gaps, gaps[1:]))


def test_bucket_split_and_the_syncsgd_model():
    assert costs.bucket_split(100 * MB, 25 * MB) == (4, pytest.approx(25 * MB))
    assert costs.bucket_split(97 * MIB, 25 * MIB) == (4, pytest.approx(22 * MIB))
    link, p = Link(0.5e-3, 1.25e9), 64
    comm = lambda b: costs.ring_allreduce(b, p, link)  # noqa: E731
    # communication hidden: T_obs = gamma T_comp + T_comm(b_last)
    t_hidden = costs.syncsgd_time(1.0, 97 * MIB, p, link, 25 * MIB, gamma=1.05)
    assert t_hidden == pytest.approx(1.05 * 1.0 + comm(22 * MIB))
    # communication-bound: (k-1) T_comm(b) + T_comm(b_last)
    t_bound = costs.syncsgd_time(0.01, 97 * MIB, p, link, 25 * MIB, gamma=1.05)
    assert t_bound == pytest.approx(3 * comm(25 * MIB) + comm(22 * MIB))
    for t_comp in (0.0, 0.05, 0.2, 0.4, 1.0):
        t = costs.syncsgd_time(t_comp, 97 * MIB, p, link, 25 * MIB, gamma=1.1)
        assert t >= comm(22 * MIB) + max(1.1 * t_comp, 3 * comm(25 * MIB)) - 1e-12


def test_compressor_forms_of_appendix_b():
    link, p, t_comp, t_ed = Link(0.5e-3, 1.25e9), 64, 0.122, 0.045
    rows, cols, rank = 2304, 256, 4
    power = costs.powersgd_transfers(rows, cols, rank)
    assert [t.nbytes for t in power] == [rows * rank * 4, cols * rank * 4]
    assert costs.compressed_time(t_comp, t_ed, power, p, link) == pytest.approx(
        t_comp + t_ed + costs.ring_allreduce(rows * rank * 4, p, link) + costs.ring_allreduce(cols * rank * 4, p, link))
    # ACP-SGD: one factor a step, so half PowerSGD's bytes and one latency instead of two
    (acp,) = costs.acpsgd_transfers(rows, cols, rank)
    assert acp.nbytes == pytest.approx(sum(t.nbytes for t in power) / 2)
    assert costs.compressed_time(t_comp, t_ed, (acp,), p, link) < costs.compressed_time(t_comp, t_ed, power, p, link)
    # MSTop-K: values and indices, two allgathers, each 2 alpha + x (p-1) / BW
    values, indices = Transfer(ALLGATHER, 0.01 * 97 * MB), Transfer(ALLGATHER, 0.01 * 97 * MB)
    expected = t_comp + t_ed + 2 * (2 * link.alpha_s + 0.01 * 97 * MB * (p - 1) / link.bandwidth_bytes_per_s)
    assert costs.compressed_time(t_comp, t_ed, (values, indices), p, link) == pytest.approx(expected)
    # SignSGD: g/32 allgathered, no alpha as P1 writes it
    elements = 25_557_032
    (sign,) = costs.sign_transfers(elements)
    assert sign.nbytes == math.ceil(elements / 32) * 4
    assert sign.nbytes == pytest.approx(elements * 4 / 32, abs=4)
    assert costs.sign_transfers(elements, with_scale=True)[0].nbytes == sign.nbytes + 4
    no_alpha = Link(0.0, 1.25e9)
    assert costs.compressed_time(0, 0, (sign,), 96, no_alpha) == pytest.approx(sign.nbytes * 95 / 1.25e9)


def test_allreduce_compatible_payloads_do_not_grow_with_workers_allgathered_ones_do():
    link, n = Link(0.0, 1.25e9), 1 << 22
    reducible = (costs.fp16_transfers(n), costs.randomk_transfers(n, 0.01), costs.powersgd_transfers(2048, 2048, 4))
    for transfers in reducible:
        assert all(t.collective == ALLREDUCE for t in transfers)
        cost = lambda p: sum(t.cost(p, link) for t in transfers)  # noqa: E731,B023
        assert cost(256) < 2 * sum(t.nbytes for t in transfers) / link.bandwidth_bytes_per_s
    for transfers in (costs.sign_transfers(n), costs.sparse_transfers(n, 0.01)):
        assert all(t.collective == ALLGATHER for t in transfers)
        assert sum(t.cost(129, link) for t in transfers) == pytest.approx(128 * sum(t.cost(2, link) for t in transfers))
    assert costs.fp16_transfers(n)[0].nbytes == costs.dense_transfers(n)[0].nbytes / 2
    assert costs.sparse_transfers(1000, 0.01)[0].nbytes == 10 * 8


def test_zhang_full_model_transmission_times_at_100_gbit():
    link = Link.from_gbit(100)
    for size_mb, printed_ms, exact_ms in ((97, 7.8, 7.76), (170, 13.6, 13.6), (527, 42.2, 42.16)):
        t_ms = costs.transmission_time(size_mb * MB, link) * 1e3
        assert t_ms == pytest.approx(exact_ms, rel=1e-9)
        assert round(t_ms, 1) == printed_ms


@pytest.mark.parametrize("make, message", [
    (lambda: Link(0.0, -1.25e9), "bandwidth"),
    (lambda: Link(0.0, 0), "bandwidth"),
    (lambda: Link(0.0, float("nan")), "bandwidth"),
    (lambda: Link(-1e-3, 1e9), "alpha"),
    (lambda: Link.from_gbit(-10), "Gbit/s"),
    (lambda: costs.ring_allreduce(1e6, 0, TEN_GBIT), "workers"),
    (lambda: costs.allgather(1e6, 2.5, TEN_GBIT), "workers"),
    (lambda: costs.ring_allreduce(-1, 4, TEN_GBIT), "nbytes"),
    (lambda: costs.syncsgd_time(0.1, 1e8, 4, TEN_GBIT, bucket_bytes=0), "bucket_bytes"),
    (lambda: costs.syncsgd_time(0.1, 1e8, 4, TEN_GBIT, 25e6, gamma=0), "gamma"),
    (lambda: costs.randomk_transfers(1000, 1.5), "keep_fraction"),
    (lambda: Transfer("broadcast", 10), "collective"),
    (lambda: SizeTable([(100, 1e-6), (50, 2e-6)]), "strictly increasing"),
    (lambda: SizeTable([]), "at least one"),
    (lambda: SizeTable([(100, -1.0)]), ">= 0"),
    (lambda: CycleFusion(cycle_s=0), "cycle_s"),
])
def test_bad_cost_inputs_fail_clearly(make, message):
    with pytest.raises(ValueError, match=message):
        make()


# --- Zhang et al.'s what-if simulator ("Is Network the Bottleneck of Distributed Training?", Section 3) ---

def test_addest_interpolates_linearly_and_the_allreduce_pays_n_minus_1_adds_on_s_over_n():
    table = SizeTable([(1_000, 1e-5), (1_000_000, 1e-4), (10_000_000, 1e-3)])
    assert table(1_000_000) == pytest.approx(1e-4)
    assert table(5_500_000) == pytest.approx(5.5e-4)
    assert table(100) == pytest.approx(1e-5)
    assert table(20_000_000) == pytest.approx(2e-3)
    model, n, link = one_gradient(8 * MB), 8, Link(0.0, 1.25e9)
    result = simulate(model, n, link, addest=table)
    assert result.vector_add_s == pytest.approx((n - 1) * table(8 * MB / n))
    wire = costs.ring_allreduce(8 * MB, n, link)
    assert result.sync_s == pytest.approx(model.backward_s + wire + result.vector_add_s)
    # compression divides the transmission only; the vector adds stay (Zhang et al., Section 3)
    compressed = simulate(model, n, link, addest=table, compression_ratio=4)
    assert compressed.transfer_s == pytest.approx(result.transfer_s / 4)
    assert compressed.vector_add_s == pytest.approx(result.vector_add_s)


@pytest.mark.parametrize("fusion", [BucketFusion(), CycleFusion()], ids=["tfcomp-25MiB", "horovod-5ms-64MiB"])
def test_scaling_factor_stays_in_0_1_and_never_falls_with_more_compression_or_bandwidth(fusion):
    model, addest = resnet50_like(), SizeTable([(1e3, 5e-6), (1e8, 5e-3)])
    for workers in (2, 8, 64):
        for gbit in (1, 10, 25, 100):
            link = Link.from_gbit(gbit, alpha_s=50e-6)
            factors = [simulate(model, workers, link, addest=addest, fusion=fusion, compression_ratio=c).scaling_factor
                       for c in (1, 1.5, 2, 3, 5, 10, 32, 100)]
            assert all(0 < f <= 1 for f in factors)
            assert all(b >= a for a, b in zip(factors, factors[1:])), (workers, gbit, factors)
        by_bandwidth = [simulate(model, workers, Link.from_gbit(g), addest=addest, fusion=fusion).scaling_factor
                        for g in (0.1, 1, 10, 25, 100, 400)]
        assert all(b >= a for a, b in zip(by_bandwidth, by_bandwidth[1:]))
        assert by_bandwidth[0] < 0.5


def test_scaling_factor_is_1_when_communication_hides_fully():
    # every gradient ready well before the backward pass ends, on a fast link
    model = resnet50_like(backward_s=0.5, first_ready_s=0.01)
    model = ModelProfile(model.name, model.forward_s, 0.5, model.apply_s,
                         [GradientProfile(g.name, g.nbytes, g.ready_s * 0.5) for g in model.gradients])
    result = simulate(model, 16, Link.from_gbit(100))
    assert result.sync_s < model.backward_s
    assert result.exposed_s == 0.0
    assert result.scaling_factor == 1.0
    assert simulate(model, 1, Link.from_gbit(0.01)).scaling_factor == 1.0  # one worker sends nothing
    assert simulate(model, 16, Link.from_gbit(1)).scaling_factor < 1.0


def test_simulator_matches_the_closed_form_for_one_bucket_without_overlap():
    model, p, link = one_gradient(97 * MB), 64, Link(0.5e-3, 1.25e9)
    result = simulate(model, p, link, overlap=False)
    closed = costs.syncsgd_time(model.backward_s, model.total_bytes, p, link, bucket_bytes=100 * MB)
    assert result.iteration_s == pytest.approx(model.forward_s + closed + model.apply_s, rel=1e-12)
    # PowerSGD after the backward pass: T_comp + T_encode-decode + T_comm(P) + T_comm(Q)
    power = TensorCompression(costs.powersgd_transfers(9216, 2688, 4), encode_s=0.03, decode_s=0.015)
    result = simulate(model, p, link, compression={"w": power}, overlap=False)
    closed = costs.compressed_time(model.backward_s, 0.045, power.transfers, p, link)
    assert result.iteration_s == pytest.approx(model.forward_s + closed + model.apply_s, rel=1e-12)
    # an allgather compressor, priced by its own link
    sign = TensorCompression(costs.sign_transfers(97 * MB // 4), encode_s=0.008, decode_s=0.008)
    gather_link = Link(1e-4, 0.9e9)
    result = simulate(model, p, link, allgather_link=gather_link, compression={"w": sign}, overlap=False)
    closed = costs.compressed_time(model.backward_s, 0.016, sign.transfers, p, link, allgather_link=gather_link)
    assert result.iteration_s == pytest.approx(model.forward_s + closed + model.apply_s, rel=1e-12)


@pytest.mark.parametrize("spacing_s", [0.05, 0.0], ids=["hidden", "communication-bound"])
def test_simulator_matches_the_bucketed_syncsgd_model_with_overlap(spacing_s):
    """k bucket-sized gradients, one every spacing_s: either each bucket's allreduce ends
    before the next is ready (T_obs = T_comp + T_comm(b)), or all are ready at once at the
    start and the stream is the bottleneck (T_obs = k T_comm(b))."""
    k, b, p, link = 6, 25 * MIB, 16, Link(1e-4, 1.25e9)
    comm = costs.ring_allreduce(b, p, link)
    backward = max(spacing_s * (k - 1), 1e-3)
    grads = [GradientProfile(f"g{i}", b, spacing_s * i) for i in range(k)]
    result = simulate(ModelProfile("buckets", 0.0, backward, 0.0, grads), p, link, fusion=BucketFusion(b))
    assert result.buckets == k
    closed = costs.syncsgd_time(backward, k * b, p, link, bucket_bytes=b)
    assert result.iteration_s == pytest.approx(closed, rel=1e-9)
    assert closed == pytest.approx(backward + comm if spacing_s > comm else k * comm, rel=1e-9)


def test_a_token_bucket_lets_its_burst_through_and_refills_while_the_link_is_idle():
    """tc tbf's bucket: a transfer within the burst pays only its latency, one beyond it the
    excess; the bucket refills at one second per second, and a bigger one never slows a step."""
    p, link = 2, Link(1e-3, 12.5e6)  # 100 Mbit/s
    shaped = costs.ring_allreduce(1 * MB, p, link) - costs.ring_allreduce(0, p, link)  # 80 ms
    model = one_gradient(1 * MB)
    plain = simulate(model, p, link)
    for burst_s, through in [(0.0, 0.0), (0.02, 0.02), (0.08, shaped), (1.0, shaped)]:
        result = simulate(model, p, link, burst_s=burst_s)
        assert result.sync_s == pytest.approx(plain.sync_s - through, rel=1e-12), burst_s
    # two gradients 50 ms apart: the second finds the 30 ms bucket refilled to 30 ms, not 50
    small = costs.ring_allreduce(0.25 * MB, p, link) - costs.ring_allreduce(0, p, link)  # 20 ms
    grads = [GradientProfile("a", 0.25 * MB, 0.0), GradientProfile("b", 0.25 * MB, 0.05)]
    two = ModelProfile("two", 0.0, 0.05, 0.0, grads)
    result = simulate(two, p, link, fusion=BucketFusion(0.25 * MB), burst_s=0.03)
    assert result.sync_s == pytest.approx(0.05 + costs.ring_allreduce(0, p, link), rel=1e-9)
    assert small < 0.03
    # back to back, the second pays what the first left short
    grads = [GradientProfile("a", 0.25 * MB, 0.0), GradientProfile("b", 0.25 * MB, 0.0)]
    result = simulate(ModelProfile("two", 0.0, 1e-3, 0.0, grads), p, link, fusion=BucketFusion(0.25 * MB),
                      burst_s=0.03)
    alpha = costs.ring_allreduce(0, p, link)
    assert result.sync_s == pytest.approx(2 * alpha + 2 * small - 0.03, rel=1e-9)
    model = resnet50_like()
    times = [simulate(model, p, link, burst_s=b).iteration_s for b in (0.0, 0.01, 0.1, 1.0)]
    assert times == sorted(times, reverse=True) and times[0] > times[-1]
    with pytest.raises(ValueError, match="burst_s"):
        simulate(model, p, link, burst_s=-1.0)


def test_horovod_cycle_policy_dispatches_on_the_5ms_cycle_in_buffers_of_at_most_64mib():
    grads = [GradientProfile("a", 10 * MIB, 0.001), GradientProfile("b", 60 * MIB, 0.004),
             GradientProfile("c", 400 * MIB, 0.004), GradientProfile("d", 1 * MIB, 0.006),
             GradientProfile("e", 1 * MIB, 0.03)]
    dispatched = CycleFusion().dispatch(grads)
    # the cycle starts when the first gradient is ready (1 ms): cycles at 1, 6, 11, ... 31 ms
    assert dispatched == [(0.001, [0]), (pytest.approx(0.006), [1]), (pytest.approx(0.006), [2]),
                          (pytest.approx(0.006), [3]), (pytest.approx(0.031), [4])]
    assert BucketFusion().dispatch(grads) == [(0.001, [0]), (0.004, [1]), (0.004, [2]), (0.03, [3, 4])]


def test_simulator_refuses_contradictory_or_incomplete_compression():
    model = one_gradient(1 * MB)
    dense = TensorCompression(costs.dense_transfers(MB // 4))
    with pytest.raises(ValueError, match="not both"):
        simulate(model, 4, TEN_GBIT, compression={"w": dense}, compression_ratio=2)
    with pytest.raises(ValueError, match="no entry for gradients"):
        simulate(model, 4, TEN_GBIT, compression={"other": dense})
    with pytest.raises(ValueError, match="workers"):
        simulate(model, 0, TEN_GBIT)
    with pytest.raises(ValueError, match="compression_ratio"):
        simulate(model, 4, TEN_GBIT, compression_ratio=0)


# --- the profile file ---

def small_profile():
    model = resnet50_like(layers=4, total_bytes=8 * MB)
    payload = {g.name: [Transfer(ALLREDUCE, g.nbytes / 64), Transfer(ALLREDUCE, g.nbytes / 128)]
               for g in model.gradients}
    power = CompressorProfile("PowerSGD", SizeTable([(1e5, 1e-4), (1e7, 2e-3)]),
                              SizeTable([(1e5, 5e-5), (1e7, 1e-3)]), payload)
    return Profile(model, allreduce=Link(2e-5, 1.1e9), allgather=Link(3e-5, 0.8e9),
                   addest=SizeTable([(1e4, 2e-6), (1e7, 1e-3)]), compressors={"PowerSGD": power})


def test_profile_round_trips_through_json(tmp_path):
    profile = small_profile()
    path = tmp_path / "profile.json"
    profile.save(path)
    loaded = Profile.load(path)
    assert loaded.to_dict() == profile.to_dict()
    assert loaded.model == profile.model and loaded.allgather == profile.allgather
    for compressor in (None, "PowerSGD"):
        assert simulate_profile(loaded, 8, compressor=compressor) == simulate_profile(profile, 8, compressor=compressor)
    slow = simulate_profile(loaded, 8, link=Link.from_gbit(1))
    assert slow.iteration_s > simulate_profile(loaded, 8).iteration_s


def test_the_finite_check_scans_each_bucket_and_allreduces_one_flag_after_them(tmp_path):
    """tfcomp's exchange scans each bucket's gradients (measured per size) before it compresses
    them and sends one 4-byte allreduce after every bucket's collectives: the buckets still
    leave as their gradients are ready, and the step waits for the flag."""
    old = small_profile()
    assert old.finite_scan is None and "finite_scan" not in old.to_dict()  # profiles before it still load
    with pytest.raises(ValueError, match="no finite_scan"):
        simulate_profile(old, 8, compressor="PowerSGD", finite_check=True)
    scan = SizeTable([(1e4, 1e-5), (1e7, 4e-3)])
    profile = Profile(old.model, old.allreduce, old.allgather, old.addest, old.compressors, scan)
    path = tmp_path / "profile.json"
    profile.save(path)
    loaded = Profile.load(path)
    assert loaded.finite_scan.points() == scan.points() and loaded.to_dict() == profile.to_dict()
    compression = compression_from_profile(profile.compressor("PowerSGD"), profile.model, 8)
    scanned, flag = finite_check_costs(profile, compression, 8, profile.allreduce)
    for g in profile.model.gradients:
        assert scanned[g.name].encode_s == pytest.approx(compression[g.name].encode_s + scan.seconds_at(g.nbytes))
        assert scanned[g.name].transfers == compression[g.name].transfers
    assert flag == pytest.approx(costs.ring_allreduce(4, 8, profile.allreduce), rel=1e-12)
    assert finite_check_costs(profile, compression, 1, profile.allreduce)[1] == 0.0  # one worker allreduces nothing
    plain = simulate_profile(profile, 8, compressor="PowerSGD")
    checked = simulate_profile(profile, 8, compressor="PowerSGD", finite_check=True)
    scans_only = simulate(profile.model, 8, profile.allreduce, allgather_link=profile.allgather,
                          addest=profile.addest, compression=scanned)
    assert plain.iteration_s < checked.iteration_s
    assert scans_only.sync_s <= checked.sync_s <= scans_only.sync_s + flag + 1e-12


def test_a_float16_allreduce_pays_the_engines_extra_sum_cost_and_a_float32_one_does_not(tmp_path):
    model, p, link = one_gradient(8 * MB), 2, Link(1e-4, 1.25e9)
    extra = SizeTable([(1e4, 1e-5), (1e7, 5e-3)])
    half = TensorCompression(costs.fp16_transfers(2 * MB))
    full = TensorCompression((Transfer(ALLREDUCE, 4 * MB),))
    for tc, paid in [(half, extra.seconds_at(4 * MB)), (full, 0.0)]:
        plain = simulate(model, p, link, compression={"w": tc}, overlap=False)
        slow = simulate(model, p, link, compression={"w": tc}, overlap=False, half_extra=extra)
        assert slow.sync_s == pytest.approx(plain.sync_s + paid, rel=1e-12)
    # the profile keeps the extra and which payloads are float16
    old = small_profile()
    payloads = {g: [Transfer(ALLREDUCE, 1000.0, half=True)] for g in old.compressors["PowerSGD"].payloads}
    fp16 = CompressorProfile("FP16", SizeTable.zero(), SizeTable.zero(), payloads)
    profile = Profile(old.model, old.allreduce, old.allgather, old.addest, {"FP16": fp16}, None, extra)
    profile.save(tmp_path / "p.json")
    loaded = Profile.load(tmp_path / "p.json")
    assert loaded.to_dict() == profile.to_dict() and loaded.half_allreduce_extra.points() == extra.points()
    assert all(t.half for ts in loaded.compressors["FP16"].payloads.values() for t in ts)
    without = Profile(old.model, old.allreduce, old.allgather, old.addest, {"FP16": fp16})
    assert (simulate_profile(loaded, 2, compressor="FP16").iteration_s
            > simulate_profile(without, 2, compressor="FP16").iteration_s)
    with pytest.raises(ValueError, match="only an allreduce"):
        Transfer(ALLGATHER, 10.0, half=True)


def test_profile_from_another_model_or_without_the_compressor_is_refused():
    profile = small_profile()
    mine = [(g.name, g.nbytes) for g in profile.model.gradients]
    profile.model.check_same_model(mine)
    with pytest.raises(ValueError, match="another model|not this one") as err:
        profile.model.check_same_model(mine[:2] + [("fc/kernel", 123)] + mine[3:])
    assert "fc/kernel" in str(err.value)
    with pytest.raises(ValueError, match="4 gradients, this model 3"):
        profile.model.check_same_model(mine[:3])
    with pytest.raises(ValueError, match="'TopK'.*PowerSGD"):
        simulate_profile(profile, 8, compressor="TopK")
    data = profile.to_dict()
    data["compressors"]["PowerSGD"]["payloads"]["fc/kernel"] = [["allgather", 10]]
    with pytest.raises(ValueError, match="another model"):
        Profile.from_dict(data)


def _edited(edit):
    data = json.loads(json.dumps(small_profile().to_dict()))
    edit(data)
    return data


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(version=2), "version 2 is not supported"),
    (lambda d: d.update(format="something else"), "not a tfcomp analysis profile"),
    (lambda d: d.pop("links"), "missing field 'links'"),
    (lambda d: d["links"]["allgather"].update(bandwidth_bytes_per_s=-5), "links.allgather.*bandwidth"),
    (lambda d: d["model"].update(backward_s="fast"), r"model.backward_s: expected a number"),
    (lambda d: d["model"]["gradients"][1].pop("ready_s"), r"model.gradients\[1\]: missing field 'ready_s'"),
    (lambda d: d["model"]["gradients"][2].update(ready_s=0.0), "backward order"),
    (lambda d: d["model"]["gradients"][3].update(ready_s=9.0), "after the backward pass ends"),
    (lambda d: d["model"]["gradients"][3].update(name=d["model"]["gradients"][0]["name"]), "appears twice"),
    (lambda d: d["model"]["gradients"][0].update(bytes=0), "bytes must be > 0"),
    (lambda d: d["model"].update(gradients=[]), "no gradients"),
    (lambda d: d.update(addest=[[10, 1e-6], [5, 1e-6]]), "addest: sizes must be positive and strictly increasing"),
    (lambda d: d["compressors"]["PowerSGD"]["payloads"].update({"layer0/kernel": [["scatter", 4]]}),
     r"payloads.layer0/kernel\[0\]: expected \[collective, bytes\]"),
    (lambda d: d["compressors"]["PowerSGD"].pop("encode"), "compressors.PowerSGD: missing field 'encode'"),
    (lambda d: d["compressors"]["PowerSGD"]["payloads"].update({"layer0/kernel": [["allgather", 4, "float16"]]}),
     r"layer0/kernel\[0\]: expected \[collective, bytes\]"),
])
def test_malformed_profiles_fail_with_the_field_named(edit, message):
    with pytest.raises(ValueError, match=message):
        Profile.from_dict(_edited(edit))


def test_unreadable_profile_files_fail_clearly(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match="not a JSON profile"):
        Profile.load(path)
    path.write_text("[]")
    with pytest.raises(ValueError, match="broken.json: profile: expected a JSON object"):
        Profile.load(path)


def test_analysis_modules_run_without_tensorflow():
    code = ("import sys\n"
            "import tfcomp.costs.network, tfcomp.analysis.model.profile, tfcomp.analysis.model.simulator\n"
            "import tfcomp.analysis.model.fusion_policies, tfcomp.costs.tables, tfcomp.analysis.measure.from_timeline\n"
            "assert 'tensorflow' not in sys.modules, 'tfcomp.analysis imported TensorFlow'\n")
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False,
                          env=env)
    assert done.returncode == 0, done.stderr


def test_gradients_ready_at_backward_end_hide_no_communication():
    profile = synthetic.synthetic_profile()
    late = profile.model.ready_at_backward_end()
    assert {g.ready_s for g in late.gradients} == {profile.model.backward_s}
    assert [g.name for g in late.gradients] == [g.name for g in profile.model.gradients]
    overlapped = simulate(profile.model, 16, profile.allreduce, addest=profile.addest)
    serial = simulate(late, 16, profile.allreduce, addest=profile.addest)
    assert serial.iteration_s > overlapped.iteration_s
