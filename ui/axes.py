"""The axis rules every figure follows, decided here once (plain dicts for Plotly layouts; no Streamlit).

- A probability, share, recall or acceptance axis runs over its whole range, 0 to 1 (ticks in percent) or 0 to
  100 for values already in percent, so a 10% bar never looks full (`share_axis`). A little headroom, at most
  15%, may leave room for a label outside a bar; no tick is drawn past 100%.
- Its ticks are percent (d3 format), never Plotly's SI prefixes (a share of 2e-7 would read "200n"); a share that
  rounds to 0 is said in words by the page, not drawn as pico units.
- Ticks on such an axis are distinct: a fixed step of 20 points (`share_axis`), never "1%, 1%, 2%, 2%".
- A log axis labels 1, 3, 10, 30, 100, ... only (`log_axis`), never Plotly's minor digits ("9 10 2 3").
- Bars are never stacked on a log axis, where a segment's length means nothing (`bar_mode` turns a stack into
  groups there).
- An axis a reader reads token by token shows the tokens' text, not their positions (`token_axis`).

`problems(fig)` checks a built figure against these rules; the tests run it on every figure the pages draw.
What it does not know: which numbers a figure plots, beyond what its axes and traces say.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

HEADROOM = 0.15              # the most a share axis may run past its top, for labels outside bars
SHARE_STEP = 0.2             # one tick every 20 points: distinct at any size
TOKEN_TICKS = 48             # more tokens than this: every n-th token is labelled
SHARE_WORDS = ("share", "probability", "recall", "accepted", "acceptance", "observed", "predicted", "(%)",
               "fraction", "rate")


def share_axis(title: str | None = None, percent_values: bool = False, headroom: float = 0.0,
               decimals: int = 0) -> dict:
    """A probability / share / recall axis over its whole range: 0 to 1 with percent ticks, or 0 to 100 for
    values already in percent; `headroom` (at most 15%) leaves room for labels outside bars."""
    full = 100.0 if percent_values else 1.0
    top = full * (1 + min(max(headroom, 0.0), HEADROOM))
    ax = dict(range=[0, top], tick0=0, dtick=full * SHARE_STEP, exponentformat="none")
    if percent_values:
        ax.update(tickformat=f".{decimals}f", ticksuffix="%")
    else:
        ax.update(tickformat=f".{decimals}%")
    if title is not None:
        ax["title"] = dict(text=title)
    return ax


def is_share_title(title: str | None) -> bool:
    """A title that names a probability, share or recall (what `share_axis` is for)."""
    return any(w in (title or "").lower() for w in SHARE_WORDS)


def axis_for(title: str | None, **share) -> dict:
    """The axis a builder draws for `title`: a share axis when the title names one, else just the title."""
    return share_axis(title, **share) if is_share_title(title) else dict(title=dict(text=title or ""))


def log_ticks(lo: float, hi: float) -> list[float]:
    """1, 3, 10, 30, ... covering [lo, hi] (positive values)."""
    lo, hi = max(lo, 1e-12), max(hi, lo)
    out, p = [], math.floor(math.log10(lo))
    while True:
        for m in (1, 3):
            v = m * 10.0 ** p
            if v > hi * 1.0001:
                return out or [lo]
            if v >= lo * 0.9999:
                out.append(v)
        p += 1


def _tick_text(v: float) -> str:
    return f"{v:,.0f}" if v >= 1 else f"{v:g}"


def si_text(v: float) -> str:
    """1e15 -> '1P', 3e9 -> '3G': SI prefixes from kilo up (never below milli), for counts and rates."""
    for exp, prefix in ((18, "E"), (15, "P"), (12, "T"), (9, "G"), (6, "M"), (3, "k")):
        if v >= 10 ** exp:
            return f"{v / 10 ** exp:g}{prefix}"
    return _tick_text(v)


def log_axis(values: Sequence[float], title: str | None = None, text=_tick_text) -> dict:
    """A log axis labelled 1, 3, 10, 30, ... over the positive `values` only (powers of ten only past four
    decades, so the labels do not crowd)."""
    pos = [float(v) for v in values if v is not None and v > 0 and math.isfinite(v)] or [1.0]
    lo, hi = min(pos), max(pos)
    ticks = log_ticks(10 ** math.floor(math.log10(lo)), hi)
    if math.log10(hi / lo) > 4:
        ticks = [v for v in ticks if math.isclose(math.log10(v), round(math.log10(v)))]
    ax = dict(type="log", tickmode="array", tickvals=ticks, ticktext=[text(v) for v in ticks])
    if title is not None:
        ax["title"] = dict(text=title)
    return ax


def bar_mode(stacked: bool, log: bool) -> str:
    """'stack' only on a linear axis: on a log axis a stack's segments have no readable length, so side by side."""
    return "stack" if stacked and not log else "group"


