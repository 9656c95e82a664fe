"""`python -m lab <command>`: the lab's commands, which make the shipped weights and their data.

train (the tiny language model, then its DSpark drafter), train-vision (the vision tower and aligner),
dspark (a checkpoint's drafter), and the data commands (corpus, dataset, tokenizer, stories; data.py).
Each is a thin `function(argv) -> int` in a module of this package, run by model/cli's dispatcher, which
imports only the module asked for. The library's own commands (info, release) are `python -m model`.
"""

from __future__ import annotations

from model.cli import Command, dispatch

__all__ = ["main", "COMMANDS", "MALLOC_ENV"]

# Training frees and re-allocates large tensors every step; keeping them in the heap (not mmap) saves ~20%.
# glibc reads these only at start-up, so a shell run re-executes itself once with them set.
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "4294967296", "MALLOC_TRIM_THRESHOLD_": "17179869184",
              "MALLOC_TOP_PAD_": "1073741824"}

COMMANDS: dict[str, Command] = {
    "train": Command("lab.cli.train", "train the tiny language model (then its DSpark drafter)", MALLOC_ENV),
    "train-vision": Command("lab.cli.train_vision", "train the vision tower and aligner on generated scenes"),
    "dspark": Command("lab.cli.train_drafter", "DSpark drafter of a checkpoint: train, evaluate"),
    "corpus": Command("lab.cli.data", "download (if not cached), clean and split the training corpus",
                      function="corpus_main"),
    "dataset": Command("lab.cli.data", "tokenize the training mixture into the token stream",
                       function="dataset_main"),
    "tokenizer": Command("lab.cli.data", "train the byte-level BPE tokenizer on the corpus + stories",
                         function="tokenizer_main"),
    "stories": Command("lab.cli.data", "print or write generated recall stories and the app prompts",
                       function="stories_main"),
    "far-readings": Command("lab.cli.far_readings", "store each shipped set's reading of the held-out far story"),
}


def main(argv: list[str] | None = None) -> int:
    """`python -m lab <command> ...`; argv None: the process's own arguments (a shell run)."""
    return dispatch(argv, "lab", COMMANDS)
