"""`python -m lab train`: train the tiny language model, CPU by default,
CUDA when available, then its DSpark drafter (lab/training/run.py; see lab/README.md).

Every TrainConfig field is an option (`--drill-frac 0.25`); a command-line run is `--fast` (compiled
kernels, same maths) unless told `--no-fast`. A shell run re-executes itself once with the allocator
settings of model/cli/__init__.py (MALLOC_ENV).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from model.checkpoint import default_device
from model.fusion import configure as configure_fusion

from ..training.run import finish, start_run, train_steps
from ..training.schedule import TrainConfig
from .options import add_config_options, config_from


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m lab train", description="train the tiny language model")
    add_config_options(ap, TrainConfig, defaults={"fast": True})  # a command-line run is fast unless --no-fast
    ap.add_argument("--out", default="data/weights/tiny", help="where the final weights are written")
    ap.add_argument("--ckpt-dir", default="runs/tiny", help="resumable checkpoints")
    ap.add_argument("--resume", action="store_true", help="continue from --ckpt-dir if a checkpoint is there")
    ap.add_argument("--device", default="auto")
    return ap.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse(argv)
    tc = config_from(args, TrainConfig)
    if tc.threads:
        torch.set_num_threads(tc.threads)
    if tc.fast:
        configure_fusion()
    device = default_device() if args.device == "auto" else torch.device(args.device)
    run = start_run(tc, device, Path(args.ckpt_dir), args.resume)
    seconds = train_steps(run)
    finish(run, Path(args.out), "python -m lab train " + " ".join(argv), seconds)
    return 0
