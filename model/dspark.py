"""`python -m model.dspark`: DSpark drafter: train, evaluate (the command line is model/cli/dspark.py)."""

import sys

from .cli.dspark import main

if __name__ == "__main__":
    sys.exit(main())
