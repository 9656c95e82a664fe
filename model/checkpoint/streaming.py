"""Layer streaming: backbone layers materialized from the shards as the forward reaches them.

Follows docs/design/checkpoints.md §5. `LayerStreamer.layer(i)` builds Block i on the meta device, materializes it with
`to_empty` and copies its dequantized tensors from the shards, dropping the least recently used layer
first; a streamed Engram layer reads its table rows from the memory-mapped shard (`MappedEngramTable`, below).
Hooked into the model with `Backbone.set_layer_source`. Streamed and resident logits are bitwise equal.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from ..arch.block import Block
from ..config import V41Config
from ..layer_map import layer_map
from .parts import cast_params
from .plans import TensorPlan, dequantize, fill
from .quantization import ENGRAM_BLOCK
from .shards import ELT_BYTES, ReleaseCheckpoint, TensorInfo


# Engram tables read from the memory-mapped shard, row by row, in a layer-streamed model.
def _mapped(info: TensorInfo) -> np.memmap:
    row = math.prod(info.shape[1:]) * ELT_BYTES[info.dtype]
    return np.memmap(info.file, dtype=np.uint8, mode="r", offset=info.offset, shape=(info.shape[0], row))


class MappedEngramTable(torch.nn.Module):
    """Stands in for `EngramEmbedding` in a streamed layer: looks rows up in the shard file (memory-mapped)
    and dequantizes just those, to the values the resident (dequantized) table holds."""

    def __init__(self, plan: TensorPlan, device: torch.device):
        super().__init__()
        self.plan, self.device = plan, device
        self.rows, self.dim = plan.shape
        self._w = _mapped(plan.source)
        self._s = _mapped(plan.scale) if plan.kind == "engram_fp8" else None

    def _gather(self, mm: np.memmap, info: TensorInfo, idx: np.ndarray) -> torch.Tensor:
        raw = torch.from_numpy(np.ascontiguousarray(mm[idx]))
        return raw.view(info.torch_dtype).reshape(len(idx), *info.shape[1:])

    def full(self) -> dict[str, torch.Tensor]:
        """The whole dequantized table as `EngramEmbedding` tensors (weight, unit scale), e.g. for writing."""
        ids = torch.arange(self.rows)
        return {"weight": self(ids), "scale": torch.ones(self.rows, max(1, self.dim // ENGRAM_BLOCK))}

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        flat = ids.reshape(-1).cpu().numpy()
        if flat.size and (flat.min() < 0 or flat.max() >= self.rows):
            raise IndexError(f"Engram row id out of range [0, {self.rows})")
        uniq, inv = np.unique(flat, return_inverse=True)
        w = self._gather(self._w, self.plan.source, uniq)
        raw = {self.plan.source.name: w}
        if self._s is not None:
            raw[self.plan.scale.name] = self._gather(self._s, self.plan.scale, uniq)
        sub = dataclasses.replace(self.plan, shape=(len(uniq), self.dim))
        rows = dequantize(sub, raw, self.device, 0)
        return rows[torch.from_numpy(inv.reshape(-1)).to(self.device)].reshape(*ids.shape, self.dim)


# The memory the weights may use: parse '2G', read free GPU memory or MemAvailable, apply V41_MEMORY_BUDGET.
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


@dataclass
class LayerLoad:
    """One layer materialized from the shards (passed to the progress callback)."""

    index: int
    n_layers: int
    seconds: float
    nbytes: int


class LayerStreamer:
    """Materializes backbone layers on demand; keeps at most `capacity` of them (least recently used out).

    Hooked in through `V41Model.layer(i)`. `on_layer(LayerLoad)` is called after each load.
    """

    def __init__(self, cfg: V41Config, ck: ReleaseCheckpoint, plans: dict[str, TensorPlan], device: torch.device,
                 dtype: torch.dtype, block: int, capacity: int = 1,
                 on_layer: Callable[[LayerLoad], None] | None = None):
        self.cfg, self.ck = cfg, ck
        self.specs = layer_map(cfg)
        self.plans: dict[int, dict[str, TensorPlan]] = {}  # layer -> its plans
        for name, p in plans.items():
            self.plans.setdefault(int(name.split(".", 2)[1]), {})[name] = p
        self.device, self.dtype, self.block = device, dtype, block
        self.capacity = max(1, int(capacity))
        self.on_layer = on_layer
        self._live: OrderedDict[int, Block] = OrderedDict()
        self.loads = 0
        self.hits = 0
        self.bytes_loaded = 0
        self.seconds = 0.0

    @property
    def resident(self) -> list[int]:
        return list(self._live)

    def layer(self, i: int) -> Block:
        blk = self._live.get(i)
        if blk is not None:
            self._live.move_to_end(i)
            self.hits += 1
            return blk
        while len(self._live) >= self.capacity:  # free before loading: peak = capacity layers
            self._live.popitem(last=False)
        t0 = time.perf_counter()
        with torch.device("meta"):
            blk = Block(self.cfg, self.specs[i])
        plans = dict(self.plans.get(i, {}))
        table = plans.get(f"layers.{i}.engram.embed.weight")
        if table is not None:  # never materialize the table: rows are read from the shard on use
            blk.engram.embed = MappedEngramTable(table, self.device)
            plans = {n: p for n, p in plans.items() if not n.startswith(f"layers.{i}.engram.embed.")}
        cast_params(blk, self.dtype)
        blk.to_empty(device=self.device)
        if len(plans) != len(blk.state_dict()):  # the loader checked every tensor; this guards a changed Block
            raise RuntimeError(f"internal: layer {i} has {len(blk.state_dict())} tensors, the plan {len(plans)}")
        nbytes = fill(blk, plans, self.ck, self.device, self.block, prefix=f"layers.{i}.")
        blk.requires_grad_(False)
        blk.eval()
        dt = time.perf_counter() - t0
        self.loads += 1
        self.bytes_loaded += nbytes
        self.seconds += dt
        self._live[i] = blk
        if self.on_layer is not None:
            self.on_layer(LayerLoad(i, self.cfg.num_hidden_layers, dt, nbytes))
        return blk

    def clear(self) -> None:
        self._live.clear()

    def stats(self) -> dict:
        return {"loads": self.loads, "hits": self.hits, "bytes_loaded": self.bytes_loaded,
                "seconds": round(self.seconds, 3), "capacity": self.capacity, "resident": self.resident}
