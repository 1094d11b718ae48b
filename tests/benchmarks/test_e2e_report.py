"""The end-to-end report from synthetic runs: targets, time to accuracy, speed-ups
against dense on the same link, the crossover, the table and the plots."""
import pytest

from benchmarks.e2e import report as e2e_report
from benchmarks.e2e import validation as e2e_validation
from tests.stacks import NO_KERAS

pytestmark = NO_KERAS


def run(compression, link, step_ms, curve, gbps, status="ok"):
    return {"model": "xml", "size": "small", "compression": compression, "engine": "tf.distribute", "workers": 2,
            "link": link, "link_mode": "cluster", "status": status, "step_ms": step_ms, "step_ms_p10": 0.9 * step_ms,
            "step_ms_p90": 1.1 * step_ms, "bytes_per_step": 100 if compression != "none" else 1000,
            "dense_bytes": 1000, "curve": curve, "final_accuracy": curve[-1][2],
            "phases_s": {"forward_backward": 0.01, "communicate": step_ms / 2e3},
            "probe": {"allreduce": {"gbps": gbps, "alpha_us": 100.0}, "allgather": {"gbps": gbps, "alpha_us": 50.0}},
            "command": "python -m benchmarks.e2e", "error": None}


def grid():
    # Dense: 100 ms/step on 1gbit, 20 ms unshaped. The compressor: 40 ms on both, one more evaluation to the target.
    dense_curve = lambda ms: [(ms * 0.01 * i, i, a) for i, a in [(1, 0.5), (2, 0.9), (3, 1.0)]]
    slow_curve = lambda ms: [(ms * 0.01 * i, i, a) for i, a in [(1, 0.4), (2, 0.8), (3, 0.95), (4, 0.99)]]
    return [run("none", "1gbit", 100, dense_curve(100), 0.8), run("DGC", "1gbit", 40, slow_curve(40), 0.8),
            run("none", "unlimited", 20, dense_curve(20), 8.0), run("DGC", "unlimited", 40, slow_curve(40), 8.0)]


def test_target_time_to_accuracy_and_speedups():
    records = grid()
    assert e2e_report.targets(records, 0.95) == {("xml", "small"): pytest.approx(0.95)}
    assert e2e_report.time_to([(1.0, 1, 0.5), (2.0, 2, 0.96)], 0.95) == 2.0
    assert e2e_report.time_to([(1.0, 1, 0.5)], 0.95) is None
    rows = {(r["link"], r["compression"]): r for r in e2e_report.rows(records, 0.95)}
    assert rows["1gbit", "DGC"]["step_speedup"] == pytest.approx(2.5)
    assert rows["1gbit", "DGC"]["tta_speedup"] == pytest.approx(3.0 / (3 * 0.4))  # dense at 3 s, DGC at 1.2 s
    assert rows["unlimited", "DGC"]["step_speedup"] == pytest.approx(0.5)
    assert rows["1gbit", "DGC"]["sent_ratio"] == 10


def test_no_target_when_dense_did_not_learn_the_task():
    records = [run("none", "1gbit", 100, [(1.0, 40, 0.001)], 0.8), run("DGC", "1gbit", 50, [(0.5, 40, 0.0)], 0.8)]
    assert e2e_report.targets(records, 0.97) == {}
    (dense, dgc) = e2e_report.rows(records, None)
    assert dgc["tta_s"] is None and dgc["step_speedup"] == 2.0
    assert "No target accuracy" in e2e_report.markdown(records, 0.97)


def test_runs_never_evaluated_report_step_times_only(tmp_path):
    # --eval_every above --steps: no accuracy curve, as for step-time-only grids.
    records = [dict(run("none", "1gbit", 100, [(1.0, 1, 0.5)], 0.8), curve=[], final_accuracy=None),
               dict(run("DGC", "1gbit", 50, [(1.0, 1, 0.5)], 0.8), curve=[], final_accuracy=None)]
    e2e_report.write(records, tmp_path, 0.97)
    text = (tmp_path / "e2e.md").read_text()
    assert "No target accuracy: test accuracy was not evaluated" in text
    assert "| 1gbit | DGC | 50.0 (45.0–55.0) | 2.00x | 1/10.0 | — | — | — |" in text


def test_crossover_interpolates_in_log_bandwidth():
    assert e2e_report.crossover([(0.8, 2.5), (8.0, 0.5)]) == pytest.approx(0.8 * 10 ** ((2.5 - 1) / 2.0))
    assert e2e_report.crossover([(0.8, 2.5), (8.0, 1.5)]) is None


def test_report_and_plots_are_written(tmp_path):
    records = grid() + [run("TopK", "1gbit", 0, [(0, 0, 0)], 0.8, status="failed")]
    e2e_report.write(records, tmp_path, 0.95)
    text = (tmp_path / "e2e.md").read_text()
    assert "| 1gbit | DGC | 40.0 (36.0–44.0) | 2.50x | 1/10.0 |" in text
    assert "| 1gbit | TopK | failed |" in text
    for kind in ("speedup", "phases", "accuracy"):
        assert (tmp_path / f"xml-small-tf_distribute-2w-{kind}.png").stat().st_size > 10_000


