"""CSA2 modes: one stepped picture of the mechanism on the current prompt (lessons/mechanism.py, drawn by
ui/mechanism.py), the Full / Reuse / Reindex table, then what each layer of the running model actually computed
on that prompt, counted from its trace (lessons/layers.py)."""

import pandas as pd
import streamlit as st

from lessons import reproduce as snippets
from lessons.layers import (
    COUNTED_NOT_RESTATED,
    CSA2_PATH,
    HOW_COUNTED,
    LABELS_TEXT,
    MAP_DISAGREES,
    MODES,
    MODES_NOTE,
    POOL_SCORING,
    SEPARATE_DECISIONS,
    computed_by_layer,
    computed_rows,
    full_reads_subset,
    map_line,
    mode_checks,
    traced_caption,
)
from ui.live import picked_trace
from ui.mechanism import mechanism_view
from ui.reproduce import reproduce
from ui.session import page_header
from ui.tour import shows
from ui.url import stop

sess = page_header("CSA2: Full, Reuse, Reindex")
if shows("csa2_intro"):
    st.write(CSA2_PATH)
lt = picked_trace(sess)
mechanism_view(sess, lt, "csa2_mech")
if not shows("csa2_rest"):     # the tour's stop on the picture: the rest of the page folds away
    stop()

st.subheader("The three labels")
st.write(LABELS_TEXT)
st.table(pd.DataFrame(MODES), hide_index=True)   # sentences: wrapped in full, not cut to one line
st.info(MODES_NOTE)

st.subheader("What each layer actually did")
st.write(COUNTED_NOT_RESTATED)
comp = computed_by_layer(lt.trace)
st.caption(traced_caption(lt.n_tokens, sess.label))
st.dataframe(pd.DataFrame(computed_rows(comp, sess.one_based)), hide_index=True, key="csa2_computed",
             height=40 + 35 * len(comp))
st.markdown(SEPARATE_DECISIONS)
with st.expander("Fine print: how the counts are read, and the pool's scoring work"):
    st.caption(HOW_COUNTED)
    st.caption(POOL_SCORING)
    st.caption(map_line(sess.model.cfg, sess.one_based))
reproduce(snippets.csa2_modes(sess.weights, lt.text, sess.one_based), "csa2-modes")

checks = mode_checks(comp)
st.markdown("**Counted from the trace vs. predicted by the layer map**")
st.dataframe(pd.DataFrame([{"what": c.what, "trace": c.from_trace, "layer map": c.from_map,
                            "agree": "yes" if c.ok else "NO"} for c in checks]), hide_index=True, key="csa2_checks")
if not all(c.ok for c in checks):
    st.error(MAP_DISAGREES)

st.markdown("**\"Full\" still reads a subset**")
for line in full_reads_subset(comp, sess.one_based):
    st.write(line)
