"""Trace: per-layer records of what the running model did, collected only when asked.

Implements docs/design/architecture.md §3.7 (`m.trace`). An untraced forward pays one `is None` test per
site. A traced forward records, per layer and per row: the layer's role; attention shares over the
window rows, the selected compressed entries (with the tokens each entry packs) and the sink; the
selected entries, the candidate pool, the index scores; router scores, chosen experts and weights;
Engram gates and hashed n-grams; mHC pre/post/comb; hidden-state norms; and the logit lens (the top
tokens if the model stopped after this layer). `detail=FULL` also keeps the residual streams,
sublayer outputs, latents and entries (used by the parity tests).

Records accumulate over several forward calls (chunked prefill, bounded replay, decode steps), so
a trace can cover a prompt read in chunks and the tokens generated after it.
"""

from __future__ import annotations

import threading
import time
from collections import abc, defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from ..arch.context import CompressedRead, LensHead, Recorder
from ..arch.indexer import topk_mask
from ..arch.mhc import Mix
from ..arch.rope import apply_rope
from ..config import V41Config
from ..layer_map import LayerSpec, layer_map
from ..quant import fake_latent
from .engine import decode_step, prefill
from .sampling import Sampler

FULL = "full"
SUMMARY = "summary"


@dataclass
class Shares:
    """Attention shares of the recorded rows: window slots, selected entries, sink (sum to 1 per head)."""

    window: torch.Tensor        # [B, S, H, W]; slot j is the key at position t - (W-1) + j
    entries: torch.Tensor       # [B, S, H, k]; aligned with `entry_ids`
    entry_ids: torch.Tensor     # [B, S, k] compressed entry index (-1 = empty slot)
    sink: torch.Tensor          # [B, S, H]
    ratio: int                  # an entry e packs tokens [e*ratio, (e+1)*ratio)

    def window_positions(self, positions: torch.Tensor) -> torch.Tensor:
        w = self.window.shape[-1]
        return positions.view(-1, 1) - (w - 1) + torch.arange(w).view(1, -1)


LAZY_LENS_BYTES = 256 * 2 ** 20   # collapsed rows a trace keeps for a lazy lens; past this it computes at once


