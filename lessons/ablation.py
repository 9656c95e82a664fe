"""The ablation lab: remove one component at a time and compare answer quality, time and cache memory.

Follows the first seed's closing advice in our words (measure quality next to time and memory at a
comparable budget, then switch one piece off) and ARCHITECTURE.md §3 (the switches are
`model.context.Ablation`, applied at inference time to the trained weights). Answer quality comes from
bench/quality.py's `evaluate` (held-out loss, recall by distance bucket), so the page and the benchmark
report the same numbers for the same settings.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from model.context import Ablation
from model.engine import decode_step, prefill

INTRO = (
    "Does each part of the design earn its place? One way to ask: switch one part off in the trained model, "
    "keep everything else, and measure what changes: answer quality (loss on held-out text, and whether the "
    "model can still recall an object placed far back in a story), processing time, and the bytes the cache "
    "holds. Every configuration reads the same prompt at the same cache budget."
)

CAVEAT = (
    "These switches act at inference time on weights trained with every part on, so they show how much the "
    "trained model leans on each part, not how a model trained without it would do. Times are wall-clock on "
    "this machine's CPU and vary with its load; compare them within one run."
)

# name -> (Ablation keyword arguments, prefill mode, explanation). The names match bench/quality.ABLATIONS.
CONFIGS: dict[str, tuple[dict, str, str]] = {
    "full model": ({}, "exact", "Everything on, as trained."),
    "every layer selects": ({"reselect_all": True}, "exact",
                            "Every Reuse layer picks its own entries instead of reusing the last selection. Reuse "
                            "layers own no compressor and no indexer weights, so 'all Full' cannot mean that each "
                            "layer makes its own entries: here each one re-scores its group's shared entries with "
                            "the group's indexer weights applied to its own input."),
    "window only": ({"window_only": True}, "exact",
                    "No compressed branch: each layer reads only its own recent window (and the sink). Anything "
                    "further back is out of reach."),
    "no candidate pool": ({"no_candidates": True}, "exact",
                          "Reindex layers search every entry instead of only the candidate pool."),
    "smaller top-k": ({"index_topk": 4}, "exact",
                      "Each query reads fewer selected entries than the configured number."),
    "no Engram": ({"no_engram": True}, "exact", "The n-gram memory adds nothing to the streams."),
    "bounded prefill": ({}, "bounded",
                        "Same model, but the decoder replays only the last window of the prompt instead of every "
                        "prompt token."),
    "streams never mix": ({"mhc_identity": True}, "exact",
                          "mHC's comb matrices become the identity: each residual stream keeps to itself, the "
                          "closest we can get to a single stream with these weights."),
}

QUALITY_KEYS = ("loss", "recall_inside", "recall_just_past", "recall_far")


def make_ablation(name: str, topk: int | None = None) -> tuple[Ablation, str]:
    """(Ablation, prefill mode) for a configuration name; `topk` sets the smaller top-k."""
    if name not in CONFIGS:
        raise ValueError(f"unknown configuration {name!r}; choose from {list(CONFIGS)}")
    kw, mode, _ = CONFIGS[name]
    kw = dict(kw)
    if name == "smaller top-k" and topk is not None:
        if topk < 1:
            raise ValueError("top-k must be at least 1")
        kw["index_topk"] = int(topk)
    return Ablation(**kw), mode


def label(name: str, topk: int | None = None) -> str:
    return f"top-k {topk}" if name == "smaller top-k" and topk is not None else name


@dataclass
class Cost:
    prompt_tokens: int
    prefill_s: float
    decode_ms: float                 # per generated token
    cache_bytes: int
    cache_by_kind: dict[str, int] = field(default_factory=dict)
    entries_read: int = 0            # compressed entries one query reads in a selecting layer


@torch.no_grad()
def measure_cost(model, ids: list[int], ablation: Ablation, mode: str, decode_tokens: int = 8) -> Cost:
    """Prefill `ids` and decode a few greedy tokens under `ablation`: seconds and cache bytes."""
    pf = prefill(model, torch.tensor([ids]), mode, ablation=ablation)
    tok = pf.logits.argmax(-1).view(-1, 1)
    t0 = time.perf_counter()
    for _ in range(decode_tokens):
        tok = decode_step(model, pf.cache, tok, ablation=ablation)[:, -1].argmax(-1).view(-1, 1)
    per = (time.perf_counter() - t0) / max(1, decode_tokens) * 1000
    b = pf.cache.nbytes()
    cfg = model.cfg
    reads = 0 if ablation.window_only else (ablation.index_topk or cfg.index_topk)
    return Cost(prompt_tokens=len(ids), prefill_s=pf.seconds, decode_ms=per, cache_bytes=int(b.total),
                cache_by_kind={k: int(v) for k, v in b.by_kind.items()}, entries_read=reads)


def run_config(model, name: str, cost_ids: list[int], topk: int | None = None, max_stories: int | None = 30,
               max_natural_tokens: int | None = 2048, progress: Callable[[float, str], None] | None = None,
               evaluate=None) -> dict:
    """One table row: quality from bench.quality.evaluate plus time and bytes on `cost_ids`."""
    if evaluate is None:
        from bench.quality import evaluate
    ablation, mode = make_ablation(name, topk)
    sub = None if progress is None else (lambda f, msg: progress(0.85 * f, msg))
    q = evaluate(model, ablation=ablation, mode=mode, max_stories=max_stories, max_natural_tokens=max_natural_tokens,
                 progress=sub)
    if progress is not None:
        progress(0.9, f"timing a {len(cost_ids)}-token prompt")
    c = measure_cost(model, cost_ids, ablation, mode)
    row = {"configuration": label(name, topk), "prefill": mode, "loss": q.loss}
    row.update({f"recall_{b}": q.recall.get(b, float("nan")) for b in ("inside", "just_past", "far")})
    row.update({"stories": sum(q.recall_n.values()), "eval_s": q.seconds, "prefill_s": c.prefill_s,
                "decode_ms_per_token": c.decode_ms, "cache_bytes": c.cache_bytes, "entries_read": c.entries_read})
    return row


def ablation_table(rows: list[dict], baseline: str = "full model") -> list[dict]:
    """Add the change against the baseline row to every row: loss difference, recall differences in points,
    time and byte ratios. The baseline goes first; a missing baseline leaves the differences blank."""
    base = next((r for r in rows if r["configuration"] == baseline), None)
    out = []
    for r in sorted(rows, key=lambda r: r["configuration"] != baseline):
        r = dict(r)
        if base is not None:
            r["Δ loss"] = r["loss"] - base["loss"]
            r["Δ recall far (points)"] = _diff(r.get("recall_far"), base.get("recall_far")) * 100
            r["time × full"] = _ratio(r.get("prefill_s"), base.get("prefill_s"))
            r["bytes × full"] = _ratio(r.get("cache_bytes"), base.get("cache_bytes"))
        else:
            r["Δ loss"] = r["Δ recall far (points)"] = r["time × full"] = r["bytes × full"] = float("nan")
        out.append(r)
    return out


def _diff(a, b) -> float:
    if a is None or b is None or (isinstance(a, float) and math.isnan(a)) or (isinstance(b, float) and math.isnan(b)):
        return float("nan")
    return float(a) - float(b)


def _ratio(a, b) -> float:
    if a is None or b is None or not b:
        return float("nan")
    return float(a) / float(b)


def reading(rows: list[dict]) -> list[str]:
    """Plain sentences on the largest effects (ours, generated from the numbers)."""
    table = [r for r in rows if r["configuration"] != "full model" and not math.isnan(r.get("Δ loss", float("nan")))]
    if not table:
        return []
    out = []
    worst = max(table, key=lambda r: r["Δ loss"])
    out.append(f"Largest loss increase: {worst['configuration']} (+{worst['Δ loss']:.3f} nats per token).")
    far = [r for r in table if not math.isnan(r["Δ recall far (points)"])]
    if far:
        f = min(far, key=lambda r: r["Δ recall far (points)"])
        out.append(f"Largest drop in far recall: {f['configuration']} ({f['Δ recall far (points)']:+.0f} points).")
    return out
