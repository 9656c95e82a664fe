"""Resident memory of a config, counted on the meta device before anything is allocated.

`resident_footprint(cfg, streamed)` builds the model's module tree on the meta device (shapes only, no
storage) and adds up the bytes of what stays in memory once it is loaded: embeddings, output head, norms,
the drafter and vision tower, and every layer, or, for a layer-streamed release checkpoint (model.release),
only the largest single layer (its Engram tables are memory-mapped, not held). A loader checks the total
against a budget first, so a config that asks for too much is refused in milliseconds, not after gigabytes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .arch.engram import EngramEmbedding
from .config import V41Config
from .model import V41Model

# the config fields that size each top-level part, named in a refusal
PART_FIELDS: dict[str, tuple[str, ...]] = {
    "embed": ("vocab_size", "hidden_size"),
    "head": ("vocab_size", "hidden_size"),
    "layers": ("num_hidden_layers", "n_routed_experts", "moe_intermediate_size", "hidden_size"),
    "mtp": ("num_nextn_predict_layers", "hidden_size"),
    "vision": ("vision_config",),
    "aligner": ("vision_config",),
}
PART_NAMES = {"embed": "embedding", "head": "output head", "layers": "layers", "mtp": "drafter",
              "vision": "vision tower", "aligner": "vision aligner"}


@dataclass(frozen=True)
class Footprint:
    total: int                      # bytes resident once loaded
    parts: dict[str, int]           # top-level module -> bytes counted in `total`
    streamed: bool

    def largest(self) -> str:
        return max(self.parts, key=self.parts.get)

    def describe(self, cfg: V41Config, part: str | None = None) -> str:
        """'output head 12.3 GB (vocab_size = 6,000,000, hidden_size = 256)'."""
        part = part or self.largest()
        fields = ", ".join(f"{f} = {_field(cfg, f)}" for f in PART_FIELDS.get(part, ()))
        what = PART_NAMES.get(part, part) + (" (one streamed layer)" if part == "layers" and self.streamed else "")
        return f"{what} {human(self.parts[part])}" + (f" ({fields})" if fields else "")


def human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n:,.1f} TB"


def _field(cfg: V41Config, name: str) -> str:
    v = getattr(cfg, name, None)
    return f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else ("set" if v else "none")


def _bytes(module: torch.nn.Module, skip_mapped: bool) -> int:
    total = 0
    for m in module.modules():
        if skip_mapped and isinstance(m, EngramEmbedding):
            continue
        for t in list(m.parameters(recurse=False)) + list(m.buffers(recurse=False)):
            total += t.numel() * t.element_size()
    return total


def resident_footprint(cfg: V41Config, streamed: bool = False, dtype: torch.dtype = torch.float32) -> Footprint:
    """Bytes `cfg` keeps in memory in `dtype`; `streamed`: one layer at a time (release checkpoints)."""
    with torch.device("meta"):
        model = V41Model(cfg)
    parts: dict[str, int] = {}
    scale = torch.empty(0, dtype=dtype).element_size() / 4   # the tree is built in float32
    for name, child in model.named_children():
        if name == "layers" and streamed:
            b = max((_bytes(layer, skip_mapped=True) for layer in child), default=0)
        else:
            b = _bytes(child, skip_mapped=False)
        if b:
            parts[name] = int(b * scale)
    return Footprint(total=sum(parts.values()), parts=parts, streamed=streamed)
