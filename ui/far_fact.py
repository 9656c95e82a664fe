"""The far-fact panel, shared by the Prompt inspector, Attention shares, Indexer pools and Ablation lab pages.

One call per page: `far_fact_panel(sess, "insp", focus="inspector")`. Numbers from lessons/far_fact.py; the
figure is `far_fact_figure` (no Streamlit). The reader's story and every token text are shown only through
st.text_area, st.code, st.text, Markdown escaped by ui.text.plain (the summary's list), dataframes and escaped Plotly
labels; messages never quote the reader's text.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from lessons import reproduce as snippets
from lessons.fact_steps import folded_title
from lessons.far_fact import (
    CHANCE,
    OWN_HELP,
    about,
    checkpoints_offer,
    far_recall_of,
    read_panel,
    weights_note,
)
from lessons.far_story import far_sample, own_story
from lessons.far_weights import ShippedFacts, weights_line
from lessons.how_trained import training_clause
from model import Ablation, shipped_weights
from model.shipped import KINDS
from ui import url, weights
from ui.cache import built, cached_with_progress
from ui.checkpoints import find_checkpoints
from ui.far_reading import far_reading
from ui.figures_run import label
from ui.limits import URL_PROMPT_CHARS
from ui.live import forward
from ui.reproduce import reproduce
from ui.sources import page_link
from ui.text import plain
from ui.url import fragment
from ui.weights import training_record

SOURCES = ("The far-fact sample (held-out story)", "Your own story")
EXAMPLE_STORY = ("Tom put the coin in the red bag. Anna walked to the park. It was a sunny day. Anna and Mia talked "
                 "about the weather for a long time. Where is the coin? The coin is in the")
EXAMPLE_FACT = "Tom put the coin in the red bag."
# the panel's link: which story (`ff`), the held-out one by its place (`ffrank`), the reader's own (`ffstory`, ...)
SOURCE = url.choice("ff", SOURCES, SOURCES[0], "own or sample", instead="the page's own choice is shown",
                    spell={SOURCES[0]: "sample", SOURCES[1]: "own"}.get)
OWN = (url.any_text("ffstory", EXAMPLE_STORY, link_chars=URL_PROMPT_CHARS),
       url.any_text("fffact", EXAMPLE_FACT, link_chars=URL_PROMPT_CHARS),
       url.any_text("ffanswer", "", link_chars=URL_PROMPT_CHARS))


def rank_param(n: int, own_place: int) -> url.Param[int]:
    """`ffrank`: a held-out far story by its place in distance order, 1-based (1 = the nearest of `n`), left out
    at the rule's own story."""
    return url.whole("ffrank", 1, n, own_place, "showing the rule's story", unit="1 = the nearest far story")


HOLDS, MISSES, FACT, WINDOW = "#2ca02c", "#d62728", "#000000", "#1f77b4"


def legend_keys(fig: go.Figure, window: int) -> None:
    """The picture's legend, so it reads without its caption: what the markers, the dashed outline and the blue band
    mean (empty traces that only carry a legend entry)."""
    keys = [("top-k holds the fact's entry", dict(symbol="circle", size=10, color=HOLDS), "markers"),
            ("top-k misses it", dict(symbol="x", size=10, color=MISSES), "markers"),
            ("the fact (dashed)", None, "lines"),
            (f"the window (last {window} tokens)", dict(symbol="square", size=10, color=WINDOW, opacity=0.4),
             "markers")]
    for name, marker, mode in keys:
        fig.add_scatter(x=[None], y=[None], mode=mode, name=name, marker=marker, hoverinfo="skip",
                        line=dict(color=FACT, dash="dash", width=2) if mode == "lines" else None)
    fig.update_layout(showlegend=True, legend=dict(orientation="h", x=0, xanchor="left", y=1.0, yanchor="bottom",
                                                   font=dict(size=11)))


