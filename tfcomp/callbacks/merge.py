"""Merges the workers' trace files into one, to see them on one time axis:

    python -m tfcomp.callbacks.merge merged.json timeline/*.trace.json
"""
import sys

from tfcomp.callbacks.trace import merge

if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: python -m tfcomp.callbacks.merge MERGED.json WORKER.trace.json...")
    merge(sys.argv[1], sys.argv[2:])
