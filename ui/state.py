"""Page state and the URL: a link and a return visit reopen the same view.

The rule, for every widget a page shows: on arriving at a page (the first run of a session, or the first run
after another page was shown) a value in the URL wins, then the session's value, then the default; after that
the widget owns its value, and the page writes it back into the URL (`qp_set`), so arriving by navigation
(which empties the URL) writes the page's state into it.

Streamlit forgets a page's widget values when another page is drawn; pages keep them by giving each keyed
widget `persist_state="session"` (Streamlit's own mechanism, `KEEP`), and seed them with `seed`, never with a
`value=`/`index=` that would fight the kept value. The session-wide choices (weights, checkpoint, numbering)
live in the sidebar that app.py draws around every page (ui.common).

URL values are read with `qp_*`; a bad one gets a warning that quotes it as plain text (ui.text) and the
default is shown. Warnings are given on arrival only: after the first run the URL holds valid values.

Why not Streamlit's `bind="query-params"` (1.67, measured on a two-page app in Chromium): a bound choice puts its
shown label in the link (`weights=Random+tiny`, `pick=layer+3`), so 0-based layer links cannot survive a
`format_func`; a key is one parameter for the whole app, so a `layer` set on one page moves another page's
widget; leaving a page and coming back adds one history entry per restored value; Back shows a page at its
defaults and drops the session's values; a bad value is dropped without a word. Each breaks a rule above.
"""

from __future__ import annotations

import functools
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, NoReturn

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from ui.limits import URL_PROMPT_CHARS
from ui.text import quoted

KEEP = "session"            # persist_state for every keyed page widget
LINK_LAYERS = "links count layers from 0, as the code does"   # layer numbers in URLs, whatever the numbering
_PAGE = "_state_page"       # the page drawn by the previous run of this session
PAGE_TITLE = "_state_page_title"   # the navigation title of the page this run draws (set by app.py)
_OWN = "_state_own_text"    # (text, page title): the reader's latest own prompt, offered by the other prompt pages
_SEEN = "_state_own_seen"   # {page prompt key: the text that page showed last}: notes only what changed
_ARRIVED = "_state_arrived"  # whether the current run arrived at its page
_WRITTEN = "_state_written"  # the URL's values as this session last left them (a different URL: Back or Forward)
_MOVED = "_state_url_moved"  # whether this run's arrival is the browser's Back or Forward within the page


def page_id() -> str:
    ctx = get_script_run_ctx()
    return (ctx.page_script_hash or ctx.main_script_path) if ctx is not None else ""


def begin_run() -> bool:
    """Note the page this run draws; True when arriving at it: another page was drawn before, or the URL is not
    the one this session last wrote (the browser's Back or Forward within the page: its values are read again,
    so Back undoes a change instead of pressing to no effect). Called once per full run (by the sidebar)."""
    here = page_id()
    # a bare address is the entry Streamlit's navigation pushes before a page writes its values: the session's
    written, now = st.session_state.get(_WRITTEN), st.query_params.to_dict()
    moved = st.session_state.get(_PAGE) == here and written is not None and bool(now) and written != now
    arrived = st.session_state.get(_PAGE) != here or moved
    st.session_state[_PAGE] = here
    st.session_state[_ARRIVED] = arrived
    st.session_state[_MOVED] = moved
    return arrived


def url_moved() -> bool:
    """Whether this run follows the browser's Back or Forward within its page: then a value the URL leaves out is
    the page's default (as in a fresh open of that URL), not the session's."""
    return arrived() and bool(st.session_state.get(_MOVED, False))


def arrived() -> bool:
    """Whether this run arrived at its page; never in a fragment's own rerun (the page did not change)."""
    ctx = get_script_run_ctx()
    if ctx is not None and ctx.fragment_ids_this_run:
        return False
    return bool(st.session_state.get(_ARRIVED, True))


def seed(key: str, from_url: Any, default: Any) -> Any:
    """Put a widget's starting value into session state: the URL's value on arrival (None: no value in the
    URL), else what the session holds, else `default`. Returns the value now in session state."""
    if from_url is not None and arrived():
        st.session_state[key] = from_url
    elif key not in st.session_state or url_moved():
        st.session_state[key] = default
    return st.session_state[key]


