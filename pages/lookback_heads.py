"""Look-back heads: a span of held-out text (or the reader's own) said twice; every head's previous-token and
induction shares, one head's pattern over the first copy, and whether the model copies (lessons/lookback_heads.py).
User text is shown only through widgets, st.code, dataframes and escaped figure labels.
"""

from __future__ import annotations

import statistics

import streamlit as st

from lessons import reproduce as snippets
from lessons.how_trained import training_clause
from lessons.lookback_heads import (
    DIAGONAL,
    EVEN_HELP,
    GAP_MAX,
    INDUCTION_COUNTS,
    INTRO,
    LOOK_NOT_COPY,
    MISSING_TEXT,
    NO_LOGITS,
    PASSAGE_HELP,
    REACH,
    SPAN_DEFAULT,
    SPAN_MAX,
    SPAN_MIN,
    SWEEP,
    SWEEP_GAPS,
    SWEEP_WAITS,
    copy_row,
    explain,
    gap_help,
    head_pattern,
    lens_line,
    lens_rise,
    look_back,
    mean_share_line,
    passage_count,
    passage_parts,
    reach_sweep,
    row_caption,
    sweep_line,
    too_short,
)
from model.heldout import heldout_natural_tokens
from ui import url
from ui.cache import built, cached_with_progress
from ui.far_fact import session_record
from ui.figures import share_heatmap, show_token, stacked_bars, two_places
from ui.figures_run import label, lens_rise_figure, reach_figure
from ui.live import forward
from ui.prompt import PROMPT, typed_prompt
from ui.reproduce import reproduce
from ui.session import page_header, require_model
from ui.text import lead, plain, sentences
from ui.url import stop

OWN_CHARS = 2_000          # the reader's span: only its first SPAN_MAX tokens are used

INTRO_LEAD, INTRO_REST = lead(INTRO, 1)
sess = page_header("Look-back heads", INTRO_LEAD)
model = require_model(sess)
window = model.cfg.sliding_window
reach = sentences(REACH.format(window=window))
st.write(" ".join([reach[0], reach[-1]]))          # the rule and what to try; how older text gets in, below
with st.expander("Previous-token and induction heads: what this page looks for"):
    st.write(INTRO_REST)
    st.write(" ".join(reach[1:-1]))


@st.cache_data(show_spinner=False, max_entries=4)
def heldout_ids(weights_label: str, _tokenizer) -> list[int]:
    """The shipped held-out prose as token ids (one tokenizer per loaded weights)."""
    return heldout_natural_tokens(_tokenizer).tolist()


tokens = heldout_ids(sess.label, model.tokenizer)
n_passages = passage_count(len(tokens))
if n_passages < 1:
    st.error(MISSING_TEXT)
    stop()

# ---- the row: which span, how far apart ----------------------------------------------------------------------------
SOURCES = {"passage": "A held-out passage", "own": "Your own text"}
c = st.columns([2, 1, 2, 3])
source = url.bound(c[0].radio, "lb_source",
                   url.choice("source", list(SOURCES), "passage", "a source (passage or own)",
                              instead="the page's own choice is shown"),
                   "Span", list(SOURCES), format_func=lambda s: SOURCES[s])
passage = url.bound(c[1].number_input, "lb_passage", url.whole("passage", 1, n_passages, 1, "showing passage 1"),
                    "Passage", 1, n_passages,
                    help=PASSAGE_HELP)
span = url.bound(c[2].slider, "lb_span",
                 url.whole("span", SPAN_MIN, SPAN_MAX, SPAN_DEFAULT, f"showing {SPAN_DEFAULT} tokens"),
                 "Span length (tokens)", SPAN_MIN, SPAN_MAX)
gap = url.bound(c[3].slider, "lb_gap", url.whole("gap", 0, GAP_MAX, 4, "showing a gap of 4"),
                "Other tokens between the copies", 0, GAP_MAX,
                help=gap_help(window))
lead_ids, span_ids, filler = passage_parts(tokens, passage - 1, span, gap)
if source == "own":
    own, problem = typed_prompt("lb_text", "", OWN_CHARS, "Your text (its first tokens are the span)", samples=True)
    if problem:
        st.warning(problem)
        stop()
    span_ids = model.encode(own)[:span]
    if len(span_ids) < SPAN_MIN:
        st.warning(too_short(len(span_ids)))
        stop()
else:
    url.leave_out(PROMPT)
ids, layout = copy_row(lead_ids, span_ids, filler)
st.caption(row_caption(layout, gap))
st.code(model.decode(span_ids), language=None, wrap_lines=True)

try:
    trace = forward(sess, "trace", ids, what="tracing the two copies through every layer", lens="lazy")
except Exception as e:  # a model-side rejection becomes a message
    st.error(f"The model could not run this row: {plain(e)}")
    stop()
if trace is None:
    stop()
lb = look_back(trace, layout)

# ---- every head at once --------------------------------------------------------------------------------------------
st.subheader("Every head at the second copy")
if (record := session_record(sess)) is not None:       # how these weights came by their heads, from their record
    st.caption(training_clause(record, "copy"))
best = lb.best()
m = st.columns(4)
m[0].metric("Strongest look-back share", f"{best.induction:.2f}",
            help=f"layer {sess.num(best.layer)}, head {best.head}")
m[1].metric("Same head, spread evenly", f"{best.even:.3f}",
            help=EVEN_HELP)
if lb.copy is not None:
    n_rows = len(lb.copy.expected)
    m[2].metric("Copied, second time", f"{round(lb.copy.second_rate * n_rows)} of {n_rows}")
    m[3].metric("Right, first time", f"{round(lb.copy.first_rate * n_rows)} of {n_rows}")
