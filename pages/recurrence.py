"""Is this recurrence? Reuse shares prepared data, recurrence would share the weights: checked on the running
model's real tensors and on a trace (lessons/recurrence.py)."""

import pandas as pd
import streamlit as st

from lessons import reproduce as snippets
from lessons.layers import map_line
from lessons.recurrence import (
    CONTRAST,
    INTRO,
    TOKEN_RECURRENCE_NOTE,
    layer_param_count,
    param_comparison,
    reuse_facts,
    shares_sentence,
    storage_check,
)
from model import layer_map
from ui import url
from ui.cache import built
from ui.figures import layer_map_figure
from ui.live import picked_trace
from ui.reproduce import reproduce
from ui.session import page_header, require_model
from ui.step_pair import reuse_pair
from ui.url import stop

sess = page_header("Is this recurrence?", INTRO)
st.dataframe(pd.DataFrame(CONTRAST), hide_index=True, key="rec_contrast")

model = require_model(sess)
specs = layer_map(model.cfg)
reuse = [s.index for s in specs if s.role == "Reuse"]
if not reuse:
    st.info("This model has no Reuse layers to check.")
    stop()
LAYER = url.layer(len(specs), reuse[0], f"showing layer {sess.num(reuse[0])}")
url.seeded("rec_layer", LAYER)
if st.session_state["rec_layer"] not in reuse:
    st.warning(f"Layer {sess.num(st.session_state['rec_layer'])} is not a Reuse layer; "
               f"showing layer {sess.num(reuse[0])}.")
    st.session_state["rec_layer"] = reuse[0]
layer = st.selectbox("Reuse layer", reuse, key="rec_layer", persist_state=url.KEEP,
                     format_func=lambda i: f"layer {sess.num(i)} (entries from layer {sess.num(specs[i].kv_source)})")
url.to_link(LAYER, layer)
spec = specs[layer]
st.plotly_chart(built(layer_map_figure, [(model.cfg.name, specs)], sess.one_based, highlight=layer), key="rec_strip",
                config={"displayModeBar": False})
with st.expander("Fine print: recurrence along the sequence, and this model's layer numbers"):
    st.caption(TOKEN_RECURRENCE_NOTE)
    st.caption(map_line(model.cfg, sess.one_based))

# ---- the weights ----------------------------------------------------------------------------------------
st.subheader(f"The weights of layer {sess.num(layer)} and of layer {sess.num(spec.kv_source)}")
rows = param_comparison(model, layer, spec.kv_source)
both = [r for r in rows if r.where == "both"]
shared = [r for r in both if r.same_storage]
only_src = [r for r in rows if r.where == "source only"]
c = st.columns(3)
c[0].metric("tensors in both layers", len(both))
c[1].metric("of them the same storage", len(shared))
c[2].metric(f"tensors only layer {sess.num(spec.kv_source)} has", len(only_src))
st.write(f"Layer {sess.num(layer)} has {layer_param_count(model, layer):,} parameters of its own; layer "
         f"{sess.num(spec.kv_source)} has {layer_param_count(model, spec.kv_source):,}. The extra tensors on the "
         "source side are its compressor and indexer: the machinery that prepares the entries the Reuse "
         "layer only reads.")
st.dataframe(pd.DataFrame([{"tensor": r.name, "shape here": str(r.shape_layer or "-"),
                            "shape in source": str(r.shape_source or "-"), "where": r.where,
                            "same storage": "-" if r.same_storage is None else ("YES" if r.same_storage else "no"),
                            "largest |difference|": "-" if r.max_abs_diff is None else f"{r.max_abs_diff:.3g}"}
                           for r in rows]), hide_index=True, key="rec_params", height=320)
sc = storage_check(model)
if sc.shared_pairs:
    st.error(f"{len(sc.shared_pairs)} tensors share storage across layers, e.g. {sc.shared_pairs[0]}.")
else:
    st.success(f"Across all {len(specs)} layers: {sc.tensors} parameter tensors, {sc.distinct} distinct storages. "
               "No layer applies another layer's weights, so this is not recurrence in depth.")

# ---- the data -------------------------------------------------------------------------------------------
st.subheader("What the Reuse layer does share")
lt = picked_trace(sess)
rf = reuse_facts(lt.trace, layer)
st.write(f"On {lt.n_tokens} tokens, layer {sess.num(rf.kv_source)} made {rf.entries_read} entries. Each query of "
         f"layer {sess.num(layer)} read only the ones layer {sess.num(rf.index_source)} picked for it: at most "
         f"{rf.max_read_per_query} per query, at the same positions: "
         + ("**identical picks on every row** (checked)." if rf.same_selection else "**the picks differ**."))
reproduce(snippets.recurrence(sess.weights, lt.text, layer), "recurrence")
picker = sess.num(rf.index_source)
st.write(f"{shares_sentence(rf, picker)} And its update is its own: on {rf.lens_differs} of {lt.n_tokens} rows, "
         f"the top logit-lens token after this layer differs from the one after layer {picker}.")
# the same Reuse layer on a recall checkpoint, whose entries carry weight: the same picks, its own shares
st.markdown(f"**Layer {sess.num(layer)} beside a recall checkpoint's, at the last token**")
reuse_pair(sess, lt, layer)
