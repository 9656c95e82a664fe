"""`python -m model <command>`: the commands of model/cli/ (`python -m model --help` lists them)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
