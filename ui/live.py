"""Live traces for the Figure 3 pages: a prompt picker mirrored in the URL and one cached trace per
(weights, prompt), shared by every page and session (st.cache_resource: a Trace holds tensors, so it
is kept as an object, never pickled). Pages turn it into plain numbers with `lessons/` functions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import streamlit as st
import torch

from ui.common import ROOT, Session, clean_prompt, qp_get, qp_set
from ui.figures import show_token
from ui.limits import LIVE_TOKENS, PROMPT_CHARS
from ui.state import arrived, prompt_to_url, qp_int_or_none, seed
from ui.text import plain

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
    custom_qp = qp_get("prompt") if arrived() else None
    url_sample = n if custom_qp is not None else qp_int_or_none("sample", 0, n - 1, "showing the session's choice")
    seed(KEPT_SAMPLE, url_sample, default_sample(prompts))
    seed(KEPT_TEXT, custom_qp, "")
    st.session_state["live_sample"] = st.session_state[KEPT_SAMPLE]
    choice = st.selectbox(label, list(range(n + 1)), key="live_sample", on_change=_keep,
                          args=("live_sample", KEPT_SAMPLE),
                          format_func=lambda i: CUSTOM if i == n else prompts[i]["name"])
    if choice == n:
        st.session_state["live_text"] = st.session_state[KEPT_TEXT]
        text = st.text_area("Your text", key="live_text", height=110, on_change=_keep, args=("live_text", KEPT_TEXT))
        qp_set(sample=None)
        prompt_to_url(text)
        ok, problem = clean_prompt(text, PROMPT_CHARS)
        if problem:
            st.warning(problem)
            return None
        return ok
    qp_set(sample=choice, prompt=None)
    return prompts[choice]["text"]


@dataclass
class LiveTrace:
    trace: object             # model.trace.Trace
    tokens: list[str]         # display text of each traced token
    n_tokens: int
    truncated: bool
    text: str = ""            # the prompt as given (the "Reproduce in Python" snippets start from it)


@st.cache_resource(max_entries=8, show_spinner="Tracing the prompt through every layer ...")
def _trace(weights_label: str, text: str, _model) -> LiveTrace:
    ids = _model.encode(text)
    truncated = len(ids) > MAX_TOKENS
    ids = ids[-MAX_TOKENS:]
    with torch.no_grad():
        tr = _model.trace(torch.tensor([ids]), lens="lazy")   # the lens of the rows a page draws, when drawn
    tokens = [show_token(_model.decode([i])) for i in ids]
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
        lt = _trace(sess.label, text, sess.model)
    except Exception as e:  # bad input or a model error becomes a message, never a traceback
        st.error(f"Could not trace this prompt: {plain(e)}")
        return None
    if lt.truncated:
        st.caption(f"Only the last {MAX_TOKENS} tokens were traced.")
    return lt


def picked_trace(sess: Session, label: str = "Prompt") -> LiveTrace:
    """Prompt picker + cached trace; stops the page (after a message) when either is unavailable."""
    text = prompt_picker(label)
    lt = None if text is None else live_trace(sess, text)
    if lt is None:
        st.stop()
    return lt