def token_axis(tokens: Sequence[str], positions: Sequence[int] | None = None, title: str | None = None,
               show=lambda t: t) -> dict:
    """Ticks that read as the tokens (`show` makes one displayable), at their positions; past `TOKEN_TICKS`
    tokens every n-th is labelled, with its position."""
    pos = list(range(len(tokens))) if positions is None else list(positions)
    every = max(1, math.ceil(len(pos) / TOKEN_TICKS))
    kept = pos[::every]
    text = [show(tokens[p]) if every == 1 else f"{p}: {show(tokens[p])}" for p in kept]
    ax = dict(tickmode="array", tickvals=kept, ticktext=text, tickangle=-60 if kept else 0)
    if title is not None:
        ax["title"] = dict(text=title)
    return ax


# --------------------------------------------------------------------------------------------------
# Checking a built figure
# --------------------------------------------------------------------------------------------------

def _get(obj, key, default=None):
    if obj is None:
        return default
    if isinstance(obj, dict):
        return obj.get(key, default)
    try:
        v = obj[key]
    except (KeyError, TypeError, ValueError):
        return default
    return default if v is None else v


def _title(ax) -> str:
    t = _get(ax, "title")
    return str(_get(t, "text", "") if not isinstance(t, str) else t or "")


def _axes(layout) -> dict:
    keys = layout.keys() if isinstance(layout, dict) else [k for k in layout.to_plotly_json()]
    return {k: layout[k] for k in keys if k.startswith(("xaxis", "yaxis"))}


def is_share_axis(ax) -> bool:
    """An axis that shows a probability, share or recall: by its tick format, suffix or title."""
    fmt, suffix = str(_get(ax, "tickformat", "") or ""), str(_get(ax, "ticksuffix", "") or "")
    return fmt.endswith("%") or suffix == "%" or is_share_title(_title(ax))


def problems(fig) -> list[str]:
    """What in a built figure (a plotly Figure or its dict) breaks the rules above; empty when nothing does."""
    spec = fig if isinstance(fig, dict) else fig.to_plotly_json()
    layout, data = spec.get("layout", {}) or {}, spec.get("data", []) or []
    title = _title(layout) or "(untitled)"
    axes = _axes(layout)
    out = []
    for key, ax in axes.items():
        if _get(ax, "visible") is False or _get(ax, "overlaying"):
            continue
        name = f"{title}: {key} '{_title(ax)}'"
        if _get(ax, "type") == "log":
            if _get(ax, "tickmode") != "array" and _get(ax, "dtick") not in (1, "1"):
                out.append(f"{name}: a log axis needs readable ticks (1, 3, 10, ...), not Plotly's minor digits")
            continue
        if _get(ax, "type") == "category" or not is_share_axis(ax):
            continue
        rng = _get(ax, "range")
        fmt, suffix = str(_get(ax, "tickformat", "") or ""), str(_get(ax, "ticksuffix", "") or "")
        full = 100.0 if suffix == "%" else 1.0
        if not rng or rng[0] != 0 or not full <= rng[1] <= full * (1 + HEADROOM) + 1e-9:
            out.append(f"{name}: a share axis must run from 0 to {full:g} (got {rng})")
        if not (fmt.endswith("%") or suffix == "%"):
            out.append(f"{name}: a share axis needs percent ticks (no SI prefixes such as µ or n)")
        dtick = _get(ax, "dtick")
        if fmt.endswith("%") and dtick is None and _get(ax, "tickmode") != "array":
            out.append(f"{name}: a share axis needs a fixed tick step so its ticks are distinct")
    if layout.get("barmode") in ("stack", "relative"):
        for tr in data:
            if tr.get("type") != "bar":
                continue
            horizontal = tr.get("orientation") == "h"
            ref = tr.get("xaxis" if horizontal else "yaxis") or ("x" if horizontal else "y")
            key = ("xaxis" if horizontal else "yaxis") + ref[1:]
            if _get(axes.get(key), "type") == "log":
                out.append(f"{title}: stacked bars on a log axis ({key})")
                break
    return out
