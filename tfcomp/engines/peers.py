"""Tells a lost worker from one that left, and says which one and when.

Every worker listens on a TCP port of its own and keeps one connection open to
every other worker. A worker whose interpreter exits (normally, or with an
exception) sends a one-byte goodbye on each before closing them; a worker
killed (SIGKILL, a crash, a machine lost) cannot, so its peers see its
connections close without one, the moment its process ends. Only that is
reported as a lost worker: a worker that failed and exited on its own says
goodbye and is not blamed.

On a loss the watch logs, on every surviving worker, which worker was lost
(its rank, address and process id) and in which training step, and calls the
engine's on_loss (the tf.distribute engine aborts its collectives with that
message, so the step fails at once with it instead of waiting for a timeout;
where a collective already failed on the closed connection a moment before,
the step's error is that one, and the log line tells what happened).
"""
import atexit
import dataclasses
import selectors
import socket
import struct
import threading
import time

from absl import logging

_GOODBYE = b"B"
_RANK = struct.Struct("!i")
CONNECT_TIMEOUT_SECONDS = 60.0
EXIT_REPORT_SECONDS = 0.5  # how long an exiting worker waits for the watch to report a peer it saw close


@dataclasses.dataclass(frozen=True)
class Peer:
    rank: int
    name: str  # "worker 1", "rank 1"
    address: str  # where the engine reaches it, host:port
    pid: int


@dataclasses.dataclass(frozen=True)
class Loss:
    peer: Peer
    step: object  # the last training step this worker started (1-based), or None if not known
    message: str


