"""Step to the fact: the views a learner steps through, on the session's weights (the text model by default) beside a
shipped recall checkpoint (plain training by default, the guided one on request: `other_kind`, which the ablation
run uses too), same prompt, the fact of a recall prompt marked in both. The inspector's layer chart (`attention_pair`:
the fact's entry outlined, what each layer did with it, a button that steps the page's layer to the first decoder
layer that reaches the fact), the pools strip (`pool_pair`: the fact's entry outlined through pool, top-k and
dropped rows) and the Reuse comparison (`reuse_pair`: the fact's entry named in the bars). Every recall side keeps
its training clause beside it.

The other side's runs are the pages' own caches of that set (the inspector's "inspector" runs, the pools page's
"pools" traces, the live trace), so a layer step reads traces already made. A prompt longer than EAGER_TOKENS runs
on the other set only when the reader asks. Numbers from lessons/fact_steps.py; the charts are ui/figures_run.py's.
"""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from lessons.attention_shares import reuse_comparison
from lessons.fact_in_prompt import PromptFact, prompt_fact
from lessons.fact_steps import (
    at_layer,
    busiest_head,
    first_reaching,
    in_pool_row,
    mark_fact,
    reach,
    reach_line,
    row_line,
)
from lessons.far_compare import TITLES, learned_line
from lessons.indexer_pools import reselect, row_detail
from lessons.inspector import MAX_PROMPT_TOKENS, Run, layer_view, run_prompt
from lessons.prompts import encode_prompt
from model.shipped import RECALL_KINDS, SHIPPED
from ui import url, weights
from ui.cache import built, cached_with_progress
from ui.far_fact import FACT
from ui.figures import grouped_bars
from ui.figures_run import attention_figure, pool_strip_figure
from ui.live import live_trace
from ui.session import Session

EAGER_TOKENS = 1024       # longer prompts run on the other set only when the reader asks: a trace costs seconds


def marked_attention_figure(view, tokens: list[str], pos: int, title: str, span: tuple[int, int] | None):
    """The inspector's attention chart with the fact's entry outlined (dashed, black) over the tokens it packs."""
    fig = go.Figure(attention_figure(view, tokens, pos, title))
    if span is not None:
        fig.add_vrect(x0=span[0] - 0.5, x1=span[1] - 0.5, fillcolor="rgba(0,0,0,0)", layer="above",
                      line=dict(color=FACT, width=2, dash="dash"), annotation_text="fact",
                      annotation_position="top left")
    # half a screen is too narrow for a label per token: positions on the axis, each token's text on hover
    fig.update_xaxes(tickmode="auto", tickvals=None, ticktext=None, nticks=8, tickangle=0, title="token position")
    fig.update_layout(height=340, margin=dict(l=10, r=10, t=40, b=70),
                      legend=dict(orientation="h", y=-0.32, yanchor="top", font=dict(size=10)))
    return fig


NONE = "none"
SHORT = {s.kind: s.short for s in SHIPPED} | {NONE: "nothing"}    # the choice's labels: one row beside "Beside it"


def other_kind(sess: Session, key: str, off: bool = False) -> str | None:
    """The set drawn beside the session's: a recall checkpoint (the reader's choice, plain training first) beside
    the text model or any other weights; the text model beside a recall checkpoint. None when none is offered, or
    when the reader chose nothing (`off`: the choice offers it; `beside=none` in the link)."""
    own = weights.kind_of(sess)
    kinds = (["text"] if own in RECALL_KINDS and weights.offered("text") else
             [] if own in RECALL_KINDS else [k for k in RECALL_KINDS if weights.offered(k)])
    if not kinds:
        return None
    options = kinds + ([NONE] if off else [])
    if len(options) == 1:
        return kinds[0]
    beside = url.choice("beside", options, kinds[0], f"what to draw beside ({', '.join(options)})",
                        instead="the page's own choice is shown")
    # one row: a word, then the choice (a page's first screen keeps its chart in view)
    said, choice = st.columns([1, 6], vertical_alignment="center")
    said.markdown("**Beside it**")
    with choice:
        kind = url.bound(st.segmented_control, f"{key}_kind", beside, "Beside it", options,
                         fit=lambda k: k if k in options else kinds[0], label_visibility="collapsed",
                         format_func=SHORT.get,
                         help="Plain training learned far recall from the answers alone; the other was "
                              "also shown where to look. Each side says how it was trained.")
    kind = kind if kind in options else kinds[0]        # a second click on the chosen one clears it
    return None if kind == NONE else kind


