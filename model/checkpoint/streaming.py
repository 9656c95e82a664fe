"""Layer streaming: backbone layers materialized from the shards as the forward reaches them.

Follows docs/design/checkpoints.md §5. `LayerStreamer.layer(i)` builds Block i on the meta device, materializes it with
`to_empty` and copies its dequantized tensors from the shards, dropping the least recently used layer
first; a streamed Engram layer reads its table rows from the memory-mapped shard (mapped_engram.py).
Hooked into the model with `Backbone.set_layer_source`. Streamed and resident logits are bitwise equal.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable

import torch

from ..arch.block import Block
from ..config import V41Config
from ..layer_map import layer_map
from .mapped_engram import MappedEngramTable
from .plans import TensorPlan, fill
from .policy import cast_params
from .shards import ReleaseCheckpoint


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

