"""Layer map: every layer's role, ratio and sources, with the grouped counts of the first seed's reference
table, for the released config and the running model side by side (lessons/layers.py)."""

import pandas as pd
import streamlit as st

from lessons.figure3 import notation
from lessons.layers import bounded_note, count_table, engram_sentence, layer_rows, reference_numbers, role_counts
from model import V41Config, layer_map
from ui import url
from ui.cache import built
from ui.figures import layer_map_figure
from ui.session import page_header

sess = page_header("Layer map")
st.write("Every layer of the backbone, derived from the config (never typed in): which stack it belongs to, "
         "which CSA2 role it plays, how tightly its compressed entries are packed, whose entries and whose "
         "selection it reads, and where Engram looks things up.")


@st.cache_resource
def _full_cfg() -> V41Config:
    return V41Config.preset("v4.1-flash")


configs = {"full": ("Released V4.1-Flash", _full_cfg())}
if sess.model is not None:
    configs["running"] = (f"Running: {sess.model.cfg.name}", sess.model.cfg)

n_max = max(c.num_hidden_layers for _, c in configs.values())
NO_LAYER = -1
LAYER = url.layer(n_max, NO_LAYER, "no layer is highlighted")
url.seeded("lm_layer", LAYER)
st.plotly_chart(built(layer_map_figure, [(name, layer_map(c)) for name, c in configs.values()], sess.one_based,
                      st.session_state["lm_layer"] if st.session_state["lm_layer"] >= 0 else None),
                key="lm_strip", config={"displayModeBar": False})

st.subheader("Counting the layers")
cols = st.columns(len(configs))
for col, (key, (name, cfg)) in zip(cols, configs.items()):
    with col:
        st.markdown(f"**{name}**")
        rows = count_table(cfg)
        # a static table: the arithmetic column wraps instead of being cut at the column's edge
        st.table(pd.DataFrame([{"part": r.part, "layers": r.formula, "count": r.count, "arithmetic": r.derivation}
                               for r in rows]), hide_index=True)
# the page's caveats and notes in one place, below the view
with st.expander("Fine print: notation, Engram, what the counts leave out"):
    st.caption(notation(_full_cfg(), sess.one_based))
    cols = st.columns(len(configs))
    for col, (key, (name, cfg)) in zip(cols, configs.items()):
        with col:
            st.markdown(f"**{name}**")
            st.caption(engram_sentence(cfg))
            rc = role_counts(cfg)
            st.caption(" · ".join(f"{stack}: " + ", ".join(f"{v} {k}" for k, v in d.items())
                                  for stack, d in rc.items()))
    st.caption("The vision encoder and the DSpark drafter are extra networks beside the backbone and are not in "
               "these counts.")
with st.expander("Reference numbers behind the map"):
    cols = st.columns(len(configs))
    for col, (key, (name, cfg)) in zip(cols, configs.items()):
        with col:
            st.markdown(f"**{name}**")
            st.dataframe(pd.DataFrame(reference_numbers(cfg, sess.one_based)), hide_index=True, key=f"lm_ref_{key}")
    st.caption(bounded_note(_full_cfg(), "the full-size DeepSeek-V4.1-Flash"))

st.subheader("Per layer")
TABLE = url.choice("table", list(configs), "full", f"one of {', '.join(configs)}",
                   instead="showing the released config instead")
url.seeded("lm_table", TABLE)
if st.session_state["lm_table"] not in configs:     # a checkpoint failed to load since
    st.session_state["lm_table"] = "full"
table = st.radio("Table for", list(configs), format_func=lambda k: configs[k][0], horizontal=True, key="lm_table",
                 persist_state=url.KEEP)
cfg = configs[table][1]
rows = layer_rows(cfg, sess.one_based)
df = pd.DataFrame(rows)
options = [-1] + list(range(cfg.num_hidden_layers))
if st.session_state["lm_layer"] not in options:
    st.session_state["lm_layer"] = -1
layer = st.selectbox("Highlight a layer", options, key="lm_layer", persist_state=url.KEEP,
                     format_func=lambda i: "(none)" if i < 0 else f"layer {sess.num(i)}: {rows[i]['role']}")
numbering = "1-based" if sess.one_based else "0-based"
st.caption(f"KV source and index source are given {numbering}, like the numbering chosen in the sidebar.")
if layer >= 0:
    st.info(f"Layer {sess.num(layer)} ({rows[layer]['stack']}, {rows[layer]['role']}): "
            f"{rows[layer]['what it does']}.")
st.dataframe(df, hide_index=True, height=min(40 + 35 * len(rows), 1450), key="lm_table_df")
url.to_link(TABLE, table)
url.to_link(LAYER, layer)