def _other_run(side: Session, prompt: str, mode: str, new_tokens: int) -> tuple[Run | None, str | None]:
    ids, problem = encode_prompt(side.model, prompt, MAX_PROMPT_TOKENS)
    if problem:
        return None, problem
    try:
        return cached_with_progress("inspector", (side.label, tuple(ids), mode, new_tokens),
                                    lambda progress: run_prompt(side.model, ids, mode, new_tokens, progress=progress),
                                    f"Reading {len(ids):,} tokens on the other set ..."), None
    except Exception as e:  # a model-side rejection becomes a message
        return None, "This prompt could not run on the other set: " + type(e).__name__


def _side(name: str, run: Run, cfg, layer: int, pos: int, head: int | None, fact: PromptFact | None, key: str,
          num) -> None:
    view = layer_view(run, layer, min(pos, run.n - 1), cfg, head=head, num=num)
    if isinstance(view, str):
        st.caption(view)
        return
    a = view.attention
    row = None if fact is None else at_layer(run, layer, pos, fact, head)
    st.plotly_chart(built(marked_attention_figure, a, run.tokens, pos, name, None if row is None else row.span),
                    width="stretch", key=key, config={"displayModeBar": False})
    st.caption(f"Window {a.window_total:.0%} · compressed entries {a.entries_total:.0%} · sink {a.sink:.0%}. "
               + ("" if fact is None else row_line(row)))


def _fact(sess: Session, prompt: str, run: Run) -> PromptFact | None:
    """The recall prompt's fact in this set's tokens; None when there is none or the run's prompt was cut."""
    fact = prompt_fact(sess.model.tokenizer, prompt)
    return fact if fact is not None and fact.query == run.n_prompt - 1 else None


def _go_to(layer: int) -> None:
    st.session_state["insp_layer"] = layer


def attention_pair(sess: Session, run: Run, prompt: str, mode: str, new_tokens: int, layer: int, pos: int,
                   head: int | None, key: str = "insp_step") -> bool:
    """The session's chart beside the other set's, the fact outlined in both; True when the pair was drawn (else the
    page draws its own chart alone: the reader chose nothing beside it, `beside=none` in the link)."""
    kind = other_kind(sess, key, off=True)
    if kind is None:
        return False
    fact = _fact(sess, prompt, run)
    run_key = (prompt, mode, new_tokens)
    if run.n_prompt > EAGER_TOKENS and st.session_state.get(f"{key}_asked") != run_key:
        st.button(f"Read these {run.n_prompt:,} tokens on the {TITLES[kind].lower()} too, to compare layer by layer",
                  key=f"{key}_ask", on_click=lambda: st.session_state.update({f"{key}_asked": run_key}))
        return False
    side = weights.session_for(kind, sess)
    other, problem = _other_run(side, prompt, mode, new_tokens)
    if other is None:
        st.caption(problem or "")
        return False
    other_fact = _fact(side, prompt, other)
    own = weights.kind_of(sess)
    own_name = TITLES.get(own, sess.label) if own else sess.label
    left, right = st.columns(2)
    with left:
        _side(own_name, run, sess.model.cfg, layer, pos, head, fact, f"{key}_own", sess.num)
    with right:
        _side(TITLES[kind], other, side.model.cfg, layer, pos, head, other_fact, f"{key}_other", sess.num)
        if kind != "text":      # a recall checkpoint's behaviour keeps its training clause beside it
            st.caption(learned_line(kind, weights.record(kind), side.model.cfg.sliding_window))
    if fact is not None and other_fact is not None and pos == run.n_prompt - 1:
        mine, theirs = reach(run, pos, fact), reach(other, pos, other_fact)
        st.caption(reach_line(own_name, mine, fact.distance, sess.num) + " "
                   + reach_line(TITLES[kind], theirs, fact.distance, sess.num))
        target = first_reaching(theirs) or first_reaching(mine)
        if target is not None and target.layer != layer:
            st.button(f"Step to layer {sess.num(target.layer)}, where the fact is reached", key=f"{key}_go",
                      on_click=_go_to, args=(target.layer,), icon=":material/my_location:")
    return True


def marked_strip_figure(detail, title: str, entry: int | None, status: str):
    """The pools page's strip (ui/figures_run.pool_strip_figure) with the fact's entry outlined through every row."""
    fig = go.Figure(pool_strip_figure(detail, title))
    if entry is not None:
        fig.add_vrect(x0=entry - 0.5, x1=entry + 0.5, fillcolor="rgba(0,0,0,0)", layer="above",
                      line=dict(color=FACT, width=2, dash="dash"), annotation_text=f"fact E{entry}: {status}",
                      annotation_position="top left")
    return fig


