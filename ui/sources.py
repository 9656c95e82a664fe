"""The sources footer every page draws: a link to the glossary and the public sources, with how sure each is.

It goes at the bottom of the sidebar (drawn right after `ui.session.sidebar()`), so it shows on every page
even when a page stops early for a missing input.
"""

from __future__ import annotations

import streamlit as st

from lessons.home import scale_rows
from lessons.sources import SOURCES_NOTE, footer_lines
from model import V41Config

GLOSSARY = "pages/glossary.py"


def sources_footer() -> None:
    with st.sidebar:
        st.divider()
        if not page_link(GLOSSARY, "Glossary", "📖"):
            st.markdown("[Glossary](glossary)")
        with st.expander("Sources"):
            st.markdown(SOURCES_NOTE)
            st.markdown(scale_table())
            st.markdown("\n".join(f"- {line}" for line in footer_lines()))


@st.cache_data(show_spinner=False)
def scale_table() -> str:
    """The release beside the shipped tiny config (lessons.home.scale_rows), as a Markdown table (its cells are
    numbers and our own words, never a reader's text)."""
    rows = scale_rows(V41Config.preset("v4.1-flash"), V41Config.preset("tiny"))
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def page_link(path: str, label: str, icon: str, query_params: dict[str, str] | None = None) -> bool:
    """A link to another page of the app (with `query_params` for that page's URL, e.g. a prompt to open it with);
    False (and nothing drawn) where the page runs on its own (tests, `streamlit run pages/x.py`), which has no page
    registry."""
    try:
        st.page_link(path, label=label, icon=icon, query_params=query_params)
    except Exception:  # no registry: the page is not part of an app run
        return False
    return True
