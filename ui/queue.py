"""One server-wide queue for heavy runs (the Ablation lab, DSpark's whole run, the inspector's trace, the
indexer-pools re-run, measured rounds): at most HEAVY_SLOTS run at once, the others wait their turn in
arrival order and see their place in the queue, so one visitor cannot hold every core while the others
wait without a word.

`HeavyQueue` is plain Python (tested with threads); `heavy_run` is the Streamlit side: a context manager that
shows "N runs ahead of yours" in a placeholder while it waits. Waiting polls every half second and redraws
the placeholder, which is also where Streamlit stops a script whose visitor has left, so an abandoned
ticket leaves the queue at once (the `finally`).
"""

from __future__ import annotations

import os
import threading
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator

HEAVY_SLOTS = max(1, (os.cpu_count() or 2) - 1)   # heavy runs at once: one core stays for everyone else
POLL_S = 0.5


@dataclass
class HeavyQueue:
    slots: int = HEAVY_SLOTS
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _waiting: deque = field(default_factory=deque)
    _running: set = field(default_factory=set)
    _next: int = 0

    def join(self) -> int:
        with self._cond:
            self._next += 1
            self._waiting.append(self._next)
            return self._next

    def ahead(self, ticket: int) -> int:
        """Runs before this ticket: those running plus those waiting in front of it (0: it may start)."""
        with self._cond:
            if ticket in self._running:
                return 0
            before = list(self._waiting).index(ticket) if ticket in self._waiting else 0
            return before + len(self._running)

    def try_start(self, ticket: int) -> bool:
        with self._cond:
            if ticket in self._running:
                return True
            if self._waiting and self._waiting[0] == ticket and len(self._running) < self.slots:
                self._waiting.popleft()
                self._running.add(ticket)
                return True
            return False

    def done(self, ticket: int) -> None:
        with self._cond:
            self._running.discard(ticket)
            try:
                self._waiting.remove(ticket)
            except ValueError:
                pass
            self._cond.notify_all()

    def wait(self, ticket: int, timeout: float) -> None:
        with self._cond:
            self._cond.wait(timeout)

    def snapshot(self) -> tuple[int, int]:
        """(running, waiting)."""
        with self._cond:
            return len(self._running), len(self._waiting)


def _server_queue() -> HeavyQueue:
    # Streamlit only here and in heavy_run's default display: tests and bench/ drive HeavyQueue without it
    import streamlit as st

    @st.cache_resource(show_spinner=False)
    def _queue() -> HeavyQueue:
        return HeavyQueue()

    return _queue()


@contextmanager
def heavy_run(what: str, show: Callable[[str | None], None] | None = None,
              queue: HeavyQueue | None = None) -> Iterator[None]:
    """Wait for a slot in the server-wide queue, saying where this run stands, then run the block."""
    q = queue or _server_queue()
    if show is None:
        # Streamlit only for the default display (see _server_queue)
        import streamlit as st

        box = st.empty()

        def show(msg: str | None) -> None:
            if msg is None:
                box.empty()
            else:
                box.info(msg, icon=":material/hourglass_top:")
    ticket = q.join()
    try:
        while not q.try_start(ticket):
            n = q.ahead(ticket)
            show(f"Waiting for the server: {n} heavy run{'s' if n != 1 else ''} ahead of this one ({what}). "
                 "It starts by itself; the server runs "
                 f"{q.slots} at a time so that every visitor's pages stay quick.")
            q.wait(ticket, POLL_S)
        show(None)
        yield
    finally:
        q.done(ticket)