# ---- reading and writing the URL ----------------------------------------------------------------------------
# Streamlit's browser side pushes a history entry for every change of the query string, and a page writes a
# dozen values per run: Back then stepped through one entry per value, and the entries written before the
# address changed to the new page carried the new page's values under the old page's address (Back to the
# inspector opened it with the home page's prompt). So a full run collects its writes and sends them once, at its end.
_batch = threading.local()      # .pending: {name: value or None} while a full run collects its URL writes


ARRIVAL_WAIT_S = 0.6   # the least time between a page's arrival run starting and its URL write (see url_batch)


@contextmanager
def url_batch() -> Iterator[None]:
    """Around a full run (app.py, through ui.common.app_frame) or a fragment's own rerun: the run's URL writes
    become one change at its end, also when the page stops early (ui.state.stop). Inside a batch, a nested one
    (a fragment drawn by a full run) adds to it.

    On arrival the write waits until ARRIVAL_WAIT_S after the run began: the browser moves its address to the new
    page only after drawing the navigation, and a query string that comes first is pushed under the old page's
    address (a fast page's write did, about half the time: Back then opened the old page with the new one's
    values)."""
    if getattr(_batch, "pending", None) is not None:
        yield
        return
    _batch.pending, _batch.began = {}, time.monotonic()
    try:
        yield
    finally:
        _flush()
        _batch.pending = None


def _flush() -> None:
    """Send the batch's collected writes as one change (after the arrival wait) and start an empty batch."""
    pending, _batch.pending = _batch.pending, {}
    if pending and arrived() and not st.get_option("global.appTest"):
        time.sleep(max(0.0, ARRIVAL_WAIT_S - (time.monotonic() - _batch.began)))
    _write(pending)


def fragment(fn: Callable) -> Callable:
    """st.fragment whose own reruns send their URL writes as one change, like a full run (url_batch)."""
    @functools.wraps(fn)
    def body(*args, **kwargs):
        with url_batch():
            return fn(*args, **kwargs)

    return st.fragment(body)


def stop() -> NoReturn:
    """st.stop() for pages: the run's URL writes are sent first (once Streamlit has been asked to stop, it drops
    every message the run still sends, the end-of-run URL change included)."""
    if getattr(_batch, "pending", None) is not None:
        _flush()
    st.stop()


def _write(changes: dict[str, str | None]) -> None:
    """Apply {name: value or None (remove)} to the URL as one change; nothing is sent when nothing changes."""
    now = st.query_params.to_dict()
    new = {k: v for k, v in now.items() if changes.get(k, v) is not None}
    new.update({k: v for k, v in changes.items() if v is not None})
    if new != now:
        st.query_params.from_dict(new)
    st.session_state[_WRITTEN] = new


def _raw(name: str) -> str | None:
    """The URL's value as this run has left it so far (its collected writes first)."""
    pending = getattr(_batch, "pending", None)
    if pending is not None and name in pending:
        return pending[name]
    v = st.query_params.get(name)
    return None if v is None else str(v)


def qp_get(name: str, default: str | None = None) -> str | None:
    v = _raw(name)
    return default if v is None else v


def qp_int_or_none(name: str, lo: int, hi: int, instead: str = "", shown: Callable[[int], Any] | None = None,
                   unit: str = "") -> int | None:
    """An integer URL parameter in [lo, hi], read on arrival; None when there is none (or after a warning when
    it is not one), so `seed` keeps the session's value.
    `instead` says what is shown then; `unit` names what the number counts ("layers count from 0 in links")."""
    if not arrived():             # the URL is read on arrival only; afterwards it holds what the page wrote
        return None
    raw = _raw(name)
    if raw is None:
        return None
    show = shown or (lambda x: x)
    tail = (f" ({unit})" if unit else "") + (f"; {instead}" if instead else "") + "."
    try:
        v = int(str(raw))
    except ValueError:
        st.warning(f"URL parameter {name} = {quoted(raw)} is not a whole number{tail}")
        return None
    if not lo <= v <= hi:
        st.warning(f"URL parameter {name} = {quoted(raw)} is outside {show(lo)}..{show(hi)}{tail}")
        return None
    return v


def qp_bool(name: str) -> bool | None:
    """A yes/no URL parameter written as 1 or 0; None (after a warning) when it is something else."""
    v = qp_choice(name, ["1", "0"], None, "1 or 0")
    return None if v is None else v == "1"


