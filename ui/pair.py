"""The shipped sets of trained weights side by side, whatever the sidebar has loaded: the recall checkpoints (one
trained on the answers alone, one with losses aimed at the fact's entry) beside the text model, which has the same
machinery and has not learned the recall task. Which sets there are, and whether this server offers them, is
ui/weights.py's.

A page that teaches the global branch draws `pair_toggle` (on by default, off for the page when the reader
turns it off) and then either `far_pair` (the far-fact story read by both: lessons/far_compare.py computes the
whole comparison once per server, this module only draws it) or its own two-column view from `pair_sessions`
(CSA2 modes draws the mechanism picture twice). The sidebar's weights stay the session's choice: the pair
loads both checkpoints through the same server-wide store (ui.session.load_model) and never changes the
sidebar. When the server offers no recall checkpoint, the pair says so in one line and draws nothing.
"""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from lessons.far_compare import TITLES, brief_line, learned_line
from lessons.inspector import MAX_PROMPT_TOKENS, layer_view, run_prompt, selection_line, too_short_to_choose
from ui import weights
from ui.cache import built, cached_with_progress
from ui.far_fact import far_fact_figure
from ui.far_reading import far_reading, pair_sessions
from ui.figures_run import selection_figure
from ui.prompt import prompt_problem
from ui.session import Session
from ui.url import bound, flag

TOGGLE = "Recall checkpoints beside the text model"
TOGGLE_HELP = ("On: this view runs on the shipped sets of trained weights, side by side, whatever the sidebar "
               "has loaded. Off: only the sidebar's weights, further down the page.")
MISSING = ("The side-by-side needs the text model and at least one shipped recall checkpoint; this server does not "
           "offer them.")


def pair_toggle(key: str, url: str = "pair") -> bool:
    """The page's side-by-side switch: on by default, kept for the browser session and in the link as `url`=0
    when off (a page with two switches gives each its own name)."""
    return bound(st.toggle, f"{key}_pair", flag(url, True), TOGGLE, help=TOGGLE_HELP)


def selection_pair(sess: Session, key: str, prompt: str, mode: str, new_tokens: int, layer: int, pos: int,
                   url: str = "selpair") -> bool:
    """The inspector's selected-entries view for the current prompt, layer and token on both checkpoints: each
    side's index scores with its pool and picks (the inspector's own figure and run, cached like the page's), and
    one line on what it kept and where its attention went. Returns whether it was drawn."""
    if not pair_toggle(key, url):
        return False
    try:
        sides = pair_sessions(sess)
    except Exception as e:  # a load problem becomes a message; the page goes on
        st.error("The side-by-side could not load: " + type(e).__name__)
        return False
    if sides is None:
        st.caption(MISSING)
        return False
    for col, (kind, side) in zip(st.columns(len(sides)), sides):
        with col:
            st.markdown(f"**{TITLES[kind]}**")
            st.caption(learned_line(kind, weights.record(kind), side.model.cfg.sliding_window))
            ids, problem = prompt_problem(side.model, prompt, MAX_PROMPT_TOKENS)
            if problem:
                st.caption(problem)
                continue
            try:
                run = cached_with_progress("inspector", (side.label, tuple(ids), mode, new_tokens),
                                           lambda progress, m=side.model, i=ids: run_prompt(m, i, mode, new_tokens,
                                                                                            progress=progress),
                                           f"Reading {len(ids):,} tokens ...")
            except Exception as e:  # a model-side rejection becomes a message
                st.error("This prompt could not run here: " + type(e).__name__)
                continue
            view = layer_view(run, layer, min(pos, run.n - 1), side.model.cfg, num=sess.num)
            if isinstance(view, str) or view.selection is None:
                st.caption(view if isinstance(view, str) else "No compressed branch at this layer.")
                continue
            short = too_short_to_choose(view.selection)
            if short is not None:       # a sentence, not a solid block
                st.caption(short)
            else:
                st.plotly_chart(built(selection_figure, view.selection, "Index scores, pool and picks"),
                                width="stretch", key=f"{key}_{kind}", config={"displayModeBar": False})
            st.write(selection_line(view, run.tokens))
    return True


def compact_far_figure(ff, num) -> go.Figure:
    """The far-fact picture (ui.far_fact.far_fact_figure) cut to fit half a screen's width."""
    fig = go.Figure(far_fact_figure(ff, num, title=""))
    fig.update_xaxes(title="token position")
    # one scale for both sides (0-100%): the text model's faint shares must not be stretched to look strong
    fig.update_traces(zmin=0, zmax=1, colorbar=dict(title="share", tickformat=".0%", thickness=10, len=0.9),
                      selector=dict(type="heatmap"))
    fig.update_layout(height=130 + 20 * max(1, len(ff.layers)), margin=dict(l=10, r=10, t=40, b=40),
                      font=dict(size=11))
    return fig


def far_pair(sess: Session, key: str, focus: str, url: str = "pair") -> bool:
    """The far-fact story on the shipped sets, one column each: each with what those weights learned, the
    picture of where the answer token's attention went, and one line for this page's lesson (`focus`, one of
    lessons.far_compare.FOCUSES). Returns whether it was drawn."""
    if not pair_toggle(key, url):
        return False
    try:
        pair = far_reading(sess)
    except Exception as e:  # a load or model problem becomes a message; the page goes on
        st.error("The side-by-side could not run: " + type(e).__name__)
        return False
    if pair is None:
        st.caption(MISSING)
        return False
    st.caption(pair.story_line())
    for col, side in zip(st.columns(len(pair.sides)), pair.sides):
        with col:
            st.markdown(f"**{side.title}**")
            st.caption(brief_line(side.kind, weights.record(side.kind)))
            st.plotly_chart(built(compact_far_figure, side.ff, sess.num), width="stretch",
                            key=f"{key}_pair_{side.kind}", config={"displayModeBar": False})
            st.write(side.line(focus, sess.num))
    return True