def pool_pair(sess: Session, ids: list[int], prompt: str, mode: str, nb: int, k: int, layer: int, pos: int,
              own, own_detail, compute, key: str = "pool_step") -> None:
    """The pools page's strip for one query row on the session's weights beside a recall checkpoint's, the fact's
    entry outlined in both. `own`: the page's PoolInputs, `own_detail` its RowDetail; `compute(model, ids,
    progress)` makes a set's PoolInputs (the page's own recipe), cached per set like the page's."""
    kind = other_kind(sess, key)
    fact = prompt_fact(sess.model.tokenizer, prompt)
    fact = fact if fact is not None and fact.query == len(ids) - 1 else None
    own_kind = weights.kind_of(sess)
    own_name = TITLES.get(own_kind, sess.label) if own_kind else sess.label
    ratio = max(1, own.ratio)

    def strip(name: str, detail, r: int, chart_key: str) -> None:
        entry = None if fact is None else fact.entry(r)
        status = "" if entry is None else in_pool_row(entry, detail.pool, detail.restricted, detail.dropped,
                                                      detail.visible)
        st.plotly_chart(built(marked_strip_figure, detail, f"{name}: layer {sess.num(layer)}", entry, status),
                        width="stretch", key=chart_key, config={"displayModeBar": False})

    if kind is None:
        strip(own_name, own_detail, ratio, "pool_strip")
        return
    left, right = st.columns(2)
    with left:
        strip(own_name, own_detail, ratio, "pool_strip")
    with right:
        if len(ids) > EAGER_TOKENS and st.session_state.get(f"{key}_asked") != (prompt, mode):
            st.button(f"Trace these {len(ids):,} tokens on the {TITLES[kind].lower()} too",
                      key=f"{key}_ask", on_click=lambda: st.session_state.update({f"{key}_asked": (prompt, mode)}))
            return
        side = weights.session_for(kind, sess)
        try:
            other = cached_with_progress("pools", (side.label, tuple(ids), mode),
                                         lambda progress: compute(side.model, ids, progress),
                                         f"Tracing {len(ids):,} tokens on the other set ...", max_entries=4)
        except Exception as e:  # a model-side rejection becomes a message
            st.caption("This prompt could not run on the other set: " + type(e).__name__)
            return
        results = reselect(other, nb, k)
        if layer not in results:
            st.caption(f"Layer {sess.num(layer)} is not a Reindex layer of the other set.")
            return
        rows = other.positions.tolist()
        row = rows.index(pos) if pos in rows else len(rows) - 1
        strip(TITLES[kind], row_detail(other, results[layer], row), max(1, other.ratio), f"{key}_other")
        if kind != "text":      # a recall checkpoint's behaviour keeps its training clause beside it
            st.caption(learned_line(kind, weights.record(kind), side.model.cfg.sliding_window))


def _reuse_bars(name: str, tr, tokens: list[str], text: str, tokenizer, layer: int, num, key: str) -> None:
    pos = len(tokens) - 1
    head = busiest_head(tr, layer, pos)
    try:
        cmp = reuse_comparison(tr, layer, pos, head, tokens)
    except ValueError as e:     # the last row was not run by both layers
        st.caption(str(e))
        return
    if not cmp.entry_ids:
        st.caption("No compressed entry is visible to the last token yet.")
        return
    fact = prompt_fact(tokenizer, text)
    entry = None if fact is None or fact.query != pos else fact.entry(max(1, tr.layers[layer].spec.compress_ratio))
    src, me = f"layer {num(cmp.source)} (picks)", f"layer {num(cmp.layer)} (Reuse)"
    st.plotly_chart(built(grouped_bars, mark_fact(cmp.spans, cmp.entry_ids, entry),
                          {src: cmp.source_shares, me: cmp.layer_shares},
                          title=f"{name}: head {head}, last token", yaxis_title="share", height=320),
                    key=key, config={"displayModeBar": False})
    st.caption(cmp.sentence(num(cmp.source), num(cmp.layer)))


def reuse_pair(sess: Session, lt, layer: int, key: str = "rec_step") -> None:
    """The recurrence page's Reuse comparison at the prompt's last token on the session's weights beside a recall
    checkpoint's (whose entries carry weight), each through its busiest head, the fact's entry named in the bars."""
    kind = other_kind(sess, key)
    own = weights.kind_of(sess)
    own_name = TITLES.get(own, sess.label) if own else sess.label
    cols = st.columns(2 if kind is not None else 1)
    with cols[0]:
        _reuse_bars(own_name, lt.trace, lt.tokens, lt.text, sess.model.tokenizer, layer, sess.num, f"{key}_own")
    if kind is None:
        return
    side = weights.session_for(kind, sess)
    with cols[1]:
        other = live_trace(side, lt.text)
        if other is None:
            return
        _reuse_bars(TITLES[kind], other.trace, other.tokens, other.text, side.model.tokenizer, layer, sess.num,
                    f"{key}_other")
        if kind != "text":      # a recall checkpoint's behaviour keeps its training clause beside it
            st.caption(learned_line(kind, weights.record(kind), side.model.cfg.sliding_window))
