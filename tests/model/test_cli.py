"""`python -m model <command>`: the library's own commands (info, release) through the dispatcher, which
lists them, refuses an unknown one and runs a real one; the training commands are the lab's (tests/lab/test_cli.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from model.cli import COMMANDS, main


def test_help_lists_the_librarys_commands_only(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert tuple(COMMANDS) == ("info", "release")
    for name, cmd in COMMANDS.items():
        assert f"  {name}" in out and cmd.help in out
    assert "  train" not in out


@pytest.mark.parametrize("name", ["info", "release"])
def test_every_command_answers_help_through_the_dispatcher(name, capsys):
    with pytest.raises(SystemExit) as e:
        main([name, "--help"])
    assert e.value.code == 0 and capsys.readouterr().out.startswith(f"usage: python -m model {name}")


def test_an_unknown_command_is_a_clear_error_with_exit_2(capsys):
    assert main(["train"]) == 2
    err = capsys.readouterr().err
    assert "unknown command 'train'" in err and "info" in err
    assert main([]) == 2


def test_info_runs_through_the_dispatcher(capsys):
    assert main(["info", "--preset", "tiny"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("config: tiny") and "parameters (from the module tree" in out


def test_python_dash_m_model_runs_a_command():
    r = subprocess.run([sys.executable, "-m", "model", "info", "--preset", "tiny"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("config: tiny")
