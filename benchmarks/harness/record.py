"""What a benchmark writes beside its figures: the machine it ran on, the command that
reproduces it, and its result files (NAME.json and NAME.md). No TensorFlow is imported
until machine() asks for its version."""
import datetime
import json
import os
import pathlib
import platform
import shlex
import sys


def cpu_model():
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine():
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    return {
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
        "tensorflow": tf.__version__,
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def command_line(module):
    """The command that reproduces this run, e.g. `python -m benchmarks.ops.sign --runs=9`."""
    return shlex.join(["python", "-m", module] + sys.argv[1:])


def write_results(out_dir, name, payload, markdown):
    """Writes <name>.json and <name>.md under out_dir; returns their paths."""
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / f"{name}.json", out / f"{name}.md"
    json_path.write_text(json.dumps(payload, indent=2) + "\n")
    md_path.write_text(markdown)
    return json_path, md_path
