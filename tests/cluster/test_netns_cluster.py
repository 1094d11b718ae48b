"""How an emulated cluster places its workers: their command prefix and their
cores (no root needed), and which clusters count as left behind (root; tests/benchmarks/test_e2e.py
runs workers on a real cluster)."""
import os
import pathlib
import subprocess
import sys

import pytest

from tests.cluster import netns_cluster
from tests.cluster.launcher import Launcher
from tests.stacks import NO_KERAS

pytestmark = NO_KERAS

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("workers, available, expected", [
    (2, {0, 1}, ((0,), (1,))),
    (2, {0, 1, 2, 3}, ((0, 1), (2, 3))),
    (3, {0, 1, 2, 3, 4, 5, 6}, ((0, 1), (2, 3), (4, 5))),  # equal shares; core 6 is left idle
    (2, {4, 9}, ((4,), (9,))),  # the cores this process may use, not 0..n-1
    (3, {0, 1}, ()),  # fewer cores than workers: none pinned
    (0, {0, 1}, ()),
])
def test_disjoint_cores_gives_each_worker_an_equal_share_of_its_own(workers, available, expected):
    assert netns_cluster.disjoint_cores(workers, available) == expected


def test_a_pinned_worker_runs_in_its_namespace_under_taskset():
    unpinned = netns_cluster.Cluster("tfcx", ("10.0.0.1", "10.0.0.2"), "10.0.0.254", None)
    assert unpinned.prefix(1) == ("ip", "netns", "exec", "tfcx-w1")
    pinned = netns_cluster.Cluster("tfcx", ("10.0.0.1", "10.0.0.2"), "10.0.0.254", None, ((0, 1), (2, 3)))
    assert pinned.prefix(1) == ("ip", "netns", "exec", "tfcx-w1", "taskset", "--cpu-list", "2,3")


def test_pinned_workers_keep_two_inter_op_threads_and_the_launcher_passes_them_on():
    hosts = ("10.0.0.1", "10.0.0.2")
    one_core_each = netns_cluster.Cluster("tfcx", hosts, "10.0.0.254", None, ((0,), (1,)))
    assert one_core_each.worker_env == {"TF_NUM_INTEROP_THREADS": "2"}
    four_each = netns_cluster.Cluster("tfcx", hosts, "10.0.0.254", None, ((0, 1, 2, 3), (4, 5, 6, 7)))
    assert four_each.worker_env == {"TF_NUM_INTEROP_THREADS": "4"}
    assert netns_cluster.Cluster("tfcx", hosts, "10.0.0.254", None).worker_env == {}
    launcher = Launcher("tf.distribute", 2, cluster=one_core_each, env={"TF_CPU_ALLOCATOR_USE_BFC": "true"})
    assert launcher.env == {"TF_NUM_INTEROP_THREADS": "2", "TF_CPU_ALLOCATOR_USE_BFC": "true"}


_MAKE_AND_WAIT = """
import sys, time
from tests.cluster import netns_cluster
with netns_cluster.emulated_cluster(1) as cluster:
    print(cluster.name, flush=True)
    time.sleep(600)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="emulating a cluster needs root (network namespaces, veth)")
def test_a_cluster_is_a_leftover_only_once_the_process_that_made_it_is_gone():
    maker = subprocess.Popen([sys.executable, "-c", _MAKE_AND_WAIT], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    name = maker.stdout.readline().strip()
    try:
        assert name.startswith("tfc"), "the cluster was not made"
        # Running: its cluster is its own, not a leftover for another test's check.
        theirs = netns_cluster.made_by(maker.pid)
        assert sorted(theirs) == sorted([f"{name}-br", f"{name}-w0", f"{name}l"])
        assert not set(theirs) & set(netns_cluster.leftovers())
        maker.kill()  # no clean-up runs: what it made is left behind
        maker.wait()
        assert set(theirs) <= set(netns_cluster.leftovers())
    finally:
        maker.kill()
        maker.wait()
        netns_cluster._remove([f"{name}l", f"{name}-w0", f"{name}-br"])
        (netns_cluster.MAKERS / name).unlink(missing_ok=True)
    assert not set(theirs) & set(netns_cluster.leftovers())
