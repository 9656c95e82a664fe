"""The "Reproduce in Python" expander: a page's snippet (lessons/reproduce.py), copyable and downloadable."""

from __future__ import annotations

import streamlit as st

NOTE = ("The same numbers from a script: it imports only this project's `model` and `lessons`, finds the shipped "
        "weights itself, and runs from any folder where the project is installed (`pip install -e .`). Timings and "
        "sampled runs are the exceptions: they differ from run to run.")


def reproduce(code: str, name: str) -> None:
    with st.expander("Reproduce in Python", expanded=False):
        st.caption(NOTE)
        st.code(code, language="python")
        st.download_button("Download as .py", code, file_name=f"{name}.py", mime="text/x-python",
                           key=f"repro_{name}")
