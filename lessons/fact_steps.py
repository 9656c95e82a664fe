"""Step to the fact: what each compressed layer of an inspector run does with a recall prompt's fact, for one query
token. The fact's entry at the layer's ratio, the share of the layer's attention it got (mean over heads), and
whether the layer's selection holds it: picked (in the top-k), kept in the candidate pool but not picked, dropped by
the pool, passed over by a top-k with no pool, or not made yet (the query cannot see it).

Read off an inspector Run (lessons/inspector.py) and a PromptFact (lessons/fact_in_prompt.py); nothing is recomputed.
A page steps a layer and draws one row; `reach` lists every layer once per run and query (memoised on the run,
which is read-only). Also the same question for one query row of the pools page (`in_pool_row`), the head a Reuse
comparison shows and the fact named in its bars (`busiest_head`, `mark_fact`), and the title that states a far-fact
panel's result (`folded_title`). It does not know which weights made the run, nor anything of Streamlit.
"""

from __future__ import annotations

from dataclasses import dataclass

from lessons.fact_in_prompt import PromptFact
from lessons.inspector import AttentionView, Run, SelectionView, _row, attention_view, selection_view

PICKED, POOLED, DROPPED, PASSED, UNSEEN = ("picked", "in the pool, not picked", "dropped by the pool",
                                          "not picked", "not made yet")
REACHES = 0.10       # a layer "reaches" the fact when its entry gets at least this share of the layer's attention


@dataclass(frozen=True)
class FactAtLayer:
    layer: int
    stack: str                   # "encoder" | "decoder"
    ratio: int
    entry: int                   # the entry that packs the fact's colour word at this ratio
    span: tuple[int, int]        # the tokens [start, end) it packs
    share: float                 # share of the layer's attention on it (0 when not read)
    status: str                  # one of PICKED, POOLED, DROPPED, PASSED, UNSEEN

    @property
    def reaches(self) -> bool:
        return self.share >= REACHES


def fact_at(layer: int, stack: str, attention: AttentionView | None, selection: SelectionView | None,
            fact: PromptFact) -> FactAtLayer | None:
    """The fact's entry at one layer for one query (None for a layer with no compressed branch or no record)."""
    if attention is None or selection is None or attention.ratio <= 0:
        return None
    r = attention.ratio
    e = fact.entry(r)
    share = sum(s for i, s in zip(attention.entry_ids, attention.entry_share) if i == e)
    if e >= selection.visible:
        status = UNSEEN
    elif e in selection.selected:
        status = PICKED
    elif selection.pool is not None:
        status = POOLED if e in selection.pool else DROPPED
    else:
        status = PASSED
    return FactAtLayer(layer, stack, r, e, (e * r, (e + 1) * r), float(share), status)


def at_layer(run: Run, layer: int, pos: int, fact: PromptFact, head: int | None = None) -> FactAtLayer | None:
    rec = run.layer(layer)
    if rec.spec.compress_ratio == 0:
        return None
    row = _row(rec, pos)
    if row is None:
        return None
    return fact_at(layer, rec.spec.stack, attention_view(rec, pos, row, head), selection_view(run, layer, pos), fact)


def reach(run: Run, pos: int, fact: PromptFact) -> list[FactAtLayer]:
    """Every compressed layer with a record at `pos`, in order (mean over heads); memoised on the run."""
    key = ("fact_reach", pos, tuple(fact.positions))
    if key not in run.memo:
        rows = [at_layer(run, layer, pos, fact) for layer in range(run.n_layers)]
        run.memo[key] = [r for r in rows if r is not None]
    return run.memo[key]


def first_reaching(rows: list[FactAtLayer], stack: str = "decoder") -> FactAtLayer | None:
    """The first layer of `stack` whose attention reaches the fact's entry (REACHES or more)."""
    return next((r for r in rows if r.stack == stack and r.reaches), None)


def strongest(rows: list[FactAtLayer]) -> FactAtLayer | None:
    return max(rows, key=lambda r: r.share, default=None)


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%" if x >= 0.01 or x == 0 else "under 1%"


def row_line(r: FactAtLayer | None) -> str:
    """One line under a side's chart: the fact's entry at this layer and what the layer did with it."""
    if r is None:
        return "No compressed branch here: the fact, far past the window, cannot be read at this layer."
    return (f"The fact's entry E{r.entry} (tokens {r.span[0]}-{r.span[1] - 1}): {r.status}, "
            f"{_pct(r.share)} of this layer's attention.")


def reach_line(name: str, rows: list[FactAtLayer], distance: int, num=lambda i: i) -> str:
    """Where a side first reaches the fact in its decoder, or the most any of its layers gives it."""
    first = first_reaching(rows)
    if first is not None:
        return (f"{name}: decoder layer {num(first.layer)} is the first to reach the fact {distance} tokens back "
                f"({_pct(first.share)} of its attention on E{first.entry}).")
    best = strongest(rows)
    most = "no layer reads it" if best is None or best.share == 0 else (
        f"at most {_pct(best.share)} of any layer's attention (layer {num(best.layer)})")
    return f"{name}: no decoder layer reaches the fact {distance} tokens back; {most}."


def in_pool_row(entry: int, pool: list[int], picked: list[int], dropped: list[int], visible: int) -> str:
    """What one query row of the pools page did with the fact's entry: picked inside the pool, kept in the pool but
    not picked, dropped (the exhaustive search would have picked it, the pool left it out), left out of the pool,
    or not made yet."""
    if entry >= visible:
        return UNSEEN
    if entry in picked:
        return PICKED
    if entry in dropped:
        return "dropped: the pool left out a pick"
    return POOLED if entry in pool else "outside the pool"


def folded_title(name: str, best_share: float | None, far_recall: float | None, chance: float) -> str:
    """The title a page's own far-fact panel folds under, stating its result: whether the weights' decoder reaches
    the held-out far story's fact (best_share: the most a decoder layer gives the fact's entry; None: not read) and
    their measured far recall against a guess."""
    if best_share is None:
        verdict = "the far story, read on these weights"
    elif best_share >= REACHES:
        verdict = f"the fact is reached ({_pct(best_share)} of a decoder layer's attention)"
    else:
        verdict = "the fact is not reached"
    recall = "" if far_recall is None else f" ({100 * far_recall:.0f}% far recall, a guess {100 * chance:.0f}%)"
    return f"{name}: {verdict}{recall}"


def busiest_head(trace, layer: int, pos: int) -> int:
    """The head of `layer` that gives its selected entries the most attention at `pos` (0 without a record): the
    head a Reuse comparison shows, so a layer that reads its entries is not shown through an idle head."""
    rec = trace.layers[layer]
    row = None if rec.shares is None else rec.row(pos)
    if row is None or rec.shares.entries.numel() == 0:
        return 0
    valid = (rec.shares.entry_ids[0, row] >= 0).unsqueeze(0)          # [1, k] over the heads' [heads, k]
    return int((rec.shares.entries[0, row] * valid).sum(-1).argmax())


def mark_fact(spans: list[str], entry_ids: list[int], fact_entry: int | None) -> list[str]:
    """Bar labels with the fact's entry named: 'E27: pink' becomes 'E27: pink (the fact)'."""
    return [s + (" (the fact)" if e == fact_entry else "") for s, e in zip(spans, entry_ids)]
