"""Is this recurrence? Reuse shares prepared data, recurrence would share the weights: checked on the running
model's real tensors and on a trace (lessons/recurrence.py)."""

import pandas as pd
import streamlit as st

from lessons import reproduce as snippets
from lessons.layers import map_line
from lessons.recurrence import (
    CONTRAST,
    INTRO,
    NO_REUSE,
    TOKEN_RECURRENCE_NOTE,
    beside_title,
    layer_param_count,
    not_reuse,
    own_params,
    own_update,
    param_comparison,
    picks_sentence,
    reuse_facts,
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
    st.info(NO_REUSE)
    stop()
LAYER = url.layer(len(specs), reuse[0], f"showing layer {sess.num(reuse[0])}")
url.seeded("rec_layer", LAYER)
if st.session_state["rec_layer"] not in reuse:
    st.warning(not_reuse(sess.num(st.session_state["rec_layer"]), sess.num(reuse[0])))
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
st.write(own_params(sess.num(layer), layer_param_count(model, layer), sess.num(spec.kv_source),
                    layer_param_count(model, spec.kv_source)))
st.dataframe(pd.DataFrame([{"tensor": r.name, "shape here": str(r.shape_layer or "-"),
                            "shape in source": str(r.shape_source or "-"), "where": r.where,
                            "same storage": "-" if r.same_storage is None else ("YES" if r.same_storage else "no"),
                            "largest |difference|": "-" if r.max_abs_diff is None else f"{r.max_abs_diff:.3g}"}
                           for r in rows]), hide_index=True, key="rec_params", height=320)
sc = storage_check(model)
(st.error if sc.shared_pairs else st.success)(sc.sentence(len(specs)))

# ---- the data -------------------------------------------------------------------------------------------
st.subheader("What the Reuse layer does share")
lt = picked_trace(sess)
rf = reuse_facts(lt.trace, layer)
st.write(picks_sentence(rf, lt.n_tokens, sess.num))
reproduce(snippets.recurrence(sess.weights, lt.text, layer), "recurrence")
picker = sess.num(rf.index_source)
st.write(own_update(rf, picker, lt.n_tokens))
# the same Reuse layer on a recall checkpoint, whose entries carry weight: the same picks, its own shares
st.markdown(beside_title(sess.num(layer)))
reuse_pair(sess, lt, layer)
