"""Is this recurrence? Sharing prepared data (CSA2 Reuse) versus applying the same weights again
(shared-depth recurrence), checked on the real tensors of the running model.

Follows docs/design/architecture.md §2 (every layer has its own query, window, output and MoE) and
docs/design/equations.md §5 (only KV sources own a compressor; only index sources own indexer
queries). The checks compare parameter storage (data pointers) and values; they do not assume.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from lessons.attention_shares import IDLE_SHARE

INTRO = (
    "Two ideas hide behind the word \"sharing\". One shares data: a layer prepares entries once and later "
    "layers read them instead of preparing their own. The other shares a rule: the same block of weights "
    "is applied again and again to a state that keeps changing, which is what people mean by recurrence "
    "in depth. CSA2's Reuse label is the first kind. The check below looks at the real tensors."
)

CONTRAST = [
    {"": "what is shared", "Reuse (CSA2)": "prepared entries and the list of picked positions",
     "shared-depth recurrence": "the block's weights: the update rule itself"},
    {"": "what each layer owns", "Reuse (CSA2)": "its query, window, attention output, MoE, mHC mixing projections",
     "shared-depth recurrence": "nothing of its own: every pass uses the same weights"},
    {"": "what changes layer to layer", "Reuse (CSA2)": "the rule and the state",
     "shared-depth recurrence": "only the state"},
    {"": "what a weight check shows", "Reuse (CSA2)": "different tensors (own storage, different values)",
     "shared-depth recurrence": "the same tensor object in every pass"},
]

TOKEN_RECURRENCE_NOTE = (
    "A third kind is recurrence along the sequence: a state updated token by token, as in linear-attention "
    "layers such as Gated DeltaNet. That is a different axis again: it runs across positions, not across "
    "depth, and this model's attention does not do it."
)


@dataclass
class ParamRow:
    name: str                 # parameter name inside the layer, e.g. "attn.wq_a.weight"
    shape_layer: tuple | None
    shape_source: tuple | None
    same_storage: bool | None  # None when only one side has it
    max_abs_diff: float | None

    @property
    def where(self) -> str:
        if self.shape_layer is None:
            return "source only"
        if self.shape_source is None:
            return "this layer only"
        return "both"


def param_comparison(model, layer: int, source: int) -> list[ParamRow]:
    """Every parameter of two layers, side by side: same storage? how far apart are the values?"""
    a = dict(model.layers[layer].named_parameters())
    b = dict(model.layers[source].named_parameters())
    rows = []
    for name in sorted(set(a) | set(b)):
        pa, pb = a.get(name), b.get(name)
        same = diff = None
        if pa is not None and pb is not None:
            same = pa.data_ptr() == pb.data_ptr()
            diff = float((pa.detach().float() - pb.detach().float()).abs().max()) if pa.shape == pb.shape else None
        rows.append(ParamRow(name, None if pa is None else tuple(pa.shape), None if pb is None else tuple(pb.shape),
                             same, diff))
    return rows


@dataclass
class StorageCheck:
    tensors: int          # parameter tensors in the backbone layers
    distinct: int         # distinct storages among them
    shared_pairs: list[tuple[str, str]]

    def sentence(self, n_layers: int) -> str:
        """Whether any tensor is stored once for two layers (the page's verdict on recurrence in depth)."""
        if self.shared_pairs:
            return f"{len(self.shared_pairs)} tensors share storage across layers, e.g. {self.shared_pairs[0]}."
        return (f"Across all {n_layers} layers: {self.tensors} parameter tensors, {self.distinct} distinct storages. "
                "No layer applies another layer's weights, so this is not recurrence in depth.")


def storage_check(model) -> StorageCheck:
    """Count the layers' parameter tensors and their distinct storages: equal counts mean no layer
    shares a weight with another."""
    seen: dict[int, str] = {}
    pairs = []
    n = 0
    for i, block in enumerate(model.layers):
        for name, p in block.named_parameters():
            n += 1
            key = p.data_ptr()
            full = f"layers.{i}.{name}"
            if key in seen:
                pairs.append((seen[key], full))
            else:
                seen[key] = full
    return StorageCheck(n, len(seen), pairs)


def layer_param_count(model, layer: int) -> int:
    return sum(p.numel() for p in model.layers[layer].parameters())


@dataclass
class ReuseFacts:
    """What a Reuse layer read from its source on a trace, and how its own computation differed."""

    layer: int
    kv_source: int
    index_source: int
    entries_read: int         # entries in the group when it ran (made by the KV source)
    max_read_per_query: int   # the most entries one query of this layer read (its source's picks)
    same_selection: bool      # picks identical to its index source (all rows)
    share_gap: float          # largest share difference over the picked entries (all rows, heads)
    lens_differs: int         # rows where the logit-lens top token differs from the source's
    largest_share: float = 0.0  # the most either layer gave one of its picked entries (all rows, heads)

    @property
    def entries_idle(self) -> bool:
        """Neither layer gives the picked entries any weight to speak of: a share gap of 0 then says nothing."""
        return self.largest_share < IDLE_SHARE


def shares_sentence(rf: ReuseFacts, picker: str) -> str:
    """What the Reuse layer's own query did with its picker's entries (`picker`: the picker layer's number as the
    reader counts): not compared when the picks differ, idle when neither layer weighs them, else the gap."""
    if not rf.same_selection:
        return f"Its picks are not layer {picker}'s, so the shares are not compared entry by entry."
    if rf.entries_idle:
        return (f"Neither it nor layer {picker} gives those entries any weight on these weights (at most "
                f"{rf.largest_share:.4f} of a head's attention): here both read only their windows, so their "
                "shares cannot differ. Pick an encoder Reuse layer, or load a recall checkpoint (tiny weights "
                "trained on fact lookup; the sidebar's weights choice offers them), to see what a "
                "fresh query does with them.")
    return (f"With those same entries its own query gave other shares than layer {picker}'s: the largest gap over "
            f"all rows and heads is {rf.share_gap:.3f}.")


def reuse_facts(trace, layer: int) -> ReuseFacts:
    rec = trace.layers[layer]
    s = rec.spec
    if s.role != "Reuse":
        raise ValueError(f"layer {layer} is {s.role}, not Reuse")
    src = trace.layers[s.index_source]
    same = src.topk is not None and torch.equal(src.topk, rec.shares.entry_ids)
    gap = big = 0.0
    if rec.shares.entries.numel():   # the most either layer gave one of its picks: idle or not, whatever they picked
        big = max(float((sh.entries * (sh.entry_ids >= 0).unsqueeze(2)).max()) if sh.entries.numel() else 0.0
                  for sh in (rec.shares, src.shares))
    if same and rec.shares.entries.numel():
        valid = (rec.shares.entry_ids >= 0).unsqueeze(2)
        gap = float(((rec.shares.entries - src.shares.entries).abs() * valid).max())
    differs = 0
    if rec.lens_ids is not None and src.lens_ids is not None:
        differs = int((rec.lens_ids[..., 0] != src.lens_ids[..., 0]).sum())
    per_query = int((rec.shares.entry_ids >= 0).sum(-1).max()) if rec.shares.entry_ids.numel() else 0
    return ReuseFacts(layer, s.kv_source, s.index_source, trace.layers[s.kv_source].source_len, per_query, same, gap,
                      differs, big)


# ---- the page's other texts ------------------------------------------------------------------------------------------
NO_REUSE = "This model has no Reuse layers to check."


def not_reuse(layer: int, shown: int) -> str:
    """A layer (as the reader numbers it) that is not a Reuse layer, and the one shown instead."""
    return f"Layer {layer} is not a Reuse layer; showing layer {shown}."


def own_params(layer: int, own: int, source: int, source_own: int) -> str:
    """The Reuse layer's parameters against its source's (layers as the reader numbers them)."""
    return (f"Layer {layer} has {own:,} parameters of its own; layer {source} has {source_own:,}. The extra tensors on "
            "the source side are its compressor and indexer: the machinery that prepares the entries the Reuse "
            "layer only reads.")


def picks_sentence(rf: ReuseFacts, n_tokens: int, num: Callable[[int], int]) -> str:
    """What the Reuse layer read on the trace: its source's entries, at its picker's positions."""
    return (f"On {n_tokens} tokens, layer {num(rf.kv_source)} made {rf.entries_read} entries. Each query of "
            f"layer {num(rf.layer)} read only the ones layer {num(rf.index_source)} picked for it: at most "
            f"{rf.max_read_per_query} per query, at the same positions: "
            + ("**identical picks on every row** (checked)." if rf.same_selection else "**the picks differ**."))


def own_update(rf: ReuseFacts, picker: str, n_tokens: int) -> str:
    """Its shares (shares_sentence), then how often its logit-lens top token differs from its picker's."""
    return (f"{shares_sentence(rf, picker)} And its update is its own: on {rf.lens_differs} of {n_tokens} rows, "
            f"the top logit-lens token after this layer differs from the one after layer {picker}.")


def beside_title(layer: int) -> str:
    return f"**Layer {layer} beside a recall checkpoint's, at the last token**"
