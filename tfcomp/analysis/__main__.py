"""`python -m tfcomp.analysis`: the command line (tfcomp.analysis.cli)."""
import sys

from tfcomp.analysis import cli

if __name__ == "__main__":
    sys.exit(cli.main(sys.argv))
