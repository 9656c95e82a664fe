"""Look-back heads: which heads find the earlier copy of a repeated span, and does the model then copy it?

Follows docs/design/equations.md §3 (a query's shares go to its window rows, the compressed entries its layer
selected and a per-head sink, and add up to one) and §4 (an entry of a layer with compress ratio r packs tokens
[e*r, (e+1)*r)). The probe is the classic one for copying circuits: a span of held-out prose is said, some
other text follows (`gap` tokens), and the span is said again. From a trace of the running model
(model/inference/trace.py `Shares`, `Trace.logits`) this reads, per layer and head:
- `prev`: the mean window share on the position just before the query (a previous-token head puts most of its
  weight there; a head spreading evenly over a W-row window gives 1/W);
- `induction`: at the second copy, the mean share on the token that followed the first copy's match: its
  window slot, plus, in a ratio-1 layer, the selected one-token entry that holds it (the only road to it when
  the match lies beyond the window). A ratio-2 layer's entries pack two tokens, so they are left out here
  and shown apart in the head's pattern (`HeadPattern.packed_first`);
- `sink`: the mean share on the sink;
and, from the final logits, whether the model's top guess at each token of the second copy is the token that
followed it the first time (the copy), against the same positions of the first copy (no earlier copy to read).
`python -m lab.probes.heads` prints the same table over four passages; the page reads one.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

import torch

from model.inference import batched_traces

LEAD = 40                 # prose before the first copy, so that the first copy is not the row's start
SPAN_MIN, SPAN_MAX, SPAN_DEFAULT = 4, 24, 12
GAP_MAX = 400             # tokens between the two copies the page offers
FIRST, STRIDE = 1000, 3000   # passage k of the held-out tokens starts at FIRST + k * STRIDE

INTRO = (
    "Read a phrase once, and a language model can often finish it the second time it comes up. Studies of small "
    "transformers (Elhage et al. 2021; Olsson et al. 2022) found the usual machinery: a head that looks at the "
    "token just before its own (a previous-token head), and a head in a later layer that, at a repeated token, "
    "looks at whatever came right after that token's earlier appearance and passes it on (an induction head). "
    "This page tests the loaded weights for both: a span of held-out text is said twice with other text in "
    "between, and every head's attention is read at the second saying."
)

REACH = (
    "In this architecture a head reads raw rows only inside its sliding window: the newest {window} positions, "
    "its own included. Anything older reaches it only through the compressed entries its layer selected (and "
    "only in the layers that have a compressed branch), or by being carried forward layer to layer. Widen the "
    "gap past the window and see which heads still find the first copy."
)

SWEEP_GAPS = (0, 8, 16, 20, 24, 32, 48, 100, 200, 400)

SWEEP = (
    "The same span, the same passage, the gap swept from nothing to {gap_max} tokens: for each gap, the strongest "
    "head's share on the token to copy, and how much of the span the model continued the second time. The dotted "
    "line marks the window's edge: to its right the token to copy is no longer one of a query's raw rows."
)

LOOK_NOT_COPY = (
    "Looking is not copying. The table checks the final prediction: at each token of the second copy, is the "
    "model's top guess the token that followed it the first time? The first copy, at the same positions, is "
    "the baseline: there the model has nothing earlier to copy from. The chart follows the same token up the "
    "layers with the logit lens (each layer's streams sent through the model's own final norm and output head): "
    "where the two lines part is where the earlier copy starts to count."
)


@dataclass(frozen=True)
class CopyLayout:
    """Where the two copies sit in a row: `lead` tokens, the span, `gap` tokens, the span again."""

    lead: int
    span: int
    gap: int

    @property
    def first_start(self) -> int:
        return self.lead

    @property
    def second_start(self) -> int:
        return self.lead + self.span + self.gap

    @property
    def distance(self) -> int:
        """How far back a token of the second copy finds its match in the first."""
        return self.span + self.gap

    @property
    def length(self) -> int:
        return self.lead + 2 * self.span + self.gap

    @property
    def first_rows(self) -> range:
        """The first copy's rows that have a next token of the span to predict (all but its last)."""
        return range(self.first_start, self.first_start + self.span - 1)

    @property
    def query_rows(self) -> range:
        """The second copy's rows that have a next token of the span to predict (all but its last)."""
        return range(self.second_start, self.second_start + self.span - 1)


