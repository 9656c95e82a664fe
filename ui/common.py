"""The app's shared Streamlit layer: sidebar (weights, device, numbering), cached models, URL state.

Pages call `sidebar()` once, then read inputs, call `lessons/` or `model/`, and draw. Models are
cached with `st.cache_resource` (one copy per server, shared by all sessions); results with
`st.cache_data`. Page state is mirrored in `st.query_params` so a URL reopens the same view.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Hashable

import streamlit as st
import torch

# One intra-op thread per session: the server runs many sessions at once on few cores, and an OpenMP
# team that cannot get all its cores makes every op wait for the missing thread.
if not torch.cuda.is_available():
    torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]
TINY_DIR = ROOT / "data" / "weights" / "tiny"
WEIGHT_CHOICES = {"trained": "Trained tiny (shipped)", "random": "Random tiny", "checkpoint": "Checkpoint directory"}


@dataclass
class Session:
    model: object | None          # model.V41Model or None when loading failed
    weights: str                  # "trained" | "random" | "checkpoint"
    label: str
    device: str
    one_based: bool
    error: str | None = None

    def num(self, layer: int) -> int:
        """A 0-based layer index as the reader chose to count."""
        return layer + 1 if self.one_based else layer

    def layer_label(self, layer: int) -> str:
        return f"layer {self.num(layer)}"


def trained_available() -> bool:
    return (TINY_DIR / "model.safetensors").exists() and (TINY_DIR / "config.json").exists()


def device_name() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


@st.cache_resource(show_spinner="Loading the model ...")
def load_model(weights: str, path: str = ""):
    """One model per (weights, path) for the whole server."""
    from streamlit.logger import get_logger

    from model import V41Config, V41Model, load
    from model.tokenizer import load_tokenizer

    dev = device_name()
    # one line per real load: bench.load counts them to show the model is shared by all sessions
    get_logger(__name__).info("Loading the model: weights=%s path=%r device=%s", weights, path, dev)
    if weights == "trained":
        return load(TINY_DIR, device=dev)
    if weights == "random":
        from model.engram import compressed_token_map

        tok = load_tokenizer(TINY_DIR / "tokenizer.json")
        _, n = compressed_token_map(tok)
        cfg = V41Config.preset("tiny").replace(engram_compressed_vocab_size=n).validate()
        torch.manual_seed(0)
        m = V41Model(cfg).init_weights(0).to(dev).eval()
        return m.bind_tokenizer(tok)
    return load(path, device=dev)


def qp_get(name: str, default: str | None = None) -> str | None:
    v = st.query_params.get(name)
    return default if v is None else str(v)


def qp_int(name: str, default: int, lo: int, hi: int) -> int:
    """An integer URL parameter in [lo, hi]; anything else falls back to `default` with a warning."""
    raw = st.query_params.get(name)
    if raw is None:
        return default
    try:
        v = int(str(raw))
    except ValueError:
        st.warning(f"URL parameter {name}={raw!r} is not a whole number; showing {default} instead.")
        return default
    if not lo <= v <= hi:
        st.warning(f"URL parameter {name}={v} is outside {lo}..{hi}; showing {default} instead.")
        return default
    return v


def qp_set(**kw) -> None:
    for k, v in kw.items():
        if v is None:
            st.query_params.pop(k, None)
        elif st.query_params.get(k) != str(v):
            st.query_params[k] = str(v)


def sidebar() -> Session:
    """Draw the shared sidebar and return the session's model choice."""
    with st.sidebar:
        st.markdown("**Weights**")
        choices = list(WEIGHT_CHOICES)
        default = "trained" if trained_available() else "random"
        cur = qp_get("weights", default)
        if cur not in choices:
            st.warning(f"Unknown weights choice {cur!r} in the URL; using {WEIGHT_CHOICES[default]}.")
            cur = default
        weights = st.radio("Weights", choices, index=choices.index(cur), format_func=WEIGHT_CHOICES.get,
                           label_visibility="collapsed", key="weights_choice")
        path = ""
        if weights == "checkpoint":
            path = st.text_input("Checkpoint directory", value=qp_get("ckpt", ""),
                                 help="A directory with config.json and *.safetensors (native tensor names)")
        numbering = st.radio("Layer numbering", ["0-based (as in the code)", "1-based (as the first seed counts)"],
                             index=1 if qp_get("numbering") == "1" else 0, key="numbering_choice")
        one_based = numbering.startswith("1")
        dev = device_name()
        st.caption(f"Device: **{dev.upper()}**" + ("" if dev == "cuda" else " (no CUDA GPU found)"))
    qp_set(weights=weights, ckpt=path or None, numbering="1" if one_based else None)
    model, err = None, None
    if weights == "trained" and not trained_available():
        err = "The trained tiny weights are not in data/weights/tiny yet; choose Random tiny."
    elif weights == "checkpoint" and not path.strip():
        err = "Enter a checkpoint directory in the sidebar."
    else:
        try:
            model = load_model(weights, path.strip())
        except Exception as e:  # any load failure becomes a message in the page, never a traceback
            err = f"Could not load the weights: {e}"
    label = WEIGHT_CHOICES[weights] + (f": {path}" if path else "")
    if err:
        st.sidebar.error(err)
    elif model is not None:
        cfg = model.cfg
        st.sidebar.caption(f"{cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, "
                           f"window {cfg.sliding_window}, vocab {cfg.vocab_size}")
    return Session(model=model, weights=weights, label=label, device=dev, one_based=one_based, error=err)


def require_model(sess: Session):
    """Stop the page with a clear message when no model is loaded."""
    if sess.model is None:
        st.info(sess.error or "No model loaded.")
        st.stop()
    return sess.model


def clean_prompt(text: str, max_chars: int = 20000) -> tuple[str | None, str | None]:
    """(prompt, problem): reject empty or oversized prompts with a message instead of an error."""
    if text is None or not text.strip():
        return None, "The prompt is empty: type some text first."
    if len(text) > max_chars:
        return None, f"The prompt has {len(text):,} characters; the limit here is {max_chars:,}."
    return text, None


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
    bar = st.progress(0.0, text=text)
    try:
        value = compute(lambda f, msg: bar.progress(min(1.0, max(0.0, float(f))), text=msg))
    finally:
        bar.empty()
    store[key] = value
    while len(store) > max_entries:
        store.popitem(last=False)
    return value
