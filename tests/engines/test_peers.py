"""tfcomp.engines.peers.PeerWatch between this process and a real peer process, without TensorFlow."""
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from tfcomp.engines import peers
from tests.cluster.local_cluster import ROOT
from tests.stacks import NO_KERAS

pytestmark = NO_KERAS

KEY = b"job key"  # the peer process's too
PEER = """
import os, signal, sys
from tfcomp.engines import peers
listener, _ = peers.listen()
workers = [peers.Peer(0, "worker 0", "here", 0), peers.Peer(1, "worker 1", "there", os.getpid())]
peers.PeerWatch(1, workers, listener, ["127.0.0.1", "127.0.0.1"], [int(sys.argv[1]), 0], b"job key")
sys.stdin.readline()  # until the test is ready
if sys.argv[2] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
if sys.argv[2] == "fail":
    raise RuntimeError("a step failed")  # exits with an error; says goodbye too
"""


def watch_a_peer(how, steps_done=None, finished=False):
    """(this side's PeerWatch, the peer's exit code, what on_loss was told) after
    the peer ends `how`, while this side runs step steps_done + 1 (finished: after
    that step's exchange, as the compressor state's step counter tells)."""
    listener, port = peers.listen()
    peer = subprocess.Popen([sys.executable, "-c", PEER, str(port), how], cwd=ROOT, stdin=subprocess.PIPE)
    reported = []
    workers = [peers.Peer(0, "worker 0", "here", 0), peers.Peer(1, "worker 1", "localhost:2222", peer.pid)]
    watch = peers.PeerWatch(0, workers, listener, ["127.0.0.1", "127.0.0.1"], [port, 0], KEY,
                            on_loss=reported.append)
    if steps_done is not None:
        exchanges_done = tf.Variable(steps_done, dtype=tf.int64)
        watch.mark_step(exchanges_done)  # eagerly, as the traced step would
        if finished:
            exchanges_done.assign_add(1)
    peer.communicate(b"go\n", timeout=60)
    code = peer.returncode
    deadline = time.monotonic() + 10
    while not (watch.losses or watch.left) and time.monotonic() < deadline:
        time.sleep(0.05)
    watch.close()
    return watch, code, reported


@pytest.mark.parametrize("steps_done, finished, when", [(None, False, "before its first training step"),
                                                        (20, False, "during training step 21"),
                                                        (20, True, "after training step 21")])
def test_a_killed_peer_is_reported_once_with_its_name_address_pid_and_step(steps_done, finished, when):
    watch, code, reported = watch_a_peer("kill", steps_done, finished)
    assert code == -9
    assert [loss.peer.rank for loss in watch.losses] == [1]
    assert reported == watch.losses  # on_loss is told at once
    assert reported[0].message.startswith(
        f"tfcomp: worker 1 (localhost:2222, pid {reported[0].peer.pid}) was lost {when}: its process ended "
        "without leaving (killed or crashed)")


@pytest.mark.parametrize("how, expected_code", [("exit", 0), ("fail", 1)])
def test_a_peer_that_exits_leaves_and_is_not_reported(how, expected_code):
    watch, code, reported = watch_a_peer(how)
    assert code == expected_code
    assert watch.left == {1}
    assert watch.losses == [] and reported == []


@pytest.mark.parametrize("how, lost", [("kill", True), ("exit", False), ("fail", False)])
def test_a_worker_exiting_reports_a_lost_peer_its_watch_thread_missed(monkeypatch, how, lost):
    """A step that fails on a killed peer's connection can end the process before
    the watch thread runs (a busy machine); leaving still names the lost peer,
    and still says nothing of a peer that left."""
    monkeypatch.setattr(peers.PeerWatch, "_watch", lambda self: None)  # a watch thread that never runs
    listener, port = peers.listen()
    peer = subprocess.Popen([sys.executable, "-c", PEER, str(port), how], cwd=ROOT, stdin=subprocess.PIPE)
    reported = []
    workers = [peers.Peer(0, "worker 0", "here", 0), peers.Peer(1, "worker 1", "localhost:2222", peer.pid)]
    watch = peers.PeerWatch(0, workers, listener, ["127.0.0.1", "127.0.0.1"], [port, 0], KEY,
                            on_loss=reported.append)
    peer.communicate(b"go\n", timeout=60)
    watch.close()
    assert [loss.peer.rank for loss in watch.losses] == ([1] if lost else [])
    assert reported == []  # the process is ending: no collectives left to abort
    watch.close()  # a second close (atexit after an explicit one) reports nothing again
    assert len(watch.losses) == (1 if lost else 0)
