"""Test workers forked from an interpreter that has already imported TensorFlow.

Importing TensorFlow, Keras and tfcomp is most of what a test worker costs: 3-5
s of CPU each, more than half of a 2-worker test on 2 cores. Under pytest
(TFCOMP_TEST_PRELOAD=1, set by tests/conftest.py), local_cluster.run_workers
starts each worker as `python -m tests.cluster.preload client SOCKET MODULE
ARGS...`, a small process that stands in for the worker: a server, which
imported those packages once and has run no TensorFlow op (so no runtime
threads exist to be lost in a fork), forks a child that runs MODULE as
`python -m` would (or, after `--script PATH`, the program at PATH as `python
PATH` would: python_script), with the client's stdin, stdout, stderr, environment and
directory. The client's command line names the module, it exits with the
child's code or dies of the child's signal, SIGTERM, SIGINT and SIGHUP sent to
it reach the child, and the child ends as soon as the client does, also when
the client is killed.

A worker started this way differs from `python -m` in what was settled when the
server started: the modules it imported and Python's hash seed. Workers 0 and 1
of a cluster come from different servers, so they hash strings differently, as
separate interpreters would (Horovod's ranks 0 and 1 too). A client learns that
its worker ended from the server, a little later than a parent would: a test of
which of several processes ends first gives its workers TFCOMP_TEST_PRELOAD=0.
A server serves one environment (the variables read at import,
IMPORT_TIME_VARIABLES); one is started per environment.
"""
import json
import os
import random
import runpy
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import traceback

#: The client's argument before a script's path: the child runs it as `python PATH` would.
SCRIPT = "--script"
#: Environment variables read while the preloaded packages are imported.
IMPORT_TIME_VARIABLES = ("PYTHONPATH", "TF_USE_LEGACY_KERAS", "TF_CPP_MIN_LOG_LEVEL", "TF_ENABLE_ONEDNN_OPTS",
                         "KERAS_BACKEND", "CUDA_VISIBLE_DEVICES", "PYTHONHASHSEED")
_FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def enabled(env):
    """Whether workers with environment env start through a preload server."""
    return env.get("TFCOMP_TEST_PRELOAD") == "1"


