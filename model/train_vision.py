"""`python -m model.train_vision`: train the vision tower and aligner on generated scenes; the command is
model/cli/train_vision.py, the same as `python -m model train-vision`."""

import sys

from .cli import run

if __name__ == "__main__":
    sys.exit(run("train-vision", sys.argv[1:], shell=True))
