"""python -m bench.load: many people at once. N concurrent sessions each open the Start page and run their
own prompt on the tiny model, against one app server started as the README starts it (loopback only).

Each session speaks Streamlit's own browser protocol: a websocket to /_stcore/stream carrying the
BackMsg / ForwardMsg protobufs the web client sends and receives. It asks for the page (rerun_script
with the URL's query string), finds the prompt box in the elements the server sends, then sets the
box to a prompt of its own (a widget state change, exactly what the browser sends when a reader edits
the box) and waits for the script run to finish. Latency = that rerun, from the send to
`script_finished`; it includes the model's forward pass for a new prompt (distinct per session, so no
session is served from another's cached result).

Why the protocol and not 20 Chromium tabs: the server sees the same messages either way, and on a
2-core machine 20 browser renderers would measure the browsers' own plotly drawing, not the server.
The browser tests (tests/browser/) check what only a real browser shows.

Checks (exit status 1 when one fails): zero errors (an exception box, an error alert, a dropped
connection, a run that did not finish in time, a missing chart), and that the model was loaded once
for all sessions (ui.common.load_model logs one line per real load; it is an st.cache_resource).
Reports p50/p95 latency and the server's peak resident memory (VmHWM from /proc).

Bounded: `--sessions` sessions, `--prompts` prompt runs each, `--timeout` seconds in all; only
127.0.0.1 is contacted. Ends with one line:
`load: sessions=20 errors=0 p50_s=... p95_s=... peak_mb=... model_loads=1`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench import server as app_server


@dataclass
class Run:
    elements: list = field(default_factory=list)     # Element protos in arrival order
    status: str = ""
    seconds: float = 0.0


@dataclass
class SessionResult:
    index: int
    open_s: float | None = None
    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _exceptions_and_errors(run: Run) -> list[str]:
    from streamlit.proto.Alert_pb2 import Alert

    out = []
    for el in run.elements:
        kind = el.WhichOneof("type")
        if kind == "exception":
            out.append(f"exception: {el.exception.type}: {el.exception.message[:200]}")
        elif kind == "alert" and el.alert.format == Alert.ERROR:
            out.append(f"error message: {el.alert.body[:200]}")
    return out


class Client:
    """One browser-like Streamlit session over the websocket protocol."""

    def __init__(self, port: int, query: str):
        self.port, self.query = port, query
        self.ws = None

    async def __aenter__(self):
        import websockets

        self.ws = await websockets.connect(
            f"ws://127.0.0.1:{self.port}/_stcore/stream", subprotocols=["streamlit"],
            origin=f"http://127.0.0.1:{self.port}", max_size=None, open_timeout=120, ping_interval=None)
        return self

    async def __aexit__(self, *exc):
        await self.ws.close()

    async def rerun(self, widgets: list | None = None, timeout: float = 600.0) -> Run:
        """Send rerun_script (query string + widget states), collect elements until script_finished."""
        from streamlit.proto.BackMsg_pb2 import BackMsg
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        msg = BackMsg()
        msg.rerun_script.query_string = self.query
        for w in widgets or []:
            msg.rerun_script.widget_states.widgets.append(w)
        t0 = time.perf_counter()
        await self.ws.send(msg.SerializeToString())
        run = Run()
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no script_finished within {timeout:.0f} s")
            data = await asyncio.wait_for(self.ws.recv(), timeout=left)
            fm = ForwardMsg()
            fm.ParseFromString(data)
            kind = fm.WhichOneof("type")
            if kind == "delta" and fm.delta.WhichOneof("type") == "new_element":
                run.elements.append(fm.delta.new_element)
            elif kind == "script_finished":
                status = ForwardMsg.ScriptFinishedStatus.Name(fm.script_finished)
                if status == "FINISHED_EARLY_FOR_RERUN":
                    continue       # superseded by our own rerun request; keep waiting for its end
                run.status, run.seconds = status, time.perf_counter() - t0
                return run


def _widget_id(run: Run, kind: str, key: str) -> str:
    for el in run.elements:
        if el.WhichOneof("type") == kind and getattr(el, kind).id.endswith(key):
            return getattr(el, kind).id
    raise LookupError(f"no {kind} widget with key {key!r} on the page")


def _captions(run: Run) -> list[str]:
    return [el.markdown.body for el in run.elements if el.WhichOneof("type") == "markdown"]


async def session(i: int, port: int, query: str, prompts: int, timeout: float) -> SessionResult:
    from streamlit.proto.WidgetStates_pb2 import WidgetState

    res = SessionResult(i)
    try:
        async with Client(port, query) as c:
            first = await c.rerun(timeout=timeout)
            res.open_s = first.seconds
            res.errors += _exceptions_and_errors(first)
            box = _widget_id(first, "text_area", "start_prompt")
            for j in range(prompts):
                # distinct per session and run: each one is a real forward pass of the model
                text = f"Visitor {i} asks question {j}: the key is in the blue box. The box is"
                w = WidgetState(id=box, string_value=text)
                run = await c.rerun([w], timeout=timeout)
                res.latencies.append(run.seconds)
                res.errors += _exceptions_and_errors(run)
                if not any(el.WhichOneof("type") == "plotly_chart" for el in run.elements):
                    res.errors.append("the next-token chart did not arrive")
                n_tok = [t for t in _captions(run) if "prompt tokens read" in t]
                if not n_tok:
                    res.errors.append("no 'prompt tokens read' caption after the run")
    except Exception as e:  # any failure of one session is counted, the others go on
        res.errors.append(f"{type(e).__name__}: {e}")
    return res


def percentile(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


async def _drive(port: int, query: str, n: int, prompts: int, timeout: float, srv) -> tuple[list[SessionResult], int]:
    peak = [0]

    async def sample_memory():
        while True:
            peak[0] = max(peak[0], srv.memory_kb().get("VmHWM", 0))
            await asyncio.sleep(0.5)

    sampler = asyncio.create_task(sample_memory())
    tasks = [asyncio.create_task(session(i, port, query, prompts, timeout)) for i in range(n)]
    done, pending = await asyncio.wait(tasks, timeout=timeout)
    for t in pending:
        t.cancel()
    sampler.cancel()
    results = [t.result() for t in done]
    results += [SessionResult(-1, errors=[f"session still running after {timeout:.0f} s"]) for _ in pending]
    peak[0] = max(peak[0], srv.memory_kb().get("VmHWM", 0))
    return results, peak[0]


@dataclass
class LoadReport:
    sessions: int
    errors: list[str]
    latencies: list[float]
    opens: list[float]
    peak_mb: float
    model_loads: int
    wall_s: float

    @property
    def line(self) -> str:
        return (f"load: sessions={self.sessions} errors={len(self.errors)} p50_s={percentile(self.latencies, .5):.2f} "
                f"p95_s={percentile(self.latencies, .95):.2f} peak_mb={self.peak_mb:.0f} "
                f"model_loads={self.model_loads}")

    @property
    def ok(self) -> bool:
        return not self.errors and self.model_loads == 1


def run_load(sessions: int = 20, prompts: int = 1, timeout: float = 900.0, weights: str | None = "default",
             log_dir: Path | None = None) -> LoadReport:
    if weights == "default":
        weights = app_server.default_weights()
    query = f"weights={weights}" if weights else ""
    log_dir = log_dir or Path(tempfile.mkdtemp(prefix="v41-load-"))
    srv = app_server.start(log_dir / "server.log")
    t0 = time.perf_counter()
    try:
        results, peak_kb = asyncio.run(_drive(srv.port, query, sessions, prompts, timeout, srv))
        loads = srv.model_loads()
    finally:
        srv.stop()
    errors = [f"session {r.index}: {e}" for r in results for e in r.errors]
    return LoadReport(sessions, errors, [x for r in results for x in r.latencies],
                      [r.open_s for r in results if r.open_s is not None], peak_kb / 1024, loads,
                      time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=20)
    ap.add_argument("--prompts", type=int, default=1, help="prompt runs per session")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds for the whole load, all sessions")
    ap.add_argument("--weights", default="default", help="random | trained (default: trained if shipped)")
    a = ap.parse_args()
    if not 1 <= a.sessions <= 64 or not 1 <= a.prompts <= 10:
        sys.exit("--sessions must be 1..64 and --prompts 1..10 (the load stays bounded)")
    rep = run_load(a.sessions, a.prompts, a.timeout, None if a.weights == "trained" else a.weights)
    print(f"{rep.sessions} sessions x {a.prompts} prompt run(s) on one server, {rep.wall_s:.1f} s in all")
    if rep.opens:
        print(f"page open (first session includes the model load): p50 {percentile(rep.opens, .5):.2f} s, "
              f"max {max(rep.opens):.2f} s")
    print(f"prompt run latency: p50 {percentile(rep.latencies, .5):.2f} s, p95 {percentile(rep.latencies, .95):.2f} s, "
          f"max {max(rep.latencies, default=float('nan')):.2f} s over {len(rep.latencies)} runs")
    for e in rep.errors[:20]:
        print("ERROR", e)
    if rep.model_loads != 1:
        print(f"ERROR the model was loaded {rep.model_loads} times (expected once for all sessions)")
    print(rep.line)
    sys.exit(0 if rep.ok else 1)


if __name__ == "__main__":
    main()