def _preload():
    """Imports what every worker imports, and checks that TensorFlow's runtime has not started."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from tensorflow.python.eager import context  # pylint: disable=import-outside-toplevel
    tf.keras.layers.Dense  # pylint: disable=pointless-statement  # imports the Keras tf.keras stands for
    import tfcomp  # pylint: disable=import-outside-toplevel,unused-import
    import tfcomp.distribute  # pylint: disable=import-outside-toplevel,unused-import
    import tfcomp.callbacks  # pylint: disable=import-outside-toplevel,unused-import
    import models.registry  # pylint: disable=import-outside-toplevel,unused-import
    if context._context is not None and context._context._initialized:  # pylint: disable=protected-access
        raise RuntimeError("importing the preloaded packages started TensorFlow's runtime: forking it is unsafe")


class Servers:
    """The preload servers this process started, by environment and slot; each
    ends when this process does."""

    SLOTS = 2

    def __init__(self):
        self._servers = {}
        self._dir = None

    def command(self, env, task=None):
        """The command that runs worker `task` through a server for env (started on
        first use); task None: the worker picks a server by HOROVOD_RANK."""
        slots = range(self.SLOTS) if task is None else [task % self.SLOTS]
        paths = []
        for slot in slots:
            key = (tuple(env.get(name) for name in IMPORT_TIME_VARIABLES), slot)
            if key not in self._servers:
                self._servers[key] = self._start(env, len(self._servers))
            paths.append(self._servers[key][1])
        return [sys.executable, "-m", "tests.cluster.preload", "client", ",".join(paths)]

    def _start(self, env, number):
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="tfcomp-preload-")
        path = os.path.join(self._dir, f"server{number}.sock")
        env = {k: v for k, v in env.items() if k != "TF_CONFIG"}
        cwd = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        server = subprocess.Popen([sys.executable, "-m", "tests.cluster.preload", "serve", path], env=env,
                                  cwd=cwd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        line = server.stdout.readline()
        server.stdout.close()
        if line.strip() != "ready":
            server.kill()
            server.wait()
            raise RuntimeError(f"the preload server did not start (exit code {server.returncode}); "
                               f"TFCOMP_TEST_PRELOAD=0 starts workers without it")
        return server, path


SERVERS = Servers()


def python_m(env, task=None, wrapped=False):
    """The command prefix that runs a worker's `python -m MODULE`: through a
    preload server for worker `task` (None: Horovod's rank picks) where
    enabled(env) and the worker runs on this host unwrapped (no `ip netns
    exec`), else `python -m` itself."""
    if wrapped or not enabled(env):
        return [sys.executable, "-m"]
    return SERVERS.command(env, task)


def python_script(env, task):
    """The command prefix that runs worker `task`'s `python SCRIPT`: through a preload
    server where enabled(env), else `python` itself."""
    if not enabled(env):
        return [sys.executable]
    return [*SERVERS.command(env, task), SCRIPT]


def serve(path):
    """Accepts clients on the UNIX socket at path and forks a worker for each;
    ends when the process that started it does."""
    _preload()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    parent = os.pidfd_open(os.getppid())
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    clients = {}  # child pid -> the client's connection
    while True:
        try:
            ready, _, _ = select.select([listener, wake_read, parent], [], [])
        except InterruptedError:
            continue
        if parent in ready:
            return
        if wake_read in ready:
            os.read(wake_read, 4096)
            _reap(clients)
        if listener in ready:
            connection, _ = listener.accept()
            pid = os.fork()
            if pid == 0:
                listener.close()
                for fd in (wake_read, wake_write, parent):
                    os.close(fd)
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                _run_child(connection)  # raises SystemExit
            clients[pid] = connection
            try:
                _send(connection, {"pid": pid})
            except OSError:
                pass  # the client has gone; its child follows it


def _reap(clients):
    while clients:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        connection = clients.pop(pid, None)
        if connection is not None:
            try:
                _send(connection, {"code": os.waitstatus_to_exitcode(status)})
            except OSError:
                pass  # the client has gone; its child followed it
            connection.close()


def _send(connection, message):
    connection.sendall(json.dumps(message).encode() + b"\n")


def _receive(stream):
    line = stream.readline()
    if not line:
        return None
    return json.loads(line)


def _run_child(connection):
    """In the forked child: takes the client's stdio, environment and directory,
    runs the module as __main__, and exits through the interpreter as `python -m`
    would (SystemExit out of serve)."""
    try:
        request, fds = _receive_request(connection)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        client_pid = struct.unpack("3i", connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                               struct.calcsize("3i")))[0]
        _end_with(client_pid)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        random.seed()
        sys.modules["numpy"].random.seed()
        script = request.get("script")
        sys.argv = [script or request["module"], *request["args"]]
        if script:
            sys.path[0] = os.path.dirname(os.path.abspath(script))  # as `python SCRIPT` puts it first
    except Exception:  # pylint: disable=broad-except
        traceback.print_exc()
        raise SystemExit(1)
    if script:
        runpy.run_path(script, run_name="__main__")
    else:
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
    raise SystemExit(0)


def _receive_request(connection):
    data, fds, _, _ = socket.recv_fds(connection, 1 << 16, 3)
    while not data.endswith(b"\n"):
        more = connection.recv(1 << 16)
        if not more:
            raise RuntimeError("the client went away before its request was complete")
        data += more
    return json.loads(data), fds


def _end_with(client_pid):
    """Kills this process as soon as the client process ends."""
    try:
        client = os.pidfd_open(client_pid)
    except ProcessLookupError:
        os._exit(1)

    def watch():
        select.select([client], [], [])
        os.kill(os.getpid(), signal.SIGKILL)
    threading.Thread(target=watch, daemon=True, name="preload-client-watch").start()


def client(paths, module, args):
    """Stands in for the worker a server forks: passes it this process's stdio,
    environment and directory, forwards signals, and ends as it ended. paths:
    the servers' sockets, one picked by HOROVOD_RANK where there are several."""
    paths = paths.split(",")
    path = paths[int(os.environ.get("HOROVOD_RANK", "0")) % len(paths)]
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.connect(path)
    request = {"module": module, "args": args, "env": dict(os.environ), "cwd": os.getcwd()}
    if module == SCRIPT:
        request.update(module=None, script=args[0], args=args[1:])
    name = request.get("script") or module
    socket.send_fds(connection, [json.dumps(request).encode() + b"\n"], [0, 1, 2])
    replies = connection.makefile("r")
    started = _receive(replies)
    if started is None:
        sys.exit(f"preload: the server at {path} closed the connection before starting {name}")
    for number in _FORWARDED_SIGNALS:
        signal.signal(number, lambda received, _: os.kill(started["pid"], received))
    ended = _receive(replies)
    if ended is None:
        sys.exit(f"preload: the server at {path} ended while {name} ran")
    code = ended["code"]
    if code < 0:
        if -code != signal.SIGKILL:
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve(sys.argv[2])
    elif sys.argv[1:2] == ["client"]:
        client(sys.argv[2], sys.argv[3], sys.argv[4:])
    else:
        sys.exit("usage: python -m tests.cluster.preload serve SOCKET | client SOCKET MODULE [ARGS...] | "
                 f"client SOCKET {SCRIPT} PATH [ARGS...]")
