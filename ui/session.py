"""The session and its sidebar: the weights, checkpoint, numbering and device a reader chose, the loaded models,
the app's frame around every page, and what every page opens with (`page_header`).

app.py draws the sidebar once per run, around whichever page runs (`app_frame`), so the session-wide choices
are widgets of the entry script and survive page changes; a page calls `sidebar()` to get them (a page run on
its own, as AppTest does, draws the sidebar itself). Models come from one server-wide store (ui.checkpoints:
allow-listed checkpoints, memory budget, at most MAX_MODELS held, failures remembered). Cached results: ui.cache;
URL and page state: ui.url; prompts: ui.prompt; sentences: ui.text.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import streamlit as st
import torch
from streamlit.logger import get_logger
from streamlit.runtime.scriptrunner import get_script_run_ctx

from lessons.sources import ONE_BASED
from model import default_device, load, random_tiny, shipped_weights
from ui import url
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
from ui.nav import sections
from ui.sources import sources_footer
from ui.text import plain
from ui.tour import tour_bar
from ui.url import begin_run, stop, url_batch
from ui.warmup import ensure

# One intra-op thread per session: the server runs many sessions at once on few cores, and an OpenMP team that
# cannot get all its cores makes every op wait for the missing thread.
if default_device().type == "cpu":
    torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]
TINY_DIR = shipped_weights("text")      # model/shipped.py lists the shipped sets
APP = ROOT / "app.py"
WEIGHT_CHOICES = {"trained": "Trained tiny (shipped text model)", "random": "Random tiny",
                  "checkpoint": "Checkpoint directory"}
NO_MODEL = "No model loaded: choose weights in the sidebar."
NO_TRAINED = "The trained tiny weights (the text model) are not on this server yet; choose Random tiny."
NUMBERING = {"0": "0-based (as the code and the report count)", "1": f"1-based ({ONE_BASED})"}
NUMBERING_P = url.choice("numbering", list(NUMBERING), "0", "0 or 1", instead=f"showing {NUMBERING['0']} instead")
# a label, or a path naming an offered checkpoint, checked by ui.checkpoints.resolve_choice (never refused here:
# a checkpoint not offered empties the box and says so)
CKPT = url.any_text("ckpt")
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


def navigation_pages(root: Path, icons: bool = True) -> dict[str, list[st.Page]]:
    """The navigation's pages by section (ui.nav's list), their scripts under `root` (app.py's folder). `icons`
    False leaves the icons out: a page's ":material/...:" icon becomes the tab's favicon, fetched from a font
    CDN, unless the page config that app.py sets names a local one."""
    return {section: [st.Page(str(root / p.file), title=p.title, icon=p.icon if icons else None, default=p.default)
                      for p in pages]
            for section, pages in sections().items()}


def _ensure_in_app() -> None:
    """A page opened by its own URL on a freshly started server, before anyone opened `/`, is run by
    Streamlit's discovery of a `pages/` folder beside the main script instead of through app.py (no
    navigation, page config or shared sidebar). Streamlit stops that discovery, for the whole server, once
    `st.navigation` has been called (its documented rule for apps that declare their pages), so such a run
    declares the app's navigation, hidden, and runs again: the rerun goes through app.py to the same page.
    A page that is itself the main script (AppTest, `streamlit run pages/x.py`) draws its sidebar here."""
    ctx = get_script_run_ctx()
    if ctx is None or Path(ctx.main_script_path).resolve() != APP:
        return
    st.navigation(navigation_pages(ROOT, icons=False), position="hidden")    # no icon: nothing fetched
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
    url_ckpt = CKPT.read()
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
        weights_p = url.choice("weights", list(WEIGHT_CHOICES), default,
                               f"a weights choice ({url.either(WEIGHT_CHOICES)})",
                               instead=f"showing {WEIGHT_CHOICES[default]} instead")
        url.seeded("weights_choice", weights_p, session_wide=True)
        weights = st.radio("Weights", list(WEIGHT_CHOICES), format_func=WEIGHT_CHOICES.get,
                           label_visibility="collapsed", key="weights_choice")
        label, directory, problem = ("", None, None)
        if weights == "checkpoint":
            label, directory, problem = _checkpoint_choice()
        url.seeded("numbering_choice", NUMBERING_P, session_wide=True)
        numbering = st.radio("Layer numbering", list(NUMBERING), format_func=NUMBERING.get, key="numbering_choice")
        dev = device_name()
        st.caption(f"Device: **{dev.upper()}**" + ("" if dev == "cuda" else " (no CUDA GPU found)"))
    refused = st.session_state.get("ckpt_refused") if weights == "checkpoint" and not label else None
    # left out at the server's default, as every other value is: a first visit then writes no link at all
    url.to_link(weights_p, weights)
    url.to_link(CKPT, label or refused or None)
    url.to_link(NUMBERING_P, numbering)
    one_based = numbering == "1"
    model, err = None, None
    if weights == "trained" and not trained_available():
        err = NO_TRAINED
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
    tour_bar(sess.num)  # a tour stop on this page: its card, in the reader's layer numbering
    if intro is not None:
        st.write(intro)
    return sess


def require_model(sess: Session):
    """Stop the page with a clear message when no model is loaded."""
    if sess.model is None:
        st.info(sess.error or NO_MODEL)
        stop()
    return sess.model
