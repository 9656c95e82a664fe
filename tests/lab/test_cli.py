"""`python -m lab <command>`: the lab's dispatcher lists every training and data command, refuses an unknown
one, and runs a real command; `train` runs a whole (very short) phase through it, init-from included."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import lab.training.run as training_run
from lab.cli import COMMANDS, main

EXPECTED = ("train", "train-vision", "dspark", "corpus", "dataset", "tokenizer", "stories", "far-readings")


def test_help_lists_every_command(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert tuple(COMMANDS) == EXPECTED
    for name, cmd in COMMANDS.items():
        assert f"  {name}" in out and cmd.help in out


@pytest.mark.parametrize("name", EXPECTED)
def test_every_command_answers_help_through_the_dispatcher(name, capsys):
    with pytest.raises(SystemExit) as e:
        main([name, "--help"])
    assert e.value.code == 0 and capsys.readouterr().out.startswith("usage: python -m lab")


def test_an_unknown_command_is_a_clear_error_with_exit_2(capsys):
    assert main(["nonsense"]) == 2
    err = capsys.readouterr().err
    assert "unknown command 'nonsense'" in err and "train" in err
    assert main([]) == 2


def test_python_dash_m_lab_runs_a_command():
    r = subprocess.run([sys.executable, "-m", "lab", "stories", "--n", "1", "--seed", "3"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("--- seed 3")


@pytest.mark.slow
def test_train_writes_weights_and_the_phase_record(tmp_path, monkeypatch):
    # quick_eval (held-out stories and copies) takes minutes on a shared CPU; its maths is tested in test_train.
    monkeypatch.setattr(training_run, "quick_eval", lambda m, tok, seq_len, **kw: {"heldout_loss": 1.0})
    np.save(tmp_path / "s.npy", np.random.default_rng(0).integers(8, 4096, 5000).astype(np.uint16))
    args = ["--preset", "tiny", "--steps", "2", "--batch", "1", "--seq-len", "16", "--warmup-steps", "1",
            "--drafter-steps", "0", "--no-fast", "--stream", str(tmp_path / "s.npy")]
    assert main(["train", *args, "--out", str(tmp_path / "w"), "--ckpt-dir", str(tmp_path / "r")]) == 0
    assert (tmp_path / "r" / "ckpt.safetensors").exists() and (tmp_path / "w" / "tokenizer.json").exists()
    assert main(["train", *args, "--init-from", str(tmp_path / "w"), "--out", str(tmp_path / "w2"),
                 "--ckpt-dir", str(tmp_path / "r2")]) == 0
    info = json.loads((tmp_path / "w2" / "training.json").read_text())
    assert info["command"].startswith("python -m lab train --preset tiny")
    assert [p["run"] for p in info["phases"]] == [str(tmp_path / "r"), str(tmp_path / "r2")]
    assert info["previous_phase"] == {"from": str(tmp_path / "w")}
    assert info["steps"] == 2 and [r["step"] for r in info["log_every_step"]] == [1, 2]
    assert info["final"]["heldout_loss"] == 1.0


def test_every_command_goes_through_the_one_door(capsys):
    """`python -m lab <command>` is the only way in: each command answers --help under that name, no
    per-command entry module sits in lab/ or model/, and `python -m model` no longer offers them."""
    r = subprocess.run([sys.executable, "-m", "lab", "--help"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and all(name in r.stdout for name in COMMANDS)
    for name in COMMANDS:
        with pytest.raises(SystemExit) as e:
            main([name, "--help"])
        assert e.value.code == 0 and capsys.readouterr().out.startswith(f"usage: python -m lab {name}"), name
    repo = Path(__file__).resolve().parents[2]
    for root in (repo / "model", repo / "lab"):
        assert [p.name for p in root.glob("*.py") if p.stem in ("train", "train_vision", "dspark", "dataset")] == []
    assert not (repo / "lab" / "corpus" / "__main__.py").exists()
    from model.cli import COMMANDS as MODEL_COMMANDS

    assert not set(MODEL_COMMANDS) & set(COMMANDS)
