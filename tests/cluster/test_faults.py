"""Training over an imperfect network, on the emulated cluster (a namespace,
address and veth link per worker): packet loss on one worker's link, that link
down for 5 s in the middle of training, one worker with half a core (a
straggler), and a link down for longer than the collective timeout. Each either
completes with the weights of a clean run on every worker, or fails within the
timeout with a message that names the worker or its peer's address, leaves
nothing running, and resumes from BackupAndRestore to the weights of a run that
was never interrupted. Time per step under each fault:
benchmarks/faults (docs/failures.md)."""
import time

import pytest

from tests.cluster import faults, netns_cluster
from tests.cluster.local_cluster import run_workers
from tests.workers.workload import assert_identical_weights
from tests.stacks import KERAS2_ON_PINNED

REASON = faults.root_only_reason()
pytestmark = [pytest.mark.skipif(REASON is not None, reason=str(REASON)), KERAS2_ON_PINNED]

STEPS = 48  # 6 epochs of 8 steps: BackupAndRestore backs up at each epoch's end
FAULT_AT_STEP = 16
TIMEOUT_S = 10  # the collective timeout the workers run with
ARGS = ["--compression=EFSignSGD", f"--steps={STEPS}", f"--timeout={TIMEOUT_S}"]


def train_on(cluster, out_dir, args=(), timeout=300):
    return run_workers("tests.workers.mwms_worker", 2, [*ARGS, *args], out_dir, hosts=cluster.worker_hosts,
                       prefixes=[cluster.prefix(w) for w in range(2)], timeout=timeout, stop_on_failure_s=60)


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """Worker 0's result of the same training with no fault."""
    with netns_cluster.emulated_cluster(2) as cluster:
        codes, logs, results = train_on(cluster, tmp_path_factory.mktemp("clean"))
    assert codes == [0, 0], "\n".join(log[-3000:] for log in logs)
    assert_identical_weights(results)
    return results[0]


def assert_completed_like_clean(codes, logs, results, clean):
    assert codes == [0, 0], "\n".join(log[-3000:] for log in logs)
    assert_identical_weights([*results, clean])
    assert all("was lost" not in log for log in logs)


def assert_failed_cleanly(cluster, codes, logs, fault, ended, log_dir):
    """Both workers failed on their own, each naming the other (the task that stopped
    answering, or the address it could no longer reach), nothing is left running, and
    the failure came within the collective timeout: each collective of the step in
    flight (a step has a few) waits up to it, counted from its launch, and one may have
    waited out the outage first. The failure is when each worker wrote its error (its
    log's last write); its process exits once TensorFlow's shutdown reaches the other
    worker, which can take until the link is back."""
    assert all(code > 0 for code in codes), codes  # none was killed by the launcher
    assert [faults.namespace_pids(cluster, w) for w in range(2)] == [[], []]
    failed_at = max((log_dir / f"worker{w}.log").stat().st_mtime for w in range(2))
    waited = failed_at - fault.down_at
    assert waited < min(fault.seconds, TIMEOUT_S) + 2 * TIMEOUT_S + 10, f"failed {waited:.1f} s after the fault"
    back = fault.down_at + fault.seconds
    assert ended < max(failed_at, back) + 20, f"exited {ended - max(failed_at, back):.1f} s after failing and the link"
    for worker, other in ((0, 1), (1, 0)):
        names = (f"/job:worker/replica:0/task:{other}", cluster.worker_hosts[other])
        assert any(name in logs[worker] for name in names), logs[worker][-3000:]


def train_through(cluster, tmp_path, clean, fault, args=()):
    """Trains with BackupAndRestore while `fault` (a LinkFlap, not started) strikes:
    either training completes like the clean run, or it fails cleanly and a restart
    on the healed link resumes to the clean run's weights. Returns which, and worker
    0's finished steps."""
    backup = f"--backup_dir={tmp_path / 'backup'}"
    fault.start()
    codes, logs, results = train_on(cluster, tmp_path / "faulty", [backup, *args])
    ended = time.time()
    fault.stop()
    assert fault.down_at is not None, "the fault never struck"
    if codes == [0, 0]:
        assert_completed_like_clean(codes, logs, results, clean)
        return "completed", faults.finished_steps(logs[0])
    assert_failed_cleanly(cluster, codes, logs, fault, ended, tmp_path / "faulty")
    codes, logs, resumed = train_on(cluster, tmp_path / "resumed", [backup])
    assert_completed_like_clean(codes, logs, resumed, clean)
    return "failed and resumed", faults.finished_steps(logs[0])


def test_training_completes_under_packet_loss_on_one_workers_link(tmp_path, clean):
    """5% of worker 1's packets dropped (a milder loss is the same retransmission, less often)."""
    with netns_cluster.emulated_cluster(2) as cluster, faults.packet_loss(cluster, 1, 5) as dropped:
        codes, logs, results = train_on(cluster, tmp_path)
        assert dropped() > 0
    assert_completed_like_clean(codes, logs, results, clean)


def test_a_link_down_for_5_s_mid_training_completes(tmp_path, clean):
    """With no collective timeout, and the strategy's 60 s coordination heartbeat
    (TensorFlow's 10 s failed the job: benchmarks/results/faults.md)."""
    with netns_cluster.emulated_cluster(2) as cluster:
        flap = faults.LinkFlap(cluster, 1, 5.0, faults.reached(tmp_path / "faulty" / "worker0.log", FAULT_AT_STEP))
        outcome, steps = train_through(cluster, tmp_path, clean, flap, ["--timeout=0"])
    assert outcome == "completed"
    # The step in flight when the link went down waited for it.
    assert max(b[1] - a[1] for a, b in zip(steps, steps[1:])) >= 5.0


def test_a_link_down_past_the_collective_timeout_fails_cleanly_and_resumes(tmp_path, clean):
    with netns_cluster.emulated_cluster(2) as cluster:
        flap = faults.LinkFlap(cluster, 1, 4 * TIMEOUT_S, faults.reached(tmp_path / "faulty" / "worker0.log", FAULT_AT_STEP))
        outcome, _ = train_through(cluster, tmp_path, clean, flap)
    assert outcome == "failed and resumed"


def test_training_completes_with_a_straggler_on_half_a_core(tmp_path, clean):
    with netns_cluster.emulated_cluster(2) as cluster:
        (codes, logs, results), stat = faults.with_a_straggler(
            cluster, 1, lambda: train_on(cluster, tmp_path), faults.reached(tmp_path / "worker1.log", 1))
    assert_completed_like_clean(codes, logs, results, clean)
    assert int(stat["nr_throttled"]) > 0  # the quota held the straggler back
