"""`python -m model <command>`: the table of commands and the dispatcher (docs/design/style.md §2 and §5:
command lines live apart, one thin `main(argv)` per command).

Each command is a thin `function(argv) -> int` in a module; the dispatcher imports only the module asked for
(importlib), so `--help` stays quick and a command's heavy imports are paid only when it runs. `python -m
model` is the library's one door (info, release); the training commands are the lab's (`python -m lab`,
lab/cli/), which runs this same dispatcher (`dispatch`) over its own table.
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass, field

from .device import add_device_option, pick_device

__all__ = ["main", "run", "usage", "dispatch", "COMMANDS", "Command", "add_device_option", "pick_device"]


@dataclass(frozen=True)
class Command:
    module: str                                      # the module whose `function(argv)` runs the command
    help: str                                        # one line for `python -m <package> --help`
    env: dict[str, str] = field(default_factory=dict)  # environment a shell run re-executes itself with
    function: str = "main"


COMMANDS: dict[str, Command] = {
    "info": Command("model.cli.info", "print the layer map and parameter counts of a config"),
    "release": Command("model.cli.release_layout", "release-layout checkpoints: export, info"),
}


def usage(prog: str = "model", commands: dict[str, Command] = COMMANDS) -> str:
    width = max(map(len, commands))
    return "\n".join([f"usage: python -m {prog} <command> [options]   (python -m {prog} <command> --help for its "
                      "options)", "", "commands:"] + [f"  {name:<{width}}  {c.help}" for name, c in commands.items()])


def _reexec(prog: str, name: str, argv: list[str], env: dict[str, str]) -> None:
    """Replace this process by `python -m prog <name> argv` with `env` added, unless it is set already
    (or V41_NO_REEXEC is)."""
    if not env or all(os.environ.get(k) == v for k, v in env.items()) or os.environ.get("V41_NO_REEXEC"):
        return
    os.execve(sys.executable, [sys.executable, "-m", prog, name, *argv], dict(os.environ, **env))


def run(name: str, argv: list[str], shell: bool = False, prog: str = "model",
        commands: dict[str, Command] = COMMANDS) -> int:
    """Run command `name` on `argv`. shell: the process was started for this command (not a call from
    Python), so it re-executes itself first when the command asks for an environment."""
    cmd = commands[name]
    if shell:
        _reexec(prog, name, argv, cmd.env)
    return getattr(importlib.import_module(cmd.module), cmd.function)(argv)


def dispatch(argv: list[str] | None, prog: str, commands: dict[str, Command]) -> int:
    """`python -m prog <command> ...` over `commands`; argv None: the process's own arguments (a shell run)."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0] in ("-h", "--help"):
        print(usage(prog, commands))
        return 0
    if not args:
        print(usage(prog, commands), file=sys.stderr)
        return 2
    name, rest = args[0], args[1:]
    if name not in commands:
        print(f"python -m {prog}: error: unknown command {name!r} (commands: {', '.join(commands)})",
              file=sys.stderr)
        return 2
    return run(name, rest, shell=argv is None, prog=prog, commands=commands)


def main(argv: list[str] | None = None) -> int:
    """`python -m model <command> ...`; argv None: the process's own arguments (a shell run)."""
    return dispatch(argv, "model", COMMANDS)
