"""Several prompts in one forward: right-padded rows, each row's results as if it ran alone.

A server that many people use at once (ui/queue.py's BatchWorker) runs the prompts that arrive
together as one batch: on a small CPU a forward of a short prompt is mostly per-op overhead and
weight reads, which a batch pays once. The rows are padded on the right to the longest and each
result is cut back to its own row. Why padding changes no real row (tests/model/test_batch.py checks
each claim against solo runs):
- attention is causal: a query at t reads window rows <= t and entries visible at t;
- a compressed entry packs rows [e*r, (e+1)*r) and is visible to a query at t only when
  e < (t+1)//r, so an entry holding a pad row (e >= n//r for a row of n tokens) is never visible
  to a real query: its index scores are -inf, it never enters a top-k or a candidate block's
  max, and the selection's tie-break is by entry index, so the extra -inf columns change no pick;
- Engram hashes look back only; MoE routes each token alone (bias, no capacity, no batch
  statistics); RMSNorm, mHC (pre/post/comb per token) and the sink are per row.
What differs is floating-point rounding only: a matrix product over B rows may take another
kernel than over one, so logits agree to ~1e-5, not bit for bit (routing, top-k and pool
choices are compared exactly in the tests).

Traces are split back per row: every [B, S, ...] record to [1, n, ...], and the entry-indexed
ones (index scores, pool, block scores, top-k and its shares) to the width a solo run has
(n//r entries; k = min(index_topk, n//r)). A layer that had no entries at all alone (n < r)
has no selection records, as alone.
Only one-shot forwards without a cache batch (the next-token scores, an exact trace, the
logits under an ablation); prefill through a cache and decoding run one prompt at a time.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from ..arch.context import Ablation
from .trace import SUMMARY, LayerRecord, LensChoice, LogitLens, Shares, Trace, Tracer

PAD_ID = 0


def pad_rows(rows: list[list[int]], pad_id: int = PAD_ID) -> tuple[torch.Tensor, list[int]]:
    """Token id lists -> ([B, L] right-padded ids, lengths)."""
    if not rows or any(len(r) == 0 for r in rows):
        raise ValueError("every row needs at least one token")
    longest = max(len(r) for r in rows)
    ids = torch.full((len(rows), longest), pad_id, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = torch.as_tensor(r, dtype=torch.long)
    return ids, [len(r) for r in rows]


@torch.no_grad()
def batched_next_logits(model, rows: list[list[int]], ablation: Ablation | None = None) -> list[torch.Tensor]:
    """The next-token logits [V] after each row (its last real position), one forward for all rows."""
    ids, lengths = pad_rows(rows)
    out = model.full(ids.to(model.device), lengths=lengths, last_only=True, ablation=ablation)
    return [out.logits[i, 0].cpu() for i in range(len(rows))]


@torch.no_grad()
def batched_logits(model, rows: list[list[int]], ablation: Ablation | None = None) -> list[torch.Tensor]:
    """Every position's logits [n, V] of each row, one forward for all rows."""
    ids, lengths = pad_rows(rows)
    out = model.full(ids.to(model.device), ablation=ablation)
    return [out.logits[i, :n].cpu() for i, n in enumerate(lengths)]


@torch.no_grad()
def batched_traces(model, rows: list[list[int]], ablation: Ablation | None = None, lens: LensChoice = True,
           lens_topk: int = 5, keep_scores: bool = True) -> list[Trace]:
    """An exact trace (one forward, no cache, summary detail) of each row, recorded in one batched forward."""
    ids, lengths = pad_rows(rows)
    tracer = Tracer(detail=SUMMARY, lens_topk=lens_topk, keep_scores=keep_scores, lens=lens)
    model.full(ids.to(model.device), trace=tracer, ablation=ablation)
    whole = tracer.result("exact")
    topk = (ablation.index_topk if ablation is not None and ablation.index_topk else None) or model.cfg.index_topk
    dense = ablation is not None and ablation.dense_compressed
    return [split_trace(whole, i, n, topk, model.cfg.candidate_block_size, dense) for i, n in enumerate(lengths)]


