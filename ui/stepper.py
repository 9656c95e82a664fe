"""Back / Next arrows over a 0-based index kept in session state (a pagination widget).

It does not know what the index counts (a layer, a token, a step): the page names the session key it moves.
"""

from __future__ import annotations

from typing import Callable

import streamlit as st

from ui.url import KEEP


def stepper(key: str, count: int, target: str, then: Callable[[], None] | None = None, where=None) -> None:
    """Back / Next arrows for the 0-based index in st.session_state[target] (count values).

    A pagination widget counts the clicks in the browser and sends the position reached, so clicks that come
    faster than the page reruns are never merged into one (two clicks of one button during a rerun are)."""
    here = min(max(int(st.session_state[target]) + 1, 1), max(1, count))
    # first drawn: `default` places it (a Session State write as well would log Streamlit's "default value
    # but also set via the Session State API" warning); moved by another widget or a link: written
    if key in st.session_state and st.session_state[key] != here:
        st.session_state[key] = here

    def _moved() -> None:
        st.session_state[target] = min(max(int(st.session_state[key]) - 1, 0), count - 1)
        if then is not None:
            then()

    (where or st).pagination(max(1, count), default=here, max_visible_pages=0, key=key, on_change=_moved,
                             persist_state=KEEP, disabled=count <= 1)
