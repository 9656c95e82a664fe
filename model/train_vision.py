"""`python -m model.train_vision`: train the vision tower and aligner on generated scenes
(the command line is model/cli/)."""

import sys

from .training.vision import main

if __name__ == "__main__":
    sys.exit(main())
