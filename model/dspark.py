"""`python -m model.dspark`: DSpark drafter: train, evaluate (the command line is model/cli/)."""

import sys

from .inference.speculative import main

if __name__ == "__main__":
    sys.exit(main())
