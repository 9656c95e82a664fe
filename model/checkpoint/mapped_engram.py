"""Engram tables read from the memory-mapped shard, row by row, in a layer-streamed model.

Follows docs/design/checkpoints.md §1 (engram.embed.{weight,scale}) and §5: the released tables have
~3.8e8 rows, and a forward reads only the rows its n-gram hashes name, so a streamed Engram layer
never materializes its table; `MappedEngramTable` dequantizes just those rows, to the values the
resident (dequantized) table holds.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from .plans import TensorPlan, dequantize
from .quantization import ENGRAM_BLOCK
from .shards import ELT_BYTES, TensorInfo


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

