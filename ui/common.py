"""The app's shared Streamlit layer: the sidebar (weights, checkpoint, numbering, device), the loaded models,
and long runs with a progress bar.

app.py draws the sidebar once per run, around whichever page runs (`app_frame`), so the session-wide choices
are widgets of the entry script and survive page changes; a page calls `sidebar()` to get them (a page run on
its own, as AppTest does, draws the sidebar itself). Models come from one server-wide store (ui.checkpoints:
allow-listed checkpoints, memory budget, at most MAX_MODELS held, failures remembered); results that the
reader waits for are cached with a progress bar (`cached_with_progress`). URL and page state: ui.url.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import threading
import types
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Hashable, Iterator, TypeVar

import numpy as np
import pandas as pd
import streamlit as st
import torch
from streamlit.logger import get_logger
from streamlit.runtime.pages_manager import PagesManager

from lessons.sources import ONE_BASED
from model import default_device, load, random_tiny
from ui.checkpoints import (
    MAX_MODELS,
    NOT_OFFERED,
    CheckpointRefused,
    ModelStore,
    check_budget,
    find_checkpoints,
    resolve_choice,
    scrub,
)
from ui.queue import heavy_run
from ui.sources import sources_footer
from ui.text import plain
from ui.tour import tour_bar
from ui.url import arrived, begin_run, qp_choice, qp_get, qp_set, seed, stop, url_batch
from ui.warmup import ensure

# One intra-op thread per session: the server runs many sessions at once on few cores, and an OpenMP team that
# cannot get all its cores makes every op wait for the missing thread.
if default_device().type == "cpu":
    torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]
TINY_DIR = ROOT / "data" / "weights" / "tiny"
WEIGHT_CHOICES = {"trained": "Trained tiny (shipped text model)", "random": "Random tiny",
                  "checkpoint": "Checkpoint directory"}
NUMBERING = {"0": "0-based (as the code and the report count)", "1": f"1-based ({ONE_BASED})"}
NO_CHECKPOINTS = ("This server offers no checkpoint directories (its operator lists them in V41_CHECKPOINT_ROOTS or "
                  ".streamlit/secrets.toml; see the README). Choose another weights option.")


@dataclass
class Session:
    model: object | None          # model.V41Model or None when loading failed
    weights: str                  # "trained" | "random" | "checkpoint"
    label: str                    # shown in captions (Markdown-safe) and used as a cache key
    device: str
    one_based: bool
    error: str | None = None
    checkpoint: str = ""          # the chosen checkpoint's label (ui.checkpoints.find_checkpoints)

    def num(self, layer: int) -> int:
        """A 0-based layer index as the reader chose to count."""
        return layer + 1 if self.one_based else layer

    def layer_label(self, layer: int) -> str:
        return f"layer {self.num(layer)}"


def trained_available() -> bool:
    return (TINY_DIR / "model.safetensors").exists() and (TINY_DIR / "config.json").exists()


def device_name() -> str:
    return default_device().type


# ---- models ---------------------------------------------------------------------------------------------------
@st.cache_resource(show_spinner=False)
def model_store() -> ModelStore:
    """The one store of loaded models for the whole server (every session shares it)."""
    return ModelStore(max_models=MAX_MODELS)


def _load(weights: str, directory: Path | None):
    dev = device_name()
    if weights == "checkpoint":
        check_budget(directory)           # refused before anything is allocated
    # one line per real load: bench.load counts them to show the model is shared by all sessions
    get_logger(__name__).info("Loading the model: weights=%s path=%r device=%s", weights,
                              str(directory or ""), dev)
    if weights == "trained":
        return load(TINY_DIR, device=dev)
    if weights == "random":
        return random_tiny(0, dev)
    return load(directory, device=dev)


def load_model(weights: str, directory: Path | None = None):
    """The model for a choice, from the server-wide store (loaded at most once while it is held)."""
    key = (weights, str(directory) if weights == "checkpoint" else "")
    with st.spinner("Loading the model ..."):
        return model_store().get(key, lambda: _load(weights, directory))


# ---- the sidebar ----------------------------------------------------------------------------------------------
_run = threading.local()


@contextmanager
def app_frame() -> Iterator[Session]:
    """Used by app.py around `page.run()`: the shared sidebar is drawn once per run, before the page; the run's
    URL writes are sent as one change at its end (ui.url.url_batch)."""
    with url_batch():
        _run.session = _draw_sidebar()
        try:
            yield _run.session
        finally:
            _run.session = None


def _ensure_in_app() -> None:
    """A page opened by its own URL on a freshly started server, before anyone opened `/`, is run by
    Streamlit's pages-folder discovery instead of app.py (no navigation, page config or shared sidebar).
    Turn that discovery off for the server and run again: the rerun goes through app.py to the same page."""
    if PagesManager.uses_pages_directory:
        PagesManager.uses_pages_directory = False
        st.rerun()


def sidebar() -> Session:
    """The session's choices for this run (drawn by app.py; drawn here when a page runs on its own)."""
    sess = getattr(_run, "session", None)
    if sess is not None:
        return sess
    _ensure_in_app()
    return _draw_sidebar()


