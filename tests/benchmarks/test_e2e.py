"""The end-to-end harness on a tiny grid: real workers in an emulated cluster
(network namespaces, veth, bridge, tc tbf), a grid that resumes where it
stopped, and nothing left behind after a failed worker or Ctrl-C."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tfcomp.analysis.measure import from_timeline
from tfcomp.analysis.model.profile import Profile
from tests.cluster import netns_cluster
from tests.cluster.local_cluster import ROOT
from tests.cluster.processes import running
from tests.stacks import KERAS2_ON_PINNED, PINNED, stacks

pytestmark = [pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces and tc need root"), KERAS2_ON_PINNED]

TINY = ["--models=digits_mlp", "--workers=2", "--engines=tf.distribute", "--steps=30", "--warmup=5",
        "--eval_every=10", "--timeline_steps=5", "--probe_max_bytes=4194304", "--timeout_s=240"]


def e2e(tmp_path, *flags, **kwargs):
    return subprocess.run([sys.executable, "-m", "benchmarks.e2e", f"--output={tmp_path}", *TINY, *flags],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, **kwargs)


# The harness's own resuming of a grid and handling of a failed worker and of Ctrl-C are plain
# Python around the workers' processes; under Keras 3 the dense grid test runs its workers.
HARNESS_ONLY = stacks(PINNED, why="the harness's resuming of a grid and handling of a failed worker and of Ctrl-C, "
                      "plain Python around the workers' processes, the same on every stack; under Keras 3 "
                      "test_tiny_grid_runs_on_a_shaped_cluster_and_predicts runs the harness's workers")


def records(tmp_path):
    return [json.loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]


def assert_run_on_the_shaped_link(r):
    """One run's record: the link it got, what crossed it, where its workers ran, what they learned."""
    assert r["link"] == "500mbit" and r["link_mode"] == "cluster"
    assert r["link_worker0"]["qdisc"] == "tbf" and r["link_worker0"]["rate"] == "500Mbit"
    assert r["link_worker0"]["sent_bytes"] >= 30 * r["bytes_per_step"]  # each step's payload, at least
    assert 0.3 < r["probe"]["allreduce"]["gbps"] < 0.6  # the link it actually got (burst included)
    assert r["step_ms_p10"] <= r["step_ms"] <= r["step_ms_p90"]
    # --pin_cores (the default): worker 0 ran on the cores the cluster gave it, apart from worker 1's
    # (on a machine of one core both share it).
    cores = [list(c) for c in netns_cluster.disjoint_cores(2)]
    assert r["worker_cores"] == cores
    assert r["cpus"] == (cores[0] if cores else sorted(os.sched_getaffinity(0)))
    assert [step for _, step, _ in r["curve"]] == [10, 20, 30]
    assert r["final_accuracy"] > 0.5  # digits, 10 classes: chance is 0.1
    assert r["phases_s"]["communicate"] > 0 and r["phases_s"]["forward_backward"] > 0


@pytest.fixture(scope="module")
def dense_grid(tmp_path_factory):
    """The grid's output directory after a dense run with --predict on a 500 Mbit/s cluster."""
    out = tmp_path_factory.mktemp("grid")
    first = e2e(out, "--compressors=none", "--links=500mbit", "--predict")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    return out


def test_tiny_grid_runs_on_a_shaped_cluster_and_predicts(dense_grid):
    # --predict: a profile recorded on the cluster from the dense run's trace, and its prediction.
    profile = Profile.load(dense_grid / "profiles" / "tf.distribute-2w-500mbit-digits_mlp.json")
    assert len(profile.model.gradients) == 6 and 0.3 < 8 * profile.allreduce.bandwidth_bytes_per_s / 1e9 < 0.6
    dense = records(dense_grid)[0]  # the grown grid's test may have added a run after it
    assert dense["predicted_step_ms"] > 0 and (dense["compression"], dense["status"]) == ("none", "ok")
    assert_run_on_the_shaped_link(dense)
    # Every worker's dense trace is kept beside the profile, and worker 0's gives back its model.
    kept = sorted(p.name for p in (dense_grid / "profiles").glob("*.trace.json.gz"))
    assert kept == [f"tf.distribute-2w-500mbit-digits_mlp.worker{w}.trace.json.gz" for w in range(2)]
    again = from_timeline.model_profile(dense_grid / "profiles" / kept[0], name=profile.model.name)
    assert again == profile.model  # measured ready times kept (the exchange overlaps backward)
    assert "Predicted against measured step time" in (dense_grid / "e2e.md").read_text()
    assert netns_cluster.leftovers() == []


@HARNESS_ONLY
def test_a_grown_grid_resumes_where_it_stopped_and_cleans_up(dense_grid):
    # The grid grows by a compressor, as a grid interrupted after its first run would be resumed.
    second = e2e(dense_grid, "--compressors=none,FP16", "--links=500mbit")
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "[1/2]" not in second.stdout and "[2/2] digits_mlp (small) · FP16" in second.stdout
    runs = records(dense_grid)
    assert [(r["compression"], r["status"]) for r in runs] == [("none", "ok"), ("FP16", "ok")]
    dense, fp16 = runs
    assert fp16["bytes_per_step"] == pytest.approx(dense["dense_bytes"] / 2, rel=0.01)
    assert_run_on_the_shaped_link(fp16)
    report = (dense_grid / "e2e.md").read_text()
    assert "| 500mbit | FP16 |" in report and "Links as probed" in report
    for kind in ("phases", "accuracy"):  # (speed-up against bandwidth needs two links)
        assert (dense_grid / f"digits_mlp-small-tf_distribute-2w-{kind}.png").stat().st_size > 10_000
    assert netns_cluster.leftovers() == []


@HARNESS_ONLY
def test_a_failed_worker_is_recorded_and_leaves_nothing_behind(tmp_path):
    out = e2e(tmp_path, "--compressors=DGC:no_such_knob=1", "--links=unlimited", "--noprobe")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    (run,) = records(tmp_path)
    assert run["status"] == "failed" and "no_such_knob" in run["error"]
    assert "FAILED" in out.stdout
    assert netns_cluster.leftovers() == []
    assert running("benchmarks.e2e.worker") == []


@HARNESS_ONLY
def test_ctrl_c_removes_the_cluster_and_its_workers(tmp_path):
    # The harness writes to a file, never to a pipe nobody reads while it exits.
    log_path = tmp_path / "e2e.log"
    with open(log_path, "w") as log:
        # SIGINT ignored as a background job inherits it (CI started with `&`): the harness must still stop.
        proc = subprocess.Popen([sys.executable, "-m", "benchmarks.e2e", f"--output={tmp_path / 'out'}", *TINY,
                                 "--compressors=none", "--links=unlimited", "--noprobe", "--steps=100000"],
                                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not running("benchmarks.e2e.worker"):
        time.sleep(0.5)
    assert running("benchmarks.e2e.worker"), "the workers never started"
    assert netns_cluster.made_by(proc.pid)
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the harness did not exit within 60 s of SIGINT:\n" + log_path.read_text()[-4000:])
    assert netns_cluster.made_by(proc.pid) == [] and netns_cluster.leftovers() == []
    assert running("benchmarks.e2e.worker") == []
