"""The home page's opening: V4.1 in one screen (what is new, counted from the released config), the far-fact picture
on the recall checkpoint beside the text model, a thumbnail of Figure 3, and the limits of the weights running here.

The far-fact reading is one story traced on both shipped checkpoints, the same reading the pages' side-by-side
panels draw (ui.pair.far_reading: computed once per server), so the page draws in about a second once the server's
warm-up has drawn it. The points come from lessons/whats_new.py, the sizes against the release from lessons/start.py.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from lessons.far_fact import CHANCE
from lessons.figure3_layout import layout
from lessons.start import scale_rows
from lessons.whats_new import HEADLINE, far_headline, knows_no_facts, points
from model import V41Config
from ui.cache import built
from ui.checkpoints import find_checkpoints
from ui.common import TINY_DIR, Session
from ui.far_fact import RECALL_DIR, far_fact_figure, far_recall_of, training_record
from ui.figures import diagram_figure
from ui.pair import MISSING, far_reading
from ui.sources import page_link
from ui.tour import start_button

FIGURE3 = "pages/figure3.py"


@st.cache_resource(show_spinner=False)
def release() -> V41Config:
    return V41Config.preset("v4.1-flash")


def recall_dir():
    """The shipped recall checkpoint's directory when this server offers it (its operator's allow-list), else None."""
    real = RECALL_DIR.resolve()
    return real if (real / "config.json").is_file() and real in find_checkpoints().values() else None


def far_readings(sess: Session):
    """(recall reading, text-model reading) of the far-fact story, or None with a message drawn: the one reading
    the pages' side-by-side panels draw too (ui.pair.far_reading), so a visitor's first picture and the pages
    after it show the same story with the same numbers."""
    if recall_dir() is None:
        st.info("This server does not offer the recall checkpoint, so the far-fact picture cannot be drawn here.")
        return None
    try:
        pair = far_reading(sess)
    except Exception as e:  # the opening must still draw: the picture is one part of it
        st.warning(f"The far-fact picture could not be computed ({type(e).__name__}).")
        return None
    if pair is None:
        st.info(MISSING)
        return None
    by_kind = {side.kind: side.ff for side in pair.sides}
    return by_kind["recall"], by_kind.get("text")


def hero_figure(ff, num) -> go.Figure:
    """The far-fact picture (ui.far_fact's figure) with short row labels and axis title, for a first screen."""
    fig = go.Figure(far_fact_figure(ff, num, title=""))
    rows = [f"{num(lf.layer)} {lf.role}" for lf in ff.layers]
    fig.update_traces(y=rows, selector=dict(type="heatmap"))
    fig.update_traces(y=rows, selector=dict(type="scatter"))
    fig.update_xaxes(title="position in the story (red: the fact; blue: the window)")
    fig.update_traces(colorbar=dict(title="", tickvals=[0, 0.5, 1], tickformat=".0%"), selector=dict(type="heatmap"))
    fig.update_layout(height=110 + 26 * len(ff.layers), margin=dict(l=10, r=10, t=20, b=40))
    return fig


def far_picture(sess: Session, key: str, title: bool = True) -> None:
    """The far-fact picture on the recall checkpoint with its headline; the text model's reading of the same story
    in an expander (a message instead when the checkpoint is not offered)."""
    got = far_readings(sess)
    if got is None:
        return
    recall, text = got
    if title:
        st.markdown(f"**See it work: a fact {recall.tokens.distance} tokens back**")
    st.plotly_chart(built(hero_figure, recall, sess.num), width="stretch", key=key, config={"displayModeBar": False})
    head, comp = far_headline(recall, text, sess.num, far_recall_of(training_record(RECALL_DIR)),
                              far_recall_of(training_record(TINY_DIR)), CHANCE)
    st.caption(f"Trained for recall, {recall.window}-token windows: {head}")
    if comp:
        with st.expander("The same story on the text model"):
            st.caption(comp + " Its windows are wider, and it has not learned to use the compressed entries: the "
                              "pages on the global branch show both side by side.")


def draw_hero(sess: Session) -> None:
    """The far-fact picture with its headline, in a container the tour outlines (key home_hero)."""
    with st.container(key="home_hero"):
        far_picture(sess, "home_far_fig")


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
    """The first screen: the headline, the far-fact picture, what is new, the tour and the thumbnail."""
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
