"""Glossary: the terms every page uses, with how sure each is, and the sources (lessons/glossary.py)."""

import pandas as pd
import streamlit as st

from lessons.glossary import FIND_MAX, INTRO, find_terms, terms
from lessons.sources import SOURCES_NOTE, footer_lines
from ui import url
from ui.far_fact import weights_note_section
from ui.session import page_header

sess = page_header("Glossary", INTRO)
FIND = url.any_text("find", "", FIND_MAX)
query = url.bound(st.text_input, "glossary_find", FIND, "Find a term (words in its name or meaning)",
                  max_chars=FIND_MAX, placeholder="e.g. indexer, window, FP4")
everything = terms()
found = find_terms(query, everything)
if not found:
    st.info(f"No term holds every word of that search; all {len(everything)} terms are listed below.")
    found = everything
elif len(found) < len(everything):
    st.caption(f"{len(found)} of {len(everything)} terms.")
# a static table: every meaning in full, wrapped (an interactive grid cuts long cells to one line)
st.table(pd.DataFrame([t.row() for t in found]), hide_index=True)
if sess.model is not None:        # the pages with a far-fact view say one sentence of this and link here
    weights_note_section(sess)
st.subheader("Sources")
st.markdown(SOURCES_NOTE)
st.markdown("\n".join(f"- {line}" for line in footer_lines()))
