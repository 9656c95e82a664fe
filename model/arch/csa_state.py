"""The CSA2 state one forward hands from layer to layer, and what one layer reads from it.

Follows docs/design/equations.md §5-6 (CSA2 modes: a KV source publishes entries and index keys, an index
source selects among them, Reuse layers keep the last selection, the candidate source narrows the
pool for later index sources) and §3.3 (the indexer's KL training signal). Nothing here persists
past one forward call: entries that outlive it live in the cache (model/inference/cache.py), which
the table then points at.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from .indexer import Indexer


class EntryTable(Protocol):
    """A KV group's compressed entries and index keys: a cache's source store, or a dense table (no cache)."""

    def __len__(self) -> int: ...

    def all_entries(self) -> torch.Tensor: ...  # [B, G, d] rotated, FP4-quantised entries

    def all_keys(self) -> torch.Tensor: ...     # [B, G, d_i] index keys

    def gather(self, idx: torch.Tensor) -> torch.Tensor: ...  # [B, S, k] ids -> [B, S, k, d] entries


@dataclass
class KLInputs:
    """What the indexer loss re-scores with: the selecting layer's indexer and its (detached) inputs."""

    indexer: Indexer
    x: torch.Tensor      # [B, S, D] attention input
    q_res: torch.Tensor  # [B, S, q_lora_rank] low-rank query residual
    cos: torch.Tensor    # [S, rd/2] compress-kind RoPE of the rows
    sin: torch.Tensor    # [S, rd/2]


@dataclass
class CsaState:
    """Per-forward CSA2 state: set by the layer that owns each part, read by the layers after it."""

    table: EntryTable | None = None         # the current KV group's entries and keys (set by its KV source)
    topk: torch.Tensor | None = None        # [B, S, k] entry ids the last selecting layer chose (-1 = none)
    indexer: Indexer | None = None          # the last index source's indexer (the reselect_all ablation)
    candidates: torch.Tensor | None = None  # [B, S, T] bool pool of the candidate source
    kl: KLInputs | None = None              # the selecting layer's indexer-loss inputs, taken by its attention


@dataclass
class CompressedRead:
    """What one layer's attention reads from the compressed entries (none: the layer reads its window only).

    `dense` (the dense_compressed ablation): every visible entry with a mask; otherwise the selected
    entries, gathered. Tests check that both give the same logits."""

    n: int                    # entries in the table
    idx: torch.Tensor         # [B, S, k] selected entry ids (-1 = none)
    values: torch.Tensor      # dense: [B, T, d] every entry; gathered: [B, S, k, d] the selected ones
    mask: torch.Tensor        # dense: [B, S, T] entry visible to the row; gathered: [B, S, k] a real pick
    dense: bool
    table: EntryTable         # the table read (the indexer loss re-reads its keys)
    kl: KLInputs | None = None
