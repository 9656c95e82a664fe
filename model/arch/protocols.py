"""What the layers need from the objects passed into a forward: the cache, the trace recorder, a layer source.

Not a design section of its own: the interfaces between the forward maths (ARCHITECTURE.md §4,
reference-brief.md §5) and the inference code that implements them (model/inference/cache.py,
model/inference/trace.py, the layer streamer of model/checkpoint/streaming.py). Typing against these
keeps arch/ free of imports from the packages above it.
"""

from __future__ import annotations

from typing import Protocol

import torch

from ..config import V41Config
from .csa_state import CompressedRead, EntryTable
from .mhc import Mix
from .moe import Routing


class WindowRows(Protocol):
    """One layer's cached window rows (K = V latents)."""

    def last(self, n: int) -> torch.Tensor | None: ...  # the newest n rows [B, n, d] (None: none yet)

    def append(self, rows: torch.Tensor) -> None: ...


class SourceRows(EntryTable, Protocol):
    """One KV source's cached entries and keys, plus the rows of its unfinished group."""

    def take_groups(self, kv: torch.Tensor, gate: torch.Tensor | None
                    ) -> tuple[torch.Tensor, torch.Tensor | None, int]: ...  # whole groups' rows, first group id

    def append(self, entries: torch.Tensor, keys: torch.Tensor) -> None: ...


class LayerCache(Protocol):
    """The cache operations one forward performs."""

    length: int                              # rows already cached (the new rows' first position)
    pending_ids: torch.Tensor | None         # [B, S] ids of the rows in flight
    pending_compressed: torch.Tensor | None  # [B, S] their Engram-compressed ids

    def window(self, layer: int) -> WindowRows: ...

    def source(self, layer: int) -> SourceRows: ...

    def engram_history(self, n: int) -> torch.Tensor | None: ...

    def advance(self, n: int) -> None: ...


class LensHead(Protocol):
    """The model's output end, split for the logit lens: collapse when a layer ends, norm + head when read."""

    def collapse(self, streams: torch.Tensor, pre_mix: torch.Tensor) -> torch.Tensor: ...  # [B, S, D]

    def project(self, collapsed: torch.Tensor) -> torch.Tensor: ...  # fp32 logits [..., V]


class Recorder(Protocol):
    """The trace hooks a forward calls (only when a recorder is passed)."""

    def begin(self, cfg: V41Config, ids: torch.Tensor, positions: torch.Tensor,
              hash_ids: torch.Tensor | None) -> None: ...

    def engram(self, layer: int, gate: torch.Tensor, hashes: torch.Tensor, out: torch.Tensor) -> None: ...

    def pool(self, layer: int, candidates: torch.Tensor, block_scores: torch.Tensor) -> None: ...

    def selection(self, layer: int, scores: torch.Tensor, topk: torch.Tensor) -> None: ...

    def latent(self, layer: int, latent: torch.Tensor, g0: int) -> None: ...  # a KV source's new latents

    def source_len(self, layer: int, n: int) -> None: ...   # entries a KV source holds after this call

    def attention(self, layer: int, positions: torch.Tensor, probs: torch.Tensor, prev: torch.Tensor | None,
                  comp: CompressedRead | None, window: int) -> None: ...

    def block(self, layer: int, a: Mix, f: Mix, y: torch.Tensor, out: torch.Tensor, routing: Routing,
              new: torch.Tensor) -> None: ...

    def after_layer(self, layer: int, streams: torch.Tensor, pre_mix: torch.Tensor, head: "LensHead") -> None: ...

    def end(self, hidden: torch.Tensor, logits: torch.Tensor) -> None: ...


class LayerSource(Protocol):
    """Where a layer-streamed model gets layer i from (loaded on demand)."""

    def layer(self, i: int) -> torch.nn.Module: ...
