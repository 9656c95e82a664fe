"""V4.1 in one screen: what is new in DeepSeek-V4.1-Flash, each point counted from a config, what the small weights
this explorer runs can be expected to write (the far-fact picture's words are lessons/hero.py).

Every number in a point comes from the config passed in (through `model.layer_map` and the cache designs of
lessons/designs.py), so a changed config changes the sentences; the points follow docs/design/architecture.md
§2-3 (the causal encoder-decoder split, CSA2's Full / Reuse / Reindex modes, the hierarchical indexer, FP4
entries) and the DSpark drafter. The cache per token is the part of the cache that grows with the context, for
one sequence, compared with DeepSeek-V4-Flash's published formats (lessons/designs.py `v4_flash`). This module
knows nothing of pages or drawing; it does not run a model.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from model import V41Config, layer_map

from .cache_calculator import calculate
from .designs import defaults, v4_flash, v41_design
from .dspark import block_sentence
from .format_split import format_split

HEADLINE = "DeepSeek-V4.1-Flash in one screen."


@dataclass(frozen=True)
class Point:
    """One thing that is new, with the numbers its sentence was built from (a test reads them)."""

    key: str
    title: str
    short: str          # one line, for the first screen
    text: str           # the point in full
    numbers: dict


def _and(xs: list[int]) -> str:
    xs = [str(x) for x in xs]
    return xs[0] if len(xs) == 1 else ", ".join(xs[:-1]) + " and " + xs[-1]


def _layers(n: int) -> str:
    return f"{n} layer{'s' if n != 1 else ''}"


def cache_per_token(cfg: V41Config) -> float:
    """Bytes the cache grows by per token of context, one sequence, for a V4.1 layout built from `cfg` (its own
    window; FP4 entries as released). Fixed-size parts (the windows) do not grow and are not in it."""
    knobs = dataclasses.replace(defaults("v4.1-flash"), window=cfg.sliding_window, context=1 << 16, batch=1)
    return calculate(v41_design(cfg, knobs), knobs).hbm.growth_per_token


def v4_flash_per_token() -> float:
    """The same figure for DeepSeek-V4-Flash (vLLM's cache formats, lessons/designs.py)."""
    knobs = dataclasses.replace(defaults("v4-flash"), context=1 << 16, batch=1)
    return calculate(v4_flash(knobs), knobs).hbm.growth_per_token


def points(cfg: V41Config, num=lambda i: i) -> list[Point]:
    """What is new, counted from `cfg`; `num` maps a 0-based layer index to the reader's numbering."""
    specs = layer_map(cfg)
    n = len(specs)
    dec = cfg.decoder_start
    n_enc, n_dec = dec, n - dec
    roles = {r: [s.index for s in specs if s.role == r] for r in ("SWA", "Full", "Reuse", "Reindex")}
    ratios = {st: sorted({s.compress_ratio for s in specs if s.stack == st and s.compress_ratio}, reverse=True)
              for st in ("encoder", "decoder")}
    cand = next((s.index for s in specs if s.candidate_source), None)
    pool = cfg.candidate_topk_blocks * cfg.candidate_block_size
    ours, v4 = cache_per_token(cfg), v4_flash_per_token()
    out = []

    split = (f"{n} layers in one stack, cut in two: the first {n_enc} form a causal encoder that reads the prompt"
             + (f", and the last {n_dec} a decoder whose first layer ({num(dec)}) turns the encoder's final rows into "
                "one shared memory for every decoder layer. Most prompt tokens stop at the top of the encoder; each "
                "generated token climbs both halves." if n_dec else "; this config has no decoder half."))
    out.append(Point("split", "Encoder and decoder", f"{n_enc} + {n_dec} layers; the decoder's memory is made from the "
                     "encoder's output.", split,
                     {"layers": n, "encoder": n_enc, "decoder": n_dec, "decoder_start": dec}))

    def packs(st: str) -> str:
        """How a stack's entries hold tokens; ratio 1 is no packing at all: one entry per token."""
        rs = ratios[st]
        return " or ".join("one entry per token (ratio 1: no packing)" if r == 1 else f"{r} tokens per entry"
                           for r in rs) if rs else "no entries"

    modes = (f"{_layers(len(roles['Full']))} (Full: {_and([num(i) for i in roles['Full']]) if roles['Full'] else '-'})"
             f" make compressed entries: {packs('encoder')} in the encoder, {packs('decoder')} in the decoder. "
             f"{_layers(len(roles['Reuse']))} (Reuse) keep both those entries and the last choice "
             f"of which to read; {_layers(len(roles['Reindex']))} (Reindex) keep the entries but choose again. "
             f"{_layers(len(roles['SWA']))} read only their {cfg.sliding_window}-token window.")
    out.append(Point("modes", "CSA2's three modes", f"{len(roles['Full'])} Full layers make entries, "
                     f"{len(roles['Reuse'])} Reuse and {len(roles['Reindex'])} Reindex layers read them.", modes,
                     {"full": len(roles["Full"]), "reuse": len(roles["Reuse"]), "reindex": len(roles["Reindex"]),
                      "window_only": len(roles["SWA"]), "window": cfg.sliding_window}))

    search = (f"At layer {num(cand)} the indexer scores every visible entry and keeps the best "
              f"{cfg.candidate_topk_blocks:,} blocks of {cfg.candidate_block_size}: a pool of up to {pool:,} "
              f"positions. Each selecting layer reads at most {cfg.index_topk:,} entries, and the Reindex layers "
              "choose them only from inside that pool." if cand is not None else
              f"Each selecting layer reads at most {cfg.index_topk:,} entries; this config builds no candidate pool.")
    out.append(Point("search", "A pool, then the top-k", f"{pool:,} positions, then {cfg.index_topk:,} entries per "
                     "query.", search,
                     {"pool_blocks": cfg.candidate_topk_blocks, "block": cfg.candidate_block_size, "pool": pool,
                      "topk": cfg.index_topk, "candidate_layer": cand}))

    stored = len(roles["Full"])
    readers = sum(1 for s in specs if s.kv_source is not None)
    fs = format_split(cfg)      # the waterfall's middle: V4.1's layout in V4-Flash's formats
    cache = (f"{stored} stored cop{'y' if stored == 1 else 'ies'} of FP4 entries serve {readers} compressed layers, "
             f"so the cache grows by {ours:,.0f} B per token of context ({fs.v41_formats} entries and index keys), "
             f"against {v4:,.0f} B for DeepSeek-V4-Flash in vLLM's formats ({fs.v4_formats} entries): "
             f"{v4 / ours:.1f}x less. Of that, {fs.layout:.1f}x is the layout (shared copies, V4.1's ratios) and "
             f"{fs.formats:.1f}x the number format: in V4-Flash's formats V4.1's layout would grow "
             f"{fs.same_layout_v4_formats:,.0f} B per token. Both figures are counted here from the two layouts; "
             "the release does not quote them." if ours else
             "This config stores no compressed entries, so nothing in its cache grows per token.")
    short = (f"{ours:,.0f} B ({fs.v41_formats}) vs {v4:,.0f} B (V4-Flash, {fs.v4_formats}): {v4 / ours:.1f}x, "
             f"{fs.formats:.1f}x of it format."
             if ours else "no compressed entries stored.")
    out.append(Point("cache", "Cache per token", short, cache,
                     {"bytes_per_token": ours, "v4_flash_bytes_per_token": v4, "stored_copies": stored,
                      "readers": readers, "layout_factor": fs.layout, "format_factor": fs.formats}))

    targets = list(cfg.dspark_target_layer_ids)
    draft = (f"A small drafter reads the states of layers {_and([num(i) for i in targets])} and proposes several "
             "tokens at once. The main model checks them in one pass and keeps them up to the first its acceptance "
             "rule refuses: under greedy decoding a draft must match its own top token; under sampling it is kept "
             "with probability min(1, p/q), p and q being the main model's and the drafter's probabilities for it. "
             "The same pass adds one token of the main model's own, so every pass writes at least one. "
             + block_sentence(cfg.dspark_block_size))
    out.append(Point("dspark", "DSpark", f"a drafter proposes up to {cfg.dspark_block_size - 1} tokens, "
                     "checked in one pass.", draft,
                     {"block": cfg.dspark_block_size, "targets": targets}))

    v = cfg.vision_config
    engram = _and([num(i) for i in cfg.engram_layer_ids]) if cfg.engram_layer_ids else None
    parts = ([f"a vision encoder ({v.num_hidden_layers} layers) and projector that turn an image into up to "
              f"{v.max_image_tokens:,} tokens"] if v is not None else []) + (
        [f"Engram, a memory read by looking up hashed runs of the last few tokens, at layer"
         f"{'s' if len(cfg.engram_layer_ids) > 1 else ''} {engram}"] if engram else []) + (
        [f"single-pass mHC: each row travels as {cfg.hc_mult} residual streams, and one projection per site sets "
         "how they feed the sublayer, take its output and blend"] if cfg.hc_mult > 1 else [])
    if parts:
        also = ("The release documents more parts than CSA2 and DSpark, each separate from the cache sharing and "
                "not to be credited to it: " + "; ".join(parts) + ".")
        names = [n for n, on in (("a vision encoder", v is not None), ("Engram", bool(engram)),
                                 ("mHC", cfg.hc_mult > 1)) if on]
        out.append(Point("beyond", "Besides", ", ".join(names) + ".", also,
                         {"vision": v is not None, "engram_layers": list(cfg.engram_layer_ids),
                          "streams": cfg.hc_mult}))
    return out


# --------------------------------------------------------------------------------------------------
# The weights running here (their sizes against the release: lessons/home.py scale_rows)
# --------------------------------------------------------------------------------------------------

def knows_no_facts(cfg: V41Config, weights: str) -> str:
    """What the loaded weights can be expected to write, said next to the prompt box."""
    size = f"{cfg.num_hidden_layers} layers, hidden size {cfg.hidden_size}"
    if weights == "random":
        return f"These weights are random ({size}): every next-token score is close to noise."
    if weights == "trained":
        return (f"The model running here is tiny ({size}), trained on a small English corpus: it continues text "
                "in simple English but knows no facts, so 'The capital of Italy is' gets a guess, not 'Rome'.")
    return (f"The model running here is small ({size}) and was trained on a narrow corpus: expect it to know no "
            "facts about the world.")
