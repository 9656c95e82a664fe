"""Live traces for the Figure 3 pages: a prompt picker mirrored in the URL and one cached trace per
(weights, prompt), shared by every page and session (st.cache_resource: a Trace holds tensors, so it
is kept as an object, never pickled). Pages turn it into plain numbers with `lessons/` functions.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

import streamlit as st
from streamlit.logger import get_logger

from lessons.home import NextTokens, prompt_ids, top_tokens
from model import Ablation
from model.inference import LensChoice, batched_logits, batched_next_logits, batched_traces
from ui import url
from ui.figures import show_token
from ui.limits import LIVE_TOKENS, PROMPT_CHARS
from ui.prompt import PROMPT, clean_prompt, note_own_text, offer_own_text, prompt_to_url, sample_param
from ui.queue import BatchWorker, Busy, run_rows, wait_for, waiting_box
from ui.session import ROOT, Session
from ui.text import plain
from ui.url import stop

MAX_TOKENS = LIVE_TOKENS  # keeps a traced forward under a second on CPU for the tiny model
CUSTOM = "Your own text"


@st.cache_data(show_spinner=False)
def sample_prompts() -> list[dict]:
    try:
        return json.loads((ROOT / "data" / "prompts.json").read_text())
    except (OSError, ValueError):
        return [{"name": "Key in the blue box", "text": "The key is in the blue box. The box is"}]


def default_sample(prompts: list[dict]) -> int:
    """The first long prompt: long enough that the window, packing and picking all matter."""
    return next((i for i, p in enumerate(prompts) if p.get("kind") == "long"), 0)


KEPT_SAMPLE, KEPT_TEXT = "live_sample_kept", "live_text_kept"   # the session's choice, shared by the pages


def _keep(widget_key: str, kept_key: str) -> None:
    st.session_state[kept_key] = st.session_state[widget_key]


def prompt_picker(label: str = "Prompt for the live numbers") -> str | None:
    """A sample prompt (or the reader's own text); returns the text, or None after a message.

    The choice is one session value shared by the Figure 3 pages (KEPT_SAMPLE / KEPT_TEXT, plain session keys)
    and kept in the URL. Each page draws its own widgets (Streamlit gives a widget on another page another
    identity), seeded from the shared value on every run and copying a change back into it."""
    prompts = sample_prompts()
    n = len(prompts)
    sample = sample_param(n, default_sample(prompts))
    url.seeded(KEPT_TEXT, PROMPT.but(default=""))
    if PROMPT.read() is None:
        url.seeded(KEPT_SAMPLE, sample)
    else:                   # a link's own text: the choice is "your own text"
        st.session_state[KEPT_SAMPLE] = n
    st.session_state["live_sample"] = st.session_state[KEPT_SAMPLE]
    choice = st.selectbox(label, list(range(n + 1)), key="live_sample", on_change=_keep,
                          args=("live_sample", KEPT_SAMPLE),
                          format_func=lambda i: CUSTOM if i == n else prompts[i]["name"])

    def _use(own: str) -> None:
        st.session_state[KEPT_SAMPLE], st.session_state[KEPT_TEXT] = n, own

    if choice == n:
        st.session_state["live_text"] = st.session_state[KEPT_TEXT]
        text = st.text_area("Your text", key="live_text", height=110, on_change=_keep, args=("live_text", KEPT_TEXT),
                            placeholder=f"Type or paste any text (up to {PROMPT_CHARS:,} characters); the page "
                                        "traces it as soon as you press Ctrl+Enter or click outside the box.")
        note_own_text(text, "live", tuple(p["text"] for p in prompts))
        offer_own_text(text, PROMPT_CHARS, _use, "live_use_own")
        url.leave_out(sample)
        prompt_to_url(text)
        ok, problem = clean_prompt(text, PROMPT_CHARS)
        if problem:
            st.warning(problem)
            return None
        return ok
    note_own_text(None, "live")
    offer_own_text(prompts[choice]["text"], PROMPT_CHARS, _use, "live_use_own")
    url.to_link(sample, choice)
    url.leave_out(PROMPT)
    return prompts[choice]["text"]


@dataclass
class LiveTrace:
    trace: object             # model.trace.Trace
    tokens: list[str]         # display text of each traced token
    n_tokens: int
    truncated: bool
    text: str = ""            # the prompt as given (the "Reproduce in Python" snippets start from it)


def _trace(sess: Session, text: str) -> LiveTrace | None:
    model = sess.model
    ids = model.encode(text)
    truncated = len(ids) > MAX_TOKENS
    ids = ids[-MAX_TOKENS:]
    # the lens of the rows a page draws, when drawn; the forward batched with the other visitors' (ui.queue)
    tr = forward(sess, "trace", ids, what="tracing the prompt through every layer", lens="lazy")
    if tr is None:
        return None
    tokens = [show_token(model.decode([i])) for i in ids]
    return LiveTrace(tr, tokens, len(ids), truncated, text)


def live_trace(sess: Session, text: str) -> LiveTrace | None:
    """The cached trace of `text` on the session's model, or None after a message in the page."""
    if sess.model is None:
        st.info(sess.error or "No model loaded: the live numbers need one.")
        return None
    try:
        if not sess.model.encode(text):
            st.warning("The prompt produced no tokens.")
            return None
        lt = _trace(sess, text)
    except Exception as e:  # bad input or a model error becomes a message, never a traceback
        st.error(f"Could not trace this prompt: {plain(e)}")
        return None
    if lt is None:
        return None
    if lt.truncated:
        st.caption(f"Only the last {MAX_TOKENS} tokens were traced.")
    return lt


def picked_trace(sess: Session, label: str = "Prompt") -> LiveTrace:
    """Prompt picker + cached trace; stops the page (after a message) when either is unavailable."""
    text = prompt_picker(label)
    lt = None if text is None else live_trace(sess, text)
    if lt is None:
        stop()
    return lt


# ---- forwards shared with every other visitor: batched, cached, bounded -------------------------------------------
KINDS = ("next", "logits", "trace")   # next-token logits [V]; every position's logits [n, V]; an exact trace
RESULTS_KEPT = {"next": 512, "logits": 8, "trace": 8}   # a next-token row is 16 KB; a trace up to tens of MB


def run_forward(kind: str, context, payloads: list) -> list:
    """The batch worker's runner: one batched forward of `kind` over the rows (model/inference/batch.py)."""
    model, ablation, lens = context
    fns = {"next": lambda rows: batched_next_logits(model, rows, ablation),
           "logits": lambda rows: batched_logits(model, rows, ablation),
           "trace": lambda rows: batched_traces(model, rows, ablation, lens=lens)}
    t0 = time.perf_counter()
    out = run_rows(fns[kind], payloads)
    get_logger(__name__).info("Batched forward: kind=%s rows=%d seconds=%.3f", kind, len(payloads),
                              time.perf_counter() - t0)   # bench.load counts them
    return out


@st.cache_resource(show_spinner=False)
def batch_worker() -> BatchWorker:
    """The server's one batch worker (it owns every batched forward, for every loaded model)."""
    return BatchWorker(run=run_forward)


@st.cache_resource(show_spinner=False)
def _results() -> dict:
    return {k: OrderedDict() for k in KINDS}


@st.cache_resource(show_spinner=False)
def _inflight() -> dict:
    return {}


_results_lock = threading.Lock()


def forward(sess: Session, kind: str, ids: list[int], what: str, ablation: Ablation | None = None,
            lens: LensChoice = False):
    """A forward of `kind` over one prompt's token ids, run in the server's batch worker together with the other
    visitors' requests of the same kind and weights, kept server-wide for the next visitor who asks the same.
    Returns None after a plain "the server is busy" message when the queue is full (press to try again)."""
    key = (sess.label, tuple(ids), repr(ablation), repr(lens))
    store, inflight = _results()[kind], _inflight()
    worker = batch_worker()
    with _results_lock:
        if key in store:
            store.move_to_end(key)
            return store[key]
        ticket = inflight.get((kind, key))            # asked by another visitor a moment ago: wait for that one
        if ticket is None or ticket.cancelled:
            group = (sess.label, id(sess.model), repr(ablation), repr(lens))
            try:
                ticket = worker.submit(kind, group, (sess.model, ablation, lens), list(ids))
            except Busy as e:
                ticket = None
                busy = e
            else:
                inflight[(kind, key)] = ticket
    if ticket is None:
        busy_message(busy, what)
        return None
    show = waiting_box()

    try:
        value = wait_for(worker, ticket, what, show)
    finally:
        with _results_lock:
            if inflight.get((kind, key)) is ticket and ticket.done.is_set():
                del inflight[(kind, key)]
    with _results_lock:
        store[key] = value
        while len(store) > RESULTS_KEPT[kind]:
            store.popitem(last=False)
    return value


def busy_message(e: Busy, what: str) -> None:
    st.warning(f"The server is busy: {e.waiting} requests from other visitors are waiting for the model, as many as "
               f"it queues at once ({e.limit}), so yours ({what}) was not started. Nothing of yours is lost: try again "
               "in a few seconds, and results already finished (yours or anyone's) are kept ready.",
               icon=":material/groups:")
    st.button("Try again", key=f"busy_retry_{what}")


def next_tokens(sess: Session, text: str, k: int = 12) -> NextTokens | None:
    """The home page's next-token table for `text`, batched with everyone's (None after a busy message)."""
    ids = prompt_ids(sess.model, text)
    logits = forward(sess, "next", ids, "scoring the next token")
    return None if logits is None else top_tokens(sess.model, logits, len(ids), k)
