"""The guided tour: an ordered list of stops across the app's pages, each a question, where to look on that page
and what to take away.

A stop names its page by file (as app.py lists it) and the part of the page it talks about by the key of that
part's element (`spot`: Streamlit gives an element with a key the CSS class `st-key-<key>`, which the tour's
drawing outlines; a spot also outlines keys that extend it by "_...", so one stop can outline a pair of charts,
and may list fallbacks, the first found being outlined). Numbers in the texts are counted from the released config
(`stops(cfg)`), the same way the pages count them. The claims follow docs/design/architecture.md §2-3 and
docs/design/equations.md §3-7 (layer map, CSA2 modes, the hierarchical indexer, cache formats). This module knows
nothing of Streamlit: moving between pages, the URL and the outline are ui/tour.py's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from model import V41Config, layer_map

from .designs import format_split
from .shares import TOY_QUERIES, TOY_VALUES, fmt, two_value_mix
from .whats_new import cache_per_token, v4_flash_per_token

HOME = "pages/start.py"
TAKEAWAY_WORDS = 60        # a takeaway is read in one glance beside the live view


@dataclass(frozen=True)
class Stop:
    key: str             # the stop's name in the URL (?stop=...)
    page: str            # the page's file, as app.py lists it
    title: str
    question: str        # the question this stop answers
    look_at: str         # what to look at: the outlined part of the page
    spot: tuple[str, ...]  # that part's element key (or the stem of "key_..." keys); fallbacks after it
    takeaway: str        # at most TAKEAWAY_WORDS words

    @property
    def words(self) -> int:
        return len(re.findall(r"\S+", self.takeaway))


def stops(cfg: V41Config | None = None) -> list[Stop]:
    """The tour, in order; numbers counted from `cfg` (the released config by default)."""
    cfg = cfg or V41Config.preset("v4.1-flash")
    specs = layer_map(cfg)
    dec = cfg.decoder_start
    full = sum(s.role == "Full" for s in specs)
    readers = sum(1 for s in specs if s.kv_source is not None)
    cand = next((s.index for s in specs if s.candidate_source), None)
    pool = cfg.candidate_topk_blocks * cfg.candidate_block_size
    a, b = (two_value_mix(round(share * 100)) for _, share in TOY_QUERIES)
    ours, v4 = cache_per_token(cfg), v4_flash_per_token()
    fs = format_split(cfg)
    v1, v2 = (fmt(v) for v in TOY_VALUES)

    def mix(m) -> str:
        return f"{fmt(m.shares[0] * 100)}/{fmt(m.shares[1] * 100)} gives {fmt(m.result)}"

    return [
        Stop("layout", "pages/figure3.py", "The drawing",
             "How is V4.1-Flash laid out?",
             "the drawing: the encoder on the left, the decoder on the right, the red line between them",
             ("fig3_chart",),
             f"One stack of {len(specs)} layers cut in two. The left {dec}, a causal encoder, read the prompt; the red "
             f"line carries their final rows to layer {dec}, which turns them into the entries every decoder layer "
             "shares. Dark blue layers make entries, pale ones reuse them, orange ones choose again."),
        Stop("modes", "pages/csa2_modes.py", "Three modes",
             "What does a Full, a Reuse and a Reindex layer each compute?",
             "the picture of one query's path: entries made, scored, pooled, picked, then read",
             ("csa2_mech_fig",),
             "Full makes its group's compressed entries and chooses which to read; Reindex keeps those entries but "
             "chooses again; Reuse keeps both. In every mode the layer still computes its own query, its own "
             "window keys and values and its own output: what is shared is prepared data, never the answer."),
        Stop("shares", "pages/attention_shares.py", "Same entries, new shares",
             "If a Reuse layer reads the same entries, why is its output different?",
             f"the two bars mixing the stored values {v1} and {v2}",
             ("toy_bars",),
             f"Keys decide the shares, values are what gets mixed. The same stored {v1} and {v2} mixed {mix(a)}, "
             f"mixed {mix(b)}. A Reuse layer reads its source's entries with its own query, so it gives them its "
             "own shares and gets its own result."),
        Stop("recurrence", "pages/recurrence.py", "Not recurrence",
             "Is sharing entries the same as running a layer again?",
             "the strip with a Reuse layer and its source; below it, their weights compared tensor by tensor",
             ("rec_strip",),
             "No. CSA2 shares prepared data between layers, not the rule that updates the rows: every layer has "
             "weights of its own. Shared-depth recurrence would apply one block's weights again and again; a "
             "dotted x5 in the figure counts layers, it does not say they share weights."),
        Stop("cache", "pages/compare_designs.py", "Why the cache is small",
             "Why does V4.1's cache grow so much slower than V4-Flash's?",
             "the waterfall from V4-Flash to V4.1, one change at a time",
             ("cd_waterfall",),
             f"Per token of context V4.1's cache grows by {ours:,.0f} B ({fs.v41_formats}), V4-Flash's by {v4:,.0f} B "
             f"({fs.v4_formats}). Packing fewer tokens per entry costs bytes; keeping {full} stored copies for "
             f"{readers} compressed layers saves the most, and FP4 entries and smaller index keys save "
             f"{fs.formats:.1f}x more."),
        Stop("split", "pages/prefill_decode.py", "Prompt work and answer work",
             "Where does the encoder-decoder split save work?",
             "the bars of prefill and decode work for one round of an agent",
             ("pd_work",),
             "Most tokens of a long prompt climb only the encoder, while every generated token climbs both halves, "
             "so a prompt token is multiplied by fewer weights. When a round reads far more tokens than it writes, "
             "that is where the work is. These are counts of multiply-adds, not measured time."),
        Stop("inside", "pages/inspector.py", "Inside, layer by layer",
             "What does each layer do to one prompt?",
             "the chart of where one token's attention went in one layer, with the layer and token steppers",
             ("insp_attn",),
             "Pick a layer and a token: the chart splits that token's attention in that layer between its window "
             "rows and the compressed entries it selected. The tabs beside it show the experts it ran and its "
             "early guess at the next token, all from one trace of the small model running here."),
        Stop("pool", "pages/indexer_pools.py", "A pool, then the top-k",
             "How does the indexer choose what a layer reads?",
             "the strip of one query: its pool, its choices and what the pool dropped",
             ("pool_strip",),
             (f"In the release, layer {cand}'s broad scan scores every visible entry and keeps the best "
              f"{cfg.candidate_topk_blocks:,} blocks of {cfg.candidate_block_size} ({pool:,} positions) as a pool; "
              if cand is not None else "A broad scan keeps the best blocks of entries as a pool; ")
             + f"Reindex layers pick their top {cfg.index_topk} only inside it, so an entry the pool dropped can "
               "never be chosen by them. The page runs the same search at the small model's sizes."),
        Stop("far", HOME, "The road to a far fact",
             "Do the compressed entries really bring back something far away?",
             "the picture of where the answer token's attention went",
             ("home_hero",),
             "Yes, on weights trained to use them: decoder layers put most of their attention on the one entry that "
             "holds a fact far outside their window, and switching the global branch off loses the answer. The "
             "text model has the same machinery but leaves it unused: its far recall is close to a guess."),
    ]


def index_of(tour: list[Stop], key: str | None) -> int | None:
    """The place of the stop named `key` (None: not a stop)."""
    return next((i for i, s in enumerate(tour) if s.key == key), None)


def neighbours(tour: list[Stop], i: int) -> tuple[Stop | None, Stop | None]:
    """(the stop before, the stop after) the i-th: None before the first and after the last."""
    return (tour[i - 1] if i > 0 else None), (tour[i + 1] if i + 1 < len(tour) else None)
