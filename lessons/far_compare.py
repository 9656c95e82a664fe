"""The far-fact lesson on the shipped sets of weights side by side: the recall checkpoints (one trained on the answers
alone, one with losses aimed at the fact's entry) beside the text model, which has the same machinery and has not
learned the recall task.

One call computes the whole comparison (`compare`): the one held-out far story both read (the rule of
lessons/far_story.far_sample, taken at the wider of the two windows so the fact is past both), each model's
reading of it (lessons/far_fact.analyse: attention on the fact's entries per layer, pool, top-k, the answer
with the global branch on and off), and the plain sentences a page shows beside each picture. A page draws
the result and computes nothing; this module knows nothing of Streamlit or Plotly.
"""

from __future__ import annotations

from dataclasses import dataclass

from lessons.far_fact import (
    CHANCE,
    FarFact,
    LayerFact,
    analyse,
    far_recall_of,
    near_recall_of,
    near_tie,
    no_better_than_guess,
)
from lessons.far_story import far_sample
from lessons.how_trained import clause, training_clause
from model.shipped import SHIPPED

FOCUSES = ("shares", "selected", "pools", "ablation")


@dataclass
class SideInput:
    """One set of weights to compare: a short name, its kind, the loaded model, its training record."""

    name: str                    # e.g. "weights/recall"
    kind: str                    # a shipped kind: "text" | "unaided" | "recall" (model/shipped.py)
    model: object
    record: dict | None = None   # its training.json (far recall as measured), None when it has none


@dataclass
class Side:
    name: str
    kind: str
    title: str                   # "Recall checkpoint, plain training": a reader's name, no file path
    learned: str                 # one line: what these weights learned
    ff: FarFact

    @property
    def decoder(self) -> list[LayerFact]:
        return [lf for lf in self.ff.layers if lf.stack == "decoder"]

    @property
    def best_decoder(self) -> LayerFact | None:
        """The decoder layer that gives the fact's entries the most attention (mean over heads)."""
        return max(self.decoder, key=lambda lf: lf.share, default=None)

    def line(self, focus: str, num=lambda i: i) -> str:
        """One sentence for the page's lesson (`focus`, one of FOCUSES); `num` maps a 0-based layer."""
        ff = self.ff
        best = self.best_decoder
        if focus == "selected":
            sel = [lf for lf in ff.layers if lf.selected is not None]
            hit = [lf for lf in sel if lf.selected]
            ranked = next((lf for lf in ff.layers if lf.rank is not None and lf.stack == "decoder"), None)
            rank = ("" if ranked is None else
                    f"; rank {ranked.rank} of {ranked.ranked} in layer {num(ranked.layer)}'s index scores")
            return f"Top-k holds the fact's entry in {len(hit)} of {len(sel)} compressed layers{rank}."
        if focus == "pools":
            pooled = next((lf for lf in ff.layers if lf.pool is not None), None)
            reindex = [lf for lf in ff.layers if lf.role == "Reindex" and lf.selected is not None]
            picked = sum(bool(lf.selected) for lf in reindex)
            pool = ("no candidate pool here" if pooled is None else
                    f"the fact's entry {'in' if pooled.pool else 'not in'} the pool "
                    f"({pooled.pool_size} of {pooled.visible} entries)")
            return pool[0].upper() + pool[1:] + f"; {picked} of {len(reindex)} Reindex layers pick it."
        if focus == "ablation":
            said = answer(self)
            return said[0].upper() + said[1:] + "."
        if best is None:
            return "No decoder layer has a compressed branch."
        if best.share < 0.01:
            return "Every decoder layer gives the fact's entry under 1% of its attention."
        return (f"Up to {_pct(best.share)} of a decoder layer's attention goes to the fact's entry (layer "
                f"{num(best.layer)}).")


