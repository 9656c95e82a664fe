"""Inference engine: exact and bounded prefill, decode steps, and how far bounded is from exact.

Follows docs/design/architecture.md §3.1.
- `exact` prefill runs every layer over every prompt row (in chunks through the cache).
- `bounded` prefill (the seeds' "bounded replay") runs the encoder layers over every row, has the
  decoder's first layer publish its ratio-1 latents and index keys for every row, and runs the
  decoder layers over the last `sliding_window` rows only (the replay segment), whose windows
  start at the segment. It equals `exact` when the prompt fits in the window; `compare_prefill`
  measures how far apart they are beyond that.
- Decode runs each new token through both halves.
A persistent prefix cache (model/inference/prefix_cache.py) can supply the state of a known prompt prefix.
Sampling is model/inference/sampling.py; whole generations (plain and speculative) model/inference/generation.py.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from ..arch.backbone import Backbone
from ..arch.context import Ablation, Recorder
from ..errors import InputError
from .cache import Cache
from .prefix_cache import PrefixCache

DEFAULT_CHUNK = 256


@dataclass
class Prefill:
    cache: Cache
    logits: torch.Tensor          # [B, V] at the last prompt row
    replay_logits: torch.Tensor | None = None  # [B, R, V] of the replay segment (bounded) / last rows (exact)
    reused: int = 0               # prompt tokens served by the prefix cache
    seconds: float = 0.0
    taps: dict[int, torch.Tensor] = field(default_factory=dict)  # tap_layers: layer -> [B, rows, D], the
    #                               last rows (at most sliding_window) of the prompt that the layer ran on


def _chunks(n: int, size: int, start: int = 0, extra_cuts: tuple = (), tail: int | None = None):
    """Chunk boundaries over [start, n); extra cut points (a prefix-cache save point) are always
    boundaries, and with `tail` the rows [tail, n) form one last chunk."""
    cuts = set(range(start, n, size)) | {n} | {c for c in extra_cuts if c is not None and start < c < n}
    if tail is not None:
        tail = max(tail, start)
        cuts = {c for c in cuts if not tail < c < n} | {tail}
    cuts = sorted(cuts)
    return list(zip(cuts[:-1], cuts[1:]))


def prefill(model: Backbone, input_ids, mode: str = "bounded", *, chunk_size: int = DEFAULT_CHUNK,
            progress: Callable[[float, str], None] | None = None, rollback: int = 1,
            prefix_cache: PrefixCache | None = None, ablation: Ablation | None = None, replay_logits: bool = False,
            max_prompt_tokens: int | None = None, trace: Recorder | None = None, tap_layers=()) -> Prefill:
    """Read a prompt into a fresh cache; returns the cache and the next-token logits.

    `tap_layers`: also return those layers' attention inputs (mean over mHC streams) for the last
    rows of the prompt (the DSpark drafter's context, model/inference/speculative.py)."""
    if mode not in ("bounded", "exact"):
        raise InputError(f"prefill mode must be 'bounded' or 'exact', got {mode!r}")
    ids = model.check_ids(input_ids)
    cfg = model.cfg
    t0 = time.perf_counter()
    total = ids.shape[1]
    limit = max_prompt_tokens or cfg.max_position_embeddings
    if total > limit:
        raise InputError(f"the prompt has {total} tokens; the maximum is {limit}")
    dec, n_layers, w = cfg.decoder_start, cfg.num_hidden_layers, cfg.sliding_window
    bounded = mode == "bounded" and dec < n_layers
    cache, reused = None, 0
    if prefix_cache is not None:
        # at least the last token is always read, so there are logits to return
        hit = prefix_cache.lookup(ids[:, :-1], mode="bounded" if bounded else "exact", rollback=rollback)
        if hit is not None:
            cache, reused = hit
    if cache is None:
        cache = Cache(cfg, device=model.device, batch=ids.shape[0], rollback=rollback,
                      mode="bounded" if bounded else "exact")
    save_at = prefix_cache.save_point(total - 1) if prefix_cache is not None else None  # lookups keep the last token
    if save_at is not None and save_at <= reused:
        save_at = None
    tail = total - w if replay_logits else None  # exact: the last W rows in one chunk, to compare with bounded
    spans = _chunks(total, chunk_size, start=reused, extra_cuts=(save_at,), tail=tail)
    steps = len(spans) + (1 if bounded else 0)
    out_logits, rl = None, None
    taps: dict[int, torch.Tensor] = {}
    with torch.no_grad():
        for ci, (a, b) in enumerate(spans):
            if not bounded:
                last = b == total
                out = model(ids[:, a:b], cache, ablation=ablation, last_only=not (last and replay_logits), trace=trace,
                            tap_layers=tap_layers)
                _keep_taps(taps, out.taps, w)
                if last:
                    out_logits = out.logits[:, -1]
                    rl = out.logits[:, -w:] if replay_logits else None
            else:   # the encoder over the chunk, then the first decoder layer publishes its entries for it
                seg = model.segment(ids[:, a:b], cache, 0, dec, publish=dec, ablation=ablation, trace=trace,
                                    tap_layers=[t for t in tap_layers if t < dec])
                _keep_taps(taps, seg.taps, w)
                cache.keep_carry(seg.streams, seg.pre_mix)
                cache.advance(b - a)
            if prefix_cache is not None and b == save_at:
                prefix_cache.save(ids[:, :b], cache)
            if progress is not None:
                progress((ci + 1) / steps, f"read tokens {a}-{b} of {total}")
        if bounded:
            replay_taps = {t: None for t in tap_layers if t >= dec}
            out_logits, rl, rows = _replay(model, cache, ablation, replay_logits, trace, replay_taps)
            _keep_taps(taps, replay_taps, w)
            if progress is not None:
                progress(1.0, f"replayed the last {rows} rows through the decoder")
    return Prefill(cache=cache, logits=out_logits, replay_logits=rl, reused=reused,
                   seconds=time.perf_counter() - t0, taps=taps)


def _keep_taps(taps: dict, new: dict, w: int) -> None:
    for layer, t in new.items():
        if t is not None:
            taps[layer] = (t if layer not in taps else torch.cat([taps[layer], t], 1))[:, -w:]


def _replay(model: Backbone, cache: Cache, ablation, keep_all: bool, trace: Recorder | None = None,
            taps: dict | None = None):
    """Run the decoder over the replay segment (the last W rows the cache carries), windows floored at its start.
    `taps` (layer -> None) is filled with those layers' taps over the segment -> (last logits, all logits or
    None, rows replayed)."""
    cfg = model.cfg
    dec, n_layers = cfg.decoder_start, cfg.num_hidden_layers
    streams, pre, start = cache.begin_replay()
    hash_ids = None
    if model.hasher is not None:
        n = cfg.engram_max_ngram_size - 1
        hist = cache.compressed[:, max(0, start - n):start] if start > 0 else None
        hash_ids = model.hasher(cache.compressed[:, start:], hist)
    out = model.resume(streams, pre, cache, dec, n_layers, start=start, hash_ids=hash_ids, trace=trace,
                       ablation=ablation, skip_compress=frozenset({dec}), tap_layers=taps or (),
                       last_only=not keep_all)
    if taps is not None:
        taps.update(out.taps)
    return out.logits[:, -1], (out.logits if keep_all else None), streams.shape[1]


def decode_step(model: Backbone, cache: Cache, token_ids, ablation: Ablation | None = None,
                trace: Recorder | None = None, tap_layers=()) -> torch.Tensor:
    """Feed one (or a few) new tokens through both halves; returns logits [B, S_new, V]."""
    with torch.no_grad():
        out = model(token_ids, cache, ablation=ablation, trace=trace, tap_layers=tap_layers)
    return out.logits


# ------------------------------------------------------------------------------------------------
# Bounded vs exact
# ------------------------------------------------------------------------------------------------

@dataclass
class PrefillDivergence:
    prompt_tokens: int
    rows_compared: int
    kl_last: float            # KL(exact || bounded) at the last prompt row, nats
    kl_mean: float            # mean over the replay rows
    top1_agreement: float     # fraction of replay rows whose argmax agrees
    top1_last_agrees: bool
    exact_seconds: float
    bounded_seconds: float


def compare_prefill(model: Backbone, input_ids, chunk_size: int = DEFAULT_CHUNK) -> PrefillDivergence:
    """How far bounded prefill's logits are from exact ones, over the replay segment."""
    ex = prefill(model, input_ids, "exact", chunk_size=chunk_size, replay_logits=True)
    bo = prefill(model, input_ids, "bounded", chunk_size=chunk_size, replay_logits=True)
    be = bo.replay_logits if bo.replay_logits is not None else ex.replay_logits[:, -1:]
    r = be.shape[1]
    ee = ex.replay_logits[:, -r:]
    lp, lq = torch.log_softmax(ee.float(), -1), torch.log_softmax(be.float(), -1)
    kl = (lp.exp() * (lp - lq)).sum(-1)[0]
    agree = (ee.argmax(-1) == be.argmax(-1))[0]
    return PrefillDivergence(prompt_tokens=model.check_ids(input_ids).shape[1], rows_compared=r,
                             kl_last=float(kl[-1]), kl_mean=float(kl.mean()),
                             top1_agreement=float(agree.float().mean()), top1_last_agrees=bool(agree[-1]),
                             exact_seconds=ex.seconds, bounded_seconds=bo.seconds)