layer_names = [f"layer {sess.num(i)} ({trace.layers[i].spec.role})" for i in lb.layers]
head_names = [f"head {h}" for h in range(lb.n_heads)]
g = st.columns(2)
g[0].plotly_chart(built(share_heatmap, lb.grid("induction"), head_names, layer_names, zmax=1.0,
                        title="On the token after the match (induction)"), key="lb_ind",
                  config={"displayModeBar": False})
g[1].plotly_chart(built(share_heatmap, lb.grid("prev"), head_names, layer_names, zmax=1.0,
                        title="On the token just before (previous token)"), key="lb_prev",
                  config={"displayModeBar": False})
st.caption(INDUCTION_COUNTS)
for sentence in explain(lb, sess.num):       # what the maps show, in words, under them
    st.write(sentence)

# ---- one head's pattern --------------------------------------------------------------------------------------------
st.subheader("One head, query by query")
n_layers = len(trace.layers)
LAYER = url.layer(n_layers, best.layer, "showing the strongest head's layer")
HEAD = url.whole("head", 0, lb.n_heads - 1, best.head, "showing the strongest head")


def _to_best() -> None:
    st.session_state["lb_layer"], st.session_state["lb_head"] = best.layer, best.head


h = st.columns([2, 1, 2])
layer = url.bound(h[0].selectbox, "lb_layer", LAYER, "Layer", lb.layers,
                  fit=lambda v: v if v in lb.layers else best.layer,      # another model, or a layer without shares
                  format_func=lambda i: f"layer {sess.num(i)}: {trace.layers[i].spec.role}")
head = url.bound(h[1].selectbox, "lb_head", HEAD, "Head", list(range(lb.n_heads)),
                 fit=lambda v: v if v < lb.n_heads else best.head)
h[2].button("Strongest look-back head", on_click=_to_best, key="lb_best")
hp = head_pattern(trace, layout, layer, head)
first_tokens = [show_token(model.decode([i])) for i in span_ids]
queries = [f"{k}: {label(t, 16)}" for k, t in enumerate(first_tokens[:-1])]
st.plotly_chart(built(share_heatmap, hp.on_first, [label(t, 16) for t in first_tokens], queries, zmax=1.0,
                      title=f"Layer {sess.num(layer)}, head {head}: each token of the second copy (rows) "
                            "looking at the first copy (columns)"),
                key="lb_pattern", config={"displayModeBar": False})
st.caption(DIAGONAL)
parts = {"token after the match": hp.after_match,
         "rest of the first copy": [sum(r) - a for r, a in zip(hp.on_first, hp.after_match)],
         "entries packing the first copy": hp.packed_first,
         "everything else": hp.elsewhere, "sink": hp.sink}
st.plotly_chart(built(stacked_bars, queries, parts, title="Where each query's attention went", axis_title="share",
                      text_fmt=two_places, height=380), key="lb_split", config={"displayModeBar": False})
even = statistics.fmean(r.even for r in lb.heads if r.layer == layer)
st.write(mean_share_line(hp.after_match, even))

# ---- how far back? ------------------------------------------------------------------------------------------------
st.subheader("How far back can it look?")
st.write(SWEEP.format(gap_max=SWEEP_GAPS[-1]))
sweep_key = (sess.label, passage - 1, tuple(span_ids))
if st.button(f"Sweep the gap ({len(SWEEP_GAPS)} traces)", key="lb_sweep"):
    st.session_state["lb_swept"] = sweep_key
if st.session_state.get("lb_swept") == sweep_key:
    try:
        points = cached_with_progress("lookback_sweep", sweep_key,
                                      lambda progress: reach_sweep(model, tokens, passage - 1, span_ids,
                                                                   progress=progress),
                                      f"Tracing the span at {len(SWEEP_GAPS)} gaps ...", max_entries=16)
    except Exception as e:  # a model-side rejection becomes a message
        st.error(f"The model could not run the sweep: {plain(e)}")
    else:
        st.plotly_chart(built(reach_figure, points, window, title="The strongest head and the copy, by distance"),
                        key="lb_reach", config={"displayModeBar": False})
        if (line := sweep_line(points, window)) is not None:
            st.write(line)
else:
    st.caption(SWEEP_WAITS)

# ---- does it copy? -------------------------------------------------------------------------------------------------
st.subheader("Does the model copy?")
st.write(LOOK_NOT_COPY)
if lb.copy is None:
    st.info(NO_LOGITS)
else:
    cc = lb.copy

    def word(i: int) -> str:
        return show_token(model.decode([i]))

    st.dataframe({"after": [first_tokens[k] for k in range(len(cc.expected))],
                  "next in the span": [word(i) for i in cc.expected],
                  "first time: top guess": [word(i) for i in cc.first_top],
                  "first time: p(next)": [round(p, 3) for p in cc.first_p],
                  "second time: top guess": [word(i) for i in cc.second_top],
                  "second time: p(next)": [round(p, 3) for p in cc.second_p]},
                 hide_index=True, key="lb_copy")
rise = lens_rise(trace, layout)
if rise is not None:
    st.plotly_chart(built(lens_rise_figure, rise, [f"layer {sess.num(i)}" for i in rise.layers],
                          title="The span's next token, layer by layer (logit lens)"),
                    key="lb_lens", config={"displayModeBar": False})
    st.write(lens_line(rise, sess.num))
reproduce(snippets.lookback_heads(sess.weights, passage - 1, span, gap, layer, head, own if source == "own" else None),
          "lookback-heads")
