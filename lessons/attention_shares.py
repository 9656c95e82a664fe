"""Attention shares: the two-value toy, and the same reading of real shares from a trace.

Follows docs/design/equations.md §3 (softmax over window rows, selected compressed entries and a
per-head sink) and §5 (a Reuse layer reads its source's selection with its own query). The toy
is the first seed's example in our words: the stored values stay put, the shares move, the
result moves with them.
"""

from __future__ import annotations

from dataclasses import dataclass

from .units import counted

# Below this share (the most either layer gives one entry) the entries are idle on these weights, and a share
# difference of 0 says nothing about the Reuse layer's own query.
IDLE_SHARE = 1e-3

TOY_VALUES = (10.0, 30.0)
TOY_QUERIES = (("query A", 0.80), ("query B", 0.10))  # share given to the first value

TOY_INTRO = (
    "Attention keeps a set of stored values and, for each new query, hands out shares that add up to "
    "one. The result is the stored values weighted by those shares. Below, two values are stored: 10 and "
    "30. Move the sliders to decide how much of its attention each query gives to the first value; the "
    "rest goes to the second."
)
TOY_POINT = (
    "Neither stored value changed between the two queries; only the shares did. That is how a layer that "
    "reuses someone else's prepared entries can still compute something new: it brings its own query."
)

CHECK_QUESTION = ("A Reuse layer reads exactly the entries its source picked, at the same positions. "
                  "How can its output differ from the source's?")
def check_answer(results: list[float] | None = None) -> str:
    """The answer to the check question, quoting what the toy's queries read now (`results`, one per query in
    TOY_QUERIES; the defaults' results when None), so it follows the sliders."""
    if results is None:
        results = [two_value_mix(round(share * 100)).result for _, share in TOY_QUERIES]
    vals = " and ".join(fmt(v) for v in TOY_VALUES)
    got = ", ".join(f"{fmt(r)} for {name}" for (name, _), r in zip(TOY_QUERIES, results))
    same = len({round(r, 6) for r in results}) == 1
    toy = (f"as the {vals} above gave {got}" if not same else
           f"as the {vals} above would if the sliders gave the queries different shares (now both read "
           f"{fmt(results[0])})")
    return (
        "Because it asks its own question. Its query comes from its own input and its own weights, so the "
        f"same entries get different shares, {toy}. "
        "On top of that it reads its own window of recent rows, has its own sink, and runs its own MoE "
        "update. Only the prepared entries and the list of picked positions are shared."
    )


CHECK_FOLLOWUP = (
    "Would this make the model better? The layout only promises less work. Whether the trade is worth it "
    "is an experiment: compare answer quality, time and memory at equal budgets, and switch one piece off "
    "at a time (the Ablation lab does that on our tiny model). This app does not re-run the report's "
    "benchmarks."
)


@dataclass
class MixResult:
    values: tuple[float, ...]
    shares: tuple[float, ...]
    result: float
    terms: list[str]        # "0.80 x 10 = 8.0" per value

    def derivation(self) -> str:
        return " + ".join(self.terms) + f" = {fmt(self.result)}"


def fmt(x: float) -> str:
    """A toy number without trailing noise: 14.0 -> '14', 8.5 -> '8.5'."""
    r = round(x, 6)
    return str(int(r)) if float(r).is_integer() else f"{r:g}"


def mix(values, shares) -> MixResult:
    """Weighted sum of stored values; the shares must be non-negative and add up to one."""
    values, shares = tuple(float(v) for v in values), tuple(float(s) for s in shares)
    if len(values) != len(shares) or not values:
        raise ValueError("need one share per stored value")
    if any(s < 0 for s in shares) or abs(sum(shares) - 1.0) > 1e-6:
        raise ValueError(f"shares must be non-negative and add up to 1, got {shares}")
    terms = [f"{s:.2f} x {fmt(v)} = {fmt(s * v)}" for v, s in zip(values, shares)]
    return MixResult(values, shares, sum(v * s for v, s in zip(values, shares)), terms)


def two_value_mix(first_share_pct: int, values=TOY_VALUES) -> MixResult:
    """The slider form: an integer percentage for the first value, the rest to the second."""
    if not 0 <= first_share_pct <= 100:
        raise ValueError("a share is between 0 and 100 percent")
    s = first_share_pct / 100
    return mix(values, (s, 1 - s))


# --------------------------------------------------------------------------------------------------
# Live shares from a trace
# --------------------------------------------------------------------------------------------------
@dataclass
class ShareView:
    """Shares of one query position in one layer, every head, split by what was read."""

    layer: int
    position: int
    labels: list[str]          # one per column
    kinds: list[str]           # "window" | "entry" | "sink"
    shares: list[list[float]]  # [head][column]
    totals: list[dict]         # per head: {"window": x, "entries": y, "sink": z}
    entry_ids: list[int]


def entry_span(entry: int, ratio: int) -> tuple[int, int]:
    """Token positions [start, end) packed into compressed entry `entry` at this ratio."""
    return entry * ratio, (entry + 1) * ratio


