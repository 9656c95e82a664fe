"""`python -m model.train`: train the tiny language model (see README, 'Training'); the command is
model/cli/train.py, the same as `python -m model train`."""

import sys

from .cli import run

if __name__ == "__main__":
    sys.exit(run("train", sys.argv[1:], shell=True))