def far_fact_figure(ff, num=lambda i: i, title: str = "Where the answer token's attention went") -> go.Figure:
    """Layers (rows) x token positions (columns): the share (mean over heads) the answer-predicting token gave the
    compressed entry packing each position (blank where it read nothing). The fact's tokens, its sentence and the
    window are shaded; a marker on each row at the fact says whether that layer's top-k holds a fact entry."""
    t = ff.tokens
    x = list(range(t.query + 1))
    z, ylab, hover = [], [], []
    for lf in ff.layers:
        row = [None] * len(x)
        ylab.append(f"layer {num(lf.layer)} {lf.role} r{lf.ratio}")
        for e, s in lf.entry_shares.items():
            for p in range(e * lf.ratio, min((e + 1) * lf.ratio, len(x))):
                row[p] = round(s, 4)        # the hover shows two decimals of a percent
        # a blank cell shows no hover (hoverongaps=False): its text would only weigh down the page
        hover.append(["" if row[p] is None else f"{p}: {label(ff.token_texts[p], 16)} (E{p // lf.ratio})"
                      for p in x])
        z.append(row)
    fig = go.Figure()
    if z:
        fig.add_heatmap(z=z, x=x, y=ylab, customdata=hover, colorscale="Oranges", zmin=0, hoverongaps=False,
                        colorbar=dict(title="share", tickformat=".1~%"),
                        hovertemplate="%{y}<br>token %{customdata}<br>share %{z:.2%}<extra></extra>")
        picked = [bool(lf.selected) for lf in ff.layers]
        notes = [f"fact entries {', '.join(f'E{e}' for e in lf.fact_entries)}: "
                 + ("in the top-k" if lf.selected else "not in the top-k")
                 + ("" if lf.pool is None else (", in the pool" if lf.pool else ", not in the pool"))
                 + f"; share {lf.share:.2%}" for lf in ff.layers]
        fig.add_scatter(x=[t.colour_positions[0]] * len(ylab), y=ylab, mode="markers", name="fact entry",
                        marker=dict(symbol=["circle" if p else "x" for p in picked], size=11,
                                    color=[HOLDS if p else MISSES for p in picked],
                                    line=dict(width=1, color="#333")),
                        customdata=notes, hovertemplate="%{y}<br>%{customdata}<extra></extra>", showlegend=False)
    w0 = max(0, t.query - ff.window + 1)
    fig.add_vrect(x0=w0 - 0.5, x1=t.query + 0.5, fillcolor=WINDOW, opacity=0.25, line_width=0, layer="below")
    s0, s1 = t.sentence_positions[0], t.sentence_positions[-1]
    fig.add_vrect(x0=s0 - 0.5, x1=s1 + 0.5, fillcolor="#ffd700", opacity=0.35, line_width=0, layer="below")
    # the fact is an outline in black, dashed: no colour of the attention scale can be mistaken for it
    c0, c1 = t.colour_positions[0], t.colour_positions[-1]
    fig.add_vrect(x0=c0 - 0.5, x1=c1 + 0.5, fillcolor="rgba(0,0,0,0)", line=dict(color=FACT, width=2, dash="dash"),
                  layer="above")
    legend_keys(fig, ff.window)
    fig.update_xaxes(title="token position (the fact's sentence shaded yellow)", range=[-1, t.query + 1])
    # the title sits above the legend's row
    fig.update_layout(title=dict(text=title, y=0.98, yanchor="top"), height=170 + 28 * max(1, len(z)),
                      margin=dict(l=10, r=10, t=80 if title else 30, b=40), plot_bgcolor="white")
    return fig


def weights_dir(sess) -> Path | None:
    """The directory the session's weights were loaded from (None for random weights)."""
    if sess.weights == "trained":
        return shipped_weights("text")
    if sess.weights == "checkpoint" and sess.checkpoint:
        return find_checkpoints().get(sess.checkpoint)
    return None


def session_record(sess) -> dict | None:
    d = weights_dir(sess)
    return training_record(d) if d is not None else None


def _offer_other_weights(sess, key: str) -> None:
    """The shipped sets of trained weights, what each is, learned and was trained with, and a button per set that
    loads it in the sidebar (shown on the text model and on the shipped recall checkpoints)."""
    now = weights.kind_of(sess)
    kinds = weights.offered_kinds()
    if now is None or len(kinds) < 2:
        return
    facts = [ShippedFacts(k, weights.title(k), weights.record(k), weights.window_of(k)) for k in kinds]
    st.markdown("\n".join(f"- {line}" for line in checkpoints_offer(now, facts)))     # our own text
    clicked = False
    for col, k in zip(st.columns(len(kinds) - 1), [k for k in kinds if k != now]):
        with col:
            clicked |= st.button(f"Load the {weights.title(k).lower()}" if k != "text" else "Back to the text model",
                                 key=f"{key}_ff_to_{k}", on_click=weights.choose, args=(k,))
    if clicked:             # the panel is a fragment: the sidebar and the page run again with the new weights
        st.rerun(scope="app")


def _sample(sess, model, rank: int | None = None):
    return cached_with_progress("far_fact_sample", (sess.label, model.cfg.sliding_window, rank),
                                lambda progress: far_sample(model.tokenizer, model.cfg.sliding_window, rank=rank),
                                "Choosing the far-fact sample ...")