def qp_float_or_none(name: str, lo: float, hi: float) -> float | None:
    """A decimal URL parameter in [lo, hi]; None (after a warning) when it is not one."""
    if not arrived():             # the URL is read on arrival only; afterwards it holds what the page wrote
        return None
    raw = _raw(name)
    if raw is None:
        return None
    try:
        v = float(str(raw))
    except ValueError:
        v = float("nan")
    if not lo <= v <= hi:     # also NaN
        st.warning(f"URL parameter {name} = {quoted(raw)} is not a number in {lo}..{hi}; showing the session's value.")
        return None
    return round(v, 4)


def qp_choice(name: str, choices, default=None, what: str = "a choice here") -> Any:
    """A URL parameter that must be one of `choices` (compared as text); None when absent or unknown."""
    if not arrived():             # the URL is read on arrival only; afterwards it holds what the page wrote
        return None
    raw = _raw(name)
    if raw is None:
        return None
    for c in choices:
        if str(c) == str(raw):
            return c
    instead = "; the page's own choice is shown" if default is None else f"; showing {default} instead"
    st.warning(f"URL parameter {name} = {quoted(raw)} is not {what}{instead}.")
    return None


def qp_set(**kw) -> None:
    """Write values into the URL (None removes a parameter): collected until the end of a full run, at once in a
    fragment's own rerun or a page run on its own; unchanged values send nothing."""
    changes = {k: None if v is None else str(v) for k, v in kw.items()}
    pending = getattr(_batch, "pending", None)
    if pending is not None:
        pending.update(changes)
    else:
        _write(changes)


def _link_key(name: str) -> str:
    return f"_state_link_{page_id()}_{name}"     # per page: the same name on two pages keeps two values


def link_value(name: str, default: Any, parse: Callable[[str], Any], what: str) -> Any:
    """A page value that no widget holds (a guided tour's stop, say), kept by the widgets' rules: on arrival
    the URL's `name` when `parse` accepts it (it returns None for a bad one, which gets a warning quoting it
    as plain text and saying the value should be `what`), else the session's value, else `default`. The value
    is written back into the URL with the run's other writes, and left out when it is the default.
    Change it with `set_link_value`."""
    raw = _raw(name) if arrived() else None
    url = None if raw is None else parse(raw)
    if raw is not None and url is None:
        st.warning(f"URL parameter {name} = {quoted(raw)} is not {what}; showing the page's own choice.")
    value = seed(_link_key(name), url, default)
    qp_set(**{name: None if value == default else value})
    return value


def set_link_value(name: str, value: Any, default: Any) -> None:
    """Change a `link_value` (from a button's callback or later in the run) and its URL parameter."""
    st.session_state[_link_key(name)] = value
    qp_set(**{name: None if value == default else value})


def prompt_to_url(text: str | None, default: str | None = None) -> None:
    """Put a typed prompt into the URL (also an empty or rejected one, so the link shows what the page
    shows); a prompt longer than URL_PROMPT_CHARS is left out, and the page says so."""
    text = text or ""
    if len(text) <= URL_PROMPT_CHARS:
        qp_set(prompt=None if text == default else text)
    else:
        qp_set(prompt=None)
        st.caption(f"This prompt ({len(text):,} characters) is longer than the links this page writes keep "
                   f"({URL_PROMPT_CHARS:,} characters): the address bar leaves it out, so a link copied from it opens "
                   "the default prompt instead.")


OWN_TEXT = -1   # the sample index of "your own text"
OFFER_PREVIEW = 90   # characters of the offered text shown beside its button


def note_own_text(text: str | None, where: str, samples: tuple[str, ...] = ()) -> None:
    """Remember a prompt the reader gave a page (`where`: the page's prompt key), typed, pasted, or brought by a
    link, so that the other prompt pages can offer it. Noted only when it changed on that page (a return visit
    to an older text does not make it the latest), never a sample's text (choosing "your own text" without
    typing), and a text brought over from another page keeps the page it was typed on."""
    seen = st.session_state.setdefault(_SEEN, {})
    changed = seen.get(where) != text
    seen[where] = text
    if not changed or not text or not text.strip() or text in samples:
        return
    kept = st.session_state.get(_OWN)
    if kept and kept[0] == text:
        return
    st.session_state[_OWN] = (text, st.session_state.get(PAGE_TITLE) or "another page")


