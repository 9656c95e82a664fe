"""Glossary: the terms every page uses, with how sure each is, and the sources (lessons/glossary.py)."""

import pandas as pd
import streamlit as st

from lessons.glossary import INTRO, terms
from lessons.sources import SOURCES_NOTE, footer_lines
from ui.common import page_header

sess = page_header("Glossary", INTRO)
st.dataframe(pd.DataFrame([t.row() for t in terms()]), hide_index=True, key="glossary_terms", width="stretch")
st.subheader("Sources")
st.markdown(SOURCES_NOTE)
st.markdown("\n".join(f"- {line}" for line in footer_lines()))
