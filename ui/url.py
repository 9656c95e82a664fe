"""The URL layer: a link and a return visit reopen the same view, and a parameter is declared once.

A `Param` holds everything about one URL value: its name in the link, its default, a parser that refuses a bad
value with a message (`Refused`), and how the link spells it. A page binds a widget to it in one statement,
`bound(st.radio, "insp_mode", MODE, label=..., options=...)`, which seeds the widget (made to fit what the widget
offers now, `fit=`), draws it and writes it back; `seeded` and `to_link` are the two halves for a widget that needs
work in between (a stepper, a value written once the page has computed), and `leave_out` takes the values of a part
of the page that is not drawn out of the link. The layer's link form is decided in one place (`layer`).

The rules, for every bound widget: on arriving at a page (the first run of a session, the first run after
another page was shown, or the browser's Back or Forward within the page) a value in the URL wins, then the
session's value, then the default; after that the widget owns its value and the page writes it back into the
URL, left out at its default, so arriving by navigation (which empties the URL) writes the page's state into
it. A run's writes go out as one change (one history entry, so Back undoes a change). A bad value gets a
warning that quotes it as plain text (ui.text) and the page shows the session's or the default value;
warnings are given on arrival only, since afterwards the URL holds what the page wrote.

Streamlit forgets a page's widget values when another page is drawn; pages keep them by giving each keyed
widget `persist_state="session"` (Streamlit's own mechanism, `KEEP`, which `bound` passes), and seed them
(`seeded`), never with a `value=`/`index=` that would fight the kept value. The session-wide choices (weights,
checkpoint, numbering) live in the sidebar that app.py draws around every page (ui.session).

Why not Streamlit's `bind="query-params"` (1.67, measured on a two-page app in Chromium): a bound choice puts its
shown label in the link (`weights=Random+tiny`, `pick=layer+3`), so 0-based layer links cannot survive a
`format_func`; a key is one parameter for the whole app, so a `layer` set on one page moves another page's
widget; leaving a page and coming back adds one history entry per restored value; Back shows a page at its
defaults and drops the session's values; a bad value is dropped without a word. Each breaks a rule above.

This module does not know what a page shows: prompts are ui.prompt's, the sidebar ui.session's.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Generic, Iterator, NoReturn, TypeVar

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from ui.text import quoted

KEEP = "session"            # persist_state for every keyed page widget (`bound` passes it)
LINK_LAYERS = "links count layers from 0, as the code does"   # layer numbers in URLs, whatever the numbering
_PAGE = "_state_page"       # the page drawn by the previous run of this session
PAGE_TITLE = "_state_page_title"   # the navigation title of the page this run draws (set by app.py)
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
    # a bare address is also a page at its defaults (every value is left out of the link there), so Back to it
    # is a move like any other once this session has written something else for the page
    written, now = st.session_state.get(_WRITTEN), st.query_params.to_dict()
    moved = st.session_state.get(_PAGE) == here and written is not None and written != now
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


def _seed(key: str, from_url: Any, default: Any, session_wide: bool = False) -> Any:
    """Put a starting value into session state: the URL's value on arrival (None: no value in the
    URL), else what the session holds, else `default`. Returns the value now in session state."""
    bare = session_wide and not st.query_params.to_dict()
    if from_url is not None and arrived():
        st.session_state[key] = from_url
    elif key not in st.session_state or (url_moved() and not bare):
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
    """Around a full run (app.py, through ui.session.app_frame) or a fragment's own rerun: the run's URL writes
    become one change at its end, also when the page stops early (`stop`). Inside a batch, a nested one
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
    """Send the batch's collected writes as one change (after the arrival wait, when the link changes) and start
    an empty batch."""
    pending, _batch.pending = _batch.pending, {}
    # the wait (a browser race seen with Streamlit 1.67) matters only when a query string is sent: a link that
    # already holds the page's values (Back, a full link, a first visit at the defaults) sends nothing
    if _changed(pending) != st.query_params.to_dict() and arrived() and not st.get_option("global.appTest"):
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


def _changed(changes: dict[str, str | None]) -> dict[str, str]:
    """The URL's values once {name: value or None (remove)} is applied."""
    new = {k: v for k, v in st.query_params.to_dict().items() if changes.get(k, v) is not None}
    new.update({k: v for k, v in changes.items() if v is not None})
    return new


def _write(changes: dict[str, str | None]) -> None:
    """Apply {name: value or None (remove)} to the URL as one change; nothing is sent when nothing changes."""
    new = _changed(changes)
    if new != st.query_params.to_dict():
        st.query_params.from_dict(new)
    st.session_state[_WRITTEN] = new