def offer_own_text(current: str | None, max_chars: int, use: Callable[[str], None], key: str) -> bool:
    """A button that puts the reader's latest own prompt into this page's prompt (`use` gets the text), shown
    when there is one, it differs from what the page shows, and it fits the page's limit. True when drawn."""
    kept = st.session_state.get(_OWN)
    if not kept:
        return False
    text, where = kept
    if text == current or len(text) > max_chars:
        return False
    here = st.session_state.get(PAGE_TITLE)
    label = "Back to your text" if where == here else f"Use your text from {where}"
    st.button(label, key=key, on_click=use, args=(text,), icon=":material/input:",
              help="Put the text you typed last into this page's prompt.")
    st.caption(quoted(text, OFFER_PREVIEW))
    return True


def offer_cut(prefix: str, cut: str | None, max_tokens: int) -> None:
    """Under an overlong prompt's message, a button that keeps its first `max_tokens` tokens (`cut`, computed by
    the lesson) as the reader's own text in `{prefix}_prompt`; nothing when there is no cut to offer."""
    if cut is None:
        return

    def _keep() -> None:
        st.session_state[f"{prefix}_sample"], st.session_state[f"{prefix}_prompt"] = OWN_TEXT, cut

    st.button(f"Keep the first {max_tokens:,} tokens", key=f"{prefix}_cut", on_click=_keep,
              icon=":material/content_cut:", help="Cut the prompt to what this page can run, and run it.")


def sample_or_text(prefix: str, samples: list, default: int, max_chars: int, options: list[int] | None = None,
                   label: str = "Sample prompt", text_label: str = "Prompt", height: int = 100,
                   columns=None, help: str | None = None) -> tuple[int, str]:
    """A sample picker (`{prefix}_sample`, OWN_TEXT for the reader's own text) and its text area
    (`{prefix}_prompt`), seeded by the URL's `prompt` or `sample` on arrival, kept for the session, and written
    back to the URL before the text is checked (a rejected prompt is still what the link shows).
    Returns (sample index or OWN_TEXT, text)."""
    skey, tkey = f"{prefix}_sample", f"{prefix}_prompt"
    n = len(samples)
    url_prompt = qp_get("prompt") if arrived() else None
    url_sample = qp_int_or_none("sample", 0, n - 1, "showing the session's prompt") if arrived() else None
    if url_prompt is not None and len(url_prompt) > max_chars:
        st.warning(f"The prompt in the URL has {len(url_prompt):,} characters; the limit here is {max_chars:,}. "
                   "Showing a sample instead.")
        url_prompt = None
    if url_prompt is not None:
        st.session_state[skey], st.session_state[tkey] = OWN_TEXT, url_prompt
    elif url_sample is not None:
        st.session_state[skey], st.session_state[tkey] = url_sample, samples[url_sample].text
    elif skey not in st.session_state or tkey not in st.session_state:
        st.session_state[skey], st.session_state[tkey] = default, samples[default].text if default >= 0 else ""

    def _pick() -> None:
        i = st.session_state[skey]
        if i != OWN_TEXT:
            st.session_state[tkey] = samples[i].text

    opts = options if options is not None else list(range(n)) + [OWN_TEXT]
    where = columns[0] if columns else st
    where.selectbox(label, opts, key=skey, on_change=_pick, persist_state=KEEP, help=help,
                    format_func=lambda i: "(your own text)" if i == OWN_TEXT else samples[i].name)
    def _edited() -> None:          # a sample edited by hand is the reader's own text (as a link would say)
        i = st.session_state[skey]
        if i != OWN_TEXT and samples[i].text != st.session_state[tkey]:
            st.session_state[skey] = OWN_TEXT

    text = st.text_area(text_label, key=tkey, height=height, persist_state=KEEP, on_change=_edited)

    def _use(own: str) -> None:
        st.session_state[skey], st.session_state[tkey] = OWN_TEXT, own

    i = st.session_state[skey]
    own = not (i != OWN_TEXT and samples[i].text == text)
    note_own_text(text if own else None, prefix, tuple(s.text for s in samples))
    offer_own_text(text, max_chars, _use, f"{prefix}_use_own")
    if not own:
        qp_set(sample=i, prompt=None)
    else:
        qp_set(sample=None)
        prompt_to_url(text)
    return i, text


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
