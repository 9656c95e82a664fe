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
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterator

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
        show = waiting_box()
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


# ------------------------------------------------------------------------------------------------------------
# The batched forward worker
# ------------------------------------------------------------------------------------------------------------

BATCH_ROWS = int(os.environ.get("V41_BATCH_ROWS", "32"))         # rows in one forward (1: one at a time)
QUEUE_LIMIT = int(os.environ.get("V41_QUEUE_LIMIT", "48"))       # requests waiting or running, at most
WINDOW_S = float(os.environ.get("V41_BATCH_WINDOW_S", "0.02"))   # a lone request waits this long for company
BURST_GAP_S = 0.06        # once company came, a gap this long ends the window (stragglers of a burst arrive late)
MAX_WAIT_S = 0.5          # the longest a first request waits: about half a batched forward of a class's prompts
BATCH_TOKENS = 8192


def _size(payload: Any) -> int:
    try:
        return len(payload)
    except TypeError:
        return 1


class Busy(Exception):
    """The batch queue is full: the request was not queued (nothing is running on its behalf)."""

    def __init__(self, waiting: int, limit: int):
        super().__init__(f"the server is busy: {waiting} requests are waiting for the model (the limit is {limit})")
        self.waiting, self.limit = waiting, limit


@dataclass(eq=False)
class Ticket:
    """One request in the batch queue: a row of some kind for one model, and, once run, its result."""

    kind: str
    group: Hashable                    # requests batch together only with the same group (kind, weights, options)
    context: Any                       # what the runner needs besides the row (the model, an ablation ...)
    payload: Any                       # the row (token ids)
    seq: int = 0
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None
    cancelled: bool = False
    batch_rows: int = 0                # rows in the forward that ran it
    waiters: int = 0                   # visitors waiting for it (the same request asked twice runs once)

    def value(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.result


Runner = Callable[[str, Any, list], list]   # (kind, context, payloads) -> a result or an exception per payload


@dataclass
class BatchWorker:
    """One thread owns the forward passes. Requests that arrive together (the collection window, `_collect`: up
    to `max_wait_s` after the first), or while a batch runs, and share a group run as one batch of up to `max_rows`
    rows (and `max_tokens` padded tokens); groups take turns in arrival order of their oldest request. At most
    `limit` requests wait or run: past it `submit` raises Busy at once. A cancelled request (its visitor left) is
    dropped before it runs; a row that fails fails only its own request (the runner retries the rows of a
    failed batch one by one)."""

    run: Runner
    max_rows: int = BATCH_ROWS
    limit: int = QUEUE_LIMIT
    window_s: float = WINDOW_S
    burst_gap_s: float = BURST_GAP_S               # the window's gap once two or more requests wait
    max_tokens: int = BATCH_TOKENS                 # padded tokens in one forward (rows x the longest row)
    max_wait_s: float = MAX_WAIT_S                 # the longest a first request waits for company
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _queue: list = field(default_factory=list)
    _running: list = field(default_factory=list)
    _thread: threading.Thread | None = None
    _seq: int = 0
    stats: dict = field(default_factory=lambda: {"batches": 0, "rows": 0, "largest": 0, "dropped": 0, "busy": 0,
                                                 "failed_rows": 0})

    def submit(self, kind: str, group: Hashable, context: Any, payload: Any) -> Ticket:
        with self._cond:
            load = len(self._queue) + len(self._running)
            if load >= self.limit:
                self.stats["busy"] += 1
                raise Busy(len(self._queue), self.limit)
            self._seq += 1
            t = Ticket(kind, (kind, group), context, payload, seq=self._seq)
            self._queue.append(t)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="v41-batch-worker", daemon=True)
                self._thread.start()
            self._cond.notify_all()
            return t

    def cancel(self, ticket: Ticket) -> None:
        with self._cond:
            if not ticket.done.is_set():
                ticket.cancelled = True

    def join(self, ticket: Ticket) -> None:
        """One more visitor waits for this ticket."""
        with self._cond:
            ticket.waiters += 1

    def leave(self, ticket: Ticket) -> None:
        """A visitor stopped waiting: a ticket nobody waits for any more is dropped before it runs."""
        with self._cond:
            ticket.waiters -= 1
            if ticket.waiters <= 0 and not ticket.done.is_set():
                ticket.cancelled = True

    def ahead(self, ticket: Ticket) -> int:
        """Requests that run before this one (the running batch and those queued in front of it)."""
        with self._cond:
            if ticket.done.is_set() or ticket in self._running:
                return 0
            front = sum(1 for t in self._queue if t.seq < ticket.seq and not t.cancelled)
            return front + len(self._running)

    def snapshot(self) -> tuple[int, int]:
        """(running, waiting)."""
        with self._cond:
            return len(self._running), len(self._queue)

    def _take(self) -> list[Ticket]:
        """The next batch: the oldest request's group, up to max_rows, cancelled requests dropped."""
        with self._cond:
            for t in [t for t in self._queue if t.cancelled]:
                self._queue.remove(t)
                self.stats["dropped"] += 1
                t.error = RuntimeError("cancelled: the visitor left")
                t.done.set()
            if not self._queue:
                return []
            group = self._queue[0].group
            take, longest = [], 0
            for t in self._queue:
                if t.group != group or len(take) >= max(1, self.max_rows):
                    continue
                n = _size(t.payload)
                if take and max(longest, n) * (len(take) + 1) > self.max_tokens:
                    continue                         # padded to the longest row: keep the batch's tokens bounded
                take.append(t)
                longest = max(longest, n)
            for t in take:
                self._queue.remove(t)
            self._running = take
            return take

    def _collect(self) -> None:
        """The collection window: wait while requests keep arriving, at most `max_wait_s`, or until a full batch is
        there; the others of this moment then run with the first. A lone request waits `window_s` for company;
        once a second one came (a class pressing Run together), the window closes only after `burst_gap_s`
        without a new request. A burst's requests reach the queue over a few tenths of a second on a busy
        server (each visitor's script run takes its turn at the interpreter before it submits), and a straggler
        cut off by a short gap waits for the whole first forward before its own runs."""
        deadline = time.monotonic() + self.max_wait_s
        while True:
            with self._cond:
                n = len(self._queue)
                if n >= self.max_rows:
                    return
            time.sleep(min(self.window_s if n < 2 else max(self.window_s, self.burst_gap_s),
                           max(0.0, deadline - time.monotonic())))
            with self._cond:
                if len(self._queue) == n or time.monotonic() >= deadline:
                    return

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue:
                    self._cond.wait()
                fresh = not self._running
            if fresh and self.window_s > 0 and self.max_rows > 1:
                self._collect()
            take = self._take()
            if not take:
                continue
            try:
                results = self.run(take[0].kind, take[0].context, [t.payload for t in take])
            except BaseException as e:              # the runner itself failed: every row of the batch gets it
                results = [e] * len(take)
            with self._cond:
                self.stats["batches"] += 1
                self.stats["rows"] += len(take)
                self.stats["largest"] = max(self.stats["largest"], len(take))
                for t, r in zip(take, results):
                    t.batch_rows = len(take)
                    if isinstance(r, BaseException):
                        t.error = r
                        self.stats["failed_rows"] += 1
                    else:
                        t.result = r
                    t.done.set()
                self._running = []
                self._cond.notify_all()


