"""Attention shares: the two-value toy (10 and 30 give 14 and 28), then the real shares of the running model
for a chosen layer, head and query position, and a Reuse layer beside its source (lessons/attention_shares.py)."""

import streamlit as st

from lessons import reproduce as snippets
from lessons.attention_shares import (
    CHECK_FOLLOWUP,
    CHECK_QUESTION,
    MAP_CAPTION,
    NO_REUSE,
    THREE_PLACES,
    TOY_INTRO,
    TOY_POINT,
    TOY_QUERIES,
    TOY_VALUES,
    check_answer,
    fmt,
    no_entry_yet,
    query_caption,
    reuse_comparison,
    share_view,
    two_value_mix,
)
from lessons.layers import map_line
from lessons.recurrence import not_reuse
from ui import url
from ui.cache import built
from ui.far_fact import far_fact_panel
from ui.figures import grouped_bars, share_heatmap, stacked_bars
from ui.live import picked_trace
from ui.pair import far_pair
from ui.reproduce import reproduce
from ui.session import page_header
from ui.sources import page_link
from ui.text import quoted
from ui.url import stop

sess = page_header("Same entries, new shares")

# ---- the toy -------------------------------------------------------------------------------------
st.subheader("Two stored values")
st.write(TOY_INTRO)
results = []
cols = st.columns(len(TOY_QUERIES))
for col, (i, (name, default)) in zip(cols, enumerate(TOY_QUERIES)):
    toy = url.whole(f"toy{i}", 0, 100, round(default * 100), f"showing {round(default * 100)}")
    with col:
        pct = url.bound(st.slider, f"toy_{i}", toy, f"{name}: share given to {fmt(TOY_VALUES[0])} (%)", 0, 100,
                        step=5)
        r = two_value_mix(pct)
        results.append((name, r))
        st.metric(f"{name} reads", fmt(r.result))
        st.caption(r.derivation())
parts = {f"{fmt(v)} x its share": [r.shares[k] * v for _, r in results] for k, v in enumerate(TOY_VALUES)}
st.plotly_chart(built(stacked_bars, [n for n, _ in results], parts, title="What each query reads", axis_title="result",
                      text_fmt=fmt, height=220), key="toy_bars", config={"displayModeBar": False})
st.write(TOY_POINT)

# ---- live shares -----------------------------------------------------------------------------------------
st.subheader("The same idea in the running model")
far_pair(sess, "sh_pair", "shares")
st.write(THREE_PLACES)
lt = picked_trace(sess)
tr, n_tok = lt.trace, lt.n_tokens
n_layers = len(tr.layers)
heads = tr.layers[0].shares.window.shape[2]
comp_layers = [r.spec.index for r in tr.layers if r.spec.compress_ratio]
default_layer = comp_layers[0] if comp_layers else 0
LAYER = url.layer(n_layers, default_layer, f"showing layer {sess.num(default_layer)}")
HEAD = url.whole("head", 0, heads - 1, 0, "showing head 0")
POS = url.whole("pos", 0, n_tok - 1, n_tok - 1, f"showing the last position, {n_tok - 1}")
for key, p in (("sh_layer", LAYER), ("sh_head", HEAD), ("sh_pos", POS)):
    url.seeded(key, p)
if st.session_state["sh_layer"] >= n_layers:    # another model with fewer layers
    st.session_state["sh_layer"] = default_layer
if st.session_state["sh_head"] >= heads:
    st.session_state["sh_head"] = 0
# written every run: a slider whose range changes (a shorter prompt) is a new widget to Streamlit, which would
# otherwise start it at its minimum
st.session_state["sh_pos"] = min(int(st.session_state["sh_pos"]), n_tok - 1)
c = st.columns([2, 1, 3])
layer = c[0].selectbox("Layer", list(range(n_layers)), key="sh_layer", persist_state=url.KEEP,
                       format_func=lambda i: f"layer {sess.num(i)}: {tr.layers[i].spec.role}")
