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

Only the job's own workers get in. The watch listens on the worker's own
cluster address (on every interface only where that address is not this
machine's, as behind a service address), lets in connections from the
cluster's addresses alone, and each side proves it belongs to this job before a
connection counts: a challenge and response under the job's key, an HMAC-SHA256
of what the workers gathered at start-up (every worker's identity, watch port
and process id) under a secret from TFCOMP_PEER_SECRET (or Horovod's launcher's
own secret). Without a secret the key rests on the gathered ports and process
ids alone, which is enough on one machine; across machines, set
TFCOMP_PEER_SECRET to the same value on every worker. Anything else (a
stranger's connection, one that sends garbage, a wrong proof, or nothing for
HANDSHAKE_TIMEOUT_SECONDS) is logged and dropped without touching training. The
listening socket closes once every peer is in, so nothing can connect during
training.
"""
import atexit
import dataclasses
import hashlib
import hmac
import ipaddress
import os
import selectors
import socket
import struct
import threading
import time

from absl import logging

_GOODBYE = b"B"
_RANK = struct.Struct("!i")
CONNECT_TIMEOUT_SECONDS = 60.0
HANDSHAKE_TIMEOUT_SECONDS = 5.0  # a connection that has not proved itself by then is dropped
SECRET_ENVIRONMENT = "TFCOMP_PEER_SECRET"
_HOROVOD_SECRET_ENVIRONMENT = "_HOROVOD_SECRET_KEY"  # horovodrun gives every rank its own job secret
_MAGIC = b"tfcomp-peer-watch/1"
_NONCE_BYTES = 16
_PROOF_BYTES = hashlib.sha256().digest_size
_HELLO_BYTES = _RANK.size + _NONCE_BYTES + _PROOF_BYTES
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
    and ports[r] are where its watch listens. key: the job's key (job_key),
    the same on every worker.
    """

    def __init__(self, rank, peers, listener, connect_hosts, ports, key, on_loss=None):
        self.rank = rank
        self.peers = peers
        self._listener = listener
        self._key = key
        self._allowed = cluster_networks(connect_hosts)
        self._on_loss = on_loss
        self._step_started = None  # a tf.Variable: the step being run, from mark_step
        self._exchanges_done = None  # the compressor state's step counter, when mark_step gets a variable
        self._sockets = {}  # rank -> socket
        self.left = set()  # ranks that said goodbye
        self.losses = []
        self.ignored = []  # (address, why) of each connection the watch let not in
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
        try:
            for other in range(self.rank):  # connect to the lower ranks, accept from the higher
                self._sockets[other] = self._connect_to(other, hosts[other], ports[other], deadline)
            self._accept_higher_ranks(deadline)
        except BaseException:
            for sock in self._sockets.values():
                sock.close()
            raise
        finally:
            self._listener.close()
        for sock in self._sockets.values():
            sock.settimeout(None)

    def _connect_to(self, other, host, port, deadline):
        """A proved connection to a lower rank's watch: answer its challenge, check its answer to ours."""
        while True:
            try:
                sock = socket.create_connection((host, port), timeout=5)
                break
            except OSError as error:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"tfcomp: cannot reach {self.peers[other].name}'s peer watch at {host}:{port} ({error}). "
                        f"Open that port range between the workers, or pass watch_peers=False to do without "
                        f"lost-worker reports") from error
                time.sleep(0.2)
        try:
            sock.settimeout(max(1.0, deadline - time.monotonic()))  # it may be connecting to its own lower ranks
            challenge = _recv_exactly(sock, len(_MAGIC) + _NONCE_BYTES)
            if not challenge.startswith(_MAGIC):
                raise RuntimeError("what listens there is not a tfcomp peer watch")
            mine = os.urandom(_NONCE_BYTES)
            sock.sendall(_RANK.pack(self.rank) + mine + _proof(self._key, b"hello", challenge[len(_MAGIC):],
                                                               self.rank))
            if not hmac.compare_digest(_recv_exactly(sock, _PROOF_BYTES),
                                       _proof(self._key, b"ack", mine, other)):
                raise RuntimeError("it answered with a wrong proof")
            return sock
        except (OSError, RuntimeError) as error:
            sock.close()
            raise RuntimeError(
                f"tfcomp: {self.peers[other].name}'s peer watch at {host}:{port} did not let this worker in, or "
                f"did not prove it belongs to this job ({error}). Give every worker the same "
                f"{SECRET_ENVIRONMENT}, and check that the workers reach each other from the addresses of the "
                f"cluster spec; or pass watch_peers=False") from error

    def _accept_higher_ranks(self, deadline):
        """Lets in every higher rank that proves it belongs to this job, handshakes in
        parallel, each within HANDSHAKE_TIMEOUT_SECONDS; anything else is logged and dropped."""
        missing = {p.rank for p in self.peers if p.rank > self.rank}
        if not missing:
            return
        selector = selectors.DefaultSelector()
        self._listener.setblocking(False)
        selector.register(self._listener, selectors.EVENT_READ)
        pending = {}  # socket -> [address, our nonce, bytes received, deadline]

        def drop(sock, why):
            selector.unregister(sock)
            address = pending.pop(sock)[0]
            sock.close()
            self._ignore(address, why)

        try:
            while missing:
                now = time.monotonic()
                for sock in [s for s, entry in pending.items() if entry[3] <= now]:
                    drop(sock, f"no proof within {HANDSHAKE_TIMEOUT_SECONDS:g} s")
                if now >= deadline:
                    names = ", ".join(self.peers[r].name for r in sorted(missing))
                    ignored = "; ".join(f"{a} ({why})" for a, why in self.ignored)
                    raise RuntimeError(f"tfcomp: no peer-watch connection from {names}"
                                       + (f"; connections let not in: {ignored}" if ignored else ""))
                wake = min([deadline] + [entry[3] for entry in pending.values()])
                for event, _ in selector.select(max(0.0, wake - now)):
                    sock = event.fileobj
                    if sock is self._listener:
                        self._greet(selector, pending)
                        continue
                    try:
                        data = sock.recv(_HELLO_BYTES - len(pending[sock][2]))
                    except BlockingIOError:
                        continue
                    except OSError:
                        data = b""
                    if not data:
                        drop(sock, "closed before proving anything")
                        continue
                    pending[sock][2] += data
                    if len(pending[sock][2]) < _HELLO_BYTES:
                        continue
                    hello, nonce = pending[sock][2], pending[sock][1]
                    other = _RANK.unpack(hello[:_RANK.size])[0]
                    theirs = hello[_RANK.size:_RANK.size + _NONCE_BYTES]
                    if other not in missing or not hmac.compare_digest(
                            hello[_RANK.size + _NONCE_BYTES:], _proof(self._key, b"hello", nonce, other)):
                        drop(sock, "a wrong proof of belonging to this job")
                        continue
                    selector.unregister(sock)
                    address = pending.pop(sock)[0]
                    sock.setblocking(True)
                    try:
                        sock.sendall(_proof(self._key, b"ack", theirs, self.rank))
                    except OSError as error:
                        sock.close()
                        self._ignore(address, f"closed as it was let in ({error})")
                        continue
                    self._sockets[other] = sock
                    missing.discard(other)
        finally:
            for sock, (address, *_) in pending.items():
                sock.close()
                self._ignore(address, "still unproved when every peer was in")
            selector.close()

    def _greet(self, selector, pending):
        """Accepts one connection: from a cluster address it gets a challenge, from elsewhere nothing."""
        try:
            sock, (address, _) = self._listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        if not any(ipaddress.ip_address(address) in network for network in self._allowed):
            sock.close()
            self._ignore(address, "not one of the cluster's addresses")
            return
        nonce = os.urandom(_NONCE_BYTES)
        try:
            sock.sendall(_MAGIC + nonce)  # a fresh socket's buffer takes it at once
        except OSError as error:
            sock.close()
            self._ignore(address, f"closed at once ({error})")
            return
        sock.setblocking(False)
        pending[sock] = [address, nonce, b"", time.monotonic() + HANDSHAKE_TIMEOUT_SECONDS]
        selector.register(sock, selectors.EVENT_READ)

    def _ignore(self, address, why):
        self.ignored.append((address, why))
        logging.warning("tfcomp: the peer watch ignored a connection from %s: %s", address, why)

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


