"""The guided tour's drawing: the bar under a page's title (the stop's question, where to look, the takeaway, Back
and Next), the outline around the part of the page the stop talks about, and the "Start the tour" button.

The stops are data (lessons/tour.py). The stop being shown lives in the URL (`?stop=<key>`) and only there, so the
browser's Back button and a reload return to it; Back and Next are links to
the neighbouring stops' pages (st.page_link with the stop in their query), drawn as buttons. The outline is a style
rule on the elements whose key the stop names (Streamlit gives them the class `st-key-<key>`), added by a small
script that also scrolls the part under the bar once it is drawn; a page needs no code of its own to be a stop.
"""

from __future__ import annotations

import json
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


# ---- the stop in the URL ---------------------------------------------------------------------------------------
# Only the URL holds the stop (not the session, as ui.url.link_value would): the tour's links carry it, and a
# link without it (Home, Finish, the sidebar) leaves the tour.
def url_stop() -> str | None:
    """The stop the URL names, or None (after a message quoting it when it names no stop)."""
    raw = st.query_params.get(PARAM)
    if raw is None:
        return None
    if index_of(tour(), str(raw)) is None:
        st.warning(f"URL parameter stop = {quoted(raw)} is not a stop of the tour; the page is shown on its own.")
        return None
    return str(raw)


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


def _link(key: str, stop: Stop | None, label: str, icon: str, help: str) -> None:
    """A link that opens a stop's page with the stop in its URL (None: the home page, the tour left), in a keyed
    container (styled as a button by LINK_CSS). A link, not a button that switches page: the browser moves at
    once, and the page being left does not run again (its own URL writes would race the move). A stop on the page
    being shown is a button instead (a link to the page one is on is drawn inactive): it rewrites the URL's stop."""
    page = HOME if stop is None else stop.page
    with st.container(key=key):
        if page == current_page():
            st.button(label, key=f"{key}_here", icon=icon, help=help, width="stretch",
                      type="primary" if key in ("tour_next", "tour_start") else "secondary",
                      on_click=_set_stop, args=(None if stop is None else stop.key,))
            return
        try:
            st.page_link(page, label=label, icon=icon, help=help, width="stretch",
                         query_params=None if stop is None else {PARAM: stop.key})
        except StreamlitAPIException:   # a page run on its own (no navigation) has no other page to open
            st.caption("Open the app to follow the tour.")


def _set_stop(key: str | None) -> None:
    """Button callback: name a stop of this page in the URL, or leave the tour (None)."""
    if key is None:
        st.query_params.pop(PARAM, None)
    else:
        st.query_params[PARAM] = key


LINK_CSS = """<style>
.st-key-tour_next a, .st-key-tour_start a {{ background: #ff4b4b; border-radius: 0.5rem; justify-content: center; }}
.st-key-tour_next a:hover, .st-key-tour_start a:hover {{ background: #d93a3a; }}
.st-key-tour_next a *, .st-key-tour_start a * {{ color: #fff !important; }}
.st-key-tour_back a {{ border: 1px solid rgba(49, 51, 63, 0.2); border-radius: 0.5rem; justify-content: center; }}
{extra}</style>"""


def start_button(key: str = "tour_start") -> None:
    """The home page's "Start the tour" link, drawn as a button."""
    first = tour()[0]
    st.html(LINK_CSS.format(extra=""))
    _link(key, first, "Start the tour", ":material/tour:",
          f"{len(tour())} stops, the first: {first.title}. Each stop asks one question, outlines the part of the "
          "page that answers it and moves on with Next.")


# ---- the bar and the outline --------------------------------------------------------------------------------------
def tour_bar() -> None:
    """Under a page's title: when the URL names a stop of this page, its bar and the outline of its part; a stop
    of another page gets a link to it; a name that is no stop gets a message. Nothing without a stop."""
    key = url_stop()
    stops_ = tour()
    i = index_of(stops_, key)
    if i is None:
        return
    stop = stops_[i]
    if stop.page != current_page():      # a link that names a stop of another page
        c1, c2, c3 = st.columns([4, 2, 2], vertical_alignment="center")
        c1.info(f"Tour stop {i + 1} of {len(stops_)}, {stop.title}, is on another page.")
        with c2:
            _link("tour_goto", stop, "Back to the tour", ":material/arrow_forward:", stop.question)
        c3.button("Leave the tour", key="tour_leave", on_click=_set_stop, args=(None,), width="stretch")
        return
    before, after = neighbours(stops_, i)
    with st.container(border=True, key="tour_bar"):
        top = st.columns([5, 2, 2], vertical_alignment="center")
        top[0].markdown(f"**Tour, stop {i + 1} of {len(stops_)}: {stop.title}**")
        with top[1]:
            _link("tour_back", before, "Back" if before else "Home", ":material/arrow_back:",
                  f"Stop {i}: {before.title}" if before else "The home page")
        with top[2]:
            _link("tour_next", after, "Next" if after else "Finish", ":material/arrow_forward:",
                  f"Stop {i + 2}: {after.title}" if after else "Leave the tour")
        st.markdown(f"**{stop.question}** Look at {stop.look_at} (outlined below).")
        st.caption(stop.takeaway)
    outline(stop.spot)


# the bar stays in view while the reader scrolls to the part it talks about
# (the rule goes on the bar's wrapper: a sticky element sticks inside its parent, and the wrapper is the bar's size)
BAR_CSS = """div:has(> .st-key-tour_bar) { position: sticky; top: 3rem; z-index: 990; }
.st-key-tour_bar { background: #fff; box-shadow: 0 2px 6px rgba(0, 0, 0, 0.08); }
"""

# The spot may be drawn after this script runs (a page draws top to bottom): look for the first of its keys for a
# while, outline the element with that key or keys extending it by "_..." (a rule, so the page's reruns keep it; a
# plain prefix would also catch a longer name: pd_work and pd_workload), and scroll the main
# area so that it starts just under the bar when it is not in view (above or below: a page opened from a link keeps
# the scroll of the page before).
SPOT_JS = """<script>
(() => {{ const keys = {keys}; let tries = 0; const t = setInterval(() => {{
  for (const k of keys) {{
    const sel = '.st-key-' + k + ', [class*="st-key-' + k + '_"]';   // the key, or keys that extend it by _...
    const el = document.querySelector(sel);
    if (!el) continue;
    clearInterval(t);
    const rule = document.createElement('style');
    rule.textContent = sel + ' {{ outline: 3px solid #ff4b4b; outline-offset: 6px; border-radius: 4px; }}';
    document.head.appendChild(rule);
    const bar = document.querySelector('.st-key-tour_bar');
    const under = bar ? bar.getBoundingClientRect().bottom + 16 : 80;
    const top = el.getBoundingClientRect().top;
    const main = document.querySelector('[data-testid="stMain"]');
    if (main && (top < under || top > window.innerHeight - 150)) main.scrollBy({{top: top - under}});
    return;
  }}
  if (++tries > 100) clearInterval(t);
}}, 200); }})();
</script>"""


def outline(spot: tuple[str, ...]) -> None:
    """Outline the part a stop names and scroll it into view once it is drawn (our own keys: no reader's text)."""
    keys = ["".join(ch for ch in k if ch.isalnum() or ch in "_-") for k in spot]
    st.html(LINK_CSS.format(extra=BAR_CSS) + SPOT_JS.format(keys=json.dumps(keys)), unsafe_allow_javascript=True)