def _checkpoint_choice() -> tuple[str, Path | None, str | None]:
    """(label, directory, problem) for the checkpoint selectbox. The URL's ckpt (a label, or a path naming an
    offered checkpoint) is read on arrival; one that is not offered leaves the box empty with NOT_OFFERED."""
    found = find_checkpoints()
    url_ckpt = qp_get("ckpt") if arrived() else None
    if url_ckpt is not None:
        try:
            st.session_state["ckpt_choice"] = resolve_choice(url_ckpt)[0]
            st.session_state.pop("ckpt_refused", None)
        except CheckpointRefused:
            st.session_state["ckpt_choice"] = None
            st.session_state["ckpt_refused"] = url_ckpt
    refused = st.session_state.get("ckpt_refused")
    if not found:
        return "", None, NOT_OFFERED if refused is not None else NO_CHECKPOINTS
    if st.session_state.get("ckpt_choice") not in found and refused is None:
        st.session_state["ckpt_choice"] = next(iter(found))
    label = st.selectbox("Checkpoint", list(found), key="ckpt_choice", placeholder="Choose a checkpoint",
                         on_change=lambda: st.session_state.pop("ckpt_refused", None),
                         help="Checkpoint directories under the roots this server's operator allows")
    if label is None:
        return "", None, NOT_OFFERED if refused is not None else NOT_CHOSEN
    return label, found[label], None


NOT_CHOSEN = "Choose a checkpoint in the sidebar."


def _draw_sidebar() -> Session:
    begin_run()
    default = "trained" if trained_available() else "random"
    with st.sidebar:
        st.markdown("**Weights**")
        seed("weights_choice", qp_choice("weights", list(WEIGHT_CHOICES), WEIGHT_CHOICES[default],
                                         "a weights choice (trained, random or checkpoint)"), default)
        weights = st.radio("Weights", list(WEIGHT_CHOICES), format_func=WEIGHT_CHOICES.get,
                           label_visibility="collapsed", key="weights_choice")
        label, directory, problem = ("", None, None)
        if weights == "checkpoint":
            label, directory, problem = _checkpoint_choice()
        seed("numbering_choice", qp_choice("numbering", list(NUMBERING), NUMBERING["0"], "0 or 1"), "0")
        one_based = st.radio("Layer numbering", list(NUMBERING), format_func=NUMBERING.get,
                             key="numbering_choice") == "1"
        dev = device_name()
        st.caption(f"Device: **{dev.upper()}**" + ("" if dev == "cuda" else " (no CUDA GPU found)"))
    refused = st.session_state.get("ckpt_refused") if weights == "checkpoint" and not label else None
    # left out at the server's default, as every other value is: a first visit then writes no link at all
    qp_set(weights=None if weights == default else weights, ckpt=label or refused or None,
           numbering="1" if one_based else None)
    model, err = None, None
    if weights == "trained" and not trained_available():
        err = "The trained tiny weights are not in data/weights/tiny yet; choose Random tiny."
    elif weights == "checkpoint" and directory is None:
        err = problem
    else:
        try:
            model = load_model(weights, directory)
        except CheckpointRefused as e:      # our own message: names no server path
            err = str(e)
        except Exception as e:  # any load failure becomes a message in the page, never a traceback
            err = f"Could not load the weights: {plain(scrub(str(e)))}"
    shown = WEIGHT_CHOICES[weights] + (f": {plain(label)}" if label else "")
    if model is not None and weights == default:
        ensure()            # once per process: every page drawn at its defaults before the next visitors come
    if err:
        st.sidebar.error(err)
    elif model is not None:
        cfg = model.cfg
        st.sidebar.caption(f"{cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, "
                           f"window {cfg.sliding_window}, vocab {cfg.vocab_size}")
    return Session(model=model, weights=weights, label=shown, device=dev, one_based=one_based, error=err,
                   checkpoint=label)


