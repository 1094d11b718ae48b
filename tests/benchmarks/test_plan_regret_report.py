"""benchmarks.plan_regret's report: medians over repeats, and Auto against the dense run
of its own repeat."""
import pytest

from benchmarks.plan_regret import __main__ as plan_regret
from benchmarks.plan_regret import audit_report
from tests.stacks import NO_KERAS

pytestmark = NO_KERAS


def record(repeat, compression, step_ms, settled=None, phase="dense"):
    r = {"model": "xml", "workers": 2, "link": "1gbit", "compression": compression, "status": "ok",
         "step_ms": step_ms, "repeat": repeat}
    if settled is not None:
        r.update(settled_step_ms=settled, auto={"phase": phase, "choices": [], "compressed": 0})
    return r


def test_auto_is_compared_with_the_dense_run_of_its_own_repeat(tmp_path):
    records = [record(1, "none", 40.0), record(2, "none", 50.0), record(3, "none", 44.0),
               record(1, "PowerSGD", 30.0), record(2, "PowerSGD", 36.0), record(3, "PowerSGD", 33.0),
               record(1, "auto", 60.0, settled=41.0), record(3, "auto", 60.0, settled=40.0),
               record(2, "auto", 60.0, settled=52.0), record(2, "FP16", 70.0, ) | {"status": "failed"}]
    (row,) = plan_regret.regret_rows(*plan_regret.cells(records, tmp_path))
    assert row["dense_ms"] == 44.0 and row["best"] == "PowerSGD" and row["best_ms"] == 33.0
    assert "FP16" not in row["singles"]  # a failed run counts nowhere
    assert row["auto_ms"] == 41.0 and row["auto_regret"] == pytest.approx(41.0 / 33.0 - 1)
    assert row["auto_vs_dense"] == pytest.approx(44.0 / 41.0)
    assert row["auto_vs_dense_each"] == pytest.approx([40.0 / 41.0, 50.0 / 52.0, 44.0 / 40.0])  # in repeat order
    table = plan_regret.markdown([row], "cmd")
    assert "| 1.07x | 0.98x / 0.96x / 1.10x |" in table


def audited(repeat, kept, ratios, link="1gbit"):
    """An Auto run whose audit measured {label: steps over dense's}; the fastest is found."""
    trials = [{"label": label, "ms": 40.0 * x, "vs_dense": x} for label, x in ratios.items()]
    fastest = min(trials, key=lambda t: t["vs_dense"])
    history = [{"phase": "dense", "compressed": 0},
               {"phase": "audit", "kept": kept, "fastest": fastest["label"], "trials": trials,
                "vs_dense": ratios[kept], "regret": ratios[kept] / fastest["vs_dense"] - 1}]
    return {"model": "xml", "workers": 2, "link": link, "compression": "auto", "status": "ok", "repeat": repeat,
            "step_ms": 50.0, "auto": {"phase": "dense", "history": history}}


def test_the_audits_give_each_repeats_regret_side_by_side_and_their_median():
    power = "PowerSGD(matrix_approximation_rank=4)"
    records = [audited(1, power, {"dense": 1.0, power: 0.50, "FP16()": 0.70}),
               audited(2, power, {"dense": 1.0, power: 0.55, "FP16()": 0.52}),
               audited(3, "dense", {"dense": 1.0, power: 1.02, "FP16()": 0.99}),
               audited(1, "dense", {"dense": 1.0, power: 1.3}, link="unlimited") | {"status": "failed"}]
    (row,) = audit_report.rows(records)  # the failed run counts nowhere
    assert row["kept"] == ["PowerSGD", "PowerSGD", "dense"] and row["fastest"] == ["PowerSGD", "FP16", "FP16"]
    assert row["regret_each"] == pytest.approx([0.0, 0.55 / 0.52 - 1, 1 / 0.99 - 1])
    assert row["regret"] == pytest.approx(1 / 0.99 - 1)
    assert row["vs_dense_each"] == pytest.approx([2.0, 1 / 0.55, 1.0])
    assert row["speedups"]["PowerSGD"] == pytest.approx(1 / 0.55) and row["speedups"]["dense"] == 1.0
    table = audit_report.markdown([row])
    assert "| PowerSGD / PowerSGD / dense | PowerSGD / FP16 / FP16 | +0.0% / +5.8% / +1.0% | +1.0% |" in table
    assert "Median regret within 5% in 1 of 1 cells" in table and "single runs within it in 2 of 3" in table
    assert "more than 2% slower than dense side by side: 0 of 3" in table


def test_a_rewritten_report_keeps_the_command_that_made_the_runs(tmp_path):
    report = tmp_path / "regret.md"
    assert plan_regret.recorded_command(report) is None
    report.write_text("# title\n\nCommand: `python -m benchmarks.plan_regret --repeats=3 --steps=60`\n\ntext\n")
    assert plan_regret.recorded_command(report) == "python -m benchmarks.plan_regret --repeats=3 --steps=60"
