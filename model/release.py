"""`python -m model.release`: release-layout checkpoints: export, info (the command line is model/cli/)."""

import sys

from .checkpoint.release import main

if __name__ == "__main__":
    sys.exit(main())
