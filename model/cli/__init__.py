"""`python -m model <command>`: the table of commands and the dispatcher (docs/design/style.md §2 and §5:
command lines live apart, one thin `main(argv)` per command).

Each command is a thin `function(argv) -> int` in a module of this package (the data commands share
data.py); the dispatcher imports only the module asked for (importlib), so `--help` stays quick and a
command's heavy imports (torch compile, tokenizers) are paid only when it runs. `python -m model` is the
one door: there are no per-command entry modules.
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass, field

__all__ = ["main", "run", "usage", "COMMANDS", "Command"]

# Training frees and re-allocates large tensors every step; keeping them in the heap (not mmap) saves ~20%.
# glibc reads these only at start-up, so a shell run re-executes itself once with them set.
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "4294967296", "MALLOC_TRIM_THRESHOLD_": "17179869184",
              "MALLOC_TOP_PAD_": "1073741824"}


@dataclass(frozen=True)
class Command:
    module: str                                      # the module whose `function(argv)` runs the command
    help: str                                        # one line for `python -m model --help`
    env: dict[str, str] = field(default_factory=dict)  # environment a shell run re-executes itself with
    function: str = "main"


COMMANDS: dict[str, Command] = {
    "info": Command("model.cli.info", "print the layer map and parameter counts of a config"),
    "train": Command("model.cli.train", "train the tiny language model (then its DSpark drafter)", MALLOC_ENV),
    "train-vision": Command("model.cli.train_vision", "train the vision tower and aligner on generated scenes"),
    "dspark": Command("model.cli.train_drafter", "DSpark drafter of a checkpoint: train, evaluate"),
    "release": Command("model.cli.release_layout", "release-layout checkpoints: export, info"),
    "corpus": Command("model.cli.data", "download (if not cached), clean and split the training corpus",
                      function="corpus_main"),
    "dataset": Command("model.cli.data", "tokenize the training mixture into the token stream",
                       function="dataset_main"),
    "tokenizer": Command("model.cli.data", "train the byte-level BPE tokenizer on the corpus + stories",
                         function="tokenizer_main"),
    "stories": Command("model.cli.data", "print or write generated recall stories and the app prompts",
                       function="stories_main"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    return "\n".join(["usage: python -m model <command> [options]   (python -m model <command> --help for its options)",
                      "", "commands:"] + [f"  {name:<{width}}  {c.help}" for name, c in COMMANDS.items()])


def _reexec(name: str, argv: list[str], env: dict[str, str]) -> None:
    """Replace this process by `python -m model <name> argv` with `env` added, unless it is set already
    (or V41_NO_REEXEC is)."""
    if not env or all(os.environ.get(k) == v for k, v in env.items()) or os.environ.get("V41_NO_REEXEC"):
        return
    os.execve(sys.executable, [sys.executable, "-m", "model", name, *argv], dict(os.environ, **env))


def run(name: str, argv: list[str], shell: bool = False) -> int:
    """Run command `name` on `argv`. shell: the process was started for this command (not a call from
    Python), so it re-executes itself first when the command asks for an environment."""
    cmd = COMMANDS[name]
    if shell:
        _reexec(name, argv, cmd.env)
    return getattr(importlib.import_module(cmd.module), cmd.function)(argv)


def main(argv: list[str] | None = None) -> int:
    """`python -m model <command> ...`; argv None: the process's own arguments (a shell run)."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0] in ("-h", "--help"):
        print(usage())
        return 0
    if not args:
        print(usage(), file=sys.stderr)
        return 2
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        print(f"python -m model: error: unknown command {name!r} (commands: {', '.join(COMMANDS)})", file=sys.stderr)
        return 2
    return run(name, rest, shell=argv is None)
