"""The guided tour's drawing: the bar under a page's title (the stop's question, where to look, the takeaway, Back
and Next), the outline around the part of the page the stop talks about, and the "Start the tour" button.

The stops are data (lessons/tour.py). The stop being shown lives in the URL (`?stop=<key>`), so the browser's
Back button and a reload return to it; Back and Next move between pages with st.switch_page. The outline is a
style rule on the element whose key the stop names (Streamlit gives it the class `st-key-<key>`), plus a small
script that scrolls it into view once it is drawn; a page needs no code of its own to be a stop.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st
from streamlit.errors import StreamlitAPIException
from streamlit.runtime.scriptrunner import get_script_run_ctx

from lessons.tour import HOME, Stop, index_of, neighbours, stops
from ui.text import quoted

ROOT = Path(__file__).resolve().parents[1]
PAGE_FILE = "_tour_page_file"   # the file of the page this run draws, as app.py lists it (set by app.py)
PARAM = "stop"


@st.cache_resource(show_spinner=False)
def tour() -> list[Stop]:
    return stops()


# ---- the stop in the URL (one place, so that the app's own URL helper can take it over) ----------------------
def url_stop() -> str | None:
    """The stop named in the URL, or None."""
    v = st.query_params.get(PARAM)
    return None if v is None else str(v)


def set_url_stop(key: str | None) -> None:
    """Name a stop in the URL (None removes it) without leaving the page."""
    if key is None:
        st.query_params.pop(PARAM, None)
    else:
        st.query_params[PARAM] = key


# ---- which page is drawn ----------------------------------------------------------------------------------------
def current_page() -> str:
    """The file of the page this run draws ("pages/x.py"): app.py's record, else the script run on its own."""
    f = st.session_state.get(PAGE_FILE)
    if f:
        return f
    ctx = get_script_run_ctx()
    if ctx is None:
        return ""
    p = Path(ctx.main_script_path).resolve()
    try:
        return p.relative_to(ROOT).as_posix()
    except ValueError:
        return p.name


def _switch(page: str, params: dict | None = None) -> None:
    try:
        st.switch_page(page, query_params=params)
    except StreamlitAPIException:       # a page run on its own (no navigation) cannot open another
        st.warning("This page runs on its own here, without the app's other pages: open the app to follow the tour.")


def _go(stop: Stop | None) -> None:
    """Open a stop's page with the stop in its URL (None: the home page, the tour left)."""
    if stop is None:
        if current_page() == HOME:
            set_url_stop(None)
            st.rerun()
        _switch(HOME)
    elif stop.page == current_page():
        set_url_stop(stop.key)
        st.rerun()
    else:
        _switch(stop.page, {PARAM: stop.key})


def start_button(key: str = "tour_start") -> None:
    """The home page's "Start the tour" button."""
    first = tour()[0]
    if st.button("Start the tour", key=key, type="primary", icon=":material/tour:", width="stretch",
                 help=f"{len(tour())} stops, the first: {first.title}. Each stop asks one question, outlines the "
                      "part of the page that answers it and moves on with Next."):
        _go(first)


# ---- the bar and the outline --------------------------------------------------------------------------------------
def tour_bar() -> None:
    """Under a page's title: when the URL names a stop of this page, its bar and the outline of its part; a stop
    of another page gets a link to it; a name that is no stop gets a message. Nothing without a stop."""
    key = url_stop()
    if key is None:
        return
    stops_ = tour()
    i = index_of(stops_, key)
    if i is None:
        st.warning(f"URL parameter stop = {quoted(key)} names no stop of the tour; the page is shown on its own.")
        return
    stop = stops_[i]
    if stop.page != current_page():
        c1, c2 = st.columns([3, 1], vertical_alignment="center")
        c1.info(f"Tour stop {i + 1} of {len(stops_)}, {stop.title}, is on another page.")
        if c2.button("Go to that stop", key="tour_goto"):
            _go(stop)
        return
    before, after = neighbours(stops_, i)
    with st.container(border=True, key="tour_bar"):
        top = st.columns([5, 2, 2], vertical_alignment="center")
        top[0].markdown(f"**Tour, stop {i + 1} of {len(stops_)}: {stop.title}**")
        back = top[1].button("Back" if before else "Home", key="tour_back", icon=":material/arrow_back:",
                             width="stretch", help=f"Stop {i}: {before.title}" if before else "The home page")
        nxt = top[2].button("Next" if after else "Finish", key="tour_next", icon=":material/arrow_forward:",
                            icon_position="right", type="primary", width="stretch",
                            help=f"Stop {i + 2}: {after.title}" if after else "Leave the tour")
        st.markdown(f"**{stop.question}** Look at {stop.look_at} (outlined below).")
        st.caption(stop.takeaway)
    outline(stop.spot)
    if back:
        _go(before)
    if nxt:
        _go(after)


OUTLINE_CSS = """<style>
.st-key-{spot} {{ outline: 3px solid #ff4b4b; outline-offset: 6px; border-radius: 4px; }}
</style>"""

# the spot may be drawn after this script runs (a page draws top to bottom): look for it for a while, scroll once
# (only when it starts below the screen: the tour's bar, above it, stays in view whenever the part is in view)
SCROLL_JS = """<script>
(() => {{ let tries = 0; const t = setInterval(() => {{
  const el = document.querySelector('.st-key-{spot}');
  if (el) {{ clearInterval(t);
             if (el.getBoundingClientRect().top > window.innerHeight - 150)
               el.scrollIntoView({{block: 'start', behavior: 'smooth'}}); }}
  else if (++tries > 100) clearInterval(t);
}}, 200); }})();
</script>"""


def outline(spot: str) -> None:
    """Outline the element with key `spot` and scroll it into view once it is drawn (our own key: no user text)."""
    safe = "".join(ch for ch in spot if ch.isalnum() or ch in "_-")
    st.html(OUTLINE_CSS.format(spot=safe) + SCROLL_JS.format(spot=safe), unsafe_allow_javascript=True)
