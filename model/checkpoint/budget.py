"""The memory the weights may use: parse '2G', read free GPU memory or MemAvailable, apply V41_MEMORY_BUDGET.

Follows docs/design/checkpoints.md §5: when a release checkpoint would not fit the budget (argument, env
`V41_MEMORY_BUDGET` like "2G", or 80% of free memory / 90% of free GPU memory) its layers are streamed
(streaming.py).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import torch

GIB = 1 << 30


def parse_bytes(text: str) -> int:
    """'512M', '2G', '1.5GiB', '1000000' -> bytes."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*([kmgt]?)(i?b)?\s*", str(text).lower())
    if not m:
        raise ValueError(f"cannot read a memory size from {text!r} (try 512M or 2G)")
    return int(float(m.group(1)) * 1024 ** " kmgt".index(m.group(2) or " "))


def available_memory(device: torch.device) -> int:
    """Free memory where the weights will live: GPU free memory, or MemAvailable from /proc/meminfo."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 8 * GIB


def memory_budget(device: torch.device) -> int:
    """The default budget: env V41_MEMORY_BUDGET, else 90% of free GPU memory / 80% of available RAM."""
    env = os.environ.get("V41_MEMORY_BUDGET")
    if env:
        return parse_bytes(env)
    return int(available_memory(device) * (0.9 if device.type == "cuda" else 0.8))

