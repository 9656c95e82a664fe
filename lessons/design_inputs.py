"""The calculator's inputs: what each one is and why it moves the bytes (`knob_tooltip`), what to tell a reader whose
typed number is refused (`range_note`, `combination_note`) or cut by the browser (`digits_note`), what carries over
when the reader changes design (`switch_design`), and the sizes a design sets itself instead of taking them as inputs
(`own_values`), said in one line.

Reads the designs of lessons/designs.py; pure text and `Knobs`, no rendering.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

from .cache_calculator import KIND_LABELS, KNOB_HELP, LIMITS, CalcError, Design, Knobs, calculate
from .designs import DESIGNS, build, defaults
from .units import counted

SHARED_KNOBS = ("context", "batch", "window")   # inputs that mean the same thing in every design that takes them
CALC_DESIGN = "v4.1-flash"    # the calculator opens on the model the app explains
CALC_CONTEXT = 131_072        # ... at a long working context (128K tokens), the same for every design


# why each input moves the bytes (the tooltips: what an input is, then why it matters); replay, rollback and the
# prefill mode are left out: their descriptions (lessons.cache_calculator.KNOB_HELP) already say what they are for
KNOB_WHY = {
    "context": "the stores that grow with the prompt (entries, index keys, plain K/V rows) grow in step with it; "
               "a sliding window does not",
    "batch": "every per-sequence store is held once per sequence, so the cache scales with it; the weights do not",
    "layers": "each layer that keeps its own copy adds one more copy of every stored entry",
    "numbers": "an entry's width: its bytes are numbers x bits / 8",
    "bits": "the storage format: at 4 bits a number takes a quarter of its 16-bit size (block scales, where the "
            "format has them, are rows of their own)",
    "group": "g layers that share one stored copy divide those layers' cache by g",
    "ratio": "one entry per r tokens: the stores that grow with the prompt divide by r",
    "window": "a fixed number of recent rows per layer: its bytes do not grow with the context",
}


def knob_tooltip(name: str) -> str:
    """An input's tooltip: what it is, why it changes the bytes, and (for a number) the values this page takes."""
    what = KNOB_HELP[name]
    text = what[0].upper() + what[1:] + (f". Why it matters: {KNOB_WHY[name]}." if name in KNOB_WHY else ".")
    if name in LIMITS:
        lo, hi = LIMITS[name]
        text += f" A whole number from {lo:,} to {hi:,}, typed as digits."
    return text


DIGITS_CUT = ("context",)   # inputs whose sensible values run to many digits: a single digit there is a cut 1e9


def digits_note(name: str, label: str, was: int, now: int) -> str | None:
    """What to tell a reader whose typed number fell to a single digit (a browser's number box reads '1e9' or
    '2.5e6' as its first digits, 1 and 2, and the app only sees that); None when the change does not look like that.
    Only for inputs whose sensible values are large (the context): a batch of 4 or a rollback of 0 is an ordinary
    choice."""
    if name not in DIGITS_CUT or now >= 10 or was < 100:
        return None
    lo, hi = LIMITS[name]
    return (f"{label} is now {now:,} (it was {was:,}). This box reads digits only and stops at the first other "
            f"character, so 1e9 or 2.5e6 arrive as 1 or 2. To mean a larger number, type it in full, from {lo:,} to "
            f"{hi:,}.")


def range_note(name: str, label: str, typed: int, kept: int) -> str | None:
    """What to tell a reader who typed a number outside an input's range (the input keeps `kept`, its last good
    value); None when `typed` is in range."""
    lo, hi = LIMITS[name]
    if lo <= typed <= hi:
        return None
    return (f"{label}: {typed:,} is outside what this page computes ({lo:,} to {hi:,}), so it was not applied; the "
            f"figures below still use {kept:,}.")


def combination_note(key: str, knobs: Knobs, label: str, typed: int, kept: int) -> str | None:
    """What to tell a reader whose typed number is in its own range but leaves the design uncomputable with the
    other inputs (a sharing group larger than the layers, a cache past a 64-bit count); None when it computes.
    The page then keeps `kept`, so the figures and the link still describe a design that exists."""
    try:
        calculate(build(key, knobs), knobs)
    except CalcError as e:
        return f"{label}: with {typed:,}, {e}, so it was not applied; the figures below still use {kept:,}."
    return None


def page_defaults(key: str) -> Knobs:
    """A design's inputs as the calculator first shows them: its own defaults at the page's context."""
    return dataclasses.replace(defaults(key), context=CALC_CONTEXT)


