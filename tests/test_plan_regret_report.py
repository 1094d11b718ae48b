"""benchmarks.plan_regret's report: medians over repeats, and Auto against the dense run
of its own repeat."""
import pytest

from benchmarks import plan_regret


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
