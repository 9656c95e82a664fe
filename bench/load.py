"""python -m bench.load: many people at once. N concurrent sessions each open the home page and run their
own prompt on the tiny model, against one app server started as the README starts it (loopback only).

Each session speaks Streamlit's own browser protocol: a websocket to /_stcore/stream carrying the
BackMsg / ForwardMsg protobufs the web client sends and receives. It asks for the page (rerun_script
with the URL's query string), finds the prompt box in the elements the server sends, then sets the
box to a prompt of its own (a widget state change, exactly what the browser sends when a reader edits
the box) and waits for the script run to finish. Latency = that rerun, from the send to
`script_finished`; it includes the model's forward pass for a new prompt (distinct per session, so no
session is served from another's cached result). Like the web client, a session keeps the large messages the
server marks cacheable and sends their hashes with each rerun, so an unchanged chart comes back as a reference.

Batched vs one at a time, in one run: the same load runs twice, each against a fresh server: once as
the app runs (the server's batch worker, ui/queue.py, runs the prompts that arrive together as one
forward) and once with the worker limited to one row per forward (V41_BATCH_ROWS=1: each prompt's
forward waits for the others, one at a time). The ratio of their p95 latencies is the batching gain
on this machine now; absolute seconds depend on what else the machine runs. On a shared machine one
pair of runs can land on a busy or a quiet moment, so `--rounds N` alternates the two modes N times
(batched, one at a time, batched, ...) and reports every round's ratio and their median.

A full queue: when the worker already holds its limit of requests (V41_QUEUE_LIMIT, `--queue-limit`
here), a page says at once that the server is busy, with how many requests are waiting, instead of
hanging. A session that sees that message counts it (`busy`) and, like a student pressing "Try
again", runs its prompt again after a pause, up to `--retries` times; `completed` counts sessions
whose prompt finally drew its chart (a finished result is never lost: the server keeps it).

Why the protocol and not 20 Chromium tabs: the server sees the same messages either way, and on a
2-core machine 20 browser renderers would measure the browsers' own plotly drawing, not the server.
The browser tests (tests/browser/) check what only a real browser shows.

Checks (exit status 1 when one fails): zero errors (an exception box, an error alert, a dropped
connection, a run that did not finish in time, a missing chart), every session completed, and that
each model was loaded once for all sessions (ui.session.load_model logs one line per real load; it is an
st.cache_resource). Reports p50/p95 latency, the server's peak resident memory (VmHWM from /proc),
and the batches the worker ran (ui.live logs one line per batched forward).

Bounded: `--sessions` sessions, `--prompts` prompt runs each, `--timeout` seconds in all; only
127.0.0.1 is contacted. Ends with one line:
`load: sessions=30 errors=0 p50_s=... p95_s=... serial_p50_s=... serial_p95_s=... speedup_p95=... peak_mb=...
model_loads=1 busy=0 completed=30 batches=... largest_batch=...` (with `--rounds N`: the median round's seconds,
the median ratio, and `speedups=a,b,c`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
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
    fragments: list = field(default_factory=list)    # the fragment id each element was drawn in ("" = none)
    page_hash: str = ""


@dataclass
class SessionResult:
    index: int
    open_s: float | None = None
    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    busy: int = 0                 # runs that ended with the "server is busy" message
    completed: int = 0            # prompt runs that drew their chart


BUSY_TEXT = "server is busy"


def _busy(run: Run) -> bool:
    from streamlit.proto.Alert_pb2 import Alert

    return any(el.WhichOneof("type") == "alert" and el.alert.format == Alert.WARNING and BUSY_TEXT in el.alert.body
               for el in run.elements)


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


MAX_CACHED_AGE = 2     # runs a kept message outlives its last use (Streamlit's global.maxCachedMessageAge)


class Client:
    """One browser-like Streamlit session over the websocket protocol. Like the web client it keeps the large
    messages the server marks cacheable, tells the server their hashes with each rerun, and reads a reference
    (`ref_hash`) as the message it names: an unchanged chart is not sent again, as in a browser."""

    def __init__(self, port: int, query: str):
        self.port, self.query = port, query
        self.ws = None
        self.cache: dict[str, list] = {}     # hash -> [ForwardMsg, the run that last used it, its fragment id]
        self.runs = 0                         # script runs finished in this session

    def _resolved(self, fm):
        """The message as the web client's ForwardMsgCache hands it on: a reference becomes the kept message (with
        the reference's metadata: where it goes), a cacheable message is kept."""
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        if fm.WhichOneof("type") == "ref_hash":
            kept = self.cache.get(fm.ref_hash)
            if kept is None:
                raise LookupError(f"the server referred to a message this session does not hold ({fm.ref_hash})")
            kept[1] = self.runs
            out = ForwardMsg()
            out.CopyFrom(kept[0])
            out.metadata.CopyFrom(fm.metadata)
            return out
        if fm.metadata.cacheable and fm.hash:
            self.cache[fm.hash] = [fm, self.runs, fm.delta.fragment_id if fm.WhichOneof("type") == "delta" else ""]
        return fm

    def _finished(self, fragment_id: str) -> None:
        """A run ended: kept messages unused for more than MAX_CACHED_AGE runs are dropped (after a fragment's run,
        only that fragment's)."""
        self.runs += 1
        for h, (_, used, frag) in list(self.cache.items()):
            if fragment_id and frag != fragment_id:
                continue
            if self.runs - used > MAX_CACHED_AGE:
                del self.cache[h]

    async def __aenter__(self):
        import websockets

        self.ws = await websockets.connect(
            f"ws://127.0.0.1:{self.port}/_stcore/stream", subprotocols=["streamlit"],
            origin=f"http://127.0.0.1:{self.port}", max_size=None, open_timeout=120, ping_interval=None)
        return self

    async def __aexit__(self, *exc):
        await self.ws.close()

    async def rerun(self, widgets: list | None = None, timeout: float = 600.0, fragment_id: str = "",
                    page_hash: str = "", page_name: str = "") -> Run:
        """Send rerun_script (query string + widget states), collect elements until script_finished. A widget
        drawn inside a fragment reruns that fragment only: the browser then sends its `fragment_id` (and the
        page's script hash), and so does this client."""
        from streamlit.proto.BackMsg_pb2 import BackMsg
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        msg = BackMsg()
        msg.rerun_script.query_string = self.query
        if fragment_id:
            msg.rerun_script.fragment_id = fragment_id
        if page_hash:
            msg.rerun_script.page_script_hash = page_hash
        if page_name:
            msg.rerun_script.page_name = page_name       # a page's URL path, as the browser sends on arrival
        for w in widgets or []:
            msg.rerun_script.widget_states.widgets.append(w)
        msg.rerun_script.cached_message_hashes.extend(self.cache)     # as the web client does
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
            fm = self._resolved(fm)
            kind = fm.WhichOneof("type")
            if kind == "delta" and fm.delta.WhichOneof("type") == "new_element":
                run.elements.append(fm.delta.new_element)
                run.fragments.append(fm.delta.fragment_id)
            elif kind == "new_session":
                run.page_hash = fm.new_session.page_script_hash
            elif kind == "script_finished":
                status = ForwardMsg.ScriptFinishedStatus.Name(fm.script_finished)
                if status == "FINISHED_EARLY_FOR_RERUN":
                    continue       # superseded by our own rerun request; keep waiting for its end
                run.status, run.seconds = status, time.perf_counter() - t0
                self._finished(fragment_id)
                return run