def test_bad_link_is_refused():
    assert e2e_report.nominal_gbps("500mbit") == 0.5
    with pytest.raises(ValueError, match="tc rate"):
        e2e_report.nominal_gbps("fast")


def test_every_flag_of_the_harness_is_in_its_help():
    import subprocess  # pylint: disable=import-outside-toplevel
    import sys  # pylint: disable=import-outside-toplevel
    from tests.cluster.local_cluster import ROOT  # pylint: disable=import-outside-toplevel
    out = subprocess.run([sys.executable, "-m", "benchmarks.e2e", "--help"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)  # absl's --help exits 1
    assert "End-to-end benchmark" in out.stdout, out.stderr[-2000:]
    for flag in ("models", "size", "compressors", "engines", "workers", "links", "shared_loopback", "steps",
                 "warmup", "eval_every", "global_batch", "lr", "timeline_steps", "probe", "probe_max_bytes",
                 "target_fraction", "output", "resume", "report_only", "timeout_s"):
        assert f"--{flag}" in out.stdout or f"--[no]{flag}" in out.stdout, flag


def _predicted(record, predicted_ms):
    return dict(record, predicted_step_ms=predicted_ms)


def test_predictions_are_tabled_with_their_errors_and_crossovers(tmp_path):
    records = grid()
    # Predicted: dense 110 and 22 ms, DGC 40 and 44 ms -> errors +10%, 0%, +10%, +10%.
    records = [_predicted(r, p) for r, p in zip(records, (110.0, 40.0, 22.0, 44.0))]
    table = e2e_validation.rows(records)
    assert [round(r["error"], 6) for r in table] == [0.1, 0.0, 0.1, 0.1]
    assert e2e_validation.summary(table) == pytest.approx((0.1, 0.1))
    (found,) = e2e_validation.crossovers(table, e2e_report.crossover)
    # Measured speed-ups 2.5 (0.8 Gbit/s) and 0.5 (8); predicted 2.75 and 0.5.
    assert found["measured"] == pytest.approx(e2e_report.crossover([(0.8, 2.5), (8.0, 0.5)]))
    assert found["predicted"] == pytest.approx(e2e_report.crossover([(0.8, 2.75), (8.0, 0.5)]))
    assert e2e_validation.within_one_grid_step(found)
    e2e_report.write(records, tmp_path, 0.95)
    text = (tmp_path / "e2e.md").read_text()
    assert "median |error| 10.0%, max 10.0%" in text
    assert "| xml (small) | tf.distribute | 2 | 1gbit | DGC | 40.0 | 40.0 | +0.0% |" in text
    assert (tmp_path / "predicted-vs-measured.png").stat().st_size > 10_000


def test_a_crossover_one_grid_step_off_agrees_and_two_do_not():
    grid_gbps = [0.1, 0.5, 1.0, 2.0, 8.0]
    found = lambda predicted: {"measured": 0.7, "predicted": predicted, "grid_gbps": grid_gbps}  # noqa: E731
    assert e2e_validation.within_one_grid_step(found(0.3))  # one step below 0.5
    assert e2e_validation.within_one_grid_step(found(1.9))  # one step above 1.0
    assert not e2e_validation.within_one_grid_step(found(0.05))
    assert not e2e_validation.within_one_grid_step(found(3.0))
    assert not e2e_validation.within_one_grid_step(found(None))
    assert e2e_validation.within_one_grid_step({"measured": None, "predicted": None, "grid_gbps": grid_gbps})


def test_the_report_says_where_the_workers_ran():
    records = grid()
    assert "Workers' cores: not recorded" in e2e_report.markdown(records, 0.95)
    for r in records:
        r["worker_cores"] = [[0], [1]]
    assert "Workers' cores: worker 0 on 0, worker 1 on 1." in e2e_report.markdown(records, 0.95)
    records[0]["worker_cores"] = []
    assert "Workers' cores: differ between runs" in e2e_report.markdown(records, 0.95)
    for r in records:
        r["worker_cores"] = []
    assert "Workers' cores: shared (not pinned)." in e2e_report.markdown(records, 0.95)


def test_a_grid_of_several_models_summarises_each():
    records = [_predicted(r, p) for r, p in zip(grid(), (110.0, 40.0, 22.0, 44.0))]  # +10%, 0%, +10%, +10%
    assert "- xml (small)" not in "\n".join(e2e_validation.markdown(records, e2e_report.crossover))
    for r in records[2:]:
        r["model"] = "resnet50"
    text = "\n".join(e2e_validation.markdown(records, e2e_report.crossover))
    assert "- xml (small), 2 runs: median |error| 5.0%, max 10.0%." in text
    assert "- resnet50 (small), 2 runs: median |error| 10.0%, max 10.0%." in text
