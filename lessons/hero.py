"""The home page's far-fact picture in words: one line above the pictures (which model, which story), and under
each shipped recall checkpoint's picture what its decoder layers read, what it answered, its held-out far recall
and how it was trained; then the text model on the same story.

Everything comes from the one side-by-side reading (lessons/far_compare.compare) and the sets' training records
(lessons/how_trained.py for the losses). Plain text; it knows nothing of Streamlit or of where records live.
"""

from __future__ import annotations

from lessons.far_compare import FarPair, Side, answer
from lessons.far_fact import CHANCE, far_recall_of
from lessons.how_trained import clause, read_guidance


def title(pair: FarPair, layers: int) -> str:
    """The pictures' title: the model is the tiny one, and the fact lies past every window it has."""
    windows = sorted({w for s, w in zip(pair.sides, pair.windows) if s.kind != "text"})
    w = " or ".join(str(x) for x in windows)
    return f"A fact {pair.distance} tokens back; a {layers}-layer tiny model, {w}-token windows"


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def reads(side: Side, num=lambda i: i) -> str:
    """Where the decoder's attention went: every decoder layer's range when all of them hold most of it on the
    fact's entry, else the best layer."""
    dec = side.decoder
    if not dec:
        return "No decoder layer reads compressed entries"
    best = side.best_decoder
    if all(lf.share >= 0.5 for lf in dec):
        lo, hi = min(lf.share for lf in dec), max(lf.share for lf in dec)
        span = _pct(lo) if round(100 * lo) == round(100 * hi) else f"{100 * lo:.0f}-{_pct(hi)}"
        return f"Layers {num(dec[0].layer)}-{num(dec[-1].layer)}: {span} of attention on the fact's entry"
    return f"Layer {num(best.layer)}: {_pct(best.share)} of attention on the fact's entry"


def side_caption(side: Side, record: dict | None, num=lambda i: i) -> str:
    """Under one recall checkpoint's picture: what it read and answered, its held-out far recall, how trained."""
    far = far_recall_of(record)
    held = "" if far is None else f" Far recall {_pct(far)}."
    return f"{reads(side, num)}; {answer(side)}.{held} {clause(record)}"


def text_caption(side: Side, record: dict | None, window: int) -> str:
    """The text model on the same story, for the expander under the pictures."""
    best = side.best_decoder
    top = 0.0 if best is None else best.share
    far = far_recall_of(record)
    held = "" if far is None else f"; over the held-out far stories it recalls {_pct(far)}, a guess {_pct(CHANCE)}"
    return (f"The text model on the same story: at most {100 * top:.1f}% of any decoder layer's attention on the "
            f"fact's entry, and {answer(side)}{held}. It was trained mostly on ordinary text with {window}-token "
            "windows and has not learned the recall task.")


def guided(record: dict | None) -> bool:
    """Whether a record's training aimed a loss at the answer's source (the picture then needs its clause)."""
    g = read_guidance(record)
    return bool(g and g.guided)