def split_trace(whole: Trace, b: int, n: int, index_topk: int, block_size: int, dense: bool = False) -> Trace:
    """Row `b` (its first `n` positions) of a batched exact trace, shaped as a solo trace of that row."""
    layers = []
    for rec in whole.layers:
        layers.append(_split_record(rec, b, n, index_topk, block_size, dense))
    logits = None if whole.logits is None else whole.logits[b:b + 1, :n]
    return Trace(ids=whole.ids[b:b + 1, :n], positions=whole.positions[:n], layers=layers, logits=logits,
                 mode=whole.mode, meta=dict(whole.meta))


def _rows(t: torch.Tensor | None, b: int, n: int) -> torch.Tensor | None:
    return None if t is None else t[b:b + 1, :n].clone()


def _split_record(rec: LayerRecord, b: int, n: int, index_topk: int, block_size: int, dense: bool) -> LayerRecord:
    keep = int((rec.positions < n).sum())           # exact traces: positions 0..L-1 in order
    out = LayerRecord(spec=rec.spec, positions=rec.positions[:keep].clone())
    for name in ("pre_mix", "stream_norms", "router_logits", "router_scores", "router_experts", "router_weights",
                 "engram_gate", "engram_hash"):
        setattr(out, name, _rows(getattr(rec, name), b, keep))
    if rec.hc_attn is not None:
        out.hc_attn = type(rec.hc_attn)(*(_rows(t, b, keep) for t in (rec.hc_attn.pre, rec.hc_attn.post,
                                                                        rec.hc_attn.comb)))
        out.hc_ffn = type(rec.hc_ffn)(*(_rows(t, b, keep) for t in (rec.hc_ffn.pre, rec.hc_ffn.post, rec.hc_ffn.comb)))
    ratio = rec.spec.compress_ratio
    n_entries = n // ratio if ratio else 0
    k = n_entries if dense else min(index_topk, n_entries)
    if rec.shares is not None:
        sh = rec.shares
        width = k if sh.entry_ids.shape[-1] else 0
        out.shares = Shares(window=_rows(sh.window, b, keep), entries=_rows(sh.entries, b, keep)[..., :width],
                            entry_ids=_rows(sh.entry_ids, b, keep)[..., :width], sink=_rows(sh.sink, b, keep),
                            ratio=sh.ratio)
    if n_entries:                                    # alone, a row with no entry yet selects nothing
        if rec.topk is not None:
            out.topk = _rows(rec.topk, b, keep)[..., :min(index_topk, n_entries)]
        if rec.index_scores is not None:
            out.index_scores = _rows(rec.index_scores, b, keep)[..., :n_entries]
        if rec.candidates is not None:
            out.candidates = _rows(rec.candidates, b, keep)[..., :n_entries]
        if rec.block_scores is not None:
            out.block_scores = _rows(rec.block_scores, b, keep)[..., :math.ceil(n_entries / block_size)]
    if rec.spec.kv_source == rec.spec.index:          # the layer that makes the entries records how many
        out.source_len = n_entries
    if rec.lens is not None:
        out.lens = _split_lens(rec.lens, b, keep)
    return out


def _split_lens(lens: LogitLens, b: int, n: int) -> LogitLens:
    """Row b of a batched lens: its pending collapsed rows stay pending (computed when read, as alone)."""
    part = lens.parts[0] if len(lens.parts) == 1 else None
    out = LogitLens(lens.topk, lens.project)
    if part is not None and part[0] is not None:
        out.add_hidden(part[0][b:b + 1, :n].clone())
    else:
        ids, probs = lens.top()
        out.parts.append([None, ids[b:b + 1, :n].clone(), probs[b:b + 1, :n].clone()])
    return out


def trim_meta(tr: Trace, **meta) -> Trace:
    """A copy of a trace with extra meta entries."""
    return replace(tr, meta={**tr.meta, **meta})