def page_header(title: str, intro: str | None = None) -> Session:
    """What every page opens with: the sidebar (the session's choices), the sources footer, the title, the
    guided tour's bar when the URL names a stop of this page, and, when given, the page's introduction."""
    sess = sidebar()
    sources_footer()
    st.title(title)
    tour_bar()          # a tour stop on this page: its question, where to look, Back and Next
    if intro is not None:
        st.write(intro)
    return sess


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"*(])")


def sentences(text: str) -> list[str]:
    """A paragraph's sentences (it is our own text: a sentence ends at . ! or ? before a capital)."""
    return _SENTENCE_END.split(text.strip())


def lead(text: str, n: int = 1) -> tuple[str, str]:
    """A paragraph cut after its first `n` sentences: (the lead a page shows beside its view, the rest it puts in
    its fine print). A reader takes in the first sentence of a block, so the lead is written to carry the point;
    the rest is kept word for word, only moved."""
    parts = sentences(text)
    return " ".join(parts[:n]), " ".join(parts[n:])


def require_model(sess: Session):
    """Stop the page with a clear message when no model is loaded."""
    if sess.model is None:
        st.info(sess.error or "No model loaded: choose weights in the sidebar.")
        stop()
    return sess.model


@st.cache_resource(show_spinner=False)
def _progress_store() -> dict:
    return {}


def cached_with_progress(namespace: str, key: Hashable, compute: Callable[[Callable[[float, str], None]], Any],
                         text: str, max_entries: int = 8) -> Any:
    """`compute(progress)` once per key, server-wide like st.cache_resource, with a progress bar while it runs.

    st.cache_data / st.cache_resource cannot drive a bar created outside the cached function (they replay
    elements), so long runs whose progress the reader should see are cached here. Results are shared
    read-only; the oldest entries beyond `max_entries` per namespace are dropped."""
    store = _progress_store().setdefault(namespace, OrderedDict())
    if key in store:
        store.move_to_end(key)
        return store[key]
    with heavy_run(text.rstrip(" .")):          # one server-wide queue for long runs (ui.queue)
        bar = st.progress(0.0, text=text)
        try:
            value = compute(lambda f, msg: bar.progress(min(1.0, max(0.0, float(f))), text=msg))
        finally:
            bar.empty()
    store[key] = value
    while len(store) > max_entries:
        store.popitem(last=False)
    return value


# ---- pure results (figures, tables) made once per argument values -------------------------------------------------
T = TypeVar("T")
BUILT_KEPT = 256      # results kept server-wide (a figure is tens to hundreds of KB)


_PLAIN = {type(None), bool, int, float, str}


