"""Per-forward context: positions, cache, per-forward CSA2 state, trace recorder, ablations.

The CSA2 state (docs/design/equations.md §5-6) lives here for the length of one
forward call: the current KV group's entries and index keys, the last published top-k selection,
and the candidate pool. Persistent state (window rows, compressed entries, pending rows) lives in
the cache (model/inference/cache.py); the context only points at it, through the Protocols below, which
keep arch/ free of imports from the packages above it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch

from ..config import V41Config
from .indexer import Indexer
from .mhc import Mix
from .moe import Routing


# The CSA2 state one forward hands from layer to layer, and what one layer reads from it.
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


# What the layers need from the objects passed into a forward: the cache, the trace recorder, a layer source.
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

    def window(self, layer: int) -> WindowRows: ...

    def source(self, layer: int) -> SourceRows: ...

    def engram_history(self, n: int) -> torch.Tensor | None: ...

    def stage(self, ids: torch.Tensor, compressed: torch.Tensor | None) -> None: ...  # the rows in flight

    def advance(self, n: int) -> None: ...


class LensHead(Protocol):
    """The model's output end, split for the logit lens: collapse when a layer ends, norm + head when read."""

    def collapse(self, streams: torch.Tensor, pre_mix: torch.Tensor) -> torch.Tensor: ...  # [B, S, D]

    def project(self, collapsed: torch.Tensor) -> torch.Tensor: ...  # fp32 logits [..., V]


class Recorder(Protocol):
    """The trace hooks a forward calls (only when a recorder is passed).

    Most hooks only look. Two let a recorder take part, the way a hook point does in TransformerLens: `attention_output`
    may return a replacement for a layer's attention output, and `wants_score_grad` asks a selecting layer to keep
    its index scores' gradient (to the indexer only: its inputs are detached) and hand them to `index_scores`. A
    recorder that subclasses this Protocol inherits the defaults below: look only, change nothing."""

    def begin(self, cfg: V41Config, ids: torch.Tensor, positions: torch.Tensor,
              hash_ids: torch.Tensor | None) -> None: ...

    def engram(self, layer: int, gate: torch.Tensor, hashes: torch.Tensor, out: torch.Tensor) -> None: ...

    def pool(self, layer: int, candidates: torch.Tensor, block_scores: torch.Tensor) -> None: ...

    def selection(self, layer: int, scores: torch.Tensor, topk: torch.Tensor) -> None: ...

    def latent(self, layer: int, latent: torch.Tensor, g0: int) -> None: ...  # a KV source's new latents

    def source_len(self, layer: int, n: int) -> None: ...   # entries a KV source holds after this call

    def attention(self, layer: int, positions: torch.Tensor, probs: torch.Tensor, prev: torch.Tensor | None,
                  comp: CompressedRead | None, window: int) -> None: ...

    def attention_output(self, layer: int, out: torch.Tensor, comp: CompressedRead | None) -> torch.Tensor:
        """The layer's attention output [B, S, H, d] before its output projection, or a replacement for it."""
        return out

    def wants_score_grad(self, layer: int) -> bool:
        """Should selecting layer `layer` keep its index scores' gradient and pass them to `index_scores`?"""
        return False

    def index_scores(self, layer: int, scores: torch.Tensor) -> None:
        """Selecting layer `layer`'s index scores over every visible entry [B, S, T] (-inf where not visible), with
        their gradient, before any candidate pool: called only when `wants_score_grad(layer)` said so."""

    def block(self, layer: int, a: Mix, f: Mix, y: torch.Tensor, out: torch.Tensor, routing: Routing,
              new: torch.Tensor) -> None: ...

    def after_layer(self, layer: int, streams: torch.Tensor, pre_mix: torch.Tensor, head: "LensHead") -> None: ...

    def end(self, hidden: torch.Tensor, logits: torch.Tensor) -> None: ...


class LayerSource(Protocol):
    """Where a layer-streamed model gets layer i from (loaded on demand)."""

    def layer(self, i: int) -> torch.nn.Module: ...


@dataclass
class Ablation:
    """Inference-time switches for the ablation lab. Defaults = the model as released.

    - window_only: compressed layers ignore their compressed entries (local window only).
    - no_candidates: the candidate pool is not applied (later index sources search everything).
    - index_topk: override the number of selected entries (None = config value).
    - no_engram: Engram layers add nothing.
    - reselect_all: every compressed layer makes its own selection (with its group's index-source
      weights) instead of reusing the last one: "all layers choose", the closest thing to "all Full"
      that trained weights allow (Reuse layers own no compressor weights).
    - mhc_identity: comb = identity (no direct blending; pre and post still mix), the closest to "one stream".
    - dense_compressed: attend every visible compressed entry (no sparse selection).
    """

    window_only: bool = False
    no_candidates: bool = False
    index_topk: int | None = None
    no_engram: bool = False
    reselect_all: bool = False
    mhc_identity: bool = False
    dense_compressed: bool = False

    def is_default(self) -> bool:
        return self == Ablation()


@dataclass
class Context:
    positions: torch.Tensor                 # [S] absolute positions of the rows in this call
    cache: LayerCache | None = None
    trace: Recorder | None = None
    ablation: Ablation = field(default_factory=Ablation)
    image_mask: torch.Tensor | None = None  # [B, S] True on image-span tokens
    skip_compress: frozenset[int] = frozenset()  # sources whose entries for these rows already exist
    publish_only: bool = False              # run a layer's compressor/keys only (bounded prefill)
    indexer_loss: bool = False              # collect the indexer's KL training signal
    indexer_losses: dict[int, torch.Tensor] = field(default_factory=dict)   # selecting layer -> its KL
    collect_routing: bool = False           # keep each MoE's chosen experts (load balancing in training)
    routings: list[tuple[int, torch.Tensor]] = field(default_factory=list)
    taps: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> attention input (mean of streams)
    tap_layers: frozenset[int] = frozenset()
    csa: CsaState = field(default_factory=CsaState)  # CSA2 state handed from layer to layer

    @property
    def start(self) -> int:
        return int(self.positions[0]) if self.positions.numel() else 0