class LogitLens:
    """The logit lens of one layer: the model's own final norm and head on the layer's collapsed streams, top k.

    Computed when a reader asks, for the rows it asks (`at`), or for every row at once (`top`); the tracer
    keeps each forward call's collapsed rows [B, s, D] until then (a few hundred KB per layer for the tiny
    model; past LAZY_LENS_BYTES in one trace it computes at record time instead). `top` caches its answer;
    the projection reads the model's current norm and head, so a lazy lens belongs to a model whose
    weights stay as they were when it was traced (the app's models never change). Thread-safe: one
    trace serves every session of a server."""

    def __init__(self, topk: int, project: Callable[[torch.Tensor], torch.Tensor] | None = None):
        self.topk, self.project = topk, project
        self.parts: list[list] = []          # per forward call: [hidden or None, ids or None, probs or None]
        self._rows: dict[tuple[int, int], list[tuple[int, float]]] = {}
        self._lock = threading.Lock()

    @classmethod
    def fixed(cls, ids: torch.Tensor, probs: torch.Tensor) -> "LogitLens":
        lens = cls(ids.shape[-1])
        lens.parts.append([None, ids, probs])
        return lens

    @property
    def pending_bytes(self) -> int:
        return sum(p[0].numel() * p[0].element_size() for p in self.parts if p[0] is not None)

    def add_hidden(self, collapsed: torch.Tensor) -> None:
        self.parts.append([collapsed.detach(), None, None])

    def add_top(self, collapsed: torch.Tensor) -> None:
        ids, probs = self._top(collapsed)
        self.parts.append([None, ids, probs])

    def _top(self, collapsed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            probs = torch.softmax(self.project(collapsed).float(), -1)
            top = probs.topk(min(self.topk, probs.shape[-1]), dim=-1)
        return top.indices.cpu(), top.values.cpu()

    def top(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(ids [B, S, k], probs [B, S, k]) over every recorded row."""
        with self._lock:
            for part in self.parts:
                if part[1] is None:
                    part[1], part[2] = self._top(part[0])
                    part[0] = None
            if len(self.parts) > 1:
                ids, probs = (torch.cat([p[i] for p in self.parts], 1) for i in (1, 2))
                self.parts = [[None, ids, probs]]
            return self.parts[0][1], self.parts[0][2]

    def log_probs(self, rows: list[int], targets: list[int], batch: int = 0) -> list[float] | None:
        """log p(target) at each row under this lens, or None once the collapsed rows are gone (`top` drops them;
        a lens computed at record time never had them)."""
        with self._lock:
            if any(p[0] is None for p in self.parts):
                return None
            hidden = torch.cat([p[0] for p in self.parts], 1)[batch]
        idx = torch.as_tensor(rows, dtype=torch.long, device=hidden.device)
        with torch.no_grad():
            lp = torch.log_softmax(self.project(hidden[idx]).float(), -1)
        return lp[torch.arange(len(rows)), torch.as_tensor(targets, device=lp.device)].tolist()

    def at(self, row: int, batch: int = 0) -> list[tuple[int, float]]:
        with self._lock:
            hit = self._rows.get((batch, row))
            if hit is not None:
                return hit
            r = row
            for hidden, ids, probs in self.parts:
                n = (hidden if hidden is not None else ids).shape[1]
                if r < n:
                    if ids is None:
                        ids, probs = self._top(hidden[batch:batch + 1, r:r + 1])
                        b, rr = 0, 0
                    else:
                        b, rr = batch, r
                    out = [(int(i), float(p)) for i, p in zip(ids[b, rr].tolist(), probs[b, rr].tolist())]
                    self._rows[(batch, row)] = out
                    return out
                r -= n
            raise IndexError(f"row {row} is not in this lens")


@dataclass
class LayerRecord:
    spec: LayerSpec
    positions: torch.Tensor                   # [S_l] absolute positions this layer processed
    shares: Shares | None = None
    hc_attn: Mix | None = None
    hc_ffn: Mix | None = None
    pre_mix: torch.Tensor | None = None       # [B, S, n]
    stream_norms: torch.Tensor | None = None  # [B, S, n] RMS of each stream after the layer
    router_logits: torch.Tensor | None = None
    router_scores: torch.Tensor | None = None
    router_experts: torch.Tensor | None = None
    router_weights: torch.Tensor | None = None
    engram_gate: torch.Tensor | None = None   # [B, S, n]
    engram_hash: torch.Tensor | None = None   # [B, S, cols]
    topk: torch.Tensor | None = None          # [B, S, k] selected entries (-1 = none), selecting layers only
    index_scores: torch.Tensor | None = None  # [B, S, T] (-inf: not visible / outside the pool)
    candidates: torch.Tensor | None = None    # [B, S, T] pool (candidate source only)
    block_scores: torch.Tensor | None = None  # [B, S, n_blocks]
    source_len: int = 0                       # entries of this layer's KV group when it ran
    lens: LogitLens | None = None             # logit lens: top tokens per row, computed when read (see below)
    # FULL detail
    streams: torch.Tensor | None = None
    attn_out: torch.Tensor | None = None
    ffn_out: torch.Tensor | None = None
    engram_out: torch.Tensor | None = None
    latent: torch.Tensor | None = None
    entries: torch.Tensor | None = None
    index_keys: torch.Tensor | None = None

    @property
    def lens_ids(self) -> torch.Tensor | None:
        """[B, S, k] logit-lens top tokens of every recorded row (computed on first read when lazy)."""
        return None if self.lens is None else self.lens.top()[0]

    @lens_ids.setter
    def lens_ids(self, value: torch.Tensor | None) -> None:
        self._set_lens(value, 0)

    @property
    def lens_probs(self) -> torch.Tensor | None:
        return None if self.lens is None else self.lens.top()[1]

    @lens_probs.setter
    def lens_probs(self, value: torch.Tensor | None) -> None:
        self._set_lens(value, 1)

    def _set_lens(self, value: torch.Tensor | None, which: int) -> None:
        if value is None:
            self.lens = None
            return
        ids, probs = (None, None) if self.lens is None else self.lens.top()
        ids, probs = (value, probs) if which == 0 else (ids, value)
        self.lens = LogitLens.fixed(ids if ids is not None else torch.zeros(value.shape, dtype=torch.long),
                                    probs if probs is not None else torch.zeros(value.shape))

    def lens_at(self, row: int, batch: int = 0) -> list[tuple[int, float]]:
        """The logit lens at one recorded row: (token id, probability), most likely first ([] without a lens).
        A lazy lens computes this one row only."""
        return [] if self.lens is None else self.lens.at(row, batch)

    @property
    def topk_mask(self) -> torch.Tensor | None:
        if self.topk is None or self.index_scores is None:
            return None
        return topk_mask(self.topk, self.index_scores.shape[-1])

    def row(self, position: int) -> int | None:
        hit = (self.positions == position).nonzero()
        return int(hit[0, 0]) if len(hit) else None


@dataclass
class Trace:
    ids: torch.Tensor                  # [B, S_total] token ids of every traced row
    positions: torch.Tensor            # [S_total]
    layers: list[LayerRecord]
    logits: torch.Tensor | None        # [B, S_last, V] final logits of the last call
    mode: str
    meta: dict[str, Any] = field(default_factory=dict)


def _cat(parts: list[torch.Tensor], dim: int = 1, pad_value: float | bool = 0) -> torch.Tensor | None:
    if not parts:
        return None
    width = max(p.shape[-1] for p in parts)
    if parts[0].ndim >= 3 and any(p.shape[-1] != width for p in parts):
        parts = [torch.nn.functional.pad(p, (0, width - p.shape[-1]), value=pad_value) for p in parts]
    return torch.cat(parts, dim=dim)


LensChoice = bool | str | abc.Collection   # see lens_plan
LAZY = "lazy"


def lens_plan(lens: LensChoice) -> tuple[bool, frozenset[int] | None]:
    """(lazy, eager layers) for a tracer's `lens` argument:
    True: every layer at record time (the full lens); False: none; "lazy": every layer, each row computed
    when read; a collection of layer indices: those layers at record time, the others lazily."""
    if lens is True:
        return False, None
    if lens is False or lens is None:
        return False, frozenset()
    if lens == LAZY:
        return True, frozenset()
    if isinstance(lens, str) or not all(isinstance(i, int) for i in lens):
        raise ValueError(f"lens must be True, False, {LAZY!r} or a collection of layer indices, got {lens!r}")
    return True, frozenset(lens)


class Tracer(Recorder):
    """Collects records during forwards; `result()` assembles the Trace."""

    def __init__(self, detail: str = SUMMARY, lens_topk: int = 5, keep_scores: bool = True,
                 lens: LensChoice = True):
        self.detail, self.lens_topk, self.keep_scores = detail, lens_topk, keep_scores
        self.lazy, self.lens_layers = lens_plan(lens)
        self.lenses: dict[int, LogitLens] = {}
        self.data: dict[int, dict[str, list]] = defaultdict(lambda: defaultdict(list))
        self.ids: list[torch.Tensor] = []
        self.pos: list[torch.Tensor] = []
        self.logits: torch.Tensor | None = None
        self.specs: list[LayerSpec] = []

    @property
    def full(self) -> bool:
        return self.detail == FULL

    # ---- hooks called by the model ---------------------------------------------------------------
    def begin(self, cfg: V41Config, ids: torch.Tensor, positions: torch.Tensor, hash_ids) -> None:
        if not self.specs:
            self.specs = layer_map(cfg)
        self.ids.append(ids.detach().cpu())
        self.pos.append(positions.detach().cpu())

    def engram(self, layer: int, gate: torch.Tensor, hashes: torch.Tensor, out: torch.Tensor) -> None:
        d = self.data[layer]
        d["engram_gate"].append(gate.detach().cpu())
        d["engram_hash"].append(hashes.detach().cpu())
        if self.full:
            d["engram_out"].append(out.detach().cpu())

    def pool(self, layer: int, candidates: torch.Tensor, block_scores: torch.Tensor) -> None:
        d = self.data[layer]
        d["candidates"].append(candidates.detach().cpu())
        d["block_scores"].append(block_scores.detach().cpu())

    def selection(self, layer: int, scores: torch.Tensor, topk: torch.Tensor) -> None:
        d = self.data[layer]
        if self.keep_scores:
            d["index_scores"].append(scores.detach().cpu())
        d["topk"].append(topk.detach().cpu())

    def latent(self, layer: int, latent: torch.Tensor, g0: int) -> None:
        if self.full:
            self.data[layer]["latent"].append(latent.detach().float().cpu())

    def source_len(self, layer: int, n: int) -> None:
        self.data[layer]["source_len"].append(int(n))

    def attention(self, layer: int, positions: torch.Tensor, probs: torch.Tensor, prev: torch.Tensor | None,
                  comp: CompressedRead | None, window: int) -> None:
        d = self.data[layer]
        d["positions"].append(positions.detach().cpu())
        p = probs.detach().float().cpu()
        wshare, sink = p[..., :window], p[..., -1]
        if comp is not None:
            if comp.dense:  # every visible entry is read: record them all, in entry order
                full_c = p[..., window:-1]                        # [B, S, H, T]
                t = full_c.shape[-1]
                idx = torch.arange(t).view(1, 1, -1).expand(full_c.shape[0], full_c.shape[1], -1)
                idx = torch.where(comp.mask.cpu().expand_as(idx), idx, torch.full_like(idx, -1))
                g = idx.clamp_min(0).unsqueeze(2).expand(-1, -1, full_c.shape[2], -1)
                eshare = full_c.gather(-1, g) * (idx >= 0).unsqueeze(2)
            else:
                idx = comp.idx.detach().cpu()
                eshare = p[..., window:-1]
        else:
            idx = torch.full(p.shape[:2] + (0,), -1, dtype=torch.long)
            eshare = p.new_zeros(p.shape[:3] + (0,))
        d["shares_window"].append(wshare)
        d["shares_entries"].append(eshare)
        d["shares_ids"].append(idx)
        d["shares_sink"].append(sink)

    def block(self, layer: int, a: Mix, f: Mix, y, out, routing, new) -> None:
        d = self.data[layer]
        for name, m in (("hc_attn", a), ("hc_ffn", f)):
            d[name + ".pre"].append(m.pre.detach().cpu())
            d[name + ".post"].append(m.post.detach().cpu())
            d[name + ".comb"].append(m.comb.detach().cpu())
        b, s = new.shape[:2]
        d["router_logits"].append(routing.logits.detach().cpu().view(b, s, -1))
        d["router_scores"].append(routing.scores.detach().cpu().view(b, s, -1))
        d["router_experts"].append(routing.indices.detach().cpu().view(b, s, -1))
        d["router_weights"].append(routing.weights.detach().cpu().view(b, s, -1))
        if self.full:
            d["attn_out"].append(y.detach().float().cpu())
            d["ffn_out"].append(out.detach().float().cpu())

    def after_layer(self, layer: int, streams: torch.Tensor, pre_mix: torch.Tensor, head: LensHead) -> None:
        """Norms (and the logit lens: `head` is the model's output end) after layer `layer`."""
        d = self.data[layer]
        d["pre_mix"].append(pre_mix.detach().cpu())
        d["stream_norms"].append(streams.detach().float().pow(2).mean(-1).sqrt().cpu())
        if self.full:
            d["streams"].append(streams.detach().float().cpu())
        if self.lens_layers is not None and not self.lens_layers and not self.lazy:
            return
        lens = self.lenses.get(layer)
        if lens is None:
            lens = self.lenses[layer] = LogitLens(self.lens_topk, head.project)
        with torch.no_grad():
            collapsed = head.collapse(streams, pre_mix)
        eager = self.lens_layers is None or layer in self.lens_layers
        if not eager:
            kept = sum(x.pending_bytes for x in self.lenses.values())
            eager = kept + collapsed.numel() * collapsed.element_size() > LAZY_LENS_BYTES
        if eager:
            lens.add_top(collapsed)
        else:
            lens.add_hidden(collapsed)

    def end(self, hidden, logits) -> None:
        self.logits = logits.detach().cpu()

    # ---- assembly ------------------------------------------------------------------------------
    def result(self, mode: str = "exact", meta: dict | None = None) -> Trace:
        ids = torch.cat(self.ids, 1) if self.ids else torch.zeros(1, 0, dtype=torch.long)
        pos = torch.cat(self.pos) if self.pos else torch.zeros(0, dtype=torch.long)
        # the trace's own row order: a position can appear once (bounded replay rows re-run the decoder only)
        order = {int(p): i for i, p in enumerate(pos.tolist())}
        ids_u = ids[:, sorted(set(order.values()))]
        pos_u = pos[sorted(set(order.values()))]
        layers = []
        for spec in self.specs:
            d = self.data.get(spec.index, {})
            positions = torch.cat(d["positions"]) if d.get("positions") else torch.zeros(0, dtype=torch.long)
            rec = LayerRecord(spec=spec, positions=positions)
            if d.get("shares_window"):
                rec.shares = Shares(window=_cat(d["shares_window"]), entries=_cat(d["shares_entries"]),
                                    entry_ids=_cat(d["shares_ids"], pad_value=-1), sink=_cat(d["shares_sink"]),
                                    ratio=spec.compress_ratio)
            if d.get("hc_attn.pre"):
                rec.hc_attn = Mix(_cat(d["hc_attn.pre"]), _cat(d["hc_attn.post"]), torch.cat(d["hc_attn.comb"], 1))
                rec.hc_ffn = Mix(_cat(d["hc_ffn.pre"]), _cat(d["hc_ffn.post"]), torch.cat(d["hc_ffn.comb"], 1))
            for key in ("pre_mix", "stream_norms", "router_logits", "router_scores", "router_experts",
                        "router_weights", "engram_gate", "engram_hash", "topk"):
                if d.get(key):
                    setattr(rec, key, _cat(d[key], pad_value=-1 if key == "topk" else 0))
            rec.lens = self.lenses.get(spec.index)
            if d.get("index_scores"):
                rec.index_scores = _cat(d["index_scores"], pad_value=float("-inf"))
            if d.get("candidates"):
                rec.candidates = _cat(d["candidates"], pad_value=False)
            if d.get("block_scores"):
                rec.block_scores = _cat(d["block_scores"], pad_value=float("-inf"))
            if d.get("source_len"):
                rec.source_len = d["source_len"][-1]
            if self.full:
                for key in ("streams", "attn_out", "ffn_out", "engram_out"):
                    if d.get(key):
                        setattr(rec, key, torch.cat(d[key], 1))
                if d.get("latent"):
                    rec.latent = torch.cat(d["latent"], 1)
            layers.append(rec)
        return Trace(ids=ids_u, positions=pos_u, layers=layers, logits=self.logits, mode=mode, meta=meta or {})


def run_trace(model, input_ids, *, detail: str = SUMMARY, mode: str = "exact", ablation=None, lens_topk: int = 5,
              keep_scores: bool = True, chunk_size: int | None = None, progress=None, lens: LensChoice = True) -> Trace:
    """Trace a prompt. `mode="exact"` with no chunk_size runs one forward over all rows (no cache);
    otherwise the prompt is read through the engine (chunked, exact or bounded) with the tracer on.
    `lens`: which layers' logit lens is computed during the forward (see lens_plan; "lazy" or a list of
    the layers a page draws computes the rest only when read)."""
    tracer = Tracer(detail=detail, lens_topk=lens_topk, keep_scores=keep_scores, lens=lens)
    with torch.no_grad():
        if mode == "exact" and chunk_size is None:
            model(input_ids, trace=tracer, ablation=ablation)
            tr = tracer.result("exact")
            if detail == FULL:
                _add_entries(model, input_ids, tr, ablation)
            return tr
    return trace_generate(model, input_ids, mode, 0, chunk_size=chunk_size or 256, lens=lens, lens_topk=lens_topk,
                          keep_scores=keep_scores, ablation=ablation, progress=progress, detail=detail).trace


@dataclass
class TracedRun:
    """A prompt read with the tracer on and the tokens generated after it, recorded into the same trace."""

    trace: Trace
    generated: list[int]          # the sampled tokens; every one but the last was fed back through the model
    prefill_s: float
    decode_s: float
    step_s: list[float] = field(default_factory=list)


def trace_generate(model, input_ids, mode: str = "bounded", new_tokens: int = 0, sampler: Sampler | None = None, *,
                   chunk_size: int = 512, lens: LensChoice = True, lens_topk: int = 5, keep_scores: bool = True,
                   ablation=None, progress: Callable[[float, str], None] | None = None,
                   meta: dict | None = None, detail: str = SUMMARY) -> TracedRun:
    """Prefill with the tracer on (the engine's chunked exact or bounded prefill), then decode `new_tokens`, each
    sampled token fed back once so that it has a record in every layer. `progress(fraction, message)` covers
    both. The one traced loop of the prompt inspector (lessons/inspector.py)."""
    tracer = Tracer(detail=detail, lens_topk=lens_topk, keep_scores=keep_scores, lens=lens)
    sampler = sampler or Sampler()
    total = 1.0 + new_tokens

    def pf_progress(f: float, msg: str) -> None:
        if progress:
            progress(f / total, msg)

    pf = prefill(model, input_ids, mode, chunk_size=chunk_size, progress=pf_progress, trace=tracer, ablation=ablation)
    logits, out, steps = pf.logits, [], []
    t0 = time.perf_counter()
    for i in range(new_tokens):
        tok = sampler.sample(logits)
        out.append(int(tok[0]))
        ts = time.perf_counter()
        logits = decode_step(model, pf.cache, tok.view(-1, 1), ablation=ablation, trace=tracer)[:, -1]
        steps.append(time.perf_counter() - ts)
        if progress:
            progress((2 + i) / total, f"generated token {i + 1} of {new_tokens}")
    decode_s = time.perf_counter() - t0
    tr = tracer.result(mode, meta=meta)
    tr.meta["cache"] = pf.cache
    return TracedRun(trace=tr, generated=out, prefill_s=pf.seconds, decode_s=decode_s, step_s=steps)


def _add_entries(model, input_ids, tr: Trace, ablation) -> None:
    """FULL detail: the entries and index keys each KV source made (re-derived from its latent)."""
    for rec in tr.layers:
        if rec.latent is None:
            continue
        attn = model.layer(rec.spec.index).attn  # layer(): a layer-streamed model loads it on demand
        lat = rec.latent.to(model.device)
        pos = attn.ratio * torch.arange(lat.shape[1], device=model.device)
        cos, sin = model.rotary.cos_sin(pos, "compress")
        with torch.no_grad():
            rec.entries = fake_latent(apply_rope(lat, cos, sin)).cpu()
            rec.index_keys = attn.indexer.keys(lat, cos, sin).cpu()
