"""A worker for tests/cluster/test_preload.py: writes what it was started with
(arguments, directory, an environment variable, its pid, a string's hash) as
JSON to --out, then exits as asked."""
import json
import os
import signal
import sys
import time

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_string("out", None, "Where the JSON goes.")
flags.DEFINE_integer("exit_code", 0, "The exit code.")
flags.DEFINE_bool("kill_self", False, "SIGKILL this process instead of exiting.")
flags.DEFINE_float("sleep_s", 0, "Seconds to sleep before exiting.")


def main(argv):
    with open(FLAGS.out, "w") as out:
        json.dump({"argv": argv[1:], "cwd": os.getcwd(), "marker": os.environ.get("PRELOAD_PROBE"),
                   "pid": os.getpid(), "hash": hash("tfcomp"), "tensorflow": "tensorflow" in sys.modules}, out)
    print("preload probe wrote", FLAGS.out, flush=True)
    time.sleep(FLAGS.sleep_s)
    if FLAGS.kill_self:
        os.kill(os.getpid(), signal.SIGKILL)
    return FLAGS.exit_code


if __name__ == "__main__":
    app.run(main)
