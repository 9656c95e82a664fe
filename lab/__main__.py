"""`python -m lab <command>`: the commands of lab/cli/ (`python -m lab --help` lists them)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