@dataclass
class FarPair:
    sides: list[Side]            # the recall checkpoints first (plain training, then guided), then the text model
    distance: int                # tokens from the fact to the answer
    windows: list[int]           # each side's window
    answer: str | None

    def story_line(self) -> str:
        ws = " and ".join(str(w) for w in sorted(set(self.windows)))
        every = "both" if len(self.sides) == 2 else "every set"
        past = "both windows" if len(set(self.windows)) == 2 and len(self.sides) == 2 else "every window"
        return (f"One story for {every}: the fact is {self.distance} tokens before the answer, past {past} "
                f"({ws} tokens).")

    def decoder_best(self, kind: str) -> float:
        """The largest decoder-layer share on the fact's entries for the side of `kind` (0 when absent)."""
        side = next((s for s in self.sides if s.kind == kind), None)
        best = None if side is None else side.best_decoder
        return 0.0 if best is None else best.share


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%" if x >= 0.01 or x == 0 else "under 1%"


def _word(token: str) -> str:
    return f"'{token.strip() or token}'"


def _answer(a) -> str:
    """"'orange' (right, 97% on the right colour)": the top token, and how sure among the colours. A right colour
    under twice a guess's share (`near_tie`) is the top of a flat spread, so it is named a guess, not right."""
    if a.right and a.colour_share is not None and near_tie(a.colour_share):
        return (f"{_word(a.token)} (a guess: the colours are nearly tied, {_pct(a.colour_share)} on the right one "
                f"against {_pct(CHANCE)} by chance)")
    verdict = "" if a.right is None else "right" if a.right else "wrong"
    share = "" if a.colour_share is None else f"{', ' if verdict else ''}{_pct(a.colour_share)} on the right colour"
    return f"{_word(a.token)}" + (f" ({verdict}{share})" if verdict or share else "")


def learned_line(kind: str, record: dict | None, window: int) -> str:
    """What a shipped set learned and how it was trained, in two short sentences: its measured far recall against a
    guess and, for a recall checkpoint, the losses its record names (lessons.how_trained)."""
    far = far_recall_of(record)
    recall = "" if far is None else f" Far recall {100 * far:.0f}% (a guess: {100 * CHANCE:.0f}%)"
    if kind == "text":
        near = near_recall_of(record)
        flat = far is not None and no_better_than_guess(far) and bool(near) and all(
            no_better_than_guess(x) for x in near)
        verdict = (f", nearer facts {', '.join(f'{100 * x:.0f}%' for x in near)}: it has not learned the recall task "
                   "at any distance" if flat else "")
        return f"English from a small corpus (window {window}).{recall}{verdict}."
    return (f"Recall drills and copies (window {window}).{recall + '.' if recall else ''} "
            + training_clause(record, "far", short=True))


def brief_line(kind: str, record: dict | None) -> str:
    """`learned_line` in the fewest words, for a column under a page's first screen: far recall against a guess and
    how the set was trained (lessons.how_trained, read from its record)."""
    far = far_recall_of(record)
    recall = "" if far is None else f"Far recall {100 * far:.0f}% (a guess {100 * CHANCE:.0f}%). "
    return recall + (clause(record) if kind != "text" else "English text; the recall task not learned.")


def answer(side: Side) -> str:
    """The answer with the global branch on and off, a near-tie said as one (lessons.far_fact.near_tie)."""
    on, off = side.ff.answers

    def said(a) -> str:
        word = f"'{a.token.strip() or a.token}'"
        if a.right and a.colour_share is not None and near_tie(a.colour_share):
            return f"{word} (a near-tie: {100 * a.colour_share:.0f}%, a guess {100 * CHANCE:.0f}%)"
        return word + ("" if a.right is None else " (right)" if a.right else " (wrong)")

    return f"answer {said(on)}; global branch off: {said(off)}"


TITLES = {s.kind: s.title for s in SHIPPED}


def compare(inputs: list[SideInput]) -> FarPair:
    """Both readings of the one far story: the rule's story at the widest window of the inputs, traced on each
    model (one exact forward, and one with the global branch off)."""
    window = max(i.model.cfg.sliding_window for i in inputs)
    sides = []
    distance, answer = 0, None
    for i in inputs:
        sample = far_sample(i.model.tokenizer, window)
        ff = analyse(i.model, sample.story, sample.tokens)
        distance, answer = sample.tokens.distance, sample.story.answer
        sides.append(Side(name=i.name, kind=i.kind, title=TITLES.get(i.kind, i.kind),
                          learned=learned_line(i.kind, i.record, i.model.cfg.sliding_window), ff=ff))
    return FarPair(sides=sides, distance=distance, windows=[i.model.cfg.sliding_window for i in inputs],
                   answer=answer)
