"""`python -m model.release`: release-layout checkpoints: export, info (the command line is model/cli/release.py)."""

import sys

from .cli.release import main

if __name__ == "__main__":
    sys.exit(main())
