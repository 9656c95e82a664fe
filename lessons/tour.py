"""The guided tour: an ordered list of stops across the app's pages, each a question and a short card, then a
self-check whose questions link back to the stops that teach them, and where to go deeper.

A stop names its page by file (as app.py lists it), the part of the page it talks about by element key (`spot`:
Streamlit gives an element with a key the CSS class `st-key-<key>`, which the tour's drawing outlines; a spot also
outlines keys that extend it by "_...", so one stop can outline a pair of charts; every key listed is outlined,
the first one found is scrolled to), and the other parts of the page it needs (`keep`: the page folds the rest
away while the stop is open, see ui.tour.shows). A stop on the Figure 3 page opens the walkthrough at one of its
story steps (`step`, a key of lessons.figure3.steps), so the tour and the walkthrough tell one story: the step's
text on the page, the card beside it adding what the step leaves out.

Numbers in the texts are counted from the released config (`stops(cfg)`) and layer numbers are given in the
reader's numbering (`num` maps a 0-based layer to it) and named as the release's. The claims follow
docs/design/architecture.md §2-3 and docs/design/equations.md §3-12. This module knows nothing of Streamlit:
moving between pages, the URL, folding and the outline are ui/tour.py's.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from model import V41Config, layer_map

from .format_split import format_split
from .whats_new import cache_per_token, v4_flash_per_token

HOME = "pages/home.py"
FIGURE3 = "pages/figure3.py"
CARD_WORDS = 60            # the whole card (counter, title, question, text, Back/Next) is read in one glance
CARD_CHROME = 7            # the words around a card's own text: "Tour 3/15:" and "Back" / "Next" (ui.tour)
CHECK = "check"            # the last stop's key: the self-check and where to go deeper

# The far-fact stop's text, in one place, within CARD_WORDS: two pictures, one per shipped recall checkpoint, each
# captioned with how it was trained (read from its record, lessons/how_trained.py); the card says the difference.
FAR_FACT = ("Two tiny recall checkpoints, 2-token windows, one story with the fact far back. The first learned "
            "from the answers alone; the second had losses aimed at the fact's entry: it shows the road can carry a "
            "fact, not that training finds it.")


@dataclass(frozen=True)
class Stop:
    key: str             # the stop's name in the URL (?stop=...)
    page: str            # the page's file, as app.py lists it
    title: str
    question: str        # the question this stop answers
    text: str            # the card's text: what to do with the outlined part, and what to take away
    spot: tuple[str, ...]      # the outlined part's element keys (or stems of "key_..." keys)
    step: str | None = None    # the Figure 3 story step this stop opens (lessons.figure3.steps' keys)
    keep: tuple[str, ...] = ()  # parts of the page the stop needs besides its spot (names the page asks about)

    @property
    def words(self) -> int:
        """Words of the card as drawn: its counter and buttons, title, question and text."""
        return CARD_CHROME + sum(len(re.findall(r"\S+", t)) for t in (self.title, self.question, self.text))


@dataclass(frozen=True)
class Question:
    """One self-check question: the learner answers it before opening the app's answer."""

    ask: str
    answer: str
    stop: str            # the key of the stop that teaches it


# where to go deeper after the tour: (page file, title as the navigation shows it, what it adds)
DEEPER = (
    ("pages/cache_calculator.py", "Cache calculator", "every byte of the cache, for any context"),
    ("pages/where_time_goes.py", "Where the time goes", "FLOPs and bytes on real chips"),
    ("pages/dspark.py", "DSpark draft & verify", "drafting run live"),
    ("pages/ablation.py", "Ablation lab", "switch one part off, measure"),
)


