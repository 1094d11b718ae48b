"""The peer watch lets in only the job's own workers: strangers that connect while
the workers start (and close, send garbage, claim a rank, or say nothing) are
logged and dropped, the real peer still gets in, and nothing is reported lost.
Without TensorFlow workers; tests/engines/test_distribute.py has the same with
training workers."""
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from tfcomp.engines import peers
from tests.cluster.local_cluster import ROOT
from tests.stacks import KERAS2_ON_PINNED

pytestmark = KERAS2_ON_PINNED

KEY = b"job key"
PEER = """
import sys, time
from tfcomp.engines import peers
port, delay, key = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3].encode()
time.sleep(delay)  # the strangers come first
listener, _ = peers.listen("127.0.0.1")
workers = [peers.Peer(0, "worker 0", "here", 0), peers.Peer(1, "worker 1", "there", 0)]
peers.PeerWatch(1, workers, listener, ["127.0.0.1", "127.0.0.1"], [port, 0], key)
sys.stdin.readline()  # until the test is done with the watch
"""
WORKERS = [peers.Peer(0, "worker 0", "here", 0), peers.Peer(1, "worker 1", "there", 0)]


def start_peer(port, delay=0.0, key=KEY):
    return subprocess.Popen([sys.executable, "-c", PEER, str(port), str(delay), key.decode()], cwd=ROOT,
                            stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def stranger(port, how, done):
    """Connects to the watch and misbehaves `how`; holds its socket until done is set."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        if how == "garbage":
            sock.sendall(os.urandom(64))
        elif how == "a rank":  # worker 1's rank, a nonce, and a proof made without the key
            sock.sendall(peers._RANK.pack(1) + os.urandom(peers._NONCE_BYTES) + bytes(peers._PROOF_BYTES))
        elif how == "close":
            return
        done.wait(30)  # "nothing": a half-open handshake held open
    finally:
        sock.close()


@pytest.mark.parametrize("how, why", [("close", "closed before proving anything"),
                                      ("garbage", "a wrong proof of belonging to this job"),
                                      ("a rank", "a wrong proof of belonging to this job"),
                                      ("nothing", "still unproved when every peer was in")])
def test_a_stranger_during_start_up_is_dropped_and_the_peer_still_gets_in(how, why):
    listener, port = peers.listen("127.0.0.1")
    done = threading.Event()
    intruder = threading.Thread(target=stranger, args=(port, how, done))
    intruder.start()
    peer = start_peer(port, delay=1.0)
    started = time.monotonic()
    try:
        watch = peers.PeerWatch(0, WORKERS, listener, ["127.0.0.1", "127.0.0.1"], [port, 0], KEY)
        took = time.monotonic() - started
    finally:
        done.set()
        intruder.join()
    assert set(watch._sockets) == {1}
    assert [w for _, w in watch.ignored] == [why]
    # A stranger that says nothing holds up no one: the peer got in before its handshake timed out.
    assert took < 1.0 + peers.HANDSHAKE_TIMEOUT_SECONDS
    with pytest.raises(ConnectionRefusedError):  # once every peer is in, nothing listens
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    peer.communicate("go\n", timeout=60)
    deadline = time.monotonic() + 10
    while not watch.left and time.monotonic() < deadline:
        time.sleep(0.05)
    watch.close()
    assert peer.returncode == 0 and watch.left == {1} and watch.losses == []


def test_a_silent_stranger_is_dropped_after_the_handshake_timeout(monkeypatch):
    monkeypatch.setattr(peers, "HANDSHAKE_TIMEOUT_SECONDS", 0.5)
    listener, port = peers.listen("127.0.0.1")
    done = threading.Event()
    intruder = threading.Thread(target=stranger, args=(port, "nothing", done))
    intruder.start()
    peer = start_peer(port, delay=2.0)
    try:
        watch = peers.PeerWatch(0, WORKERS, listener, ["127.0.0.1", "127.0.0.1"], [port, 0], KEY)
    finally:
        done.set()
        intruder.join()
    assert [w for _, w in watch.ignored] == ["no proof within 0.5 s"]
    peer.communicate("go\n", timeout=60)
    watch.close()


def test_a_peer_with_another_secret_is_refused_on_both_sides(monkeypatch):
    monkeypatch.setattr(peers, "CONNECT_TIMEOUT_SECONDS", 3.0)
    listener, port = peers.listen("127.0.0.1")
    peer = start_peer(port, key=b"another secret")
    with pytest.raises(RuntimeError, match=r"no peer-watch connection from worker 1; connections let not in: "
                                           r"127\.0\.0\.1 \(a wrong proof of belonging to this job\)"):
        peers.PeerWatch(0, WORKERS, listener, ["127.0.0.1", "127.0.0.1"], [port, 0], KEY)
    _, stderr = peer.communicate("", timeout=60)
    assert peer.returncode != 0
    assert "worker 0's peer watch at 127.0.0.1" in stderr and peers.SECRET_ENVIRONMENT in stderr


def test_a_connection_from_outside_the_cluster_gets_no_challenge(monkeypatch):
    monkeypatch.setattr(peers, "CONNECT_TIMEOUT_SECONDS", 2.0)
    listener, port = peers.listen()  # every interface: as behind a service address
    received = []

    def outsider():
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            received.append(sock.recv(64))

    thread = threading.Thread(target=outsider)
    thread.start()
    with pytest.raises(RuntimeError, match=r"127\.0\.0\.1 \(not one of the cluster's addresses\)"):
        peers.PeerWatch(0, WORKERS, listener, ["10.250.0.1", "10.250.0.2"], [port, 0], KEY)
    thread.join()
    assert received == [b""]  # closed without a word


def test_a_worker_does_not_trust_a_listener_that_is_not_a_peer_watch():
    impostor = socket.create_server(("127.0.0.1", 0))
    port = impostor.getsockname()[1]

    def serve():
        conn, _ = impostor.accept()
        conn.sendall(b"HTTP/1.1 200 OK\r\n\r\n" + bytes(64))
        try:
            conn.recv(1024)  # the worker hangs up
        except ConnectionResetError:
            pass
        conn.close()

    thread = threading.Thread(target=serve)
    thread.start()
    listener, _ = peers.listen("127.0.0.1")
    with pytest.raises(RuntimeError, match="is not a tfcomp peer watch"):
        peers.PeerWatch(1, WORKERS, listener, ["127.0.0.1", "127.0.0.1"], [port, 0], KEY)
    thread.join()
    impostor.close()


def test_the_job_key_rests_on_the_description_and_the_secret(monkeypatch):
    monkeypatch.delenv(peers.SECRET_ENVIRONMENT, raising=False)
    monkeypatch.delenv("_HOROVOD_SECRET_KEY", raising=False)
    local = ["localhost", "127.0.0.1"]
    assert peers.job_key(b"rows", local) == peers.job_key(b"rows", local)
    assert peers.job_key(b"rows", local) != peers.job_key(b"other rows", local)
    monkeypatch.setenv("_HOROVOD_SECRET_KEY", "from horovodrun")
    from_horovod = peers.job_key(b"rows", local)
    monkeypatch.setenv(peers.SECRET_ENVIRONMENT, "from the user")
    from_user = peers.job_key(b"rows", local)
    assert len({peers.job_key(b"rows", local, secret=b""), from_horovod, from_user}) == 3
    assert from_user == peers.job_key(b"rows", local, secret=b"from the user")


def test_without_a_secret_across_machines_the_key_warns(monkeypatch):
    monkeypatch.delenv(peers.SECRET_ENVIRONMENT, raising=False)
    monkeypatch.delenv("_HOROVOD_SECRET_KEY", raising=False)
    warned = []
    monkeypatch.setattr(peers.logging, "warning", lambda message, *args: warned.append(message % args))
    peers.job_key(b"rows", ["localhost", "127.0.0.1"])
    assert warned == []
    peers.job_key(b"rows", ["10.250.0.1", "10.250.0.2"])
    assert len(warned) == 1 and peers.SECRET_ENVIRONMENT in warned[0]
    peers.job_key(b"rows", ["10.250.0.1", "10.250.0.2"], secret=b"s")
    assert len(warned) == 1


def test_cluster_networks_are_the_hosts_and_all_of_loopback_for_a_local_host():
    import ipaddress  # pylint: disable=import-outside-toplevel
    assert peers.cluster_networks(["10.250.0.1", "localhost"]) == {ipaddress.ip_network("10.250.0.1/32"),
                                                                    ipaddress.ip_network("127.0.0.0/8")}
    with pytest.raises(RuntimeError, match="cannot resolve the worker address"):
        peers.cluster_networks(["no-such-host.invalid"])
