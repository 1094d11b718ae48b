"""tfcomp.keras.optimizers.advice() and settings_advice() against the committed convergence
benchmark (benchmarks/results/convergence.json): they warn exactly where a recommended
setting did not train like dense there, and quote how far below dense RandomK ended."""
import json

import tensorflow as tf

import tfcomp
from benchmarks.convergence.__main__ import settings
from benchmarks.harness.convergence_tasks import TASKS
from tests.cluster.local_cluster import ROOT
from tfcomp.keras.optimizers import advice, settings_advice
from tests.stacks import EVERY_STACK

pytestmark = EVERY_STACK

BETA = 0.9  # as the benchmark trains (SGD with momentum 0.9)
LR = 0.1  # the learning rate advice() is asked about where a setting does not name its own
RESULTS = ROOT / "benchmarks" / "results" / "convergence.json"


def sgd_at(learning_rate):
    return tf.keras.optimizers.SGD(learning_rate, momentum=BETA)


def test_advice_speaks_exactly_where_the_committed_benchmark_did_not_train_like_dense():
    """Each recommended setting of benchmarks/results/convergence.json under SGD with
    momentum, as the benchmark ran it (learning rate, dense warm-up): advice() warns where
    it was not like dense on the digits MLP or CNN, and says nothing where it was on both."""
    results = json.loads(RESULTS.read_text())["results"]
    recommended = settings(TASKS["mlp"], "sgd_momentum")["recommended"]
    verdicts = set()
    for label, factory, options in recommended:
        like_dense = [run["like_dense"] for task in ("mlp", "cnn")
                      for run in results[f"convergence_{task}_sgd_momentum"]["runs"]
                      if run["setting"] == "recommended" and run["label"] == label]
        assert len(like_dense) == 2, label
        compressor = factory()
        said = settings_advice(compressor) or advice(compressor, sgd_at(options.get("learning_rate", LR)),
                                                     warmup_steps=22 * options.get("warmup_epochs", 0))
        assert (said is None) == all(like_dense), (label, like_dense, said)
        verdicts.add(all(like_dense))
    assert verdicts == {True, False}, "the committed benchmark has settings of both kinds"
    said = settings_advice(tfcomp.RandomK(0.1))  # whatever the optimizer, when the engine is made
    for optimizer_name in ("sgd_momentum", "adam"):
        below = [block["dense"]["final"] - run["final"]
                 for block in (results[f"convergence_{task}_{optimizer_name}"] for task in ("mlp", "cnn"))
                 for run in block["runs"] if run["setting"] == "recommended" and run["label"] == "RandomK(0.1)"]
        assert f"{100 * below[0]:.1f} and {100 * below[1]:.1f} points" in said, (optimizer_name, said)