def passage_count(n_tokens: int, span: int = SPAN_MAX, gap: int = GAP_MAX, lead: int = LEAD) -> int:
    """How many passages `passage_parts` can cut from `n_tokens` held-out tokens at this span and gap."""
    need = max(200 + gap, 100 + lead, span)
    return max(0, (n_tokens - FIRST - need) // STRIDE + 1)


def passage_parts(tokens, k: int, span: int, gap: int, lead: int = LEAD) -> tuple[list[int], list[int], list[int]]:
    """Passage k of the held-out token stream: (lead, span, filler) ids, from three places of the passage (the
    span at its start, the lead 100 tokens on, the filler 200 tokens on), so that the filler does not repeat
    the span."""
    s = FIRST + STRIDE * k
    if k < 0 or s + max(200 + gap, 100 + lead, span) > len(tokens):
        raise ValueError(f"{len(tokens)} held-out tokens are too few for passage {k} at gap {gap}")
    ids = [int(t) for t in tokens[s:s + max(200 + gap, 100 + lead, span)]]
    return ids[100:100 + lead], ids[:span], ids[200:200 + gap]


def copy_row(lead_ids: list[int], span_ids: list[int], filler_ids: list[int]) -> tuple[list[int], CopyLayout]:
    """One row: lead, span, filler, span again; with its layout."""
    if len(span_ids) < 2:
        raise ValueError("the span needs at least two tokens (one to match, one to copy)")
    row = list(lead_ids) + list(span_ids) + list(filler_ids) + list(span_ids)
    return row, CopyLayout(len(lead_ids), len(span_ids), len(filler_ids))


def copy_rows_of_prose(tokens: torch.Tensor, n: int, span: int, gap: int, lead: int = LEAD) -> torch.Tensor:
    """n rows (passages 0..n-1) as one batch: lead, span, `gap` other tokens, the span again."""
    if passage_count(len(tokens), span, gap, lead) < n:
        raise ValueError(f"{len(tokens)} held-out tokens are too few for {n} rows at gap {gap}")
    return torch.tensor([copy_row(*passage_parts(tokens, k, span, gap, lead))[0] for k in range(n)])


def head_scores(window: torch.Tensor, sink: torch.Tensor, second_start: int, distance: int,
                span: int, entries: torch.Tensor | None = None, entry_ids: torch.Tensor | None = None
                ) -> tuple[list[float], list[float], list[float]]:
    """window [B, S, H, W] shares (slot j = position t-(W-1)+j), sink [B, S, H]. The second copy
    starts at `second_start`, `distance` positions after the first; returns per head (prev,
    induction, sink). Where the match lies outside the window, induction is the share on the selected
    one-token entry that holds the token after it (`entries` [B, S, H, k] with `entry_ids` [B, S, k]
    of a ratio-1 layer), and 0 for a layer that has none. Inside the window a ratio-1 layer sees that token twice,
    in its window slot and as its own entry (an entry is visible from the row it is made on), so its induction
    share is the two added."""
    w = window.shape[-1]
    prev = window[:, 1:, :, w - 2].mean((0, 1))
    rows = slice(second_start, second_start + span - 1)
    # at t the earlier match of token t is t - distance; the token after it is t - distance + 1
    ind = torch.zeros(window.shape[2])
    if distance <= w:
        ind = ind + window[:, rows, :, w - distance].mean((0, 1))
    if entries is not None and entry_ids is not None:
        after = torch.arange(second_start, second_start + span - 1) - distance + 1
        hit = entry_ids[:, rows] == after.view(1, -1, 1)                       # [B, R, k]
        ind = ind + (entries[:, rows] * hit.unsqueeze(2)).sum(-1).mean((0, 1))
    return prev.tolist(), ind.tolist(), sink.mean((0, 1)).tolist()


@dataclass
class HeadRow:
    layer: int
    head: int
    role: str
    ratio: int                # 0: window only
    prev: float
    induction: float
    sink: float
    even: float               # the share of one key under an even spread over what the layer's second-copy rows read

    @property
    def window_only(self) -> bool:
        return self.ratio == 0


@dataclass
class CopyCheck:
    """The model's top guess at each token of each copy (all but the last), against the span's next token."""

    expected: list[int]       # span[1:]
    first_top: list[int]
    second_top: list[int]
    first_p: list[float]      # probability of the expected token
    second_p: list[float]

    @staticmethod
    def _rate(top: list[int], want: list[int]) -> float:
        return sum(a == b for a, b in zip(top, want)) / max(1, len(want))

    @property
    def first_rate(self) -> float:
        return self._rate(self.first_top, self.expected)

    @property
    def second_rate(self) -> float:
        return self._rate(self.second_top, self.expected)


@dataclass
class LookBack:
    layout: CopyLayout
    window: int
    heads: list[HeadRow]
    copy: CopyCheck | None

    @property
    def layers(self) -> list[int]:
        return sorted({h.layer for h in self.heads})

    @property
    def n_heads(self) -> int:
        return 1 + max(h.head for h in self.heads)

    def best(self, key: str = "induction") -> HeadRow:
        return max(self.heads, key=lambda h: getattr(h, key))

    def grid(self, key: str) -> list[list[float]]:
        """[layer][head] of `key` ('prev', 'induction' or 'sink'), layers in `self.layers` order."""
        out = {layer: [0.0] * self.n_heads for layer in self.layers}
        for h in self.heads:
            out[h.layer][h.head] = getattr(h, key)
        return [out[layer] for layer in self.layers]

    @property
    def inside_window(self) -> bool:
        """The token to copy (distance - 1 back) is still one of the query's window rows."""
        return self.layout.distance - 1 <= self.window - 1


def look_back(trace, layout: CopyLayout) -> LookBack:
    """Per layer and head: prev, induction, sink shares (averaged over the trace's rows); and the copy check
    when the trace has every position's logits."""
    heads: list[HeadRow] = []
    window = 0
    for li, rec in enumerate(trace.layers):
        sh = rec.shares
        if sh is None:
            continue
        window = sh.window.shape[-1]
        one_token = sh.ratio == 1   # an entry is one token: the token after the match is an entry of its own
        prev, ind, sink = head_scores(sh.window.float(), sh.sink.float(), layout.second_start, layout.distance,
                                      layout.span, sh.entries.float() if one_token else None,
                                      sh.entry_ids if one_token else None)
        even = 1 / keys_read(sh, layout)
        for h in range(len(prev)):
            heads.append(HeadRow(li, h, rec.spec.role, sh.ratio, prev[h], ind[h], sink[h], even))
    if not heads:
        raise ValueError("the trace holds no attention shares")
    return LookBack(layout, window, heads, copy_check(trace, layout))


def keys_read(sh, layout: CopyLayout) -> float:
    """How many keys a second-copy row of this layer reads, on average: its window rows (fewer near the row's
    start) and the entries it selected."""
    w = sh.window.shape[-1]
    rows = torch.tensor(list(layout.query_rows))
    window_rows = torch.clamp(rows + 1, max=w).float().mean()
    entries = (sh.entry_ids[:, rows] >= 0).sum(-1).float().mean() if sh.entry_ids.numel() else torch.tensor(0.0)
    return float(window_rows + entries)


def copy_check(trace, layout: CopyLayout, b: int = 0) -> CopyCheck | None:
    logits = trace.logits
    if logits is None or logits.shape[1] < layout.length:
        return None
    ids = trace.ids[b]
    first = layout.first_rows
    expected = [int(ids[t + 1]) for t in first]
    probs = {t: torch.softmax(logits[b, t].float(), -1) for t in list(first) + list(layout.query_rows)}
    return CopyCheck(expected=expected,
                     first_top=[int(probs[t].argmax()) for t in first],
                     second_top=[int(probs[t].argmax()) for t in layout.query_rows],
                     first_p=[float(probs[t][e]) for t, e in zip(first, expected)],
                     second_p=[float(probs[t][e]) for t, e in zip(layout.query_rows, expected)])


@dataclass
class LensRise:
    """Mean log p(the span's next token) under each layer's logit lens, at the first copy and at the second: where on
    the way up the earlier copy starts to count in the prediction (the last layer's lens is the model's output)."""

    layers: list[int]
    first: list[float]
    second: list[float]

    @property
    def rise(self) -> list[float]:
        return [b - a for a, b in zip(self.first, self.second)]

    def biggest_step(self) -> tuple[int, float]:
        """The layer whose lens gains most over the layer below it in (second - first), and that gain."""
        rise = self.rise
        steps = [r - (rise[i - 1] if i else 0.0) for i, r in enumerate(rise)]
        i = max(range(len(steps)), key=steps.__getitem__)
        return self.layers[i], steps[i]


def lens_rise(trace, layout: CopyLayout, b: int = 0) -> LensRise | None:
    """From a trace with a lazy logit lens (model/inference/trace.py `LogitLens.log_probs`); None without one."""
    ids = trace.ids[b]
    first = list(layout.first_rows)
    target = [int(ids[t + 1]) for t in first]
    n = len(first)
    layers, a, c = [], [], []
    for li, rec in enumerate(trace.layers):
        if rec.lens is None:
            continue
        lp = rec.lens.log_probs(first + list(layout.query_rows), target + target, b)   # both copies, one read
        if lp is None:
            return None
        layers.append(li)
        a.append(sum(lp[:n]) / n)
        c.append(sum(lp[n:]) / n)
    return LensRise(layers, a, c) if layers else None


@dataclass
class HeadPattern:
    """One head at the second copy: where each of its queries looks in the first copy, and where else."""

    layer: int
    head: int
    on_first: list[list[float]]    # [query k][first-copy position j]: window slot + one-token entry
    after_match: list[float]       # [query k]: the share on the token after the match (the diagonal j = k + 1)
    packed_first: list[float]      # [query k]: multi-token entries that pack part of the first copy
    elsewhere: list[float]         # [query k]: everything else but the sink (the recent rows, other entries)
    sink: list[float]


def head_pattern(trace, layout: CopyLayout, layer: int, head: int, b: int = 0) -> HeadPattern:
    sh = trace.layers[layer].shares
    if sh is None:
        raise ValueError(f"layer {layer} has no attention shares")
    w = sh.window.shape[-1]
    first = list(range(layout.first_start, layout.first_start + layout.span))
    on_first, after, packed, elsewhere, sink = [], [], [], [], []
    for k, t in enumerate(layout.query_rows):
        win = sh.window[b, t, head].float()
        ent = sh.entries[b, t, head].float()
        eid = sh.entry_ids[b, t]
        row = []
        for p in first:
            j = p - (t - (w - 1))
            v = float(win[j]) if 0 <= j < w else 0.0
            if sh.ratio == 1:
                v += float(ent[eid == p].sum())
            row.append(v)
        pk = 0.0
        if sh.ratio > 1:
            lo, hi = first[0] // sh.ratio, first[-1] // sh.ratio
            pk = float(ent[(eid >= lo) & (eid <= hi)].sum())
        s = float(sh.sink[b, t, head])
        on_first.append(row)
        after.append(row[k + 1])
        packed.append(pk)
        sink.append(s)
        elsewhere.append(max(0.0, 1.0 - sum(row) - pk - s))
    return HeadPattern(layer, head, on_first, after, packed, elsewhere, sink)


@dataclass
class ReachPoint:
    gap: int
    back: int                 # how far back the token to copy lies (distance - 1)
    share: float              # the strongest head's induction share
    layer: int
    head: int
    even: float               # that head's even spread
    copied: float             # share of the span continued the second time
    first: float              # ... and the first time


def reach_sweep(model, tokens, passage: int, span_ids: list[int], gaps=SWEEP_GAPS, lead: int = LEAD,
                progress: Callable[[float, str], None] | None = None, rows_per_forward: int = 4) -> list[ReachPoint]:
    """The span said twice at each gap (lead and filler from passage `passage` of `tokens`), traced in batches of
    `rows_per_forward` rows (model/inference/batch.py, exact); one ReachPoint per gap."""
    rows = []
    for g in gaps:
        lead_ids, _, filler = passage_parts(tokens, passage, len(span_ids), g, lead)
        rows.append(copy_row(lead_ids, span_ids, filler))
    out: list[ReachPoint] = []
    for i in range(0, len(rows), rows_per_forward):
        chunk = rows[i:i + rows_per_forward]
        if progress:
            progress(i / len(rows), f"tracing gaps {', '.join(str(lay.gap) for _, lay in chunk)}")
        for tr, (_, lay) in zip(batched_traces(model, [r for r, _ in chunk], lens=False), chunk):
            lb = look_back(tr, lay)
            best = lb.best()
            out.append(ReachPoint(lay.gap, lay.distance - 1, best.induction, best.layer, best.head, best.even,
                                  lb.copy.second_rate if lb.copy else float("nan"),
                                  lb.copy.first_rate if lb.copy else float("nan")))
    return out


LOOKS = 3.0   # a head "looks back" when its induction share is at least this many times its even spread
LOOKS_RULE = (f"(A head counts as looking back when its share on the token to copy is at least {LOOKS:g} times what "
              "an even spread would give it.)")


def explain(lb: LookBack, num: Callable[[int], int] = lambda i: i) -> list[str]:
    """The page's reading of the numbers, one sentence each; `num` numbers the layers as the reader counts."""
    lay, best = lb.layout, lb.best()
    out = []
    if lb.inside_window:
        where = f"inside the {lb.window}-row window, so every layer can read it as a raw row"
    else:
        where = (f"beyond the {lb.window}-row window: no raw row reaches it, only a selected entry or what the "
                 "layers below carried forward")
    out.append(f"Each token of the second copy has its match {lay.distance} tokens back and the token to copy "
               f"{lay.distance - 1} back, {where}.")
    if best.induction >= LOOKS * best.even:
        out.append(f"The strongest look-back head is layer {num(best.layer)}, head {best.head} ({best.role}): at the "
                   f"second copy it gives {best.induction:.2f} of its attention to the token that followed the "
                   f"match. Spread evenly over the {1 / best.even:.0f} rows and entries it reads there, it would "
                   f"give {best.even:.3f}. {LOOKS_RULE}")
    else:
        out.append(f"No head looks back at the first copy: the largest share on the token to copy is "
                   f"{best.induction:.3f} (layer {num(best.layer)}, head {best.head}), against {best.even:.3f} for "
                   f"that head spread evenly over what it reads. {LOOKS_RULE}")
    pv = lb.best("prev")
    out.append(f"The strongest previous-token head is layer {num(pv.layer)}, head {pv.head}: "
               f"{pv.prev:.2f} of its attention on the position just before its own, averaged over the row.")
    if lb.copy is not None:
        c = lb.copy
        n = len(c.expected)
        out.append(f"The model's top guess continues the span at {round(c.second_rate * n)} of {n} positions the "
                   f"second time, {round(c.first_rate * n)} of {n} the first time.")
    return out


# ---- the page's other texts ------------------------------------------------------------------------------------------
MISSING_TEXT = "The shipped held-out text is missing or too short for this page."
PASSAGE_HELP = "Also supplies the text before the first copy and between the copies."
EVEN_HELP = "one key's share if that head spread its attention evenly over the window rows and entries it reads"
INDUCTION_COUNTS = ("Induction counts a head's window slot on the token to copy and, in a layer whose entries hold one "
                    "token each, the selected entry that holds it. Entries that pack two tokens are left out of this "
                    "map; the pattern below shows them apart.")
DIAGONAL = ("An induction head lights the diagonal just right of the main one: at the k-th token of the second copy it "
            "looks at token k + 1 of the first, the one to say next.")
SWEEP_WAITS = "Press the button to trace this span at every gap (a few seconds on a CPU)."
NO_LOGITS = "This trace has no final logits for every position."


def gap_help(window: int) -> str:
    return f"The window holds {window} rows: with span + gap <= {window} the token to copy is still inside it."


def too_short(n_tokens: int) -> str:
    """The reader's text gives fewer tokens than a span needs."""
    return f"Your text gives {n_tokens} token{'' if n_tokens == 1 else 's'}; the span needs at least {SPAN_MIN}."


def row_caption(layout: CopyLayout, gap: int) -> str:
    """What the traced row is made of, above the span itself."""
    return (f"The row: {LEAD} tokens of prose, the span ({layout.span} tokens), {gap} other tokens, the span again: "
            f"{layout.length} tokens. The span:")


def mean_share_line(after_match: list[float], even: float) -> str:
    """One head's mean share on the token after the match, against an even spread over what its layer reads."""
    return (f"Mean share on the token after the match: {statistics.fmean(after_match):.3f} "
            f"(spread evenly over what this layer reads: {even:.3f}).")


def sweep_line(points: list[ReachPoint], window: int) -> str | None:
    """The strongest head's share inside the window against beyond it; None unless the sweep reached both."""
    inside = [p for p in points if p.back <= window - 1]
    beyond = [p for p in points if p.back > window - 1]
    if not (inside and beyond):
        return None
    return (f"Inside the window the strongest head gives up to {max(p.share for p in inside):.2f} to the "
            f"token to copy; beyond it, up to {max(p.share for p in beyond):.2f}.")


def lens_line(rise: LensRise, num: Callable[[int], int] = lambda i: i) -> str:
    """How much surer the output is of the span's next token the second time, and where the biggest step is."""
    at, step = rise.biggest_step()
    return (f"At the output the second time gives the right next token {rise.rise[-1]:+.2f} nats of log-probability "
            f"against the first time; the biggest step is at layer {num(at)} ({step:+.2f}).")
