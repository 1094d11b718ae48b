"""The op benchmarks `make bench` runs, one after another, each in a process of its own
(each pins TensorFlow's threads before its first op) and with its defaults:

    python -m benchmarks.ops            # or: make bench

For other settings, or the low-rank benchmarks, run a module alone:
`python -m benchmarks.ops.sign --help` (sparse, dgc_candidates, lowrank, lowrank_residual).
"""
import subprocess
import sys

MODULES = ("benchmarks.ops.sign", "benchmarks.ops.sparse", "benchmarks.ops.dgc_candidates")


def main(argv):
    if argv:
        print(f"python -m benchmarks.ops takes no arguments (got {' '.join(argv)}); run a module alone "
              f"for other settings: {', '.join(MODULES)}", file=sys.stderr)
        return 2
    for module in MODULES:
        print(f"python -m {module}", flush=True)
        code = subprocess.call([sys.executable, "-m", module])
        if code:
            return code
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