def _widget_id(run: Run, kind: str, key: str) -> tuple[str, str]:
    """(widget id, the fragment it is drawn in or "")."""
    for el, frag in zip(run.elements, run.fragments):
        if el.WhichOneof("type") == kind and getattr(el, kind).id.endswith(key):
            return getattr(el, kind).id, frag
    raise LookupError(f"no {kind} widget with key {key!r} on the page")


def _captions(run: Run) -> list[str]:
    return [el.markdown.body for el in run.elements if el.WhichOneof("type") == "markdown"]


async def session(i: int, port: int, query: str, prompts: int, timeout: float, retries: int = 10,
                  retry_s: float = 2.0, start: asyncio.Event | None = None) -> SessionResult:
    from streamlit.proto.WidgetStates_pb2 import WidgetState

    res = SessionResult(i)
    try:
        async with Client(port, query) as c:
            first = await c.rerun(timeout=timeout)
            res.open_s = first.seconds
            res.errors += _exceptions_and_errors(first)
            box, fragment = _widget_id(first, "text_area", "home_prompt")
            OPENED[0] += 1
            if start is not None:
                await start.wait()          # every session has its page open: the prompts go in together
            for j in range(prompts):
                # distinct per session and run: each one is a real forward pass of the model
                text = f"Visitor {i} asks question {j}: the key is in the blue box. The box is"
                w = WidgetState(id=box, string_value=text)
                for attempt in range(retries + 1):
                    run = await c.rerun([w], timeout=timeout, fragment_id=fragment, page_hash=first.page_hash)
                    res.errors += _exceptions_and_errors(run)
                    if _busy(run):
                        res.busy += 1
                        if attempt == retries:
                            res.errors.append(f"still busy after {retries} tries")
                        await asyncio.sleep(retry_s)   # the student reads the message and tries again
                        continue
                    res.latencies.append(run.seconds)
                    if not any(el.WhichOneof("type") == "plotly_chart" for el in run.elements):
                        res.errors.append("the next-token chart did not arrive")
                    elif not [t for t in _captions(run) if "prompt tokens read" in t]:
                        res.errors.append("no 'prompt tokens read' caption after the run")
                    else:
                        res.completed += 1
                    break
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


