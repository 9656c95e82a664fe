"""Draws the stepped picture of compressed sparse attention (lessons/mechanism.py computes every number).

One Plotly figure, token positions across, one lane per stage from top to bottom: the tokens, the entries each
Full layer packs them into, the scoring layer's index scores, its candidate pool, its top-k, then what a Full, a
Reuse and a Reindex layer read (shaded by the attention share each read entry got). A step control reveals the
lanes one stage at a time. With the page's side-by-side on, the picture is drawn for the recall checkpoint and
the text model on the same prompt (ui/pair.py).
"""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from lessons import hero
from lessons.fact_in_prompt import prompt_fact
from lessons.far_compare import TITLES
from lessons.mechanism import MechanismPicture, mechanism_picture
from ui import url, weights
from ui.cache import built
from ui.far_fact import FACT
from ui.figures_run import label
from ui.live import LiveTrace, live_trace
from ui.pair import MISSING, pair_sessions, pair_toggle
from ui.session import Session

ENTRY_COLOURS = ("#9ecae1", "#3182bd")       # alternate entries, so a pair of tokens packed together shows
READ_SCALE = [[0, "#c7e9c0"], [1, "#00441b"]]  # a read entry is always visible, darker with more attention


def _lanes(pic: MechanismPicture, num) -> list[tuple[str, int]]:
    """(lane label, the step that reveals it), top to bottom."""
    lanes = [("tokens", 0)]
    lanes += [(f"entries r{g.ratio}, layer {num(g.layer)}", 1) for g in pic.groups]
    lanes.append((f"scores, layer {num(pic.scorer)}", 2))
    s = 3
    if pic.pool is not None:
        lanes.append(("pool", s))
        s += 1
    lanes.append((f"top-k, layer {num(pic.scorer)}", s))
    lanes += [(f"{r.role} {num(r.layer)} reads", s + 1) for r in pic.reads]
    return lanes


