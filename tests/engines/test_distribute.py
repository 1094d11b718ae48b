"""tfcomp.distribute.MultiWorkerMirroredStrategy with real worker processes on localhost."""
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import zipfile

import numpy as np
import pytest

import tfcomp
from tfcomp.keras import version as keras_in_use
from tfcomp.engines import peers
from tests.cluster import processes
from tests.cluster.local_cluster import ROOT, run_workers
from tests.workers.workload import (MOMENTUM_RUN, assert_compressed_after_an_epoch, assert_identical_weights,
                                    assert_trains_like_dense_with_momentum)
from tests.stacks import EVERY_STACK, KERAS2_ON_PINNED, KERAS3, NO_KERAS, PINNED, stacks

pytestmark = KERAS2_ON_PINNED

STEPS = 32
UNDER_KERAS3 = keras_in_use.in_use().major >= 3  # the workers' tf.keras, as this process's (same environment)


def train(tmp_path, workers=2, **flags):
    args = [f"--{k}={v}" for k, v in flags.items()]
    codes, logs, results = run_workers("tests.workers.mwms_worker", workers, args, tmp_path)
    assert codes == [0] * workers, "worker failed:\n" + "\n".join(log[-3000:] for log in logs)
    return results


@EVERY_STACK
def test_no_compression_matches_tf_distribute(tmp_path):
    # Keras 3's model.fit fails under tf.distribute's own strategy on 2 workers (keras-team/keras#20585;
    # tfcomp's strategy works around it): there both run a custom loop.
    loop = "custom" if UNDER_KERAS3 else "fit"
    ours = train(tmp_path / "tfcomp", compression="NoCompression", loop=loop)
    plain = train(tmp_path / "plain", strategy="plain", loop=loop)
    assert_identical_weights(ours)
    for a, b in zip(ours[0]["weights"], plain[0]["weights"]):
        np.testing.assert_allclose(np.array(a), np.array(b), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(ours[0]["losses"], plain[0]["losses"], rtol=1e-6)
    assert ours[0]["state_step"] == STEPS


SPARSE = {"ratio": 0.05, "selection": False}  # the test model's tensors are small


# Three workers once per collective kind (allgather: DRAGONN, allreduce: ACPSGD); the
# Horovod suite runs EFSignSGD on three ranks.
# (Every compressor's bare name on 2 workers: test_each_bare_name_trains_like_dense_under_sgd_with_momentum.)
@pytest.mark.parametrize("compression, lr, workers, extra", [
    ("SignSGD", 0.01, 2, {}), ("DRAGONN", 0.2, 3, SPARSE), ("RandomK", 0.5, 2, SPARSE),
    ("DRAGONN", 0.2, 2, {**SPARSE, "warmup_steps": 8}), ("ACPSGD", 0.2, 3, {"rank": 4})])
def test_compressors_train_under_model_fit(tmp_path, compression, lr, workers, extra):
    results = train(tmp_path, workers, compression=compression, lr=lr, **extra)
    assert_identical_weights(results)
    losses = results[0]["losses"]
    assert losses[-1] < 0.85 * losses[0], losses
    dense_bytes = 4 * (64 * 64 + 64 + 64 * 10 + 10)
    assert results[0]["payload_bytes"] < dense_bytes
    assert results[0]["state_step"] == STEPS


@pytest.fixture(scope="module")
def dense_with_momentum(tmp_path_factory):
    return train(tmp_path_factory.mktemp("dense_with_momentum"), compression="NoCompression", **MOMENTUM_RUN)


# Under tf-keras (Keras 2's path on TensorFlow 2.21) one sparsifier, its dense epoch learned
# from model.fit's dataset (EFSignSGD runs through model.fit in the tutorial test).
@pytest.mark.parametrize("compression", ["FP16", "EFSignSGD", "TopK", "DGC", pytest.param("DRAGONN", marks=EVERY_STACK),
                                         "PowerSGD", "ACPSGD"])
def test_each_bare_name_trains_like_dense_under_sgd_with_momentum(tmp_path, dense_with_momentum, compression):
    """compression=tfcomp.X with no arguments under SGD(momentum=0.9), as users compile it (every
    compressor but RandomK and SignSGD, which need more: see settings_advice): a dense epoch
    learned from model.fit's dataset, then compressed, within MOMENTUM_TOLERANCE of dense.
    Every tensor it can compress is compressed (selection=False: the test model is small)."""
    ours = assert_trains_like_dense_with_momentum(train, tmp_path, dense_with_momentum, compression,
                                                  {"selection": False})
    assert_compressed_after_an_epoch(ours, compression)


@stacks(KERAS3, why="gradient_accumulation_steps is Keras 3 optimizers' (Horovod's "
        "backward_passes_per_step on the pinned stack: test_horovod.py)")
def test_keras3_gradient_accumulation_compresses_the_accumulated_gradient_once_per_applied_step(tmp_path):
    """Keras 3's optimizer reduces the mean of ACCUMULATE micro-batches' gradients on the step that
    applies it: the exchange runs (and error feedback steps) once per applied step, and training
    stays within MOMENTUM_TOLERANCE's loss of dense accumulation's."""
    accumulate = {"accumulate": 2, "momentum": 0.9, "lr": 0.05, "selection": False}
    dense = train(tmp_path / "dense", compression="NoCompression", **accumulate)
    compressed = train(tmp_path / "efsign", compression="EFSignSGD", **accumulate)
    for results in (dense, compressed):
        assert_identical_weights(results)
        assert results[0]["state_step"] == STEPS // 2  # exchanged on applied steps only
    assert compressed[0]["payload_bytes"] < dense[0]["payload_bytes"] / 4
    assert compressed[0]["losses"][-1] < 0.85 * compressed[0]["losses"][0], compressed[0]["losses"]
    assert compressed[0]["losses"][-1] <= dense[0]["losses"][-1] * 1.25, (compressed[0]["losses"], dense[0]["losses"])


def test_frozen_variance_adam_freezes_where_the_strategy_starts_compressing(tmp_path):
    results = train(tmp_path, compression="EFSignSGD", optimizer="frozen_adam", lr=0.01, warmup_steps=8)
    assert_identical_weights(results)
    for worker in results:
        assert worker["variance_steps"] == 8
        assert worker["variance_at_warmup_end"] == worker["variance_at_end"]  # not moved by compressed steps
        assert min(worker["variance_at_end"]) > 0
    assert results[0]["losses"][-1] < 0.85 * results[0]["losses"][0], results[0]["losses"]


def test_custom_training_loop_conserves_error_feedback_mass(tmp_path):
    results = train(tmp_path, compression="EFSignSGD", loop="custom", check_mass=True,
                    min_compress_elements=100, lr=0.2)
    assert_identical_weights(results)
    assert results[0]["losses"][-1] < 0.85 * results[0]["losses"][0]
    for worker in results:
        # gradient + old residual == what was sent (mean|p| sign p) + new residual, per tensor
        assert worker["mass_error"] < 1e-5, worker["mass_error"]
        assert worker["compressed_tensors"] >= 2


@NO_KERAS
@pytest.mark.parametrize("seconds", [0, -1.0])
def test_a_heartbeat_timeout_must_be_positive(seconds):
    with pytest.raises(ValueError, match="heartbeat_timeout_s must be a positive number of seconds"):
        tfcomp.distribute.MultiWorkerMirroredStrategy(heartbeat_timeout_s=seconds)


@NO_KERAS
def test_unknown_compressor_fails_at_construction():
    with pytest.raises(ValueError, match="compression must be a tfcomp compressor"):
        tfcomp.distribute.MultiWorkerMirroredStrategy(compression="topk")


ENGINE_COLLECTIVES = """
import json
from tensorflow.python.eager import context
import tfcomp
engine = tfcomp.distribute.MultiWorkerMirroredStrategy(compression=tfcomp.FP16).engine
counts = []
for i in range(4):
    assert engine.mean_floats([1.0, 2.0]) == [1.0, 2.0]
    assert engine.gather_ints([i, 7]) == [[i, 7]]
    counts.append(len(context.context().list_function_names()))
print(json.dumps(counts))
"""


@NO_KERAS
def test_the_engines_own_collectives_add_no_function_per_call():
    # tfcomp.Auto's drift check runs one every replan_every steps for as long as training lasts.
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    done = subprocess.run([sys.executable, "-c", ENGINE_COLLECTIVES], capture_output=True, text=True, timeout=300,
                          cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert done.returncode == 0, done.stderr[-3000:]
    counts = json.loads(done.stdout.strip().splitlines()[-1])
    assert counts[1:] == counts[:1] * 3, counts


def test_workers_disagreeing_on_the_compressor_fail_clearly(tmp_path):
    start = time.monotonic()
    codes, logs, _ = run_workers("tests.workers.mwms_worker", 2, ["--timeout=20"], tmp_path,
                                 per_worker_args=[["--compression=SignSGD"], ["--compression=EFSignSGD"]])
    assert codes == [1, 1], logs
    for log in logs:
        assert "workers disagree on the compression" in log
        assert "SignSGD" in log
    assert time.monotonic() - start < 120


def test_a_lost_worker_fails_the_step_instead_of_hanging(tmp_path):
    start = time.monotonic()
    codes, logs, _ = run_workers("tests.workers.mwms_worker", 2, ["--compression=EFSignSGD", "--timeout=10"], tmp_path,
                                 per_worker_args=[[], ["--interrupt_at=3"]])
    assert codes[1] == 3
    assert codes[0] not in (0, None) and codes[0] > 0, "the surviving worker must fail, not hang or be killed"
    errors = ("DeadlineExceeded", "timed out", "Unavailable", "Aborted", "Cancelled")
    assert any(e in logs[0] for e in errors), logs[0][-2000:]  # a collective error, whichever comes first
    assert time.monotonic() - start < 120


def kill_one_worker(out_dir, workers, killed, extra=()):
    """Worker `killed` SIGKILLs itself as it starts step KILLED_STEP; returns (codes, logs)."""
    per_worker = [["--kill_at=20"] if t == killed else [] for t in range(workers)]
    codes, logs, _ = run_workers("tests.workers.mwms_worker", workers, ["--compression=EFSignSGD", *extra], out_dir,
                                 per_worker_args=per_worker)
    assert codes[killed] == -signal.SIGKILL, codes
    assert processes.running(str(out_dir)) == []  # no worker is left behind
    return codes, logs


KILLED_STEP = 21  # --kill_at=20: the worker dies when it starts the 21st step


@pytest.mark.parametrize("workers, killed, loop", [(2, 1, "fit"), (3, 0, "fit"), (2, 1, "custom")])
def test_a_killed_worker_fails_every_other_worker_with_its_name_and_step(tmp_path, workers, killed, loop):
    start = time.monotonic()
    # A collective timeout far above the time the test allows: the loss must fail the step, not the timeout.
    codes, logs = kill_one_worker(tmp_path, workers, killed, ["--timeout=600", f"--loop={loop}"])
    # The step named is the one the survivors were in: the killed worker's, or the one before, where
    # a survivor was still in that step's last collective (the non-finite flag, which the killed
    # worker had completed) or, under Keras 3's fit (it calls on_train_batch_begin, where the worker
    # kills itself, while the step before may still run on the others), after it.
    steps = f"({KILLED_STEP - 1}|{KILLED_STEP})"
    # An error-level log line (E<mmdd> ...), which may follow other output on its line: stderr is shared.
    named = re.compile(rf"E\d{{4}} .*tfcomp: worker {killed} \(localhost:\d+, pid \d+\) was lost (during "
                       rf"training step {steps}|after training step {KILLED_STEP - 1}): its process ended "
                       rf"without leaving")
    for task in range(workers):
        if task != killed:
            assert codes[task] == 1, (codes, logs[task][-3000:])
            assert named.search(logs[task]), logs[task][-3000:]
            assert "UnavailableError" in logs[task], logs[task][-3000:]
            lost = set(re.findall(r"tfcomp: (?:then )?worker (\d+) \(", logs[task]))
            assert lost == {str(killed)}, lost  # a survivor that failed and left is not blamed
    # The step's error also carries the message where the watch aborted the collectives before one
    # failed on the closed connection (a race; the log line above is there either way).
    assert time.monotonic() - start < 150


def test_strangers_at_the_peer_watch_during_start_up_and_training_change_nothing(tmp_path):
    """While worker 1 waits to connect, strangers reach worker 0's peer watch: one closes,
    one sends garbage, one claims a rank with a wrong proof, one says nothing. Then, as the
    workers train, the watch's port refuses connections. Training ends on both workers,
    nobody is reported lost, and the weights agree."""
    outcome = {}
    workers = threading.Thread(target=lambda: outcome.update(zip(
        ("codes", "logs", "results"),
        run_workers("tests.workers.mwms_worker", 2, ["--compression=EFSignSGD", "--steps=64",
                                                     "--hold_peer_watch_s=4"], tmp_path))))
    workers.start()
    port = _peer_watch_port(tmp_path / "worker0.log")
    held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(4)]
    held[0].close()
    held[1].sendall(os.urandom(64))
    held[2].sendall(peers._RANK.pack(1) + os.urandom(peers._NONCE_BYTES) + bytes(peers._PROOF_BYTES))
    refused = 0
    while workers.is_alive():  # worker 1 gets in; from then on nothing listens there
        try:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
            assert not refused, "the peer watch's port took a connection after it had closed"
        except ConnectionRefusedError:
            refused += 1
        time.sleep(0.2)
    for sock in held[1:]:
        sock.close()
    workers.join()
    assert outcome["codes"] == [0, 0], "\n".join(log[-3000:] for log in outcome["logs"])
    assert refused > 0
    log = outcome["logs"][0]
    assert log.count("the peer watch ignored a connection from 127.0.0.1") >= 4, log[-3000:]
    assert "was lost" not in log and "was lost" not in outcome["logs"][1]
    assert_identical_weights(outcome["results"])


def _peer_watch_port(log_path, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = re.search(r"peer watch port (\d+)", log_path.read_text() if log_path.exists() else "")
        if found:
            return int(found.group(1))
        time.sleep(0.05)
    raise AssertionError(f"no peer watch port in {log_path}")


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """EFSignSGD trained STEPS steps without a break, where every resumed run must end:
    trained once for the tests below."""
    return train(tmp_path_factory.mktemp("uninterrupted"), compression="EFSignSGD")


def test_backup_and_restore_resumes_after_a_worker_is_killed(tmp_path, uninterrupted):
    backup = tmp_path / "backup"
    kill_one_worker(tmp_path / "killed", 2, 1, ["--timeout=600", f"--backup_dir={backup}"])
    resumed = train(tmp_path / "resumed", compression="EFSignSGD", backup_dir=backup)
    assert_identical_weights([*resumed, uninterrupted[0]])
    assert resumed[0]["state_step"] == STEPS


@EVERY_STACK
def test_backup_and_restore_resumes_with_every_workers_residuals(tmp_path, uninterrupted):
    """One backup_dir for both workers, as users write it: tf-keras writes from the chief
    alone; under Keras 3, which writes from every worker, each has a folder of its own there."""
    backup = tmp_path / "backup"
    codes, logs, _ = run_workers("tests.workers.mwms_worker", 2, ["--compression=EFSignSGD", f"--backup_dir={backup}",
                                                          "--interrupt_at=20"], tmp_path / "interrupted")
    assert codes == [3, 3], logs
    if UNDER_KERAS3:
        assert sorted(p.name for p in backup.iterdir()) == ["worker0", "worker1"]
        assert all((backup / f"worker{w}" / "latest.weights.h5").exists() for w in (0, 1))
    resumed = train(tmp_path / "resumed", compression="EFSignSGD", backup_dir=backup)
    assert_identical_weights([*resumed, uninterrupted[0]])
    assert resumed[0]["state_step"] == STEPS


@stacks(PINNED, why="Keras 2's model.save writes a SavedModel (tf-keras takes the pinned stack's path); "
        "Keras 3 saves .keras archives: the test below")
def test_model_save_carries_every_workers_state_and_load_weights_resumes(tmp_path, uninterrupted):
    saved = tmp_path / "saved"
    first = train(tmp_path / "first", compression="EFSignSGD", steps=STEPS // 2, save_dir=saved)
    assert (saved / "model" / "saved_model.pb").exists()
    shapes = dict((name, shape) for name, shape in first[0]["saved_variables"])
    residuals = [shape for name, shape in shapes.items() if "tfcomp_state" in name and "residual" in name]
    assert residuals and all(shape[0] == 2 for shape in residuals), shapes  # both workers' rows
    resumed = train(tmp_path / "resumed", compression="EFSignSGD", steps=STEPS // 2,
                    load_weights=saved / "model" / "variables" / "variables")
    assert_identical_weights([*resumed, uninterrupted[0]])
    assert resumed[0]["state_step"] == STEPS


@stacks(KERAS3, why="Keras 2's model.save writes a SavedModel: the test above")
def test_keras3_model_save_carries_every_workers_state_and_load_weights_resumes(tmp_path, uninterrupted):
    import h5py  # pylint: disable=import-outside-toplevel
    saved = tmp_path / "saved"
    first = train(tmp_path / "first", compression="EFSignSGD", steps=STEPS // 2, save_dir=saved)
    archive = saved / "model.keras"
    with zipfile.ZipFile(archive) as z, h5py.File(io.BytesIO(z.read("model.weights.h5")), "r") as weights:
        shapes = {}
        weights.visititems(lambda name, item: shapes.update({name: item.shape}) if hasattr(item, "shape") else None)
    residuals = [shape for name, shape in shapes.items() if "tfcomp_state:" in name and "residual" in name]
    assert residuals and all(shape[0] == 2 for shape in residuals), shapes  # both workers' rows
    assert first[0]["state_step"] == STEPS // 2
    resumed = train(tmp_path / "resumed", compression="EFSignSGD", steps=STEPS // 2, load_weights=archive)
    assert_identical_weights([*resumed, uninterrupted[0]])
    assert resumed[0]["state_step"] == STEPS


def test_tensor_selection_shares_profiles_and_agrees(tmp_path):
    """With selection on, the small test model's tensors stay dense (they are not
    worth compressing at 10 Gbit/s), and every worker decides the same."""
    results = train(tmp_path, compression="DRAGONN", min_compress_elements=1)
    assert_identical_weights(results)
    dense_bytes = 4 * (64 * 64 + 64 + 64 * 10 + 10)
    assert results[0]["payload_bytes"] == dense_bytes  # nothing compressed: no non-finite flag either
