"""`python -m model.dataset`: build the training token stream (the command line is model/cli/)."""

import sys

from .corpus.dataset import main

if __name__ == "__main__":
    sys.exit(main())
