"""Byte and FLOP counts written for people: binary units for bytes (8 MiB = 8,388,608 bytes, as the
sources count memory) and decimal units for FLOPs. Shared by the calculator, workload and ablation lessons and
their pages."""

from __future__ import annotations

import math


def human_bytes(b: float) -> str:
    """Binary units, as the seed writes them (8 MiB = 8,388,608 bytes)."""
    if not math.isfinite(b):
        return "n/a"
    for unit, f in (("TiB", 2 ** 40), ("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if abs(b) >= f:
            return f"{b / f:,.2f} {unit}"
    return f"{b:,.0f} B"


def human_flops(x: float) -> str:
    for unit, f in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if abs(x) >= f:
            return f"{x / f:,.2f} {unit}"
    return f"{x:,.0f} FLOP"
