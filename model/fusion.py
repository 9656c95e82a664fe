"""Fused kernels for training: the same functions, compiled by Inductor while a fast step runs.

Not a design section of its own: a speed switch for the maths of docs/design/equations.md §8 (mHC),
§1 (RMSNorm), §9 (experts) and §13 (training loss). A profile of one tiny training step
spends most of its time in thousands of small elementwise kernels (the mHC Sinkhorn loop alone
issues about a thousand divisions per forward, and as many again backward); compiled, each of
these functions becomes one or two loops.

`@fusable` marks a pure tensor function. Outside `fused()` it runs eagerly, exactly as written;
inside, it runs its `torch.compile` version (static shapes: one graph per input shape, which a
training run has one of; nothing here depends on the sliding window, so a window curriculum
never recompiles). Where compiling is unavailable (no C compiler, an unsupported platform) the
first failure is reported once and the eager function is used from then on.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
from typing import Callable, Iterator, TypeVar

import torch

F = TypeVar("F", bound=Callable)

_state = threading.local()
_broken: list[str] = []  # the reason compiling failed, once


def fusing() -> bool:
    """True inside `fused()` on this thread (and compiling is available)."""
    return getattr(_state, "on", False) and not _broken


@contextlib.contextmanager
def fused(on: bool = True) -> Iterator[None]:
    """Run the `@fusable` functions compiled inside this block (a no-op with on=False)."""
    before = getattr(_state, "on", False)
    _state.on = on
    try:
        yield
    finally:
        _state.on = before


def compile_error() -> str | None:
    """Why compiling was given up, or None."""
    return _broken[0] if _broken else None


def fusable(fn: F | None = None, *, dynamic: bool = False) -> F:
    """Mark a pure tensor function whose compiled form replaces it inside `fused()`. `dynamic=True`
    for functions whose input shapes change at every call (an expert's share of the tokens)."""
    if fn is None:
        return functools.partial(fusable, dynamic=dynamic)  # type: ignore[return-value]
    compiled: list[Callable] = []

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if not fusing():
            return fn(*args, **kwargs)
        if not compiled:
            compiled.append(torch.compile(fn, dynamic=dynamic))
        try:
            return compiled[0](*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - any compiler failure falls back to the same maths
            if torch.compiler.is_compiling():
                raise
            _broken.append(f"{type(exc).__name__}: {exc}"[:300])
            print(f"model.fusion: compiling {fn.__name__} failed, running eagerly ({_broken[0]})", file=sys.stderr)
            return fn(*args, **kwargs)

    wrapper.eager = fn  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


def configure() -> None:
    """Dynamo settings for training: many small graphs (one per function and shape), no automatic
    dynamic shapes (a second shape gets its own static graph instead of a symbolic one)."""
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
    torch._dynamo.config.automatic_dynamic_shapes = False