def _held_out(key: str, sess, model):
    """The held-out far story: the rule's median one, or the one the reader steps to by its place in distance
    order (`ffrank` in the URL, 1-based; the rule's own story leaves it out). Returns (story, tokens, rank): rank
    None for the rule's story, else the 0-based place (what the reproduce snippet passes to far_sample)."""
    rule = _sample(sess, model)
    n, own_place = rule.candidates, rule.median + 1
    place = int(url.bound(st.number_input, f"{key}_ff_rank", rank_param(n, own_place),
                          f"Far story by distance (1 = the nearest of {n}; {own_place} = the rule's median)", 1, n,
                          step=1, fit=lambda v: v if 1 <= int(v) <= n else own_place,   # fewer stories than before
                          help="Step through every held-out far story to see where the fact comes back "
                               "and where it does not."))
    rank = None if place == own_place else place - 1
    sample = rule if rank is None else _sample(sess, model, rank)
    story, tokens = sample.story, sample.tokens
    which = "the rule's median story" if place == own_place else f"the rule's own is story {own_place}"
    st.caption(f"Held-out far story {place} of {n} by distance (seed {story.seed}, {tokens.distance} tokens from the "
               f"fact to the answer; the far stories span {sample.distances[0]}-{sample.distances[-1]}): {which}.")
    return story, tokens, rank


def _own(key: str, model):
    """The reader's story, fact and answer: seeded from the URL on arrival (`ffstory`, `fffact`, `ffanswer`), kept
    for the session, written back to the URL (a story longer than a link keeps is left out)."""
    st.caption(OWN_HELP)
    story_p, fact_p, answer_p = OWN
    text = url.bound(st.text_area, f"{key}_ff_story", story_p, "Your story (ending right before the answer)",
                     height=110)
    c1, c2 = st.columns([3, 1])
    fact = url.bound(c1.text_input, f"{key}_ff_fact", fact_p, "The fact (a word or a sentence copied from the story)")
    answer = url.bound(c2.text_input, f"{key}_ff_answer", answer_p, "Right answer (optional)",
                       help="Defaults to the colour word in the fact, when it has exactly one.")
    story, tokens, problem = own_story(text, fact, answer, model.tokenizer)
    if problem:
        st.warning(problem)
        return None, None
    return story, tokens


def far_fact_run(sess, story, tokens, focus: str):
    """The story's trace and its run with the global branch off, each one forward batched with the other visitors'
    requests (ui.live.forward, kept server-wide), then the whole panel read at the answer row in one call
    (lessons.far_fact.read_panel). None after a busy message."""
    tr = forward(sess, "trace", tokens.ids, "tracing the far story", lens=False)
    if tr is None:
        return None
    off = forward(sess, "next", tokens.ids, "running the story with the global branch off",
                  ablation=Ablation(window_only=True))
    if off is None:
        return None
    return read_panel(sess.model, story, tokens, tr, off, focus, sess.num)


def bullets(lines: list[str]) -> str:
    """Plain sentences as a Markdown list, one item each, every character drawn as itself (a line can quote the
    reader's story): a list reads in short blocks where one monospace block of 200 words would not."""
    return "\n".join(f"- {plain(line, limit=5000)}" for line in lines)


WEIGHTS_NOTE_LINK = "All measured figures for these weights (glossary)"


def weights_line_link(sess) -> None:
    """What the loaded weights do on far recall in one sentence (lessons.far_weights.weights_line), with a link to
    the glossary, the one page that states the measured figures in full: they are many, and the view comes first."""
    record = session_record(sess)
    kind = weights.kind_of(sess)
    st.caption(weights_line(sess.weights, record, None if kind is None else weights.title(kind)))
    page_link("pages/glossary.py", WEIGHTS_NOTE_LINK, ":material/query_stats:", {"find": "far fact"})


def weights_note_section(sess) -> None:
    """The full statement of what the loaded weights do on far recall (lessons.far_weights.weights_note): the
    glossary draws it, and the pages link there."""
    st.markdown("**The weights running here, on far facts (measured)**")
    st.info(weights_note(sess.weights, session_record(sess)))
    kinds = weights.offered_kinds(KINDS)
    if kinds:
        st.markdown("**How each shipped set of weights was trained** (read from its training record)")
        st.markdown("\n".join(f"- **{weights.title(k)}.** "
                               + training_clause(weights.record(k), "copy" if k == "text" else "far")
                               for k in kinds))       # our own text, from the records