def _raw(name: str) -> str | None:
    """The URL's value as this run has left it so far (its collected writes first)."""
    pending = getattr(_batch, "pending", None)
    if pending is not None and name in pending:
        return pending[name]
    v = st.query_params.get(name)
    return None if v is None else str(v)


class Refused(ValueError):
    """A URL value a parser will not take; its message says what the value should be ("is not a whole number").
    `kept`: what the page shows instead when it is not the session's value (the known names of a list, or
    nothing opened), and `instead` what the warning then says in place of the parameter's own."""

    def __init__(self, says: str, kept: Any = None, instead: str = ""):
        super().__init__(says)
        self.kept, self.instead = kept, instead


T = TypeVar("T")


@dataclass(frozen=True)
class Param(Generic[T]):
    """One URL value, declared once: `name` in the link, its `default`, `parse` (text -> value, raising Refused
    with what the value should be), `write` (value -> the link's text; None leaves it out, as for a text longer
    than a link keeps), and what the warning says is shown instead of a refused value (`instead`; `unit` names
    what a number counts, "links count layers from 0")."""
    name: str
    default: T
    parse: Callable[[str], T]
    write: Callable[[T], str | None] = str
    instead: str = ""
    unit: str = ""

    def link(self, v: T) -> str | None:
        """How the link spells `v`; None (left out) at the default."""
        return None if v is None or v == self.default else self.write(v)

    def given(self) -> bool:
        """Whether this run arrived by a link that names the parameter (with any value, refused or not)."""
        return arrived() and _raw(self.name) is not None

    def read(self) -> T | None:
        """The URL's value on arrival; None when there is none, after arrival, or (after a warning quoting it)
        when the parser refuses it, so the session's value stays (or what the refusal `kept`)."""
        if not arrived():         # the URL is read on arrival only; afterwards it holds what the page wrote
            return None
        raw = _raw(self.name)
        if raw is None:
            return None
        try:
            return self.parse(raw)
        except Refused as e:
            instead = e.instead or self.instead
            tail = (f" ({self.unit})" if self.unit else "") + (f"; {instead}" if instead else "") + "."
            st.warning(f"URL parameter {self.name} = {quoted(raw)} {e}{tail}")
            return e.kept

    def but(self, **changes) -> "Param[T]":
        """The same parameter with some fields changed (another default or `instead`, say)."""
        return dataclasses.replace(self, **changes)

    def only(self, values, what: str) -> "Param[T]":
        """The same parameter refusing what its parser takes but `values` does not hold (saying it is not `what`):
        a layer number that is not a Reindex layer, a position that is not a query row."""
        allowed, parse = list(values), self.parse

        def narrowed(raw: str) -> T:
            v = parse(raw)
            if v not in allowed:
                raise Refused(f"is not {what}")
            return v

        return self.but(parse=narrowed)


def whole(name: str, lo: int, hi: int, default: int | None, instead: str = "", unit: str = "",
          shown: Callable[[int], Any] | None = None) -> Param[int]:
    """A whole number in [lo, hi] (`shown` writes the bounds in the warning as the reader counts)."""
    show = shown or (lambda x: x)

    def parse(raw: str) -> int:
        try:
            v = int(raw)
        except ValueError:
            raise Refused("is not a whole number") from None
        if not lo <= v <= hi:
            raise Refused(f"is outside {show(lo)}..{show(hi)}")
        return v

    return Param(name, default, parse, instead=instead, unit=unit)


def ordinal(name: str, count: int, default: int, instead: str = "") -> Param[int]:
    """A 0-based index (a step of a story) that the link counts from 1, as the reader does."""
    one_based = whole(name, 1, count, default + 1, instead)
    return Param(name, default, lambda raw: one_based.parse(raw) - 1, write=lambda i: str(i + 1), instead=instead)


def decimal(name: str, lo: float, hi: float, default: float | None) -> Param[float]:
    """A decimal number in [lo, hi], kept to four places."""
    def parse(raw: str) -> float:
        try:
            v = float(raw)
        except ValueError:
            v = float("nan")
        if not lo <= v <= hi:     # also NaN
            raise Refused(f"is not a number in {lo}..{hi}")
        return round(v, 4)

    return Param(name, default, parse, instead="showing the session's value")


def either(options) -> str:
    """Options as a reader lists them: "h100, h200 or b200"."""
    said = [str(o) for o in options]
    return said[0] if len(said) == 1 else ", ".join(said[:-1]) + " or " + said[-1]


