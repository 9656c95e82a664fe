"""The calculator's inputs across designs: what carries over when the reader changes design (`switch_design`), and
the sizes a design sets itself instead of taking them as inputs (`own_values`), said in one line.

Reads the designs of lessons/designs.py; pure text and `Knobs`, no rendering.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

from .calculator import KIND_LABELS, LIMITS, Design, Knobs
from .designs import DESIGNS, build, defaults
from .units import counted

SHARED_KNOBS = ("context", "batch", "window")   # inputs that mean the same thing in every design that takes them
CALC_DESIGN = "v4.1-flash"    # the calculator opens on the model the app explains
CALC_CONTEXT = 131_072        # ... at a long working context (128K tokens), the same for every design


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

