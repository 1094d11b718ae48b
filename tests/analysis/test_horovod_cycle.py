"""Horovod's fusion cycle as the simulator replays it (issue 41): the cycle starts when the
first gradient is ready, as Horovod's background loop does, not when the backward pass
starts; checked against a step worked by hand. No TensorFlow."""
import pytest

from tfcomp.analysis.model.fusion_policies import CycleFusion
from tfcomp.analysis.model.profile import GradientProfile, ModelProfile
from tfcomp.analysis.model.simulator import simulate
from tfcomp.costs.network import Link
from tests.stacks import NO_KERAS

pytestmark = NO_KERAS

MS = 1e-3


def test_cycles_start_when_the_first_gradient_is_ready():
    # ready at 3, 5, 8 and 14 ms; cycles of 5 ms from 3 ms: 3, 8, 13, 18 ms
    grads = [GradientProfile("a", 2e6, 3 * MS), GradientProfile("b", 4e6, 5 * MS),
             GradientProfile("c", 1e6, 8 * MS), GradientProfile("d", 3e6, 14 * MS)]
    dispatched = CycleFusion(5 * MS, 64 * 2**20).dispatch(grads)
    assert [(pytest.approx(t), group) for t, group in dispatched] == [
        (3 * MS, [0]),  # the first gradient starts the cycle and leaves with it
        (8 * MS, [1, 2]),  # b waited for the next cycle; c, ready as it began, is fused with it
        (18 * MS, [3])]  # d missed the cycle at 13 ms by 1 ms


def test_a_step_worked_by_hand():
    """Two workers on a latency-free 1 GB/s link, no vector-add cost: a ring allreduce of n
    bytes takes 2 n (p - 1) / (p BW) = n / 1e9 s. By hand, with cycles at 3, 8, 13, 18 ms:
    a (2 MB) leaves at 3 ms and is done at 5; b and c (5 MB, fused) leave at 8 and are
    done at 13; d (3 MB) leaves at 18 and is done at 21. The backward pass ends at 15 ms,
    so 6 ms are exposed: 10 + 15 + 1 + 6 = 32 ms. (Cycles counted from the start of the
    backward pass, at 5, 10, 15 ms, would have fused a and b and ended at 18 ms.)"""
    grads = [GradientProfile("a", 2e6, 3 * MS), GradientProfile("b", 4e6, 5 * MS),
             GradientProfile("c", 1e6, 8 * MS), GradientProfile("d", 3e6, 14 * MS)]
    model = ModelProfile("hand", 10 * MS, 15 * MS, 1 * MS, grads)
    result = simulate(model, 2, Link(0.0, 1e9), fusion=CycleFusion(5 * MS, 64 * 2**20))
    assert result.buckets == 3
    assert result.sync_s == pytest.approx(21 * MS)
    assert result.exposed_s == pytest.approx(6 * MS)
    assert result.iteration_s == pytest.approx(32 * MS)
    assert result.transfer_s == pytest.approx(10 * MS)


def test_a_cycle_fills_buffers_of_at_most_the_fusion_threshold():
    grads = [GradientProfile("a", 1e6, 0.0), GradientProfile("b", 3e6, 0.0), GradientProfile("c", 2e6, 0.001)]
    dispatched = CycleFusion(0.005, 4e6).dispatch(grads)
    assert dispatched == [(0.0, [0, 1]), (pytest.approx(0.005), [2])]
