"""Byte and FLOP counts written for people: binary units for bytes (8 MiB = 8,388,608 bytes, as the
sources count memory), decimal units for FLOPs, and a count with its noun in the right number. Shared by the
lessons and their pages."""

from __future__ import annotations

import math

BINARY = (("TiB", 2 ** 40), ("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10))


def human_bytes(b: float, spec: str | None = None) -> str:
    """Binary units, as the seed writes them (8 MiB = 8,388,608 bytes): two decimals in a unit, whole bytes below
    1 KiB; `spec` (a format spec, e.g. ",.4g" for axis ticks: 512 KiB, 1.5 GiB) formats both instead."""
    if not math.isfinite(b):
        return "n/a"
    for unit, f in BINARY:
        if abs(b) >= f:
            return f"{b / f:{spec or ',.2f'}} {unit}"
    return f"{b:{spec or ',.0f'}} B"


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """'1 token', '4,096 tokens': a count with its noun in the right number."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def human_flops(x: float) -> str:
    for unit, f in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if abs(x) >= f:
            return f"{x / f:,.2f} {unit}"
    return f"{x:,.0f} FLOP"
