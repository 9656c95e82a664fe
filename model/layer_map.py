"""The per-layer role map, derived from the config (docs/design/architecture.md §2); never a hard-coded table.

Roles: "SWA" (ratio 0: sliding window only), "Full" (KV source: makes compressed entries and
index keys, and selects), "Reindex" (index source without a compressor: selects again among its
group's entries), "Reuse" (keeps its group's entries and the last selection). Every layer keeps its
own query, window, attention output and MoE. The stack is "decoder" for the trailing run of ratio-1
layers (the CED decoder), else "encoder". The attention module is built from its layer's LayerSpec, and the
lessons, pages and command lines read roles from here: nothing else reads `kv_source_layer_ids`,
`index_source_layer_ids` or `candidate_source_layer_id` (docs/design/architecture.md §2 says what
`searches_pool` means for a Reuse layer that an ablation makes select).
"""

from __future__ import annotations

from dataclasses import dataclass

from .config import V41Config


@dataclass(frozen=True)
class LayerSpec:
    index: int                  # 0-based, as in the code
    stack: str                  # "encoder" | "decoder" (| "drafter", drafter_spec)
    role: str                   # "SWA" | "Full" | "Reuse" | "Reindex"
    compress_ratio: int
    kv_source: int | None       # the layer whose compressed entries this layer reads
    index_source: int | None    # the layer whose selection this layer uses (itself when it selects)
    engram: bool
    candidate_source: bool      # this layer builds the candidate pool
    searches_pool: bool         # a selection made here searches only the pool: every compressed layer after
                                # the candidate source (a Reuse layer selects only under Ablation.reselect_all)

    @property
    def number(self) -> int:
        """1-based, as the first seed counts."""
        return self.index + 1

    @property
    def makes_entries(self) -> bool:
        return self.role == "Full"

    @property
    def selects(self) -> bool:
        return self.role in ("Full", "Reindex")

    @property
    def uses_candidates(self) -> bool:
        """This layer's own selection is restricted to the candidate pool (the Reindex layers after it)."""
        return self.selects and self.searches_pool


def layer_map(cfg: V41Config) -> list[LayerSpec]:
    """One LayerSpec per backbone layer: the only reader of the config's wiring fields besides the config."""
    ratios = cfg.backbone_ratios
    kv, ix = cfg.kv_source_layer_ids, cfg.index_source_layer_ids
    cand = cfg.candidate_source_layer_id if cfg.candidate_source_layer_id is not None else -1
    dec = cfg.decoder_start
    out = []
    for i, r in enumerate(ratios):
        if r == 0:
            role, kvs, ixs = "SWA", None, None
        else:
            kvs = max(s for s in kv if s <= i)
            ixs = max(s for s in ix if s <= i)
            role = "Full" if i in kv else ("Reindex" if i in ix else "Reuse")
        out.append(LayerSpec(index=i, stack="decoder" if i >= dec else "encoder", role=role, compress_ratio=r,
                             kv_source=kvs, index_source=ixs, engram=i in cfg.engram_layer_ids,
                             candidate_source=(i == cand), searches_pool=(r > 0 and 0 <= cand < i)))
    return out


def drafter_spec(cfg: V41Config, index: int) -> LayerSpec:
    """A DSpark drafter layer (index >= num_hidden_layers): window-only, no Engram."""
    if index < cfg.num_hidden_layers:
        raise ValueError(f"layer {index} is a backbone layer: read it from layer_map(cfg)")
    return LayerSpec(index=index, stack="drafter", role="SWA", compress_ratio=0, kv_source=None, index_source=None,
                     engram=False, candidate_source=False, searches_pool=False)


def describe(spec: LayerSpec) -> str:
    """One plain sentence on what the layer computes (used by the CLI and the pages)."""
    if spec.role == "SWA":
        return "reads only its own sliding window of recent raw rows"
    if spec.role == "Full":
        extra = "; its scores also build the candidate pool" if spec.candidate_source else ""
        return (f"makes compressed entries (ratio {spec.compress_ratio}) and index keys for its group, "
                f"then selects which entries to read{extra}")
    if spec.role == "Reindex":
        return (f"keeps layer {spec.kv_source}'s entries but scores them again with its own indexer query"
                + (" inside the candidate pool" if spec.uses_candidates else ""))
    return f"keeps layer {spec.kv_source}'s entries and layer {spec.index_source}'s selection"