class PeerWatch:
    """Watches every other worker of a job for a loss.

    listener: a bound, listening socket (from listen()), made before the
    workers shared their ports. peers[r] describes worker r; connect_hosts[r]
    and ports[r] are where its watch listens.
    """

    def __init__(self, rank, peers, listener, connect_hosts, ports, on_loss=None):
        self.rank = rank
        self.peers = peers
        self._listener = listener
        self._on_loss = on_loss
        self._step_started = None  # a tf.Variable: the step being run, from mark_step
        self._exchanges_done = None  # the compressor state's step counter, when mark_step gets a variable
        self._sockets = {}  # rank -> socket
        self.left = set()  # ranks that said goodbye
        self.losses = []
        self._lock = threading.Lock()
        self._closed = False
        self._connect(connect_hosts, ports)
        self._thread = threading.Thread(target=self._watch, name="tfcomp-peer-watch", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    def mark_step(self, exchanges_done, device=None):
        """An op for the traced step, to run before its collectives: records
        which step runs (exchanges_done, the compressor state's step counter,
        is the number of steps whose gradients were exchanged before it)."""
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        from tfcomp.state import variables as state_lib  # pylint: disable=import-outside-toplevel
        if self._step_started is None:
            with state_lib.worker_local_variables(device):
                self._step_started = tf.Variable(-1, dtype=tf.int64, trainable=False, name="tfcomp_peer_step")
        if isinstance(exchanges_done, tf.Variable):
            self._exchanges_done = exchanges_done
        return self._step_started.assign(tf.cast(exchanges_done, tf.int64) + 1)

    def _progress(self):
        """(step, finished): the last step this worker started (0: none, None: unreadable),
        and whether its exchange has finished since (the worker is between steps)."""
        if self._step_started is None:
            return 0, False
        try:
            step = max(0, int(self._step_started.numpy()))
            done = self._exchanges_done is not None and int(self._exchanges_done.numpy()) >= step > 0
        except Exception:  # pylint: disable=broad-except
            return None, False  # the runtime can no longer read it: say so rather than guess
        return step, done

    def _connect(self, hosts, ports):
        deadline = time.monotonic() + CONNECT_TIMEOUT_SECONDS
        for other in range(self.rank):  # connect to the lower ranks, accept from the higher
            while True:
                try:
                    sock = socket.create_connection((hosts[other], ports[other]), timeout=5)
                    break
                except OSError as error:
                    if time.monotonic() > deadline:
                        raise RuntimeError(
                            f"tfcomp: cannot reach {self.peers[other].name}'s peer watch at "
                            f"{hosts[other]}:{ports[other]} ({error}). Open that port range between the "
                            f"workers, or pass watch_peers=False to do without lost-worker reports") from error
                    time.sleep(0.2)
            sock.sendall(_RANK.pack(self.rank))
            self._sockets[other] = sock
        self._listener.settimeout(max(1.0, deadline - time.monotonic()))
        while len(self._sockets) < len(self.peers) - 1:
            try:
                sock, _ = self._listener.accept()
            except socket.timeout as error:
                missing = [p.name for p in self.peers if p.rank != self.rank and p.rank not in self._sockets]
                raise RuntimeError(f"tfcomp: no peer-watch connection from {', '.join(missing)}") from error
            sock.settimeout(10)
            other = _RANK.unpack(_recv_exactly(sock, _RANK.size))[0]
            self._sockets[other] = sock
        self._listener.close()
        for sock in self._sockets.values():
            sock.settimeout(None)

    def _watch(self):
        selector = selectors.DefaultSelector()
        for other, sock in self._sockets.items():
            selector.register(sock, selectors.EVENT_READ, other)
        open_count = len(self._sockets)
        while open_count and not self._closed:
            for key, _ in selector.select():
                other = key.data
                try:
                    data = key.fileobj.recv(64)
                except (OSError, ValueError):  # reset, or closed by close() meanwhile
                    data = b""
                if data and _GOODBYE in data:
                    with self._lock:
                        self.left.add(other)
                    continue
                if data:
                    continue
                selector.unregister(key.fd)
                open_count -= 1
                with self._lock:
                    if self._closed or other in self.left:
                        continue
                self._lost(self.peers[other])

    def _lost(self, peer, abort=True):
        with self._lock:
            if any(loss.peer.rank == peer.rank for loss in self.losses):
                return  # reported already (by the watch, or at exit)
        step, finished = self._progress()
        # A peer that dies as it starts step N can find this worker still finishing step N - 1 after
        # their last exchange, or already waiting in step N's: both name the same moment.
        when = {0: "before its first training step", None: "at a training step that could not be read"}.get(
            step, f"after training step {step}" if finished else f"during training step {step}")
        message = (f"tfcomp: {peer.name} ({peer.address}, pid {peer.pid}) was lost {when}: its process ended "
                   f"without leaving (killed or crashed). Restart all workers to resume from the last "
                   f"checkpoint (for example with tf.keras.callbacks.BackupAndRestore).")
        loss = Loss(peer, step, message)
        with self._lock:
            self.losses.append(loss)
            first = len(self.losses) == 1
        if not first:  # a launcher ending the job after the first loss kills the rest this way
            logging.warning("tfcomp: then %s (%s, pid %d) ended without leaving too", peer.name, peer.address,
                            peer.pid)
            return
        if abort and self._on_loss is not None:  # first: the collectives may be failing with a less clear error
            self._on_loss(loss)
        logging.error(message)

    def _report_pending_losses(self, wait_s=EXIT_REPORT_SECONDS):
        """A peer whose connection has closed without a goodbye is reported before
        this worker leaves: a step that failed on that peer's connection ends the
        process at once, maybe before the watch thread (on a busy machine) ran."""
        pending = []
        for other, sock in self._sockets.items():
            try:
                data = sock.recv(64, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            except BlockingIOError:
                continue  # open, and nothing said
            except OSError:  # reset
                data = b""
            if not data:
                pending.append(other)
        deadline = time.monotonic() + wait_s
        for other in pending:
            while time.monotonic() < deadline and not self._reported(other):
                time.sleep(0.02)  # the watch thread's report, if it comes, says the same first
            if not self._reported(other):
                self._lost(self.peers[other], abort=False)  # the process is ending: nothing left to abort

    def _reported(self, other):
        with self._lock:
            return other in self.left or any(loss.peer.rank == other for loss in self.losses)

    def close(self):
        """Says goodbye to every peer (this worker leaves; it was not lost), after
        reporting any peer already lost."""
        with self._lock:
            if self._closed:
                return
        self._report_pending_losses()
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for sock in self._sockets.values():
            try:
                sock.sendall(_GOODBYE)
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()


def listen():
    """A listening socket on a free port of every interface, and its port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("", 0))
    sock.listen(64)
    return sock, sock.getsockname()[1]


def ipv4_as_int(host):
    """host's IPv4 address, as the peers reach it, packed in an int for a collective."""
    try:
        address = socket.gethostbyname(host)
    except OSError as error:
        raise RuntimeError(f"tfcomp: cannot resolve this worker's host name {host!r} for the peer watch "
                           f"({error}); fix the name or pass watch_peers=False") from error
    return struct.unpack("!I", socket.inet_aton(address))[0]


def int_as_ipv4(value):
    return socket.inet_ntoa(struct.pack("!I", value))


def _recv_exactly(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise RuntimeError("tfcomp: a peer-watch connection closed while it was being set up")
        data += chunk
    return data
