"""The home page's opening: V4.1 in one screen (what is new, counted from the released config), the far-fact picture
on the recall checkpoint beside the text model, a thumbnail of Figure 3, and the limits of the weights running here.

The far-fact reading is one story traced on both shipped checkpoints, the same reading the pages' side-by-side
panels draw (ui.far_reading: stored with the weights, else computed once per server), so the page loads and runs
no recall checkpoint to draw it. The points come from lessons/whats_new.py, the sizes against the release from
lessons/home.py.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from lessons import hero
from lessons.figure3_layout import layout
from lessons.home import scale_rows
from lessons.whats_new import HEADLINE, knows_no_facts, points
from model import V41Config, shipped_set
from model.shipped import RECALL_KINDS
from ui import weights
from ui.cache import built, held
from ui.far_fact import far_fact_figure
from ui.far_reading import far_reading
from ui.figures import diagram_figure
from ui.pair import MISSING
from ui.session import Session
from ui.sources import page_link
from ui.tour import shows, start_button

FIGURE3 = "pages/figure3.py"


@st.cache_resource(show_spinner=False)
def release() -> V41Config:
    return V41Config.preset("v4.1-flash")


def far_pair_reading(sess: Session):
    """The far-fact story read on the shipped sets (a FarPair), or None with a message drawn: the one reading the
    pages' side-by-side panels draw too (ui.far_reading), so a visitor's first picture and the pages after it
    show the same story with the same numbers."""
    if not any(weights.offered(k) for k in RECALL_KINDS):
        st.info("This server does not offer the recall checkpoints, so the far-fact picture cannot be drawn here.")
        return None
    try:
        pair = far_reading(sess)
    except Exception as e:  # the opening must still draw: the picture is one part of it
        st.warning(f"The far-fact picture could not be computed ({type(e).__name__}).")
        return None
    if pair is None:
        st.info(MISSING)
    return pair


def hero_figure(ff, num, scale: bool = True) -> go.Figure:
    """The far-fact picture (ui.far_fact's figure) with short row labels and axis title, for a first screen; `scale`
    False leaves the colour scale to the picture beside it (both run 0-100%)."""
    fig = go.Figure(far_fact_figure(ff, num, title=""))
    rows = [f"{num(lf.layer)} {lf.role}" for lf in ff.layers]
    fig.update_traces(y=rows, selector=dict(type="heatmap"))
    fig.update_traces(y=rows, selector=dict(type="scatter", name="fact entry"))   # not the legend's keys
    fig.update_xaxes(title="position in the story")
    fig.update_traces(zmin=0, zmax=1, showscale=scale, colorbar=dict(title="", tickvals=[0, 0.5, 1], tickformat=".0%",
                                                                     thickness=10),
                      selector=dict(type="heatmap"))
    fig.update_layout(height=150 + 24 * len(ff.layers), margin=dict(l=10, r=10, t=40, b=40))
    return fig


@dataclass(frozen=True)
class HeroColumn:
    kind: str
    head: str                    # above the picture
    figure: go.Figure
    caption: str                 # under it: what the set read, answered and was trained with


@dataclass(frozen=True)
class HeroView:
    """Everything the far-fact picture draws, made once per reading, records and numbering (ui.cache.held): a rerun
    only hands it to Streamlit."""
    title: str
    columns: tuple[HeroColumn, ...]
    text_caption: str | None     # the text model on the same story, for the expander


def hero_view(pair, *records, num) -> HeroView:
    """The view of the reading `pair`, with the training records of its sides (in the pair's order)."""
    record = {s.kind: r for s, r in zip(pair.sides, records)}
    recalls = [s for s in pair.sides if s.kind != "text"]
    text = next((s for s in pair.sides if s.kind == "text"), None)
    columns = tuple(HeroColumn(side.kind, shipped_set(side.kind).heading,
                               built(hero_figure, side.ff, num, i == len(recalls) - 1),
                               hero.side_caption(side, record[side.kind], num))
                    for i, side in enumerate(recalls))
    text_caption = None if text is None else (hero.text_caption(text, record["text"], text.ff.window)
                                              + " The pages on the global branch show every set side by side.")
    return HeroView(hero.title(pair, recalls[0].ff.n_layers), columns, text_caption)


def far_picture(sess: Session, key: str, title: bool = True, pair=None) -> None:
    """The far-fact picture on each shipped recall checkpoint (plain training first, then the one shown where to
    look), each with what it read, answered and was trained with; the text model's reading of the same story in an
    expander (a message instead when the checkpoints are not offered). `pair`: the reading, when the caller has it."""
    pair = pair if pair is not None else far_pair_reading(sess)
    if pair is None:
        return
    # the reading and the records are held by the server and never changed: the view is made once for them
    view = held(hero_view, (pair, *(weights.record(s.kind) for s in pair.sides)), num=sess.num)
    if title:
        st.markdown(f"**{view.title}**")
    for col, c in zip(st.columns(len(view.columns)), view.columns):
        with col:
            st.markdown(f"**{c.head}**")
            st.plotly_chart(c.figure, width="stretch", key=f"{key}_{c.kind}", config={"displayModeBar": False})
            st.caption(c.caption)
    if view.text_caption is not None:
        with st.expander("The text model"):
            st.caption(view.text_caption)


HERO_HEIGHT = 560      # px: the headline, the line above, two pictures and their captions at 1400 px wide


def draw_hero(sess: Session) -> None:
    """The far-fact picture with its headline, in a container the tour outlines (key home_hero). While the reading is
    computed (a server without stored readings, before its warm-up has read the story), a box of the picture's
    size holds the progress, so the page does not jump when the picture arrives. V41_HERO=0 in the server's
    environment leaves the picture out: bench.pages' baseline for what the picture costs a first visit."""
    if os.environ.get("V41_HERO", "1") == "0":
        return
    with st.container(key="home_hero"):
        slot = st.empty()
        with slot.container(height=HERO_HEIGHT, border=False):
            pair = far_pair_reading(sess)
        if pair is not None:
            with slot.container():
                far_picture(sess, "home_far_fig", pair=pair)


def draw_whats_new(sess: Session) -> None:
    st.markdown("**What is new in V4.1**")
    ps = points(release(), sess.num)
    st.markdown("\n".join(f"- **{p.title}**: {p.short}" for p in ps))
    with st.expander("In full"):
        for p in ps:
            st.markdown(f"**{p.title}.** {p.text}")


def thumbnail_figure(cfg: V41Config) -> go.Figure:
    """Figure 3's compact drawing with its labels taken off: the shape of the two halves at a glance."""
    d = layout(cfg, compact=True)
    fig = go.Figure(diagram_figure(d, height=200))
    notes = [a for a in fig.layout.annotations if a.showarrow]          # keep the arrows, drop the labels
    fig.update_layout(annotations=notes, margin=dict(l=0, r=0, t=0, b=0))
    fig.data = fig.data[:len(d.lines)]                                    # the lines, not the pick markers
    return fig


def draw_thumbnail() -> None:
    st.plotly_chart(built(thumbnail_figure, release()), width="stretch", key="home_thumb",
                    config={"staticPlot": True})
    page_link(FIGURE3, "Figure 3 walkthrough", ":material/account_tree:")


def draw_limits(sess: Session) -> None:
    """What the weights running here can do, next to the prompt box: a note and the table against the release."""
    if sess.model is None:
        return
    st.info(knows_no_facts(sess.model.cfg, sess.weights))
    st.table(pd.DataFrame(scale_rows(release(), sess.model.cfg)), hide_index=True)


def opening(sess: Session) -> None:
    """The first screen: the headline, the far-fact picture, what is new, the tour and the thumbnail; on a tour
    stop, only the picture when the stop needs it."""
    if not shows("home_opening"):
        if shows("home_hero"):
            draw_hero(sess)
        return
    st.write(HEADLINE)
    left, right = st.columns([3, 2], gap="large")
    with right:
        draw_whats_new(sess)
        a, b = st.columns([1, 1], vertical_alignment="center")
        with a:
            start_button()
        with b:
            draw_thumbnail()
    with left:
        draw_hero(sess)