head = c[1].selectbox("Head (for the comparison)", list(range(heads)), key="sh_head", persist_state=url.KEEP)
if n_tok > 1:
    pos = c[2].slider("Query position", 0, n_tok - 1, key="sh_pos", persist_state=url.KEEP)
else:
    pos = 0
for p, v in ((LAYER, layer), (HEAD, head), (POS, pos)):
    url.to_link(p, v)
view = share_view(tr, layer, pos, lt.tokens)
st.caption(query_caption(pos, quoted(lt.tokens[pos]), sess.num(layer), tr.layers[layer].spec.role, view))
st.plotly_chart(built(share_heatmap, view.shares, view.labels, [f"head {h}" for h in range(heads)], kinds=view.kinds,
                      title=f"Shares at layer {sess.num(layer)}, position {pos}"),
                key="sh_heat", config={"displayModeBar": False})
st.caption(MAP_CAPTION + map_line(sess.model.cfg, sess.one_based))
tot = view.totals
st.dataframe({"head": list(range(heads)), "window": [round(t["window"], 3) for t in tot],
              "selected entries": [round(t["entries"], 3) for t in tot], "sink": [round(t["sink"], 3) for t in tot],
              "sum": [round(sum(t.values()), 3) for t in tot]}, hide_index=True, key="sh_totals")

page_link("pages/lookback_heads.py", "Which heads look back at an earlier copy of the text? Look-back heads",
          ":material/history:")

# ---- a fact far past the window: its entries' shares at the answer token (lessons/far_fact.py) ---------------
far_fact_panel(sess, "sh", focus="shares")

# ---- a Reuse layer beside its source ---------------------------------------------------------------------
st.subheader("A Reuse layer beside the layer it copies from")
reuse_layers = [r.spec.index for r in tr.layers if r.spec.role == "Reuse"]
if not reuse_layers:
    st.info(NO_REUSE)
    reproduce(snippets.attention_shares(sess.weights, lt.text, layer, pos), "attention-shares")
    stop()
REUSE = url.layer(n_layers, reuse_layers[0], f"showing layer {sess.num(reuse_layers[0])}", name="reuse")
url.seeded("sh_reuse", REUSE)
if st.session_state["sh_reuse"] not in reuse_layers:
    st.warning(not_reuse(sess.num(st.session_state["sh_reuse"]), sess.num(reuse_layers[0])))
    st.session_state["sh_reuse"] = reuse_layers[0]
ru = st.selectbox("Reuse layer", reuse_layers, key="sh_reuse", persist_state=url.KEEP,
                  format_func=lambda i: f"layer {sess.num(i)} "
                                        f"(keeps layer {sess.num(tr.layers[i].spec.index_source)}'s selection)")
url.to_link(REUSE, ru)
cmp = reuse_comparison(tr, ru, pos, head, lt.tokens)
if not cmp.entry_ids:
    st.info(no_entry_yet(pos, tr.layers[ru].spec.compress_ratio))
else:
    src, me = f"layer {sess.num(cmp.source)} (picks)", f"layer {sess.num(cmp.layer)} (Reuse)"
    st.plotly_chart(built(grouped_bars, cmp.spans, {src: cmp.source_shares, me: cmp.layer_shares},
                          title=f"Head {head}, position {pos}: shares over the same selected entries",
                          yaxis_title="share"), key="sh_reuse_bars", config={"displayModeBar": False})
    st.write(cmp.sentence(sess.num(cmp.source), sess.num(cmp.layer)))
reproduce(snippets.attention_shares(sess.weights, lt.text, layer, pos, ru, head), "attention-shares")

st.markdown(f"**Check the idea.** {CHECK_QUESTION}")
show_answer = url.bound(st.toggle, "sh_answer", url.flag("answer", False), "Show the answer")
if show_answer:
    st.success(check_answer([r.result for _, r in results]))
    st.write(CHECK_FOLLOWUP)
