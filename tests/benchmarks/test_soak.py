"""The soak report's figures and checks (benchmarks/long_run/soak_report.py) on made-up samples."""
import pytest

from benchmarks.long_run import link_schedule, soak_report as soak
from tests.stacks import NO_KERAS

pytestmark = NO_KERAS


def worker(rss_mib_per_hour, step_ms_by_minute, traces=6):
    """60 one-minute samples, from unix time 0."""
    samples = []
    for minute in range(61):
        samples.append({"step": 1000 * minute, "unix_time": 60.0 * minute, "step_ms": step_ms_by_minute(minute),
                        "rss_kib": 1024 * (700 + rss_mib_per_hour * minute / 60), "traces": traces,
                        "context_functions": 70, "threads": 120})
    history = [{"phase": "planned", "step": 30, "trial": "dense"},
               {"phase": "profiling", "step": 10500, "reason": "drifted from 13.0 to 100.0 ms/step"}]
    return {"samples": samples, "auto_history": history, "steps": 60000}


CHANGES = [{"unix_time": 600.0 * i, "rate": "unshaped" if i % 2 == 0 else "100mbit"} for i in range(6)]


def test_periods_and_checks_pass_on_flat_memory_and_steady_steps():
    workers = [worker(10, lambda m: 15.0), worker(10, lambda m: 15.0)]
    table, decisions, found = soak.summarize(workers, CHANGES)
    assert [row["rate"] for row in table] == ["unshaped", "100mbit"] * 3
    assert table[0]["steps"] == 9000 and table[0]["step_ms_median"] == 15.0
    assert decisions[1]["phase"] == "profiling" and decisions[1]["minute"] == pytest.approx(10.0)
    assert all(ok for _, ok, _ in found), found


def test_growing_memory_and_a_slower_last_period_fail():
    # 100 Mbit/s periods: 2 (minutes 10-20), 4 and 6; the first of each rate is Auto's warm-up on it.
    slow_at_end = lambda minute: 100.0 if minute < 12 else 30.0 if minute >= 50 else 15.0  # noqa: E731
    workers = [worker(2000, slow_at_end), worker(10, slow_at_end)]
    _, _, found = soak.summarize(workers, CHANGES)
    failed = [what for what, ok, _ in found if not ok]
    assert any(what.startswith("worker 0 RSS growth") for what in failed)
    assert not any(what.startswith("worker 1 RSS growth") for what in failed)
    assert any(what.startswith("100mbit: median step time, period 6 against 4") for what in failed)
    assert not any(what.startswith("unshaped") for what in failed)


def test_traces_are_bounded_per_profiling_cycle():
    _, _, found = soak.summarize([worker(0, lambda m: 15.0, traces=13)] * 2, CHANGES)
    (traces,) = [(ok, value) for what, ok, value in found if what.startswith("traces per profiling cycle")]
    assert traces == (False, 6.5)  # 13 traces over 2 cycles (the first plan and one re-plan)


@pytest.mark.parametrize("entry", ["100mbit", "100mbit:", ":10", "100mbit:zero", "unshaped:-1"])
def test_a_link_period_is_rate_and_minutes(entry):
    with pytest.raises(ValueError, match="a link period is RATE:MINUTES"):
        link_schedule.parse([entry])


def test_link_periods_parse():
    assert link_schedule.parse(["unshaped:10", "100mbit:0.5"]) == [link_schedule.Period(None, 600.0),
                                                                   link_schedule.Period("100mbit", 30.0)]
