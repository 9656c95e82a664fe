"""Results made once and shared server-wide: long runs with a progress bar (`cached_with_progress`), and pure
builders (figures, tables) made once per argument values (`built`, named by a hash of the values, `_feed`).

It does not know what it caches: the callers name the key (a run) or pass the builder and its arguments. A Plotly
figure `built` makes also keeps the dict st.plotly_chart asks it for on every run (`KeptFigure`). `held` is `built`
for arguments the server itself holds and never changes (a stored reading, a training record): named by identity,
since hashing their whole value on every run would cost more than the rerun saves.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
import types
from collections import OrderedDict
from typing import Any, Callable, Hashable, TypeVar

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st
import torch

from ui.queue import heavy_run
from ui.session import Session


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
    elif isinstance(obj, (list, tuple)) and _PLAIN.issuperset(map(type, obj)):
        up(f"{type(obj).__name__}:{obj!r};".encode())       # token texts, shares: one repr
    elif isinstance(obj, (list, tuple)):
        up(f"{type(obj).__name__}{len(obj)}[".encode())
        for x in obj:
            _feed(h, x, depth + 1)
        up(b"]")
    elif isinstance(obj, dict) and _PLAIN.issuperset(map(type, obj)) and _PLAIN.issuperset(map(type, obj.values())):
        up(f"dict:{obj!r};".encode())                       # shares by entry: one repr
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


class KeptFigure(go.Figure):
    """A Plotly figure that keeps its dict once made. st.plotly_chart asks a figure for `to_dict()` on every run, and
    Plotly makes it afresh each time (a deep copy of every trace, then binary packing of its arrays: milliseconds for
    a picture of a few thousand cells, on every rerun of every page that draws it). A figure `built` makes is shared
    and never changed, so its dict is made once; any change to the figure through Plotly (a trace added, removed or
    restyled, the layout updated) drops the kept dict. The dict is shared too: not to be changed."""

    _kept: dict | None = None

    def to_dict(self) -> dict:
        if self._kept is None:
            self._kept = super().to_dict()
        return self._kept

    def _changed(self, *a, **k) -> None:
        self._kept = None

    # every change made through Plotly's API reports itself through one of these (FigureWidget's messages to the
    # browser; no-ops on a Figure)
    _send_addTraces_msg = _send_moveTraces_msg = _send_deleteTraces_msg = _changed
    _send_restyle_msg = _send_relayout_msg = _send_update_msg = _send_animate_msg = _changed


def _kept(value):
    """A built Plotly figure as a KeptFigure (the same object: only its class changes); anything else as it is."""
    if type(value) is go.Figure:
        value.__class__ = KeptFigure
    return value


@st.cache_resource(show_spinner=False)
def _built_store() -> OrderedDict:
    return OrderedDict()


_built_lock = threading.Lock()


@st.cache_resource(show_spinner=False)
def _held_store() -> OrderedDict:
    return OrderedDict()


HELD_KEPT = 16


def held(build: Callable[..., T], objects: tuple, *args, **kwargs) -> T:
    """`build(*objects, *args, **kwargs)` made once per identity of `objects` and per value of the other arguments
    (named as `built` names them), shared server-wide, read-only. For objects the server holds and never changes
    (a reading kept by st.cache_resource, a training record read once per change of its file): a new object, even
    an equal one, makes it again. The entry holds the objects, so no other object takes their identity while it is
    kept."""
    named = _fingerprint(build.__module__, build.__qualname__, args, kwargs)
    if named is None:
        return _kept(build(*objects, *args, **kwargs))
    key = (tuple(id(o) for o in objects), named)
    store = _held_store()
    with _built_lock:
        hit = store.get(key)
        if hit is not None and all(a is b for a, b in zip(hit[0], objects)):
            store.move_to_end(key)
            return hit[1]
    value = _kept(build(*objects, *args, **kwargs))
    with _built_lock:
        store[key] = (tuple(objects), value)
        while len(store) > HELD_KEPT:
            store.popitem(last=False)
    return value


def built(build: Callable[..., T], *args, **kwargs) -> T:
    """`build(*args, **kwargs)` for a pure builder (a Plotly figure, a table), made once per argument values and
    shared server-wide, read-only: a page's rerun, or another visitor at the same inputs, reuses the result
    instead of building it again (a Plotly figure costs tens of milliseconds to hundreds to validate; passing
    the same figure object to st.plotly_chart again only serialises it). Arguments are named by their values
    (hashed, `_feed`); an argument with no value to name (a lambda, a lock) makes it build every time. Callers
    must not change the result. A Plotly figure comes back as a KeptFigure: it also keeps the dict it is drawn from."""
    key = _fingerprint(build.__module__, build.__qualname__, args, kwargs)
    if key is None:
        return _kept(build(*args, **kwargs))
    store = _built_store()
    with _built_lock:
        if key in store:
            store.move_to_end(key)
            return store[key]
    value = _kept(build(*args, **kwargs))
    with _built_lock:
        store[key] = value
        while len(store) > BUILT_KEPT:
            store.popitem(last=False)
    return value