async def _drive(port: int, query: str, n: int, prompts: int, timeout: float, srv,
                 retries: int = 10) -> tuple[list[SessionResult], int]:
    peak = [0]

    async def sample_memory():
        while True:
            peak[0] = max(peak[0], srv.memory_kb().get("VmHWM", 0))
            await asyncio.sleep(0.5)

    sampler = asyncio.create_task(sample_memory())
    # open the page once first (the model load and the default prompt), as a teacher does before the class
    warm = await session(-1, port, query, 0, timeout)
    # the server then draws every page once at its defaults (ui/warmup.py); the class comes after that
    from ui.warmup import DONE_LINE

    deadline = time.monotonic() + 600
    while DONE_LINE not in srv.log() and time.monotonic() < deadline and os.environ.get("V41_WARMUP") != "0":
        await asyncio.sleep(0.5)
    OPENED[0] = 0
    start = asyncio.Event()
    tasks = [asyncio.create_task(session(i, port, query, prompts, timeout, retries, start=start)) for i in range(n)]
    opener = asyncio.create_task(_open_all(tasks, start))
    done, pending = await asyncio.wait(tasks, timeout=timeout)
    opener.cancel()
    if warm.errors:
        done_results = [warm]
    else:
        done_results = []
    for t in pending:
        t.cancel()
    sampler.cancel()
    results = done_results + [t.result() for t in done]
    results += [SessionResult(-1, errors=[f"session still running after {timeout:.0f} s"]) for _ in pending]
    peak[0] = max(peak[0], srv.memory_kb().get("VmHWM", 0))
    return results, peak[0]