def stops(cfg: V41Config | None = None, num: Callable[[int], int] | None = None) -> list[Stop]:
    """The tour, in order; numbers counted from `cfg` (the released config by default), layers numbered by `num`
    (the reader's numbering; 0-based when None)."""
    cfg = cfg or V41Config.preset("v4.1-flash")
    num = num or (lambda i: i)
    specs = layer_map(cfg)
    n_dec = sum(s.stack == "decoder" for s in specs)
    cand = next((s.index for s in specs if s.candidate_source), None)
    pool = cfg.candidate_topk_blocks * cfg.candidate_block_size
    ours, v4 = cache_per_token(cfg), v4_flash_per_token()
    fs = format_split(cfg)          # the format's share of the difference, read off the waterfall
    scan = (f"In the release, layer {num(cand)}'s broad scan keeps {pool:,} positions; " if cand is not None
            else "In the release, a broad scan keeps a pool; ")
    return [
        Stop("job", FIGURE3, "Read it from the bottom",
             "What is Figure 3 a picture of?",
             f"One model cut in two: the release's {len(specs) - n_dec}-layer causal encoder on the left, its "
             f"{n_dec}-layer decoder on the right, reading memory built from the encoder.",
             ("fig3_chart",), step="job"),
        Stop("notation", FIGURE3, "CSA2(r)",
             "What does CSA2(2, ...) mean?",
             "CSA2 reads a window of recent rows plus a few selected global entries. r tokens pack into one entry: "
             "r2 packs pairs, r1 does not pack.",
             ("fig3_chart",), step="why", keep=("fig3_table",)),
        Stop("modes", FIGURE3, "Three modes",
             "Why does a Reuse layer still compute?",
             "Sharing entries shares prepared data, never the answer: each layer's own query gives them new shares.",
             ("fig3_chart",), step="fresh", keep=("fig3_table",)),
        Stop("split", FIGURE3, "Two halves",
             "How does the decoder get its memory?",
             f"From the encoder's final rows: all {n_dec} decoder layers read one set of entries made from them. "
             f"Only the last {cfg.sliding_window} prompt rows are replayed through the decoder's windows (bounded "
             "replay), an approximation of the full history.",
             ("fig3_chart",), step="line"),
        Stop("pool", "pages/csa2_modes.py", "A pool, then the top-k",
             "How does a layer choose what it reads?",
             "Step through the tiny models' layers: tokens packed into entries, scored, a pool of the best blocks, "
             "the top-k, read. " + scan + f"Reindex layers pick {cfg.index_topk} inside it.",
             ("csa2_mech_step", "csa2_mech_fig")),
        Stop("cache", "pages/compare_designs.py", "The cache and its formats",
             "Why does V4.1's cache grow slower than V4-Flash's?",
             f"{ours:,.0f} B ({fs.v41_formats}) per token against {v4:,.0f} B ({fs.v4_formats}). Fewer stored "
             "copies save most; FP4 entries (4-bit numbers, shared 8-bit scales) and smaller index keys save "
             f"{fs.formats:.1f}x more.",
             ("cd_waterfall",)),
        Stop("moe", FIGURE3, "MoE",
             "Which feed-forward networks run for a row?",
             "The shared expert always; the router adds a few routed ones. Unchosen experts cost memory, not "
             "arithmetic.",
             ("fig3_chart",), step="moe"),
        Stop("engram", FIGURE3, "Engram",
             "What does Engram add?",
             "A lookup, not attention: recent token ids address learned tables, and a gate decides how much of the "
             "row found is added.",
             ("fig3_chart",), step="engram"),
        Stop("mhc", FIGURE3, "mHC",
             "What replaces the single residual path?",
             f"{cfg.hc_mult} streams per row, mixed by coefficients computed for every token.",
             ("fig3_chart",), step="mhc"),
        Stop("dspark", FIGURE3, "DSpark",
             "How can drafting speed up writing without changing it?",
             "The main model checks the drafted tokens in one pass and keeps them up to the first it refuses, so "
             "the output follows what it alone would write.",
             ("fig3_chart",), step="drafter"),
        Stop("recurrence", FIGURE3, "Not recurrence",
             "Is sharing entries the same as running a layer again?",
             "No: recurrence reapplies one block's weights; here every layer has its own, and a dotted x5 only "
             "counts repeats.",
             ("fig3_chart",), step="repeat"),
        Stop("time", "pages/prefill_decode.py", "Where the time goes",
             "Where does an agent round's work go?",
             "Reading 10,000 tokens and writing 100: most weight-multiply work is reading, which the encoder-decoder "
             "split makes cheaper. Counts of work, not measured time.",
             ("pd_work",), keep=("pd_metrics",)),
        Stop("far", HOME, "A fact far back",
             "Do compressed entries reach far back?",
             FAR_FACT,
             ("home_hero",)),
        Stop(CHECK, HOME, "Check yourself",
             "Can you answer these before opening the app's answer?",
             "Each answer links to the stop that teaches it. Then go deeper below.",
             ("tour_check",)),
    ]


def self_check(cfg: V41Config | None = None) -> list[Question]:
    """The self-check: a handful of questions from the seeds' facts, each with the stop that teaches it."""
    cfg = cfg or V41Config.preset("v4.1-flash")
    return [
        Question("Stored values 10 and 30 get shares of 10% and 90% from a Reuse layer's query. What does it read?",
                 "28: the same values mixed with new shares give a new result.", "modes"),
        Question("What does the 1 in CSA2(1, ...) say?",
                 "No packing: one global entry per token.", "notation"),
        Question("Can a Reindex layer pick an entry the pool left out?",
                 "No: it searches only inside the pool the broad scan kept.", "pool"),
        Question("Does bounded replay give exactly what processing the full history would?",
                 f"No: it replays only the last {cfg.sliding_window} prompt rows, an approximation.", "split"),
        Question("Does a dotted x5 in Figure 3 mean five layers share weights?",
                 "No: it repeats the drawn structure; each copy is a layer with its own weights.", "recurrence"),
        Question("A round reads 10,000 tokens and writes 100. Which gains more from a cheaper token?",
                 "Reading: it touches 100 times as many tokens (the time still has to be measured).", "time"),
    ]


def index_of(tour: list[Stop], key: str | None) -> int | None:
    """The place of the stop named `key` (None: not a stop)."""
    return next((i for i, s in enumerate(tour) if s.key == key), None)


def neighbours(tour: list[Stop], i: int) -> tuple[Stop | None, Stop | None]:
    """(the stop before, the stop after) the i-th: None before the first and after the last."""
    return (tour[i - 1] if i > 0 else None), (tour[i + 1] if i + 1 < len(tour) else None)
