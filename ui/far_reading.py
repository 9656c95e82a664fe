"""The far story read on the shipped sets of weights, once per server: the sessions of the sets this server
offers (built as the sidebar builds them, so every cache is shared with it), and the one reading the home page's
picture, every side-by-side panel and the far-fact panels' titles draw. It is taken from the files stored with
the weights (`python -m lab far-readings`, lessons/far_store.py) while they match the weights and the held-out
stories, else computed (lessons/far_compare.py). It draws nothing.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from lessons import far_store
from lessons.far_compare import FarPair, SideInput, compare
from model import shipped_weights
from model.heldout import HELDOUT_STORIES_PATH
from ui import weights
from ui.cache import cached_with_progress
from ui.session import Session


def pair_sessions(sess: Session) -> list[tuple[str, Session]] | None:
    """[(kind, session), ...] for the shipped sets this server offers, recall checkpoints first (ui.weights builds
    each session as the sidebar would, so every cache is shared with it); None without the text model and at
    least one recall checkpoint."""
    kinds = weights.offered_kinds()
    if "text" not in kinds or len(kinds) < 2:
        return None
    return [(kind, weights.session_for(kind, sess)) for kind in kinds]


@st.cache_resource(show_spinner=False, max_entries=4)
def _stored(kinds: tuple[str, ...], stamps: tuple) -> FarPair | None:
    """The stored readings of `kinds` as one FarPair, once per server and change of the files (`stamps`), when every
    one still matches its weights and the held-out stories (lessons/far_store.py); else None."""
    datas = [far_store.read(shipped_weights(k)) for k in kinds]
    if any(d is None for d in datas):
        return None
    try:
        window = max(int(d["reading"]["window"]) for d in datas)
        if not all(far_store.matches(d, far_store.fingerprint(shipped_weights(k), window))
                   for k, d in zip(kinds, datas)):
            return None
        return far_store.stored_pair([(k, far_store.from_json(d), weights.record(k)) for k, d in zip(kinds, datas)])
    except (KeyError, TypeError, ValueError, OSError):     # a file of another shape: compute instead
        return None


def _stamp(p: Path) -> tuple:
    try:
        st_ = p.stat()
        return (str(p), st_.st_mtime_ns, st_.st_size)
    except OSError:
        return (str(p), None, None)


def stored_reading() -> FarPair | None:
    """The far reading stored with the shipped weights (`python -m lab far-readings`), when it matches them."""
    kinds = tuple(weights.offered_kinds())
    if "text" not in kinds or len(kinds) < 2:
        return None
    files = [shipped_weights(k) / name for k in kinds for name in (far_store.FILE, "model.safetensors")]
    return _stored(kinds, tuple(_stamp(f) for f in files + [HELDOUT_STORIES_PATH]))


def far_reading(sess: Session) -> FarPair | None:
    """The far story read on the shipped sets, once per server: the home page's picture and every page's
    side-by-side are this one reading, taken from the files stored with the weights when they match (no model is
    loaded then), else computed. None when the server does not offer them; a load or model error is raised for the
    caller to say in its place."""
    stored = stored_reading()
    if stored is not None:
        return stored
    sides = pair_sessions(sess)
    if sides is None:
        return None
    inputs = [SideInput(f"weights/{kind}", kind, s.model, weights.record(kind)) for kind, s in sides]
    return cached_with_progress("far_pair", tuple(s.label for _, s in sides), lambda progress: compare(inputs),
                                "Reading one far story on each set of weights ...", max_entries=2)
