"""tfcomp.Auto's interleaved trials: the schedule, each trial's speed against the
dense block of the same round, and an audit's regret."""
import pytest

from tfcomp.auto.trials import Block, regret, schedule, verdict
from tests.stacks import NO_KERAS

pytestmark = NO_KERAS


def test_rounds_start_with_dense_and_every_other_round_runs_reversed():
    blocks = schedule(num_configs=3, dense=2, check_steps=10, rounds=4)
    assert [(b.round, b.config) for b in blocks] == [(0, 2), (0, 0), (0, 1), (1, 1), (1, 0), (1, 2),
                                                     (2, 2), (2, 0), (2, 1), (3, 1), (3, 0), (3, 2)]
    for config in range(3):  # the steps split over the rounds, the remainder to the first
        assert [b.steps for b in blocks if b.config == config] == [3, 3, 2, 2]
        assert sum(b.steps for b in blocks if b.config == config) == 10
    # each round starts with what the last ended on: no switch there
    assert all(blocks[i].config == blocks[i + 1].config for i in (2, 5, 8))


def test_without_dense_the_one_trial_runs_its_rounds_back_to_back():
    blocks = schedule(num_configs=1, dense=None, check_steps=4, rounds=2)
    assert [(b.round, b.config, b.steps) for b in blocks] == [(0, 0, 2), (1, 0, 2)]


@pytest.mark.parametrize("rounds", [0, 5])
def test_rounds_outside_one_to_check_steps_are_refused(rounds):
    with pytest.raises(ValueError, match="rounds must be in"):
        schedule(2, 0, 4, rounds)


def test_a_trial_is_judged_against_dense_in_its_own_round_not_across_a_changing_machine():
    blocks = schedule(num_configs=2, dense=1, check_steps=4, rounds=4)
    load = {0: 100.0, 1: 150.0, 2: 110.0, 3: 160.0}  # the machine's speed changes from round to round
    block_ms = [load[b.round] * (0.9 if b.config == 0 else 1.0) for b in blocks]
    results = verdict(2, blocks, block_ms, dense=1)
    assert results[0]["vs_dense"] == pytest.approx(0.9)
    assert results[1]["vs_dense"] == 1.0
    assert results[0]["ms"] == pytest.approx(0.9 * 130.0) and results[1]["ms"] == pytest.approx(130.0)


def test_one_slow_round_does_not_decide():
    blocks = schedule(num_configs=2, dense=0, check_steps=5, rounds=5)
    # the candidate is 0.9x dense in four rounds and 1.5x in one that something else slowed
    block_ms = [100.0 if b.config == 0 else (150.0 if b.round == 3 else 90.0) for b in blocks]
    assert verdict(2, blocks, block_ms, dense=0)[1]["vs_dense"] == pytest.approx(0.9)


def test_without_dense_the_reference_is_the_profiled_dense_steps():
    blocks = [Block(0, 0, 2), Block(0, 1, 2)]
    (result,) = verdict(1, blocks, [40.0, 44.0], dense=None, reference_ms=50.0)
    assert result == {"ms": 42.0, "vs_dense": pytest.approx(0.84)}
    with pytest.raises(ValueError, match="give the dense reference_ms"):
        verdict(1, blocks, [40.0, 44.0], dense=None)
    with pytest.raises(ValueError, match="1 block times for 2 blocks"):
        verdict(1, blocks, [40.0], dense=None, reference_ms=50.0)


def test_the_audit_regret_is_the_kept_speed_over_the_fastest_measured_in_the_same_rounds():
    blocks = schedule(num_configs=3, dense=0, check_steps=4, rounds=2)
    load = {0: 100.0, 1: 140.0}  # the machine slows between the rounds; the ratios do not move
    factor = {0: 1.0, 1: 0.8, 2: 0.7}  # dense, the kept configuration, the fastest
    results = verdict(3, blocks, [load[b.round] * factor[b.config] for b in blocks], dense=0)
    summary = regret(results, kept=1)
    assert summary["fastest"] == 2 and summary["vs_dense"] == pytest.approx(0.8)
    assert summary["regret"] == pytest.approx(0.8 / 0.7 - 1)
    assert regret(results, kept=2) == {"fastest": 2, "vs_dense": pytest.approx(0.7), "regret": 0.0}
    # dense kept where a compressor was faster: its regret is what dense gave up
    assert regret(results, kept=0)["regret"] == pytest.approx(1 / 0.7 - 1)
