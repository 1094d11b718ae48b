"""TensorFlow's "Multi-worker training with Keras" tutorial program, fault-tolerant form
(tests/workers/keras_tutorial: model.fit with BackupAndRestore, one backup_dir for
both workers), unchanged but for the strategy line and a bundled dataset, on 2
workers: a worker killed in its second epoch fails the other, and both restarted
resume from the backup and finish. Runs on every stack: the pinned one, and in
`make test STACK=current` under tf-keras and under Keras 3, where tf.distribute's own
strategy fails this program's model.fit upstream (keras-team/keras#20585). And its
custom-training-loop variant (tests/workers/keras_tutorial_ctl), on every stack too."""
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import time

from tests.cluster import preload, processes
from tfcomp.keras import version as keras_in_use
from tests.cluster.local_cluster import ROOT, free_ports, wait_then_stop
from tests.stacks import EVERY_STACK

pytestmark = EVERY_STACK

TUTORIAL = ROOT / "tests" / "workers" / "keras_tutorial" / "main.py"
TIMEOUT_S = 240


CTL = ROOT / "tests" / "workers" / "keras_tutorial_ctl"
#: Keras 3 spells two calls of the custom-loop tutorial differently, whatever the strategy.
KERAS3_SPELLINGS = {"reduction=tf.keras.losses.Reduction.NONE": "reduction='none'",
                    "train_accuracy.reset_states()": "train_accuracy.reset_state()"}


def start(work_dir, cluster, run, program=TUTORIAL):
    """Both workers of the tutorial in work_dir (where its backup directory is), logs in
    run_<task>.log: `python PROGRAM`, through a preload server under the tests (the
    program as written, run by an interpreter that has imported TensorFlow)."""
    procs = []
    for task in range(len(cluster["worker"])):
        env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": task}}),
                   TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", CUDA_VISIBLE_DEVICES="")
        log = open(work_dir / f"{run}_{task}.log", "w")
        procs.append((subprocess.Popen([*preload.python_script(env, task), str(program)], cwd=work_dir, env=env,
                                       stdout=log, stderr=subprocess.STDOUT), log))
    return procs


def epochs(log):
    return [int(e) for e in re.findall(r"^Epoch (\d+)/3", log, re.M)]


def epoch_losses(log):
    """The loss model.fit reports at the end of each epoch: the last one printed before the
    next epoch begins (Keras 2 joins a progress bar's updates with backspaces and may print
    its last step twice, once before the epoch's logs are reduced)."""
    sections = re.split(r"^Epoch \d+/3", log, flags=re.M)[1:]
    return [float(re.findall(r"\bloss: ([0-9.]+)", section)[-1]) for section in sections
            if re.search(r"\bloss: ", section)]


def test_the_tutorial_resumes_every_worker_from_one_backup_dir_after_a_worker_is_killed(tmp_path):
    cluster = {"worker": [f"localhost:{p}" for p in free_ports(2)]}
    first = start(tmp_path, cluster, "first")
    deadline = time.monotonic() + TIMEOUT_S
    log1 = tmp_path / "first_1.log"
    while time.monotonic() < deadline and 2 not in epochs(log1.read_text()) and first[1][0].poll() is None:
        time.sleep(0.2)
    first[1][0].send_signal(signal.SIGKILL)  # in its second epoch, after the first epoch's backup
    wait_then_stop([p for p, _ in first], [log for _, log in first], TIMEOUT_S, stop_on_failure_s=90)
    logs = [(tmp_path / f"first_{t}.log").read_text() for t in range(2)]
    assert 2 in epochs(logs[1]), logs[1][-3000:]
    assert [p.returncode for p, _ in first] == [1, -signal.SIGKILL], logs[0][-3000:]
    assert "tfcomp: worker 1" in logs[0] and "was lost" in logs[0], logs[0][-3000:]
    assert processes.running(str(tmp_path)) == []

    again = start(tmp_path, {"worker": [f"localhost:{p}" for p in free_ports(2)]}, "again")
    wait_then_stop([p for p, _ in again], [log for _, log in again], TIMEOUT_S, stop_on_failure_s=60)
    logs = [(tmp_path / f"again_{t}.log").read_text() for t in range(2)]
    assert [p.returncode for p, _ in again] == [0, 0], "\n".join(log[-3000:] for log in logs)
    for log in logs:
        assert epochs(log) == [2, 3], log[-3000:]  # resumed after the first epoch
    reported = [epoch_losses(log) for log in logs]
    assert len(reported[0]) == 2 and reported[0] == reported[1], reported  # the workers' logs are reduced alike
    assert reported[0][-1] < 2.3, reported  # below chance's 2.30: it learned
    assert not list(pathlib.Path(tmp_path).glob("backup/**/*.h5"))  # the backups are removed when training ends


def custom_loop_program(work_dir):
    """The custom-loop tutorial's main.py, in Keras 3's spellings where Keras 3 runs it, in
    work_dir beside its mnist.py (and the bundled dataset's mnist_setup.py), as the
    tutorial writes its files side by side."""
    source = (CTL / "main.py").read_text()
    if keras_in_use.in_use().major >= 3:
        for keras2, keras3 in KERAS3_SPELLINGS.items():
            assert keras2 in source
            source = source.replace(keras2, keras3)
    program = work_dir / "main.py"
    program.write_text(source)
    for module in (CTL / "mnist.py", TUTORIAL.parent / "mnist_setup.py"):
        shutil.copy(module, work_dir)
    return program


def test_the_custom_training_loop_tutorial_trains_alike_on_every_worker(tmp_path):
    """TensorFlow's "Custom training loop with Keras and MultiWorkerMirroredStrategy" program
    (tests/workers/keras_tutorial_ctl: strategy.run, optimizer.apply_gradients, a checkpoint
    per epoch) with tfcomp's strategy: both workers train its 3 epochs of 70 steps and report
    the same reduced loss and accuracy, the loss falling below chance's."""
    cluster = {"worker": [f"localhost:{p}" for p in free_ports(2)]}
    procs = start(tmp_path, cluster, "ctl", program=custom_loop_program(tmp_path))
    wait_then_stop([p for p, _ in procs], [log for _, log in procs], TIMEOUT_S, stop_on_failure_s=60)
    logs = [(tmp_path / f"ctl_{t}.log").read_text() for t in range(2)]
    assert [p.returncode for p, _ in procs] == [0, 0], "\n".join(log[-3000:] for log in logs)
    reported = [re.findall(r"^Epoch: (\d+), accuracy: ([0-9.]+), train_loss: ([0-9.]+)\.$", log, re.M)
                for log in logs]
    assert [int(epoch) for epoch, _, _ in reported[0]] == [0, 1, 2], logs[0][-3000:]
    assert reported[0] == reported[1]  # a reduced loss and a synchronised metric
    losses = [float(loss) for _, _, loss in reported[0]]
    assert losses[-1] < losses[0] and losses[-1] < 2.3, reported[0]
    assert float(reported[0][-1][1]) > 0.5, reported[0]  # ten classes: chance is 0.1