def switch_design(old: str, new: str, k: Knobs) -> tuple[Knobs, str]:
    """The calculator's inputs after the reader changes design from `old` to `new`: the new design's defaults,
    except the reader's context (a change of design never moves it) and the other shared inputs the reader set
    (values other than the old design's defaults) that the new design takes too; and a sentence saying which
    were kept."""
    was, base = page_defaults(old), page_defaults(new)
    both = set(build(old, was).knobs_used) & set(build(new, base).knobs_used)
    kept = {n: getattr(k, n) for n in SHARED_KNOBS if n in both and (n == "context" or getattr(k, n) != getattr(was, n))
            and LIMITS[n][0] <= getattr(k, n) <= LIMITS[n][1]}
    out = dataclasses.replace(base, **kept)
    label = DESIGNS[new][0]
    said = {"context": f"context ({counted(out.context, 'token')})", "batch": f"batch ({out.batch:,})",
            "window": f"window ({counted(out.window, 'row')})"}
    if kept:
        text = f"Now {label}: kept your {' and '.join(said[n] for n in kept)}; the other inputs are its defaults."
    else:
        text = f"Now {label}, with its default inputs."
    if "context" not in kept and out.context != k.context:
        text += (f" Context: its default, {counted(out.context, 'token')} ({k.context:,} was the previous design's "
                 "default, not a value you typed).")
    return out, text


_SIZED = ("window", "latents", "kv", "index_keys", "recurrent_state")   # the stores an entry size speaks of


def own_values(d: Design) -> str:
    """The sizes a design sets itself, for the calculator's inputs it does not take: the page shows this line
    instead of those inputs, so that no input shows a value the design ignores ("" when it takes them all)."""
    used = d.knobs_used
    main = [s for s in d.stores if s.hbm and s.kind in _SIZED]
    growing = [s for s in main if s.growth == "tokens" and s.cap is None]
    said: list[str] = []
    if "layers" not in used:
        extra = sum(s.copies for s in d.stores if s.kind == "drafter")
        said.append(counted(d.n_layers, "layer") + (f" (+ {counted(extra, 'drafter layer')})" if extra else ""))
    if "numbers" not in used and main:
        widths: dict[str, int] = {}
        for s in main:
            widths.setdefault(KIND_LABELS[s.kind], sum(p.numbers for p in s.parts if p.kind != "block_scales"))
        common = Counter(widths.values()).most_common(1)[0][0]    # ties: the first store's width
        other = [f"{kind} {n:,}" for kind, n in widths.items() if n != common]
        said.append(counted(common, "number") + " per entry" + (f" ({', '.join(other)})" if other else ""))
    if "ratio" not in used and growing:
        rs = sorted({s.ratio for s in growing})
        said.append(f"{' or '.join(map(str, rs))} token{'' if rs == [1] else 's'} per entry")
    if "group" not in used and growing:
        shared = [s for s in growing if s.kind in ("latents", "kv")]
        copies, readers = sum(s.copies for s in shared), sum(max(s.read_by, s.copies) for s in shared)
        kinds = " and ".join(dict.fromkeys(KIND_LABELS[s.kind] for s in shared))
        said.append(f"{counted(copies, 'stored copy', 'stored copies')} of the {kinds}, read by "
                    f"{counted(readers, 'layer')}" if readers > copies else "every layer stores its own entries")
    if "window" not in used:
        said.append("no window (every entry is kept)")
    if "bits" not in used and main:
        bits = sorted({p.bits for s in main for p in s.parts if p.kind != "block_scales"})
        said.append(f"{' and '.join(map(str, bits))} bits per number")
    if "mode" not in used:
        said.append("no bounded replay, prefill mode or rollback slack (DeepSeek-V4.1's engine)")
    return f"This design sets the rest itself: {'; '.join(said)}." if said else ""


_SAID = {"context": "context", "batch": "batch", "layers": "layers", "numbers": "numbers per entry",
         "bits": "bits per number", "group": "layers sharing one copy", "ratio": "tokens per entry",
         "window": "window", "replay": "bounded-replay rows", "rollback": "rollback slack", "mode": "prefill mode"}


def what_moved(before: tuple[str, Knobs, bool], after: tuple[str, Knobs, bool]) -> str:
    """The inputs that differ between two states of the calculator (design, inputs, windows kept), said as
    "the context (131,072 to 262,144)"; "" when nothing differs."""
    (d0, k0, w0), (d1, k1, w1) = before, after
    said = []
    if d0 != d1:
        said.append(f"the design ({DESIGNS[d0][0]} to {DESIGNS[d1][0]})")
    for f in dataclasses.fields(Knobs):
        a, b = getattr(k0, f.name), getattr(k1, f.name)
        if a != b and (d0 != d1 and f.name == "context" or d0 == d1):
            said.append(f"the {_SAID[f.name]} ({a:,} to {b:,})" if isinstance(a, int) else
                        f"the {_SAID[f.name]} ({a} to {b})")
    if w0 != w1:
        said.append("the persist-windows switch")
    return ", ".join(said)

