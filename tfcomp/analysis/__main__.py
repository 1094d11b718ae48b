"""`python -m tfcomp.analysis`: the command line (tfcomp.analysis.cli.main)."""
import sys

from tfcomp.analysis.cli import main as cli

if __name__ == "__main__":
    sys.exit(cli.main(sys.argv))