async def _open_all(tasks, start: asyncio.Event) -> None:
    """Release the prompts once every session has opened its page (or 60 s have passed)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < 60:
        await asyncio.sleep(0.2)
        if OPENED[0] >= len(tasks) or all(t.done() for t in tasks):
            break
    start.set()


OPENED = [0]


@dataclass
class LoadReport:
    sessions: int
    errors: list[str]
    latencies: list[float]
    opens: list[float]
    peak_mb: float
    model_loads: int
    wall_s: float
    busy: int = 0
    completed: int = 0
    expected: int = 0
    batches: list[int] = field(default_factory=list)   # rows of each batched forward the server ran
    mode: str = "batched"

    @property
    def p50(self) -> float:
        return percentile(self.latencies, .5)

    @property
    def p95(self) -> float:
        return percentile(self.latencies, .95)

    @property
    def summary(self) -> str:
        return (f"{self.mode}: prompt run latency p50 {self.p50:.2f} s, p95 {self.p95:.2f} s, "
                f"max {max(self.latencies, default=float('nan')):.2f} s over {len(self.latencies)} runs; "
                f"{len(self.batches)} forwards of {sum(self.batches)} rows (largest {max(self.batches, default=0)}); "
                f"busy messages {self.busy}; completed {self.completed}/{self.expected}; "
                f"peak {self.peak_mb:.0f} MB; {self.wall_s:.1f} s in all")

    @property
    def ok(self) -> bool:
        return not self.errors and self.model_loads == 1 and self.completed == self.expected


def run_load(sessions: int = 20, prompts: int = 1, timeout: float = 900.0, weights: str | None = "default",
             log_dir: Path | None = None, batch_rows: int | None = None, queue_limit: int | None = None,
             retries: int = 10) -> LoadReport:
    """One load against a fresh server; `batch_rows` / `queue_limit` set the server's batch worker
    (V41_BATCH_ROWS / V41_QUEUE_LIMIT; None: the app's defaults)."""
    if weights == "default":
        weights = app_server.default_weights()
    query = f"weights={weights}" if weights else ""
    log_dir = log_dir or Path(tempfile.mkdtemp(prefix="v41-load-"))
    env = {}
    if batch_rows is not None:
        env["V41_BATCH_ROWS"] = str(batch_rows)
    if queue_limit is not None:
        env["V41_QUEUE_LIMIT"] = str(queue_limit)
    srv = app_server.start(log_dir / f"server-{batch_rows or 'batched'}.log", env=env)
    t0 = time.perf_counter()
    try:
        OPENED[0] = 0
        results, peak_kb = asyncio.run(_drive(srv.port, query, sessions, prompts, timeout, srv, retries))
        # each weights choice loaded once for all sessions (the pages also load the recall checkpoint, once,
        # for their side-by-side)
        loads = max(srv.model_loads_by_choice().values(), default=0)
        batches = [int(line.rsplit("rows=", 1)[1].split()[0]) for line in srv.log().splitlines()
                   if BATCH_LINE in line and "kind=next" in line]
    finally:
        srv.stop()
    errors = [f"session {r.index}: {e}" for r in results for e in r.errors]
    return LoadReport(sessions, errors, [x for r in results for x in r.latencies],
                      [r.open_s for r in results if r.open_s is not None], peak_kb / 1024, loads,
                      time.perf_counter() - t0, busy=sum(r.busy for r in results),
                      completed=sum(r.completed for r in results), expected=sessions * prompts, batches=batches,
                      mode="batched" if batch_rows != 1 else "one at a time")


BATCH_LINE = "Batched forward:"   # ui.live.run_forward logs one line per forward it runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=30)
    ap.add_argument("--prompts", type=int, default=1, help="prompt runs per session")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds for the whole load, all sessions")
    ap.add_argument("--weights", default="default", help="random | trained (default: trained if shipped)")
    ap.add_argument("--no-compare", action="store_true", help="only the batched server (no one-at-a-time run)")
    ap.add_argument("--queue-limit", type=int, default=None, help="the server's queue limit (default: the app's)")
    ap.add_argument("--retries", type=int, default=10, help="tries after a busy message, per prompt")
    ap.add_argument("--rounds", type=int, default=1, help="batched / one-at-a-time pairs, alternating (median)")
    a = ap.parse_args()
    if not 1 <= a.sessions <= 64 or not 1 <= a.prompts <= 10 or not 1 <= a.rounds <= 5:
        sys.exit("--sessions must be 1..64, --prompts 1..10 and --rounds 1..5 (the load stays bounded)")
    weights = None if a.weights == "trained" else a.weights
    pairs, loads = [], []
    for _ in range(a.rounds):
        loads.append(os.getloadavg()[0])
        rep = run_load(a.sessions, a.prompts, a.timeout, weights, queue_limit=a.queue_limit, retries=a.retries)
        serial = None
        if not a.no_compare:
            serial = run_load(a.sessions, a.prompts, a.timeout, weights, batch_rows=1, queue_limit=a.queue_limit,
                              retries=a.retries)
        if a.rounds > 1:
            for r in (rep, serial):
                if r is not None:
                    r.mode += f", round {len(pairs) + 1}"
        pairs.append((rep, serial))
    # the round with the median ratio (the median batched p95 without a comparison) stands for the run
    order = sorted(range(len(pairs)), key=lambda i: pairs[i][1].p95 / pairs[i][0].p95 if pairs[i][1] is not None
                   else pairs[i][0].p95)
    rep, serial = pairs[order[len(order) // 2]]
    reports = [r for pair in pairs for r in pair if r is not None]
    print(f"{a.sessions} sessions x {a.prompts} prompt run(s), each mode on a fresh server; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
          + (f" ({', '.join(f'{x:.1f}' for x in loads)} at the start of each round)" if a.rounds > 1 else ""))
    if rep.opens:
        print(f"page open (the model is loaded by a first visit before): p50 {percentile(rep.opens, .5):.2f} s, "
              f"max {max(rep.opens):.2f} s")
    for r in reports:
        print(r.summary)
        for e in r.errors[:20]:
            print("ERROR", r.mode, e)
        if r.model_loads != 1:
            print(f"ERROR {r.mode}: a model was loaded {r.model_loads} times (expected once for all sessions)")
        if r.completed != r.expected:
            print(f"ERROR {r.mode}: {r.completed} of {r.expected} prompt runs drew their chart")
    extra = ""
    if serial is not None:
        extra = (f" serial_p50_s={serial.p50:.2f} serial_p95_s={serial.p95:.2f} "
                 f"speedup_p95={serial.p95 / rep.p95:.2f}")
        if a.rounds > 1:
            extra += " speedups=" + ",".join(f"{s.p95 / b.p95:.2f}" for b, s in pairs)
    print(f"load: sessions={rep.sessions} errors={sum(len(r.errors) for r in reports)} "
          f"p50_s={rep.p50:.2f} p95_s={rep.p95:.2f}{extra} peak_mb={rep.peak_mb:.0f} model_loads={rep.model_loads} "
          f"busy={rep.busy} completed={rep.completed} batches={len(rep.batches)} "
          f"largest_batch={max(rep.batches, default=0)}")
    sys.exit(0 if all(r.ok for r in reports) else 1)


if __name__ == "__main__":
    main()
