"""One worker of `python -m tfcomp.analysis profile` under the launchers of tests.cluster
(which add --out, where each worker writes what it did as JSON, and --engine):
every worker probes the link and measures the compressors; worker 0 saves
--output."""
import json
import os
import pathlib
import sys

from tfcomp.analysis.cli import main as cli


def _expanded(argv):
    """argv with each --flagfile=F (horovodrun's launcher passes the flags so) replaced by F's lines."""
    out = []
    for arg in argv:
        if arg.startswith("--flagfile="):
            out += [line for line in pathlib.Path(arg.split("=", 1)[1]).read_text().splitlines() if line]
        else:
            out.append(arg)
    return out


def main(argv):
    argv = _expanded(argv)
    out = next(a.split("=", 1)[1] for a in argv if a.startswith("--out="))
    args = [a for a in argv if not a.startswith("--out=")]
    code = cli.main(["tfcomp.analysis", "profile", *args])
    path = pathlib.Path(out)
    if "--engine=horovod" in args:
        # The launcher's rank: with a saved link probe the profile never starts Horovod.
        path.mkdir(parents=True, exist_ok=True)
        path = path / f"rank{os.environ['HOROVOD_RANK']}.json"
    path.write_text(json.dumps({"exit": code}))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
