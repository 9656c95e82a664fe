"""`python -m model.corpus build`: download and clean the training corpus (the command is model/cli/corpus.py)."""

import sys

from ..cli import run

if __name__ == "__main__":
    sys.exit(run("corpus", sys.argv[1:], shell=True))