def share_view(trace, layer: int, position: int, tokens: list[str]) -> ShareView:
    """The shares a query at `position` gave, per head, in `layer` of the trace.

    Window slot j of row t holds position t-(W-1)+j; slots before position 0 are dropped. Entry
    columns follow the selection order and are labelled by the tokens they pack."""
    rec = trace.layers[layer]
    sh = rec.shares
    row = rec.row(position)
    if sh is None or row is None:
        raise ValueError(f"layer {layer} has no attention record for position {position}")
    w = sh.window.shape[-1]
    win = sh.window[0, row]                  # [H, W]
    first = position - (w - 1)
    keep = [j for j in range(w) if first + j >= 0]
    labels = [f"{first + j}: {tokens[first + j]}" for j in keep]
    kinds = ["window"] * len(keep)
    ids = [int(e) for e in sh.entry_ids[0, row].tolist()]
    cols = [i for i, e in enumerate(ids) if e >= 0]
    for i in cols:
        a, b = entry_span(ids[i], sh.ratio)
        labels.append(f"E{ids[i]} [{a}-{b - 1}]: " + "".join(tokens[a:b]))
        kinds.append("entry")
    labels.append("sink")
    kinds.append("sink")
    heads = win.shape[0]
    shares, totals = [], []
    for h in range(heads):
        wv = [float(win[h, j]) for j in keep]
        ev = [float(sh.entries[0, row, h, i]) for i in cols]
        sk = float(sh.sink[0, row, h])
        shares.append(wv + ev + [sk])
        totals.append({"window": float(win[h].sum()), "entries": sum(ev), "sink": sk})
    return ShareView(layer, position, labels, kinds, shares, totals, [ids[i] for i in cols])


@dataclass
class ReuseComparison:
    """A Reuse layer beside the layer whose selection it keeps, for one query position and head."""

    layer: int
    source: int
    position: int
    head: int
    entry_ids: list[int]
    source_ids: list[int]
    spans: list[str]
    source_shares: list[float]
    layer_shares: list[float]
    same_entries: bool

    @property
    def largest_gap(self) -> float:
        return max((abs(a - b) for a, b in zip(self.source_shares, self.layer_shares)), default=0.0)

    @property
    def entries_idle(self) -> bool:
        """Neither layer gives these entries any weight to speak of (see IDLE_SHARE)."""
        return max(self.source_shares + self.layer_shares, default=0.0) < IDLE_SHARE

    def sentence(self, source: str, layer: str) -> str:
        """What the page says under the bars (`source`, `layer`: the two layers' numbers as the reader counts)."""
        same = "the same entries in the same order (checked)" if self.same_entries else "DIFFERENT entries"
        if self.entries_idle:
            gap = (f"Neither layer gives them any weight on these weights (under {IDLE_SHARE} of this head's "
                   "attention: both read only their windows here), so their shares cannot differ; try an encoder "
                   "Reuse layer, or a recall checkpoint (tiny weights trained on fact lookup, offered in the "
                   "sidebar's weights choice).")
        else:
            gap = f"The largest difference in the share given to one entry is {self.largest_gap:.3f}."
        return f"Layers {source} and {layer} read {same}: {len(self.entry_ids)} entries. {gap}"


def reuse_comparison(trace, layer: int, position: int, head: int, tokens: list[str]) -> ReuseComparison:
    rec = trace.layers[layer]
    spec = rec.spec
    if spec.role != "Reuse":
        raise ValueError(f"layer {layer} is {spec.role}, not Reuse")
    src = trace.layers[spec.index_source]
    r_row, s_row = rec.row(position), src.row(position)
    if r_row is None or s_row is None:
        raise ValueError(f"position {position} was not processed by layers {spec.index_source} and {layer}")
    ids = [int(e) for e in rec.shares.entry_ids[0, r_row].tolist()]
    sids = [int(e) for e in src.shares.entry_ids[0, s_row].tolist()]
    cols = [i for i, e in enumerate(ids) if e >= 0]
    spans = []
    for i in cols:
        a, b = entry_span(ids[i], rec.shares.ratio)
        spans.append(f"E{ids[i]}: " + "".join(tokens[a:b]))
    where = {e: i for i, e in enumerate(sids) if e >= 0}  # match by entry, not by slot order
    return ReuseComparison(
        layer=layer, source=spec.index_source, position=position, head=head, entry_ids=[ids[i] for i in cols],
        source_ids=[e for e in sids if e >= 0], spans=spans,
        source_shares=[float(src.shares.entries[0, s_row, head, where[ids[i]]]) if ids[i] in where else 0.0
                       for i in cols],
        layer_shares=[float(rec.shares.entries[0, r_row, head, i]) for i in cols],
        same_entries=ids == sids)


# ---- the page's other texts ------------------------------------------------------------------------------------------
THREE_PLACES = ("A query's shares go to three places: the raw rows of its window, the compressed entries it selected, "
                "and a learned sink that absorbs attention the head does not want to spend.")
MAP_CAPTION = "Each row of the map is a head; the red lines separate window, entries and sink. Every row adds up to 1. "
NO_REUSE = "This model has no Reuse layers."


def query_caption(pos: int, token: str, layer: int, role: str, view: ShareView) -> str:
    """The query the map shows and what its layer read (`token`: as the page shows it, quoted; `layer` as the reader
    numbers it)."""
    return (f"Query at position {pos}: {token}. Layer {layer} is {role}; it read "
            f"{counted(sum(k == 'window' for k in view.kinds), 'window row')} and "
            f"{counted(len(view.entry_ids), 'compressed entry', 'compressed entries')}.")


def no_entry_yet(pos: int, ratio: int) -> str:
    """No compressed entry is complete at `pos` (entries of `ratio` tokens)."""
    return (f"At position {pos} no compressed entry is visible yet (the first entry completes at position "
            f"{ratio - 1}); move the query position to the right.")