def run_rows(fn: Callable[[list], list], payloads: list) -> list:
    """`fn` over all payloads at once; when that fails, over each alone, so one bad row fails only itself."""
    try:
        out = fn(payloads)
        if len(out) == len(payloads):
            return out
    except Exception:
        if len(payloads) == 1:
            raise
    results: list = []
    for p in payloads:
        try:
            results.append(fn([p])[0])
        except Exception as e:
            results.append(e)
    return results


def wait_for(worker: BatchWorker, ticket: Ticket, what: str, show: Callable[[str | None], None],
             quiet_s: float = 0.3) -> Any:
    """Wait for a ticket, saying where it stands after `quiet_s`; a ticket nobody waits for any more is dropped
    (Streamlit stops a script whose visitor left at the next element update, which raises here)."""
    t0 = time.monotonic()
    shown = False
    worker.join(ticket)
    try:
        while not ticket.done.wait(POLL_S / 2):
            if time.monotonic() - t0 >= quiet_s:
                n = worker.ahead(ticket)
                show(f"Waiting for the model: {n} request{'s' if n != 1 else ''} ahead of yours ({what}). The server "
                     f"runs requests that arrive together as one batch of up to {worker.max_rows}, so this is quick.")
                shown = True
        if shown:
            show(None)
        return ticket.value()
    finally:
        worker.leave(ticket)


def waiting_box():
    """A placeholder in the page and a function that writes a waiting message there (None clears it)."""
    # Streamlit only for the default display (see _server_queue)
    import streamlit as st

    box = st.empty()

    def show(msg: str | None) -> None:
        if msg is None:
            box.empty()
        else:
            box.info(msg, icon=":material/hourglass_top:")
    return show
