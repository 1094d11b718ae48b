"""Op tests' scripts run with a chosen number of intra-op threads.

TensorFlow fixes its thread pools when its runtime starts, so each thread count
is a process of its own. `run` starts `python -m tests.ops.threaded SCRIPT
THREADS ARGS...` through a preload server under the tests (tests.cluster.preload):
a thread count then costs a fork, not an import of TensorFlow.
"""
import os
import runpy
import subprocess
import sys

from tests.cluster import preload
from tests.cluster.local_cluster import ROOT


def run(tmp_path, script, threads, *args):
    """The output of `script` (Python source) run with `threads` intra-op threads and
    one inter-op thread, its sys.argv[1:] being threads and args; fails where it fails."""
    path = tmp_path / "threaded_script.py"
    path.write_text(script)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    command = [*preload.python_m(env, task=0), "tests.ops.threaded", str(path), str(threads), *map(str, args)]
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, f"{threads} thread(s): exit code {done.returncode}\n{done.stderr[-3000:]}"
    return done.stdout


def main():
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    script, threads, *args = sys.argv[1:]
    tf.config.threading.set_intra_op_parallelism_threads(int(threads))
    tf.config.threading.set_inter_op_parallelism_threads(1)
    sys.argv = [script, threads, *args]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