def mechanism_figure(pic: MechanismPicture, tokens: list[str], step: int, num=lambda i: i,
                     fact: list[int] | None = None) -> go.Figure:
    """The picture up to `step` (0-based index into pic.steps); later lanes keep their place, empty. `fact`: the
    token positions of the prompt's fact, outlined (dashed, black) through every row."""
    n = pic.query + 1
    x = list(range(n))
    lanes = _lanes(pic, num)
    names = [name for name, _ in lanes]
    fig = go.Figure()

    rows = list(reversed(names))     # y runs upwards: the first lane on top
    blank = [None] * n

    def lane(name: str, z: list, colorscale, hover: list[str], zmin=0.0, zmax=1.0, bar: dict | None = None):
        # every lane is a heatmap over all rows, empty outside its own (plotly.js fails on several one-row heatmaps)
        at = rows.index(name)
        fig.add_heatmap(z=[z if i == at else blank for i in range(len(rows))], x=x, y=rows, colorscale=colorscale,
                        zmin=zmin, zmax=zmax, showscale=bar is not None, colorbar=bar, ygap=3, hoverongaps=False,
                        customdata=[hover if i == at else [""] * n for i in range(len(rows))],
                        hovertemplate="%{customdata}<extra></extra>")

    tok = [label(tokens[p], 16) if p < len(tokens) else "" for p in x]
    shown = {name for name, s in lanes if s <= step}
    if "tokens" in shown:
        lane("tokens", [0.35] * n, [[0, "#bdbdbd"], [1, "#bdbdbd"]], [f"token {p}: {tok[p]}" for p in x])
    for g in pic.groups:
        name = f"entries r{g.ratio}, layer {num(g.layer)}"
        if name in shown:
            z = [(p // g.ratio) % 2 if p // g.ratio < g.entries else None for p in x]
            lane(name, z, [[0, ENTRY_COLOURS[0]], [1, ENTRY_COLOURS[1]]],
                 [f"entry {p // g.ratio}: tokens {p // g.ratio * g.ratio}-{(p // g.ratio + 1) * g.ratio - 1}"
                  for p in x])
    r = pic.ratio

    def per_token(values: dict[int, float]) -> list[float | None]:
        return [values.get(p // r) for p in x]

    score_name = f"scores, layer {num(pic.scorer)}"
    if score_name in shown:
        vis = {e: v for e, v in enumerate(pic.scores) if v is not None}
        lo, hi = (min(vis.values()), max(vis.values())) if vis else (0.0, 1.0)
        lane(score_name, per_token(vis), "Blues", [f"entry {p // r}: score {vis[p // r]:.3g}" if p // r in vis
                                                   else "" for p in x], zmin=lo, zmax=hi if hi > lo else lo + 1)
    if pic.pool is not None and "pool" in shown:
        lane("pool", per_token({e: 1.0 for e in pic.pool}), [[0, "#fdae6b"], [1, "#e6550d"]],
             [f"entry {p // r}: in the pool" for p in x])
    top_name = f"top-k, layer {num(pic.scorer)}"
    if top_name in shown:
        lane(top_name, per_token({e: 1.0 for e in pic.topk}), [[0, "#de2d26"], [1, "#de2d26"]],
             [f"entry {p // r}: picked" for p in x])
    for rd in pic.reads:
        name = f"{rd.role} {num(rd.layer)} reads"
        if name in shown:
            share = dict(zip(rd.entries, rd.shares))
            first = rd is pic.reads[0]
            lane(name, per_token(share), READ_SCALE,
                 [f"entry {p // r} ({tok[p]}): {share[p // r]:.1%} of layer {num(rd.layer)}'s attention"
                  if p // r in share else "" for p in x],
                 bar=dict(title="share", tickformat=".0%", thickness=8, len=0.4, y=0.2, x=1.0) if first else None)
    fig.add_vline(x=pic.query, line=dict(color="#555", width=1, dash="dot"))
    if fact:
        fig.add_vrect(x0=min(fact) - 0.5, x1=max(fact) + 0.5, fillcolor="rgba(0,0,0,0)", layer="above",
                      line=dict(color=FACT, width=2, dash="dash"))
    fig.update_yaxes(categoryorder="array", categoryarray=rows, range=[-0.5, len(rows) - 0.5], tickfont=dict(size=11),
                     automargin=True)
    fig.update_xaxes(title="position (dotted: query" + ("; dashed: fact)" if fact else ")"),
                     range=[-0.5, n - 0.5])
    fig.update_layout(height=60 + 26 * len(names), margin=dict(l=10, r=10, t=10, b=40), plot_bgcolor="white")
    return fig


def packing_figure(pic: MechanismPicture, tokens: list[str], start: int, num=lambda i: i,
                   stacks: dict[int, str] | None = None, fact: list[int] | None = None) -> go.Figure:
    """A magnified strip of MAGNIFIED tokens from `start`: one box per token, then one row per Full layer's entries,
    each box spanning the tokens it packs (2 tokens -> 1 entry at ratio 2, 1 -> 1 at ratio 1)."""
    end = min(start + MAGNIFIED, pic.query + 1)
    rows = ["tokens"] + [f"r{g.ratio}, layer {num(g.layer)}" + (f" ({stacks[g.layer]})" if stacks else "")
                         for g in pic.groups]
    fig = go.Figure()
    y = {name: len(rows) - 1 - i for i, name in enumerate(rows)}     # the tokens on top
    for p in range(start, end):
        edge = FACT if fact and p in fact else "#999"
        fig.add_shape(type="rect", x0=p - 0.45, x1=p + 0.45, y0=y["tokens"] - 0.35, y1=y["tokens"] + 0.35,
                      line=dict(color=edge, width=2 if edge == FACT else 1, dash="dash" if edge == FACT else None),
                      fillcolor="#eeeeee")
        fig.add_annotation(x=p, y=y["tokens"], text=label(tokens[p], 8) if p < len(tokens) else "", showarrow=False,
                           font=dict(size=10))
    for g, name in zip(pic.groups, rows[1:]):
        for e in range(start // g.ratio, -(-end // g.ratio)):
            a, b = max(e * g.ratio, start), min((e + 1) * g.ratio, end)
            if e >= g.entries or b <= a:
                continue
            fig.add_shape(type="rect", x0=a - 0.45, x1=b - 0.55, y0=y[name] - 0.35, y1=y[name] + 0.35,
                          line=dict(color="#333", width=1), fillcolor=ENTRY_COLOURS[e % 2])
            fig.add_annotation(x=(a + b - 1) / 2, y=y[name], text=f"E{e}", showarrow=False, font=dict(size=10))
    fig.add_scatter(x=[start, end - 1], y=[0, len(rows) - 1], mode="markers", marker=dict(opacity=0),
                    hoverinfo="skip", showlegend=False)
    fig.update_yaxes(tickvals=list(y.values()), ticktext=list(y), range=[-0.6, len(rows) - 0.4], showgrid=False,
                     zeroline=False)
    fig.update_xaxes(title=f"token positions {start}-{end - 1}, magnified", range=[start - 0.6, end - 0.4],
                     showgrid=False, zeroline=False)
    fig.update_layout(height=50 + 34 * len(rows), margin=dict(l=10, r=10, t=10, b=40), plot_bgcolor="white")
    return fig


MAGNIFIED = 16        # tokens in the magnified strip: enough to show packing, few enough to label every token


def _draw(sess: Session, lt: LiveTrace, title: str, key: str) -> None:
    pic = mechanism_picture(lt.trace, sess.model.cfg.candidate_block_size, None, sess.num)   # reads, milliseconds
    if pic is None:
        st.info("These weights have no compressed layer that selects entries, so there is nothing to draw.")
        return
    titles = [s.title for s in pic.steps]
    # a model without a pool has no "Pool" step: show the stage before it
    k = titles.index(title) if title in titles else max(0, STEP_TITLES.index(title) - 1)
    # the fact of a recall prompt, outlined in every row (positions of a cut prompt would not line up: none then)
    found = None if lt.truncated else prompt_fact(sess.model.tokenizer, lt.text)
    fact = found.positions if found is not None and found.query == pic.query else None
    st.plotly_chart(built(mechanism_figure, pic, lt.tokens, k, sess.num, fact), width="stretch", key=key,
                    config={"displayModeBar": False})
    st.write(pic.steps[k].sentence)
    if k >= 1:      # from the Entries step on: the packing itself, magnified around the fact (or the prompt's start)
        cfg = sess.model.cfg
        stacks = {g.layer: "decoder" if g.layer >= cfg.decoder_start else "encoder" for g in pic.groups}
        start = max(0, min((fact[0] - MAGNIFIED // 2) if fact else 0, pic.query + 1 - MAGNIFIED))
        start -= start % 2          # an even start, so a ratio-2 entry is never cut at the strip's edge
        st.plotly_chart(built(packing_figure, pic, lt.tokens, start, sess.num, stacks, fact), width="stretch",
                        key=f"{key}_pack", config={"displayModeBar": False})
        st.caption(PACKING)


PACKING = ("Magnified: at ratio 2 an entry packs 2 tokens into one (a learned, gated weighted sum of their rows); at "
           "ratio 1 an entry is one token's row. An entry exists once all its tokens have been read.")
STEP_TITLES = ("Tokens", "Entries", "Index scores", "Pool", "Top-k", "Reads")
STEP = url.choice("mstep", STEP_TITLES, STEP_TITLES[0], "a step of the picture",
                  instead="the page's own choice is shown")


def mechanism_view(sess: Session, lt: LiveTrace, key: str = "mech") -> None:
    """The step control and the picture: on the session's weights, or on the shipped sets side by side
    when the page's toggle is on (the default)."""
    pair = pair_toggle(key)
    # the picture opens on its first step and builds up one stage per click
    title = url.bound(st.segmented_control, f"{key}_step", STEP, "Step", STEP_TITLES,
                      help="Each step adds one stage of the mechanism to the picture.")
    title = title if title in STEP_TITLES else STEP_TITLES[0]       # a second click on the chosen step clears it
    sides = None
    if pair:
        try:
            sides = pair_sessions(sess)
        except Exception as e:  # a load problem becomes a message; the session's picture still draws
            st.error("The side-by-side could not load: " + type(e).__name__)
        if sides is None:
            st.caption(MISSING)
    if not sides:
        _draw(sess, lt, title, f"{key}_fig")
        return
    for col, (kind, side) in zip(st.columns(len(sides)), sides):
        with col:
            st.markdown(f"**{TITLES[kind]}**")
            # the fewest words that say how a recall checkpoint was trained (lessons.hero.clause, from its record)
            st.caption(hero.clause(weights.record(kind)) if kind != "text" else
                       f"English text, window {side.model.cfg.sliding_window}; recall not learned.")
            side_lt = live_trace(side, lt.text)
            if side_lt is not None:
                _draw(side, side_lt, title, f"{key}_fig_{kind}")