def panel_title(sess) -> str:
    """The folded panel's title, stating its result for the sidebar's weights: from the one far reading of the
    shipped sets (computed once per server) and the set's training record; a neutral title for other weights."""
    kind = weights.kind_of(sess)
    name = weights.title(kind) if kind else sess.label
    best, far = None, None
    if kind is not None:
        far = far_recall_of(weights.record(kind))
        try:
            pair = far_reading(sess)
        except Exception:  # no reading: the title says what it can from the record
            pair = None
        if pair is not None and any(s.kind == kind for s in pair.sides):
            best = pair.decoder_best(kind)
    return folded_title(name, best, far, CHANCE)


@fragment
def far_fact_panel(sess, key: str, focus: str = "inspector", note: bool = True,
                   pair: Callable[[], bool] | None = None) -> None:
    """The far-fact section of a page: a held-out far story (fixed rule) or the reader's own, then what the
    answer-predicting token did with the fact's compressed entries. Never stops the page. A fragment: choosing
    the story or editing one's own reruns only this panel, not the page around it (the inspector's eight figures,
    the pools' tables). `note=False` leaves out what the weights do on far recall, for a page that says it at its
    top already. `pair`: draws the same story on both shipped checkpoints side by side first (the page passes
    ui.pair.far_pair, which draws with this module's figure), True when it drew. The sidebar's weights' own
    reading is folded under a title that states its result: the side-by-side above it is the page's summary."""
    st.subheader("Far fact: does the answer reach back?")
    if pair is not None:
        pair()
    with st.expander(panel_title(sess), expanded=False):
        _panel_body(sess, key, focus, note)


def _panel_body(sess, key: str, focus: str, note: bool) -> None:
    model = sess.model
    if model is None or getattr(model, "tokenizer", None) is None:
        st.info("The far-fact view needs a loaded model with a tokenizer.")
        return
    cfg = model.cfg
    if note:
        weights_line_link(sess)
    _offer_other_weights(sess, key)
    # what "far" means and which roads reach it, said once, together (the picture below comes first)
    with st.expander("What this shows, and what counts as far", expanded=False):
        intro, *notes = about(cfg.num_hidden_layers, cfg.sliding_window)
        st.write(intro)
        for line in notes:
            st.caption(line)
    src = url.bound(st.radio, f"{key}_ff_src", SOURCE, "Story", SOURCES, horizontal=True,
                    label_visibility="collapsed")
    own = src == SOURCES[1]
    if own:
        url.leave_out(rank_param(1, 1))     # the held-out story's place (its bounds do not matter here)
    else:
        url.leave_out(*OWN)                 # the reader's story, fact and answer
    rank = None
    try:
        if not own:
            story, tokens, rank = _held_out(key, sess, model)
        else:
            story, tokens = _own(key, model)
            if story is None:
                return
        v = far_fact_run(sess, story, tokens, focus)
        if v is None:               # the server is busy: the message says so
            return
    except Exception as e:  # a model-side problem becomes a message; the rest of the page still works
        st.error("The far-fact view could not run: " + type(e).__name__)
        st.text(str(e)[:300])
        return
    for col, m in zip(st.columns(4), v.metrics):
        col.metric(m.label, m.value, help=m.help or None)
    st.markdown(bullets(v.lines))
    st.plotly_chart(built(far_fact_figure, v.ff, sess.num), width="stretch", key=f"{key}_ff_fig",
                    config={"displayModeBar": False})
    st.code(v.marked, language=None, wrap_lines=True)
    st.caption("Above: the story around the fact. Between ⟦ ⟧ the tokens packed in the fact's entries of the "
               "coarsest compressed layers; ‖ marks where the answer token's window begins.")
    percent = {c: st.column_config.NumberColumn(c, format="%.2f") for c in (v.rows[0] if v.rows else {})
               if str(c).endswith("(%)")}
    st.dataframe(pd.DataFrame(v.rows), hide_index=True, column_config=percent,
                 key=f"{key}_ff_heads" if focus == "shares" else f"{key}_ff_table")
    if v.answers:
        st.dataframe(pd.DataFrame(v.answers), hide_index=True, key=f"{key}_ff_answers")
    with st.expander("How these numbers are derived", expanded=False):
        st.markdown(bullets(v.ff.derivation))
    ss = st.session_state
    reproduce(snippets.far_fact(sess.weights, own, ss.get(f"{key}_ff_story", ""), ss.get(f"{key}_ff_fact", ""),
                                ss.get(f"{key}_ff_answer", ""), sess.one_based, rank), f"far-fact-{key}")
