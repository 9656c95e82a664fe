"""`python -m model.dataset build`: build the training token stream (the command is model/cli/dataset.py)."""

import sys

from .cli import run

if __name__ == "__main__":
    sys.exit(run("dataset", sys.argv[1:], shell=True))