def listen(host=None):
    """A listening socket on a free port of host's address (this worker's cluster
    address), and its port; on every interface where host is None, or not an
    address of this machine (behind a service address, say): the watch then
    still lets in only the cluster's addresses."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    address = ""
    if host is not None:
        try:
            address = socket.gethostbyname(host)
            sock.bind((address, 0))
        except OSError as error:
            logging.warning("tfcomp: the peer watch cannot listen on this worker's cluster address %s (%s); it "
                            "listens on every interface and lets in only the cluster's addresses", host, error)
            address = ""
    if not address:
        sock.bind(("", 0))
    sock.listen(64)
    return sock, sock.getsockname()[1]


def job_key(description, hosts, secret=None):
    """The key this job's workers prove they belong to it with: HMAC-SHA256 of
    description (bytes every worker of the job holds alike: what the start-up
    gathered) under secret (default: secret_from_environment())."""
    secret = secret_from_environment() if secret is None else secret
    if not secret and not all(network.is_loopback for network in cluster_networks(hosts)):
        logging.warning("tfcomp: the peer watch's key rests on the workers' ports and process ids only: set %s "
                        "to the same secret on every worker", SECRET_ENVIRONMENT)
    return hmac.new(secret, description, hashlib.sha256).digest()


def secret_from_environment():
    """TFCOMP_PEER_SECRET, else the secret horovodrun gives its ranks, else none (b"")."""
    for name in (SECRET_ENVIRONMENT, _HOROVOD_SECRET_ENVIRONMENT):
        value = os.environ.get(name)
        if value:
            return value.encode()
    return b""


def cluster_networks(hosts):
    """The addresses a peer's connection may come from: each host's IPv4 address,
    and all of 127.0.0.0/8 when a host is on loopback (its peers connect from
    whichever loopback address the kernel picks)."""
    networks = set()
    for host in hosts:
        try:
            address = ipaddress.ip_address(socket.gethostbyname(host))
        except OSError as error:
            raise RuntimeError(f"tfcomp: cannot resolve the worker address {host!r} for the peer watch ({error}); "
                               f"fix the name or pass watch_peers=False") from error
        networks.add(ipaddress.ip_network("127.0.0.0/8") if address.is_loopback else ipaddress.ip_network(address))
    return networks


def _proof(key, label, nonce, rank):
    return hmac.new(key, label + nonce + _RANK.pack(rank), hashlib.sha256).digest()


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
