"""The ablation lab: remove one component at a time and compare answer quality, time and cache memory.

Follows the first seed's closing advice in our words (measure quality next to time and memory at a
comparable budget, then switch one piece off) and docs/design/architecture.md §3.8 (the switches are
`model.arch.context.Ablation`, applied at inference time to the trained weights). Answer quality comes from
lab/training/evaluation.py's `evaluate` (held-out loss, recall by distance bucket), the evaluation the
quality benchmark prints, so the page and the benchmark report the same numbers for the same settings.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from model import Ablation, decode_step, prefill
from model.heldout import evaluate as held_out_quality

from .cache_calculator import Knobs, calculate
from .designs import v41_design
from .far_fact import window_reach
from .units import human_bytes

INTRO = (
    "What does each part contribute to this trained tiny model? One way to ask: switch one part off, keep everything "
    "else, and measure what changes. What is measured: answer quality (loss on held-out text, and whether the model "
    "can still recall an object placed far back in a story), processing time, and the bytes the cache holds. Every "
    "configuration is timed and sized on the same prompt and scored on the same held-out stories. Whether each part "
    "earns its place in the released model is a question for the technical report's own experiments: this lab does "
    "not reproduce the "
    "report's benchmarks, it measures the small model running here."
)

CAVEAT = (
    "These switches act at inference time on weights trained with every part on, so they show how much the "
    "trained model leans on each part, not how a model trained without it would do. Times are wall-clock on "
    "the server's device (the sidebar names it) and vary with its load; compare them within one run."
)

# name -> (Ablation keyword arguments, prefill mode, explanation). The names match the quality benchmark's.
CONFIGS: dict[str, tuple[dict, str, str]] = {
    "full model": ({}, "exact", "Everything on, as trained."),
    "every layer selects": ({"reselect_all": True}, "exact",
                            "Every Reuse layer picks its own entries instead of reusing the last selection. Reuse "
                            "layers own no compressor and no indexer weights, so this cannot mean that each "
                            "layer makes its own entries: here each one re-scores its group's shared entries with "
                            "the group's indexer weights applied to its own input."),
    "window only": ({"window_only": True}, "exact",
                    "No compressed branch: each layer reads only its own recent window (and the sink), so nothing "
                    "older than the window is read directly; what the stacked windows relay hop by hop remains "
                    "(up to {reach} positions back on this model: {layers} layers x ({window} - 1))."),
    "no candidate pool": ({"no_candidates": True}, "exact",
                          "Reindex layers search every entry instead of only the candidate pool."),
    "smaller top-k": ({"index_topk": 4}, "exact",
                      "Each query reads fewer selected entries than the configured number."),
    "no Engram": ({"no_engram": True}, "exact", "The n-gram memory adds nothing to the streams."),
    "bounded prefill": ({}, "bounded",
                        "The release's way of reading a prompt, with exact prefill as the reference it "
                        "approximates: the decoder replays only the last window of the prompt instead of every "
                        "prompt token, and the windows of the first replayed rows are cut at the start of the replay "
                        "segment."),
    # named for what it switches off: with comb = identity the streams still meet in every sublayer's input
    "mHC comb off": ({"mhc_identity": True}, "exact",
                     "mHC's comb matrices become the identity: the streams stop blending directly, though each "
                     "sublayer still reads a mix of all of them and writes its output into each."),
}

QUALITY_KEYS = ("loss", "recall_inside", "recall_just_past", "recall_far")


def config_rows(cfg) -> list[tuple[str, str, str]]:
    """(configuration, prefill mode, what changes) for every configuration, with the running model's numbers
    (the window-only reach: layers x (window - 1))."""
    n, w = cfg.num_hidden_layers, cfg.sliding_window
    return [(name, mode, text.format(reach=f"{window_reach(n, w):,}", layers=n, window=w))
            for name, (_, mode, text) in CONFIGS.items()]


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
    """One table row: quality from lab.training.evaluation.evaluate (or `evaluate`, a stand-in with its
    signature) plus time and bytes on `cost_ids`."""
    evaluate = evaluate or held_out_quality
    ablation, mode = make_ablation(name, topk)
    sub = None if progress is None else (lambda f, msg: progress(0.85 * f, msg))
    q = evaluate(model, ablation=ablation, mode=mode, max_stories=max_stories, max_natural_tokens=max_natural_tokens,
                 progress=sub)
    if progress is not None:
        progress(0.9, f"timing a {len(cost_ids)}-token prompt")
    c = measure_cost(model, cost_ids, ablation, mode)
    row = {"configuration": label(name, topk), "prefill": mode, "loss": q.loss}
    row.update({f"recall_{b}": q.recall.get(b, float("nan")) for b in ("inside", "just_past", "far")})
    row.update({f"recall_{b}_n": int(q.recall_n.get(b, 0)) for b in ("inside", "just_past", "far")})
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


def recall_noise(p1: float, n1: int, p2: float, n2: int) -> float:
    """Two standard errors of a difference of two recall rates (in points), and never less than one story's
    worth: a difference no larger than this is within noise."""
    if not n1 or not n2:
        return math.inf
    se = math.sqrt(p1 * (1 - p1) / n1 + p2 * (1 - p2) / n2)
    return 100 * max(2 * se, 1 / min(n1, n2))


def _far_noise(r: dict, base: dict) -> float:
    n1, n2 = r.get("recall_far_n", 0), base.get("recall_far_n", 0)
    return recall_noise(r.get("recall_far", 0.0), n1, base.get("recall_far", 0.0), n2)


def far_context_note(rows: list[dict]) -> str | None:
    """Do these weights use the compressed branch, the direct road past the window? Measured: the full model's far
    recall against the window-only configuration's, with the noise of the two rates. None when either row is
    missing."""
    full = next((r for r in rows if r["configuration"] == "full model"), None)
    win = next((r for r in rows if r["configuration"] == "window only"), None)
    if full is None or win is None or math.isnan(full.get("recall_far", math.nan)):
        return None
    gain = 100 * (full["recall_far"] - win["recall_far"])
    noise = _far_noise(win, full)
    if gain > noise:
        return (f"These weights do use the compressed branch (the direct road past the window): far recall is "
                f"{100 * full['recall_far']:.0f}% with everything on and {100 * win['recall_far']:.0f}% window-only "
                f"({gain:+.0f} points, noise about ±{noise:.0f}).")
    return (f"These weights gain nothing measurable from the compressed branch, the direct road past the window: far "
            f"recall with everything on ({100 * full['recall_far']:.0f}%) is no better than with it switched off "
            f"({100 * win['recall_far']:.0f}%, where only the window chain can carry a far fact), a difference of "
            f"{gain:+.0f} points within a noise of about ±{noise:.0f}. So switching off the pool, the selection or "
            "the compressed entries is not expected to lower far recall with these weights; a later training run "
            "may change that, and this sentence is recomputed from each run.")


def reading(rows: list[dict]) -> list[str]:
    """Plain sentences on the largest effects (ours, generated from the numbers). A change is named only when it
    is there: a loss increase that rounds to zero at the shown precision (the loss is measured on the same held-out
    tokens for every configuration), or a recall drop within the noise of the two rates, is not called the
    largest of anything."""
    table = [r for r in rows if r["configuration"] != "full model" and not math.isnan(r.get("Δ loss", float("nan")))]
    if not table:
        return []
    out = []
    worst = max(table, key=lambda r: r["Δ loss"])
    if round(worst["Δ loss"], 3) > 0:
        out.append(f"Largest loss increase: {worst['configuration']} (+{worst['Δ loss']:.3f} nats per token).")
    else:
        out.append("No configuration raised the held-out loss (at three decimals).")
    base = next((r for r in rows if r["configuration"] == "full model"), None)
    far = [r for r in table if not math.isnan(r["Δ recall far (points)"])]
    if far and base is not None:
        f = min(far, key=lambda r: r["Δ recall far (points)"])
        noise = _far_noise(f, base)
        if math.isinf(noise):   # story counts unknown: no noise estimate, no verdict
            pass
        elif -f["Δ recall far (points)"] > noise:
            out.append(f"Largest drop in far recall: {f['configuration']} ({f['Δ recall far (points)']:+.0f} points, "
                       f"noise about ±{noise:.0f}).")
        else:
            out.append(f"No configuration lowered far recall by more than the noise (about ±{noise:.0f} points).")
    note = far_context_note(rows)
    if note:
        out.append(note)
    return out


def memory_note(cfg, tokens: int) -> str:
    """The memory side of the trade-offs: the cache calculator's bytes for the running model at this prompt
    length, in each prefill mode (the engine holds exactly these; tests/lessons/test_cache_calculator.py)."""
    out = {}
    for mode in ("exact", "bounded"):
        k = Knobs(context=tokens, mode=mode, window=cfg.sliding_window, bits=4, layers=max(16, cfg.num_hidden_layers))
        c = calculate(v41_design(cfg, k, drafter=False, use_knobs=False), k)
        out[mode] = (c.hbm.total, c.persistent.total)
    (he, pe), (hb, pb) = out["exact"], out["bounded"]
    return (f"The memory side: at {tokens:,} tokens the cache calculator's formula gives this model "
            f"{human_bytes(he)} on the accelerator after exact prefill and {human_bytes(hb)} after bounded prefill, "
            f"and a persistent copy of {human_bytes(pe)} (exact) or {human_bytes(pb)} (bounded, with the replay "
            "input). The Cache calculator derives the same bytes row by row, and for the released model.")


# ---- the page's other texts ------------------------------------------------------------------------------------------
RANDOM_WEIGHTS = ("These are not trained weights: with random weights every configuration scores near chance, so "
                  "the table shows the machinery, not the model's behaviour.")
STORIES_HELP = "Held-out stories, split evenly over the three distance buckets; 300 is the whole held-out set."
FALLBACK_PROMPT = "The key is in the blue box."     # the cost prompt when no long sample ships


def topk_help(index_topk: int) -> str:
    return f"The model reads {index_topk} entries per query."


def not_run_yet(said: str, sets: int) -> str:
    """Beside the run button: the configurations chosen but not run (`said`), on `sets` sets of weights."""
    return (f"Not run yet: {said}" + (f", on {sets} sets of weights" if sets > 1 else "")
            + " (seconds to minutes each on CPU; results are kept).")


def bytes_and_reads(rows: list[dict]) -> str:
    """Under the tables: why the cache bytes do not move (when they do not), and the entries each configuration
    reads per query."""
    same_bytes = len({r["cache_bytes"] for r in rows}) == 1
    return (("Cache bytes are the same in every configuration: the trained model still writes its compressed "
             "entries when a switch stops it from reading them, the selection size does not change what is "
             "stored, and bounded prefill stores the same rows as exact (it saves decoder work, not memory). "
             if same_bytes else "") +
            "Compressed entries read per query in a selecting layer: "
            + ", ".join(f"{r['configuration']} {r['entries_read']}" for r in rows) + ".")
