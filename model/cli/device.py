"""The `--device cpu|cuda|auto` option of the command lines that load a model (the benchmarks, the lab's probes).

It knows the option and how a name becomes a torch device; where a model goes when no one names a device is
`model.default_device`'s rule.
"""

from __future__ import annotations

import torch

from ..checkpoint import default_device


def add_device_option(ap) -> None:
    """`--device cpu|cuda|auto`: the README's figures are CPU figures, so CPU unless asked."""
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda", "auto"),
                    help="where the model runs (auto: CUDA when PyTorch sees one)")


def pick_device(name: str) -> torch.device:
    """`--device`'s choice; `auto` is the model's own (`model.default_device`, which honours V41_DEVICE)."""
    dev = default_device() if name == "auto" else torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: PyTorch sees no CUDA device here")
    return dev
