"""`python -m model.corpus`: download and clean the training corpus."""

import sys

from .sources import main

if __name__ == "__main__":
    sys.exit(main())
