"""The guided tour's drawing: the card under a page's title (counter, the stop's question and text, Back and Next),
the outline around the part of the page the stop talks about, the folding of what the stop does not need, the
self-check at the end, and the "Start the tour" button.

The stops are data (lessons/tour.py). The stop being shown lives in the URL (`?stop=<key>`) and only there, so the
browser's Back button and a reload return to it; Back and Next are links to the neighbouring stops' pages
(st.page_link with the stop in their query), drawn as buttons. While a stop is open a page draws only the parts
the stop needs: it asks `shows(part)` before drawing a part (always True off the tour, so a page not on a stop
stays whole). The outline is a style rule inside the card's own element, so it goes when the card goes (a page
opened without a stop draws none); a small script scrolls the outlined part into the upper screen on arrival.
A page needs no other code to be a stop.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import streamlit as st
from streamlit.errors import StreamlitAPIException
from streamlit.runtime.scriptrunner import get_script_run_ctx

from lessons.tour import CHECK, DEEPER, HOME, Stop, index_of, neighbours, self_check, stops
from ui.text import quoted

ROOT = Path(__file__).resolve().parents[1]
PAGE_FILE = "_tour_page_file"   # the file of the page this run draws, as app.py lists it (set by app.py)
PARAM = "stop"
LAND_PX = 600                   # an outlined part's top lands in this many pixels of the window


def tour(num: Callable[[int], int] | None = None) -> list[Stop]:
    """The stops with layer numbers in the reader's numbering (`num`: the session's); built each run (a few ms),
    so a change of numbering shows at once."""
    return stops(num=num)


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


def open_stop() -> Stop | None:
    """The stop the URL names when it is on the page this run draws (no message: the card gives those)."""
    i = index_of(tour(), st.query_params.get(PARAM))
    stop = None if i is None else tour()[i]
    return stop if stop is not None and stop.page == current_page() else None


def shows(part: str) -> bool:
    """Whether the page draws `part` (a name the page gives one of its parts): always off the tour; while a stop
    of this page is open, only the stop's spot and the parts it keeps, so the rest folds away."""
    stop = open_stop()
    return stop is None or part in stop.spot or part in stop.keep


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


def _link(key: str, stop: Stop | None, label: str, icon: str | None, help: str) -> None:
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
          "page that answers it and moves on with Next; a self-check ends it.")


# ---- the card, the outline and the self-check ---------------------------------------------------------------------
def tour_bar(num: Callable[[int], int] | None = None) -> None:
    """Under a page's title: when the URL names a stop of this page, its card and the outline of its part (and
    on the last stop, the self-check); a stop of another page gets a link to it; a name that is no stop gets a
    message. Nothing without a stop. `num`: the reader's layer numbering."""
    key = url_stop()
    stops_ = tour(num)
    i = index_of(stops_, key)
    if i is None:
        return
    stop = stops_[i]
    n = len(stops_)
    if stop.page != current_page():      # a link that names a stop of another page
        c1, c2, c3 = st.columns([4, 2, 2], vertical_alignment="center")
        c1.info(f"Tour stop {i + 1} of {n}, {stop.title}, is on another page.")
        with c2:
            _link("tour_goto", stop, "Back to the tour", ":material/arrow_forward:", stop.question)
        c3.button("Leave the tour", key="tour_leave", on_click=_set_stop, args=(None,), width="stretch")
        return
    before, after = neighbours(stops_, i)
    with st.container(border=True, key="tour_bar"):
        top = st.columns([6, 1.4, 1.4], vertical_alignment="center")
        top[0].markdown(f"**Tour {i + 1}/{n}: {stop.title}**")
        with top[1]:
            _link("tour_back", before, "Back" if before else "Home", ":material/arrow_back:",
                  f"Stop {i}: {before.title}" if before else "The home page")
        with top[2]:
            _link("tour_next", after, "Next" if after else "Finish", ":material/arrow_forward:",
                  f"Stop {i + 2}: {after.title}" if after else "Leave the tour")
        st.markdown(f"**{stop.question}** {stop.text}")
    if stop.key == CHECK:
        _self_check(stops_)
    outline(stop)


def _self_check(stops_: list[Stop]) -> None:
    """The questions, each answer folded until the learner opens it, with a link to the stop that teaches it;
    then where to go deeper."""
    with st.container(key="tour_check"):
        for j, q in enumerate(self_check()):
            k = index_of(stops_, q.stop)
            with st.expander(q.ask):
                st.markdown(q.answer)
                if k is not None:
                    _link(f"tour_q{j}", stops_[k], f"Stop {k + 1}: {stops_[k].title}", None, stops_[k].question)
        st.markdown("**Go deeper**")
        for col, (page, title, what) in zip(st.columns(len(DEEPER)), DEEPER):
            with col:
                try:
                    st.page_link(page, label=title, help=what, width="stretch")
                except StreamlitAPIException:   # a page run on its own (no navigation)
                    st.caption(title)


# The outline: a rule on the spot's keys (or keys that extend them by "_...": a plain prefix would also catch a
# longer name, pd_work and pd_workload), inside the card's own element, so it lives exactly as long as the stop.
OUTLINE_CSS = "{sel} {{ outline: 3px solid #ff4b4b; outline-offset: 6px; border-radius: 4px; }}\n"

# The spot may be drawn after this script runs (a page draws top to bottom): once the first key found is drawn
# and the page's run is over, scroll the main area so that its top lands near the top of the window when it is
# not in the upper LAND_PX pixels (a page opened from a link keeps the scroll of the page before); once more a
# moment later, as charts above it take their height.
SPOT_JS = """<script>
(() => {{ const keys = {keys}; let tries = 0, done = 0; const t = setInterval(() => {{
  const app = document.querySelector('[data-testid="stApp"]');
  const el = keys.map(k => document.querySelector('.st-key-' + k + ', [class*="st-key-' + k + '_"]')).find(Boolean);
  if (++tries > 150) clearInterval(t);
  if (!el || !app || app.getAttribute('data-test-script-state') !== 'notRunning') return;
  const top = el.getBoundingClientRect().top;
  const main = document.querySelector('[data-testid="stMain"]');
  if (main && (top < 0 || top > {land})) main.scrollBy({{top: top - 90}});
  if (++done >= 3) clearInterval(t);
}}, 400); }})();
</script>"""


def outline(stop: Stop) -> None:
    """Outline the part a stop names and scroll it into view once it is drawn (our own keys: no reader's text)."""
    keys = ["".join(ch for ch in k if ch.isalnum() or ch in "_-") for k in stop.spot]
    rules = "".join(OUTLINE_CSS.format(sel=f".st-key-{k}, [class*=\"st-key-{k}_\"]") for k in keys)
    st.html(LINK_CSS.format(extra=rules) + SPOT_JS.format(keys=json.dumps(keys), land=LAND_PX),
            unsafe_allow_javascript=True)
