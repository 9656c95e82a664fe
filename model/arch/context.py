"""Per-forward context: positions, cache, per-forward CSA2 state, trace recorder, ablations.

The CSA2 state (docs/design/equations.md §5-6, model/arch/csa_state.py) lives here for the length of one
forward call: the current KV group's entries and index keys, the last published top-k selection,
and the candidate pool. Persistent state (window rows, compressed entries, pending rows) lives in
the cache (model/inference/cache.py); the context only points at it, through the protocols of
model/arch/protocols.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .csa_state import CsaState
from .protocols import LayerCache, Recorder


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
    - mhc_identity: comb = identity (streams never mix), the closest to "one stream".
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
    indexer_losses: list[torch.Tensor] = field(default_factory=list)
    collect_routing: bool = False           # keep each MoE's chosen experts (load balancing in training)
    routings: list[tuple[int, torch.Tensor]] = field(default_factory=list)
    taps: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> attention input (mean of streams)
    tap_layers: frozenset[int] = frozenset()
    csa: CsaState = field(default_factory=CsaState)  # CSA2 state handed from layer to layer

    @property
    def start(self) -> int:
        return int(self.positions[0]) if self.positions.numel() else 0
