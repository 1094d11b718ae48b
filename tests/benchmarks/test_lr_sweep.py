"""benchmarks.lr_sweep: the grid around a task's configured rate (SignSGD's own under SGD)
and which rates converge, on stand-in training runs."""
import pytest

from benchmarks.lr_sweep import __main__ as lr_sweep
from benchmarks.harness.convergence_tasks import TASKS
from tests.stacks import NO_KERAS

pytestmark = NO_KERAS


def fake_training(finals, calls):
    def train_seed(task, optimizer_name, factory, seed, learning_rate, **training):
        calls.append((getattr(factory, "__name__", None), learning_rate, seed))
        final = finals[round(learning_rate, 6)]
        return {"final": final + 0.001 * seed, "steps_to_target": 100 if final > 0.78 else None,
                "steps": [0, 64], "metric": [0.1, final], "seconds": 1.0}
    return train_seed


def test_every_rate_within_the_tolerance_of_the_grids_best_converges(monkeypatch):
    calls = []
    monkeypatch.setattr(lr_sweep, "train_seed", fake_training({1.0: 0.42, 2.0: 0.787, 4.0: 0.814, 8.0: 0.812},
                                                              calls))
    rows = lr_sweep.sweep(TASKS["lstm_lm"], "sgd_momentum", [2, 0.25, 1, 0.5], seeds=2, converged=0.005)
    assert [r["learning_rate"] for r in rows] == [1.0, 2.0, 4.0, 8.0]  # ascending, around the configured 4
    assert [r["converges"] for r in rows] == [False, False, True, True]
    assert rows[2]["final"] == pytest.approx(0.8155)  # the mean over seeds 1 and 2
    assert rows[0]["steps_to_target"] is None and rows[2]["steps_to_target"] == 100
    assert {seed for _, _, seed in calls} == {1, 2} and {name for name, _, _ in calls} == {None}


def test_sign_sgd_sweeps_around_the_tasks_own_sign_rate_under_sgd_only(monkeypatch):
    calls = []
    lstm = TASKS["lstm_lm"]
    finals = {round(lstm.sign_sgd_learning_rate * f, 6): 0.7 for f in (0.5, 1)}
    finals.update({round(lstm.learning_rates["adam"] * f, 6): 0.8 for f in (0.5, 1)})
    monkeypatch.setattr(lr_sweep, "train_seed", fake_training(finals, calls))
    lr_sweep.sweep(lstm, "sgd_momentum", [0.5, 1], seeds=1, converged=0.005, compressor="SignSGD")
    lr_sweep.sweep(lstm, "adam", [0.5, 1], seeds=1, converged=0.005, compressor="SignSGD")
    assert [(name, lr) for name, lr, _ in calls] == [
        ("SignSGD", lstm.sign_sgd_learning_rate / 2), ("SignSGD", lstm.sign_sgd_learning_rate),
        ("SignSGD", lstm.learning_rates["adam"] / 2), ("SignSGD", lstm.learning_rates["adam"])]
