"""`python -m tfcomp.analysis profile` run by every worker a launcher started, as the
benchmarks record their profiles (benchmarks.harness.profile_worker, which
benchmarks.harness.prediction.record_profile launches)."""
from tfcomp.analysis.model.profile import Profile
from tests.analysis.test_profile import _trace
from tests.cluster.local_cluster import run_workers
from tests.stacks import KERAS2_ON_PINNED

pytestmark = KERAS2_ON_PINNED


def test_the_link_is_probed_by_every_worker_running_the_command(tmp_path):
    """As the main job records its profile: tf.distribute's probe, and compressors measured under
    SGD with momentum (whose Keras optimizer must not start TensorFlow before the strategy)."""
    trace, _ = _trace(tmp_path)
    args = [f"--timeline={trace}", "--probe_max_bytes=4194304", "--runs=3", "--compressors=DGC:ratio=0.01",
            "--sgd_momentum=0.9", f"--output={tmp_path / 'probed.json'}"]
    codes, logs, results = run_workers("benchmarks.harness.profile_worker", 2, args, tmp_path / "workers",
                                       timeout=240)
    assert codes == [0, 0] and results == [{"exit": 0}] * 2, logs
    profile = Profile.load(tmp_path / "probed.json")
    for link in (profile.allreduce, profile.allgather):
        assert link.bandwidth_bytes_per_s > 0 and link.alpha_s >= 0
