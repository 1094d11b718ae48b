"""Workers started through a preload server behave as `python -m` ones would,
seen from the process that started them: output, exit codes, signals, and no
child left once the client has gone."""
import json
import os
import signal
import subprocess
import sys
import time

from tests.cluster import preload
from tests.cluster.local_cluster import ROOT, run_workers
from tests.stacks import NO_KERAS

pytestmark = NO_KERAS

PROBE = "tests.workers.preload_probe"


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_workers_get_their_arguments_environment_and_output_and_hash_differently(tmp_path):
    assert preload.enabled(os.environ)  # tests/conftest.py turns it on
    codes, logs, results = run_workers(PROBE, 2, ["--exit_code=3"], tmp_path, per_worker_args=[["extra0"], []],
                                       env={"PRELOAD_PROBE": "seen"})
    assert codes == [3, 3], logs
    assert all("preload probe wrote" in log for log in logs), logs
    assert results[0]["argv"] == ["extra0"] and results[1]["argv"] == []
    assert {r["marker"] for r in results} == {"seen"} and {r["cwd"] for r in results} == {str(ROOT)}
    assert all(r["tensorflow"] for r in results)  # imported before the fork
    assert results[0]["hash"] != results[1]["hash"]  # from two servers, as two interpreters


def test_a_worker_that_kills_itself_is_seen_killed(tmp_path):
    codes, logs, _ = run_workers(PROBE, 2, [], tmp_path, per_worker_args=[["--kill_self"], []])
    assert codes == [-signal.SIGKILL, 0], logs


def _worker_env():
    return dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")


def _client(tmp_path, *args):
    env = _worker_env()
    command = [*preload.python_m(env, 0), PROBE, f"--out={tmp_path / 'probe.json'}", *args]
    return subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)


def _child_pid(tmp_path, timeout_s=60):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            return json.loads((tmp_path / "probe.json").read_text())["pid"]
        except (FileNotFoundError, json.JSONDecodeError):
            time.sleep(0.05)
    raise AssertionError("the probe did not start")


def test_sigterm_reaches_the_worker_and_a_killed_client_takes_it_along(tmp_path):
    client = _client(tmp_path, "--sleep_s=60")
    child = _child_pid(tmp_path)
    assert child != client.pid
    client.terminate()
    assert client.wait(timeout=30) == -signal.SIGTERM
    (tmp_path / "probe.json").unlink()

    client = _client(tmp_path, "--sleep_s=60")
    child = _child_pid(tmp_path)
    client.kill()
    assert client.wait(timeout=30) == -signal.SIGKILL
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


SCRIPT = '''
import json, sys
import sibling  # beside this script: sys.path[0] is the script's directory, as `python SCRIPT` makes it
json.dump({"name": __name__, "argv": sys.argv, "path0": sys.path[0], "sibling": sibling.VALUE,
           "tensorflow": "tensorflow" in sys.modules}, sys.stdout)
sys.exit(4)
'''


def test_a_script_runs_as_python_script_would(tmp_path):
    (tmp_path / "program.py").write_text(SCRIPT)
    (tmp_path / "sibling.py").write_text("VALUE = 7\n")
    env = _worker_env()
    outputs = []
    for prefix in (preload.python_script(env, 0), [sys.executable]):
        done = subprocess.run([*prefix, str(tmp_path / "program.py"), "--flag=1"], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 4, done.stderr[-3000:]
        outputs.append(json.loads(done.stdout))
    preloaded, plain = outputs
    assert preloaded["tensorflow"] and not plain["tensorflow"]  # the preloaded interpreter's imports
    del preloaded["tensorflow"], plain["tensorflow"]
    assert preloaded == plain == {"name": "__main__", "argv": [str(tmp_path / "program.py"), "--flag=1"],
                                  "path0": str(tmp_path), "sibling": 7}