def choice(name: str, options, default: Any, what: str = "a choice here", instead: str | None = None,
           spell: Callable[[Any], str] = str) -> Param:
    """One of `options`, spelled in the link by `spell` (its text, unless a shorter word says it); the warning
    says the value is not `what`."""
    options = list(options)

    def parse(raw: str) -> Any:
        for c in options:
            if spell(c) == raw:
                return c
        raise Refused(f"is not {what}")

    if instead is None:
        instead = "the page's own choice is shown" if default is None else f"showing {default} instead"
    return Param(name, default, parse, write=spell, instead=instead)


def several(name: str, options, default: list, one: str, many: str, instead: str) -> Param[list]:
    """Some of `options` in the reader's order, written with commas (none chosen: an empty value). Names that are
    not options get a warning that quotes them (`one`/`many`: what an option is called) and the known ones are
    shown; with none known, the default (`instead` says so)."""
    options = list(options)

    def parse(raw: str) -> list:
        asked = [x for x in raw.split(",") if x]
        bad = [x for x in asked if x not in options]
        if not bad:
            return asked
        known = [x for x in asked if x in options]
        said = ", ".join(map(quoted, bad[:5])) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        raise Refused(f"names {'an unknown ' + one if len(bad) == 1 else 'unknown ' + many} {said}",
                      kept=known or list(default), instead="showing the known ones" if known else instead)

    return Param(name, list(default), parse, write=",".join, instead=instead)


def flag(name: str, default: bool) -> Param[bool]:
    """Yes or no, written 1 or 0."""
    def parse(raw: str) -> bool:
        if raw not in ("1", "0"):
            raise Refused("is not 1 or 0")
        return raw == "1"

    return Param(name, default, parse, write=lambda v: "1" if v else "0",
                 instead="the page's own choice is shown")


def any_text(name: str, default: str | None = None, max_chars: int | None = None,
             link_chars: int | None = None) -> Param[str]:
    """Any text (a search, a label, a story): never refused; cut to `max_chars` (the widget's own limit); a text
    longer than `link_chars` is left out of the link (a link keeps so much)."""
    def write(v: str) -> str | None:
        return None if link_chars is not None and len(v) > link_chars else v

    return Param(name, default, lambda raw: raw[:max_chars] if max_chars else raw, write=write)


def layer(n_layers: int, default: int | None, instead: str = "", name: str = "layer",
          shown: Callable[[int], Any] | None = None) -> Param[int]:
    """A layer index, the one place its link form is decided: 0-based, as the code counts, whatever numbering
    the reader chose (the warning says so)."""
    return whole(name, 0, n_layers - 1, default, instead=instead, unit=LINK_LAYERS, shown=shown)


PREFILL_MODES = ["bounded", "exact"]
PREFILL_MODE = choice("mode", PREFILL_MODES, "bounded", "a prefill mode (bounded or exact)")   # two pages take it


def seeded(key: str, p: Param[T], fit: Callable[[T], T] | None = None, session_wide: bool = False) -> T:
    """Seed the widget `key` from `p` (URL on arrival, else the session, else the default) and return it. `fit`
    makes the value one the widget offers now (the session's from a longer prompt, another model's layer), written
    every run: a widget whose range or options changed is a new widget to Streamlit, which would otherwise start it
    at its first value. `session_wide` (the sidebar's choices): a bare address keeps the session's value even after
    Back or Forward, since it is also what a click in the navigation opens, and that keeps the session's choices."""
    v = _seed(key, p.read(), p.default, session_wide)
    if fit is not None:
        st.session_state[key] = v = fit(v)
    return v


def to_link(p: Param[T], v: T) -> None:
    """Write `v` into the URL with the run's other writes (left out at the default)."""
    _set(**{p.name: p.link(v)})


def leave_out(*params: Param) -> None:
    """Take these parameters out of the link: the part of the page they belong to is not drawn in this run."""
    _set(**{p.name: None for p in params})


def bound(widget: Callable[..., T], key: str, p: Param[T], *args, fit: Callable[[T], T] | None = None,
          **kwargs) -> T:
    """`widget(*args, key=key, persist_state=KEEP, **kwargs)` bound to `p`: seeded on arrival (`fit`, as for
    `seeded`), kept for the session, written back into the link. Returns the widget's value."""
    seeded(key, p, fit)
    v = widget(*args, key=key, persist_state=KEEP, **kwargs)
    to_link(p, v)
    return v


def _set(**kw) -> None:
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
    value = _seed(_link_key(name), url, default)
    _set(**{name: None if value == default else value})
    return value


def set_link_value(name: str, value: Any, default: Any) -> None:
    """Change a `link_value` (from a button's callback or later in the run) and its URL parameter."""
    st.session_state[_link_key(name)] = value
    _set(**{name: None if value == default else value})


