"""The main job's command, shortened: both engines print the side-by-side table and
the verdict; the verdict counts only compressors that keep dense accuracy."""
import os
import re
import subprocess
import sys

import pytest
import tensorflow as tf

from benchmarks.main_job.report import verdict
from tests.cluster.local_cluster import ROOT


@pytest.mark.parametrize("engine", ["tf.distribute", pytest.param("horovod", marks=pytest.mark.horovod)])
def test_main_job_prints_the_comparison(tmp_path, engine):
    # Tensor selection plans for a 1 Gbit/s link, so DRAGONN compresses the 512x4096 head whatever
    # a busy moment of the shared machine does to its measured compression time.
    # The predicted column (a profile recorded on the workers) on one engine: the other's is the e2e test's.
    predict = "--predict" if engine == "horovod" else "--nopredict"
    out = subprocess.run([sys.executable, "-m", "benchmarks.main_job", f"--engine={engine}", "--epochs=2",
                          "--steps_per_epoch=8", "--compressors=none,DRAGONN", "--loopback_gbps=1", "--noslow_link",
                          predict, f"--timeline={tmp_path / 'timelines'}"],
                         cwd=ROOT, capture_output=True, text=True, timeout=400)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    lines = out.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("compression"))
    assert "xml (small" in lines[header - 1]  # the communication-heavy model by default
    rows = {line.split()[0]: line.split() for line in lines[header + 1:header + 3]}
    assert set(rows) == {"none", "DRAGONN"}
    if predict == "--predict":
        assert lines[header].endswith("predicted ms")
        assert all(float(rows[name][6]) > 0 for name in rows)
    dense, compressed = (int(rows[name][3].replace(",", "")) for name in ("none", "DRAGONN"))
    assert dense == 512 * 4096 * 4  # the head alone: the embedding is not trained
    assert compressed < dense / 10  # DRAGONN at 1% sends values and indices
    assert any(line.startswith("Compression for xml (small)") and "unshaped loopback" in line for line in lines)
    word = "rank" if engine == "horovod" else "worker"
    for name in ("none", "DRAGONN"):
        files = sorted(p.name for p in (tmp_path / "timelines" / name).iterdir())
        assert files == [f"{word}{r}.{ext}" for r in (0, 1) for ext in ("csv", "png", "trace.json")]


@pytest.mark.skipif(tuple(int(p) for p in tf.__version__.split(".")[:2]) < (2, 16), reason="Keras 3 comes with "
                    "TensorFlow 2.16 and later (make test STACK=current); TensorFlow 2.15's tf.keras is Keras 2")
def test_main_job_runs_under_keras3():
    """`make demo STACK=current`: the tf.distribute engine under Keras 3's model.fit, shortened."""
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    out = subprocess.run([sys.executable, "-m", "benchmarks.main_job", "--epochs=2", "--steps_per_epoch=8",
                          "--compressors=none,DRAGONN,PowerSGD", "--loopback_gbps=1", "--noslow_link"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "The workers run Keras 3" in out.stdout and "no predicted column" in out.stdout  # no Timeline there
    lines = out.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("compression"))
    assert re.search(r", Keras 3\.\d+\.\d+:$", lines[header - 1]), lines[header - 1]  # the workers' stack
    rows = {line.split()[0]: line.split() for line in lines[header + 1:header + 4]}
    dense, sparse, low_rank = (int(rows[name][3].replace(",", "")) for name in ("none", "DRAGONN", "PowerSGD"))
    assert dense == 512 * 4096 * 4 and sparse < dense / 10 and low_rank < dense / 10


def _row(name, step_ms, accuracy):
    return {"compression": name, "step_ms": step_ms, "accuracy": accuracy}


def test_the_verdict_counts_only_compressors_that_keep_dense_accuracy():
    results = {"loopback": [_row("none", 50, 0.90), _row("FP16", 60, 0.90), _row("DGC", 40, 0.80)],
               "1gbit": [_row("none", 200, 0.90), _row("EFSignSGD", 80, 0.895), _row("DGC", 50, 0.70)]}
    line = verdict("xml (small)", results, accuracy_points=1.0)
    # DGC is faster on both links but trains 10-20 points worse: it does not count.
    assert line == ("Compression for xml (small) pays on 1gbit/s links (EFSignSGD 2.50x per step) and does not "
                    "pay on unshaped loopback (best FP16 0.83x per step) (counting compressors within 1 points "
                    "of dense accuracy).")
    assert "none within 1 points" in verdict("m", {"loopback": [_row("none", 50, 0.9), _row("DGC", 10, 0.5)]}, 1.0)
    # 1% faster is noise on a shared machine, not a reason to compress.
    assert "does not pay on unshaped loopback (best FP16 1.01x" in verdict(
        "m", {"loopback": [_row("none", 50.5, 0.9), _row("FP16", 50, 0.9)]}, 1.0)
