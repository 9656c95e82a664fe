"""First visits: every page drawn once at its defaults by the server itself, as soon as the default model is loaded.

What a visitor sees first is each page at its defaults (the default prompt, sample, mode and settings), and
most of it is cached server-wide (st.cache_data / st.cache_resource, ui.cache.cached_with_progress,
ui.live.forward). So once per process, when the default weights are first loaded, a background thread opens
one session per page of the navigation (ui.nav) over Streamlit's own websocket protocol on the loopback port
(what a browser sends: rerun_script with the page's URL path) and waits for each run to finish. Every
visitor after that finds the defaults ready: the page's frame draws at once and its live part is a cache
hit. A visitor who comes while the warm-up still runs a page waits for that same computation (the caches
compute a key once), with the page's own progress, instead of starting a second one.

Off under AppTest (no server to visit) and with V41_WARMUP=0. The server log gets one line per page and one
at the end (`Warm-up done: ...`), which bench.load and bench.pages wait for.
"""

from __future__ import annotations

import asyncio
import gc
import os
import threading
import time
from dataclasses import dataclass, field

import streamlit as st
import websockets
from streamlit.logger import get_logger
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

from ui.nav import PAGES

DONE_LINE = "Warm-up done:"
PAGE_TIMEOUT_S = 300.0


@dataclass
class Warmup:
    query: str
    started: float = field(default_factory=time.monotonic)
    seconds: float | None = None                       # set when every page has been drawn once
    pages: list[tuple[str, float, str]] = field(default_factory=list)   # (url path, seconds, problem or "")

    @property
    def done(self) -> bool:
        return self.seconds is not None


def page_paths() -> list[str]:
    """The URL path of every page of the navigation (ui.nav; "" for the default page)."""
    return [p.url_path for p in PAGES]


async def visit(port: int, path: str, query: str, timeout: float = PAGE_TIMEOUT_S) -> tuple[float, str]:
    """Open one page in a fresh session and wait for its run to finish: (seconds, problem or "")."""
    t0 = time.perf_counter()
    async with websockets.connect(f"ws://127.0.0.1:{port}/_stcore/stream", subprotocols=["streamlit"],
                                  origin=f"http://127.0.0.1:{port}", max_size=None, open_timeout=60,
                                  ping_interval=None) as ws:
        msg = BackMsg()
        msg.rerun_script.query_string = query
        msg.rerun_script.page_name = path
        await ws.send(msg.SerializeToString())
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return time.perf_counter() - t0, "timed out"
            fm = ForwardMsg()
            fm.ParseFromString(await asyncio.wait_for(ws.recv(), timeout=left))
            if fm.WhichOneof("type") == "script_finished":
                status = ForwardMsg.ScriptFinishedStatus.Name(fm.script_finished)
                if status != "FINISHED_EARLY_FOR_RERUN":
                    return time.perf_counter() - t0, "" if status == "FINISHED_SUCCESSFULLY" else status


def _run(state: Warmup, port: int) -> None:
    log = get_logger(__name__)
    for path in page_paths():
        try:
            seconds, problem = asyncio.run(visit(port, path, state.query))
        except Exception as e:  # a page that cannot be warmed is drawn on its first real visit instead
            seconds, problem = float("nan"), f"{type(e).__name__}: {e}"
        state.pages.append((path, seconds, problem))
        log.info("Warm-up: page=%s seconds=%.2f%s", path or "(start)", seconds,
                 f" problem={problem}" if problem else "")
    # The warm-up leaves a large, long-lived heap (cached traces, figures, runs): move it out of the cyclic
    # collector's sight, so that a collection during a busy class does not rescan all of it every time.
    gc.collect()
    gc.freeze()
    state.seconds = time.monotonic() - state.started
    log.info("%s pages=%d seconds=%.1f", DONE_LINE, len(state.pages), state.seconds)


def ensure(query: str = "") -> Warmup | None:
    """Start the warm-up once per process (a no-op when it runs or ran, under AppTest, or with V41_WARMUP=0)."""
    if os.environ.get("V41_WARMUP", "1") == "0" or st.get_option("global.appTest"):
        return None
    store = _store()
    with _lock:
        if query in store:
            return store[query]
        state = store[query] = Warmup(query)
    port = int(st.get_option("server.port"))
    threading.Thread(target=_run, args=(state, port), name="v41-warmup", daemon=True).start()
    return state


_lock = threading.Lock()


def _store() -> dict:
    @st.cache_resource(show_spinner=False)
    def _warmups() -> dict:
        return {}

    return _warmups()
