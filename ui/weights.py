"""The shipped sets of trained weights as the app offers them: whether this server offers a set (its operator's
allow-list holds the set's directory), the set's training record, its label in the sidebar's checkpoint list, a
Session for it built the way the sidebar builds one (so the server-wide model store and every cache keyed by the
label are shared with the sidebar), and the one writer of the sidebar's weights choice.

The sets themselves (kind, directory, title) are data in model/shipped.py; what a record says about how a set
was trained is lessons/how_trained.py. This module knows nothing of any page.
"""

from __future__ import annotations

import json
from pathlib import Path

import streamlit as st

from model import shipped_set, shipped_weights
from model.shipped import KINDS, RECALL_KINDS
from ui.checkpoints import find_checkpoints
from ui.session import WEIGHT_CHOICES, Session, load_model, trained_available
from ui.text import plain

RECORD_MAX_BYTES = 16 << 20      # a training.json holds every step's log; a bigger file is not read
PAIR_ORDER = RECALL_KINDS + tuple(k for k in KINDS if k not in RECALL_KINDS)   # the side-by-side's columns


@st.cache_resource(show_spinner=False, max_entries=32)
def _read_json(path: str, mtime: float) -> dict | None:
    """The file's object, shared read-only (a training record holds every step's log: handing out a copy per call,
    as st.cache_data does, costs a page more than reading what it needs)."""
    p = Path(path)
    try:
        if p.stat().st_size > RECORD_MAX_BYTES:
            return None
        rec = json.loads(p.read_text())
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) else None


def json_at(p: Path) -> dict | None:
    """A JSON object file, read once per change of the file (None when missing, unreadable or too big). The dict is
    shared by every caller: not to be changed."""
    try:
        mtime = p.stat().st_mtime
    except OSError:
        return None
    return _read_json(str(p), mtime)


def training_record(directory: Path | None = None) -> dict | None:
    """The training.json of a weights directory (the shipped text model by default); None when it is missing,
    unreadable or too big. Re-read when it changes."""
    return json_at((directory or shipped_weights("text")) / "training.json")


def record(kind: str) -> dict | None:
    """The training record of the shipped set of `kind`."""
    return training_record(shipped_weights(kind))


def sidebar_label(kind: str) -> str | None:
    """The sidebar's checkpoint label for a shipped set other than the text model, when this server offers it."""
    directory = shipped_weights(kind)
    if not (directory / "config.json").is_file():
        return None
    real = directory.resolve()
    return next((label for label, d in find_checkpoints().items() if d == real), None)


def offered(kind: str) -> bool:
    """Whether this server offers the shipped set of `kind` (the text model: whether its files are there)."""
    return trained_available() if kind == "text" else sidebar_label(kind) is not None


def offered_kinds(kinds: tuple[str, ...] = PAIR_ORDER) -> list[str]:
    return [k for k in kinds if offered(k)]


def window_of(kind: str) -> int | None:
    """The sliding window a shipped set's config.json states (None when unreadable)."""
    try:
        return int(json_at(shipped_weights(kind) / "config.json")["text_config"]["sliding_window"])
    except (KeyError, TypeError, ValueError):
        return None


def session_for(kind: str, like: Session) -> Session:
    """A Session on the shipped set of `kind`, labelled as the sidebar would label it (the label is a cache key),
    with the reader's device and numbering from `like`. The caller checks `offered(kind)` first."""
    if kind == "text":
        return Session(model=load_model("trained"), weights="trained", label=WEIGHT_CHOICES["trained"],
                       device=like.device, one_based=like.one_based)
    label = sidebar_label(kind)
    return Session(model=load_model("checkpoint", shipped_weights(kind).resolve()), weights="checkpoint",
                   label=f"{WEIGHT_CHOICES['checkpoint']}: {plain(label or '')}", device=like.device,
                   one_based=like.one_based, checkpoint=label or "")


def kind_of(sess: Session) -> str | None:
    """Which shipped set the session's weights are (None for random weights or another checkpoint)."""
    if sess.weights == "trained":
        return "text"
    if sess.weights == "checkpoint":
        return next((k for k in PAIR_ORDER if k != "text" and sess.checkpoint
                     and sidebar_label(k) == sess.checkpoint), None)
    return None


def choose(kind: str) -> None:
    """Button callback, the one writer of the sidebar's weights choice from a page: load the shipped set of `kind`
    on the next run."""
    if kind == "text":
        st.session_state["weights_choice"] = "trained"
        return
    label = sidebar_label(kind)
    if label is None:
        return
    st.session_state["weights_choice"] = "checkpoint"
    st.session_state["ckpt_choice"] = label
    st.session_state.pop("ckpt_refused", None)


def title(kind: str) -> str:
    return shipped_set(kind).title
