"""`python -m model.train`: train the tiny language model (see README, 'Training') (the command line is model/cli/)."""

import sys

from .training.lm import main

if __name__ == "__main__":
    sys.exit(main())
