"""benchmarks.prediction_repeats: predictions against the median of repeated runs,
and the runs' own repeatability."""
import dataclasses
import json

import pytest

from benchmarks.prediction_repeats import __main__ as prediction_repeats
from tfcomp.costs.network import Link
from tfcomp.analysis.model.profile import Profile
from tfcomp.analysis.model.synthetic import synthetic_profile
from tests.stacks import NO_KERAS

pytestmark = NO_KERAS


def record(compression, step_ms, link="1gbit", status="ok"):
    return {"model": "vgg16", "size": "small", "engine": "tf.distribute", "workers": 2, "link": link,
            "compression": compression, "step_ms": step_ms, "status": status}


def test_configurations_run_often_enough_are_grouped_and_auto_and_failures_left_out():
    records = [record("none", 50.0), record("none", 54.0), record("none", 70.0, status="failed"),
               record("DGC", 40.0), record("auto", 30.0), record("auto", 31.0),
               record("none", 200.0, link="100mbit"), record("none", 210.0, link="100mbit")]
    found = prediction_repeats.measured_configurations(records, min_runs=2)
    assert found == {("vgg16", "small", "tf.distribute", 2, "1gbit", "none"): [50.0, 54.0],
                     ("vgg16", "small", "tf.distribute", 2, "100mbit", "none"): [200.0, 210.0]}


def test_errors_against_each_run_and_against_the_median_and_the_repeatability():
    configurations = {("m", "small", "e", 2, "1gbit", "none"): [40.0, 50.0, 60.0],
                      ("m", "small", "e", 2, "1gbit", "DGC"): [20.0, 30.0],
                      ("m", "small", "e", 2, "1gbit", "PowerSGD"): [10.0, 10.0]}
    predicted = {"none": 55.0, "DGC": 25.0, "PowerSGD": None}
    table = prediction_repeats.rows(configurations, lambda key: predicted[key[5]])
    assert [r["compression"] for r in table] == ["none", "DGC"]  # no prediction: left out
    dense, dgc = table
    assert dense["median_ms"] == 50.0 and dense["error"] == pytest.approx(0.1)
    assert dense["run_deviations"] == pytest.approx([-0.2, 0.0, 0.2])
    assert dense["run_errors"] == pytest.approx([55 / 40 - 1, 0.1, 55 / 60 - 1])
    assert dgc["median_ms"] == 25.0 and dgc["error"] == pytest.approx(0.0)
    stats = prediction_repeats.summary(table)
    assert stats["against the median"] == pytest.approx((0.05, 0.1))
    assert stats["repeatability"] == pytest.approx((0.2, 0.2))  # |0.2, 0, 0.2, 0.2, 0.2|
    assert stats["against each run"][1] == pytest.approx(0.375)
    text = prediction_repeats.markdown(table, "cmd")
    assert "| m (small) | e | 2 | 1gbit | none | 40.0 / 50.0 / 60.0 | 50.0 | 40% | 55.0 | +10.0% |" in text
    assert "prediction against the median of the runs | median 5.0%, max 10.0% |" in text


def test_runs_files_reads_a_plan_regret_output_with_its_repeats(tmp_path):
    (tmp_path / "grid").mkdir()
    for where in ("grid", "grid/repeat2", "grid/repeat3"):
        (tmp_path / where).mkdir(exist_ok=True)
        (tmp_path / where / "runs.jsonl").write_text(json.dumps(record("none", 1.0)) + "\n")
    single = tmp_path / "single.jsonl"
    single.write_text("")
    found = prediction_repeats.runs_files([str(tmp_path / "grid"), str(single)])
    assert [p.relative_to(tmp_path).as_posix() for p in found] == [
        "grid/runs.jsonl", "grid/repeat2/runs.jsonl", "grid/repeat3/runs.jsonl", "single.jsonl"]
    with pytest.raises(FileNotFoundError, match="no runs at"):
        prediction_repeats.runs_files([str(tmp_path / "missing")])


def test_with_model_from_takes_the_model_of_one_profile_and_the_rest_of_another(tmp_path):
    own = dataclasses.replace(synthetic_profile(), allreduce=Link(1e-4, 1.25e7))  # a 100 Mbit/s cluster
    other_model = dataclasses.replace(synthetic_profile().model, forward_s=0.5, name="unshaped cluster's")
    own.save(tmp_path / "own.json")
    dataclasses.replace(synthetic_profile(), model=other_model).save(tmp_path / "unshaped.json")
    (tmp_path / "scratch").mkdir()
    combined = Profile.load(prediction_repeats.with_model_from(tmp_path / "own.json", tmp_path / "unshaped.json",
                                                               tmp_path / "scratch"))
    assert combined.model == other_model
    saved, kept = combined.to_dict(), own.to_dict()
    assert saved["model"]["forward_s"] == 0.5
    assert {k: v for k, v in saved.items() if k != "model"} == {k: v for k, v in kept.items() if k != "model"}
