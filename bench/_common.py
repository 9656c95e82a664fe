"""Helpers shared by the benchmarks: a model to measure, timing, and the final key=value line."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from model.cli import add_device_option, pick_device  # noqa: F401  (the benchmarks' option)
from model.shipped import shipped_weights

ROOT = Path(__file__).resolve().parents[1]
TINY = shipped_weights("text")      # model/shipped.py lists the shipped sets


def sync(device: torch.device | str | None = None) -> None:
    """Wait for queued GPU work, so a wall-clock time covers it (a no-op on CPU)."""
    if torch.device(device or "cpu").type == "cuda":
        torch.cuda.synchronize()


def tiny_model(device: torch.device | str = "cpu"):
    """The shipped trained tiny model, or random tiny weights (said so) when it is absent."""
    from model import load, random_tiny

    if (TINY / "model.safetensors").exists():
        return load(TINY, device=device), "trained tiny"
    return random_tiny(0, device=device), "random tiny (trained weights absent)"


def random_ids(n: int, vocab: int, seed: int = 0, device: torch.device | str = "cpu") -> torch.Tensor:
    return torch.randint(8, vocab, (1, n), generator=torch.Generator().manual_seed(seed)).to(device)


def best_of(fn, repeats: int = 3, device: torch.device | str | None = None) -> float:
    """Minimum wall time of `repeats` calls (the least disturbed run on a shared machine)."""
    best = float("inf")
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        best = min(best, time.perf_counter() - t0)
    return best


def line(name: str, **kv) -> str:
    parts = []
    for k, v in kv.items():
        parts.append(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}")
    return f"{name}: " + " ".join(parts)