def _feed(h, obj, depth: int = 0) -> None:
    """Feed the value of `obj` into the hash `h`: plain values, containers, dataclasses, arrays, tensors and frames
    by content; a function by its name (a lambda or a local function has none: TypeError); a Session by its
    choices (its model is the same object for the same label), so `sess.num` is its numbering. Anything else
    raises TypeError: it has no value this can name."""
    if depth > 40:
        raise TypeError("nested too deep to name")
    up = h.update
    if obj is None or isinstance(obj, (bool, int, float, complex, str, bytes, np.generic)):
        up(f"{type(obj).__name__}:{obj!r};".encode())
    elif isinstance(obj, (list, tuple)) and all(type(x) in _PLAIN for x in obj):
        up(f"{type(obj).__name__}:{obj!r};".encode())       # token texts, shares: one repr
    elif isinstance(obj, (list, tuple)):
        up(f"{type(obj).__name__}{len(obj)}[".encode())
        for x in obj:
            _feed(h, x, depth + 1)
        up(b"]")
    elif isinstance(obj, dict):
        up(f"dict{len(obj)}{{".encode())
        for k, v in obj.items():
            _feed(h, k, depth + 1)
            _feed(h, v, depth + 1)
        up(b"}")
    elif isinstance(obj, (set, frozenset)):
        up(f"set{len(obj)}{{{sorted(map(repr, obj))!r}}}".encode())
    elif isinstance(obj, Session):
        _feed(h, ("Session", obj.label, obj.weights, obj.device, obj.one_based), depth + 1)
    elif isinstance(obj, types.MethodType):
        _feed(h, ("method", obj.__func__.__qualname__), depth + 1)
        _feed(h, obj.__self__, depth + 1)
    elif isinstance(obj, (types.FunctionType, types.BuiltinFunctionType, type)):
        if "<" in obj.__qualname__:
            raise TypeError(f"{obj.__qualname__} has no importable name")
        _feed(h, ("function", obj.__module__, obj.__qualname__), depth + 1)
    elif isinstance(obj, torch.Tensor):
        _feed(h, obj.detach().cpu().numpy(), depth + 1)
    elif isinstance(obj, np.ndarray):
        up(f"array{obj.dtype}{obj.shape}".encode())
        if obj.dtype == object:
            _feed(h, obj.ravel().tolist(), depth + 1)
        else:
            up(np.ascontiguousarray(obj).tobytes())
    elif isinstance(obj, (pd.DataFrame, pd.Series)):
        _feed(h, (type(obj).__name__, [str(c) for c in obj.columns] if isinstance(obj, pd.DataFrame) else obj.name),
              depth + 1)
        up(pd.util.hash_pandas_object(obj, index=True).to_numpy().tobytes())
    elif dataclasses.is_dataclass(obj):
        _feed(h, (type(obj).__module__, type(obj).__qualname__), depth + 1)
        for f in dataclasses.fields(obj):
            _feed(h, getattr(obj, f.name), depth + 1)
    else:
        raise TypeError(f"no value to name a {type(obj).__name__} by")


def _fingerprint(*parts) -> bytes | None:
    """A digest of the parts' values, or None when one of them has no value this can name (built every time)."""
    h = hashlib.blake2b(digest_size=20)
    try:
        _feed(h, parts)
    except TypeError:
        return None
    return h.digest()


@st.cache_resource(show_spinner=False)
def _built_store() -> OrderedDict:
    return OrderedDict()


_built_lock = threading.Lock()


def built(build: Callable[..., T], *args, **kwargs) -> T:
    """`build(*args, **kwargs)` for a pure builder (a Plotly figure, a table), made once per argument values and
    shared server-wide, read-only: a page's rerun, or another visitor at the same inputs, reuses the result
    instead of building it again (a Plotly figure costs tens of milliseconds to hundreds to validate; passing
    the same figure object to st.plotly_chart again only serialises it). Arguments are named by their values
    (hashed, `_feed`); an argument with no value to name (a lambda, a lock) makes it build every time. Callers
    must not change the result."""
    key = _fingerprint(build.__module__, build.__qualname__, args, kwargs)
    if key is None:
        return build(*args, **kwargs)
    store = _built_store()
    with _built_lock:
        if key in store:
            store.move_to_end(key)
            return store[key]
    value = build(*args, **kwargs)
    with _built_lock:
        store[key] = value
        while len(store) > BUILT_KEPT:
            store.popitem(last=False)
    return value
