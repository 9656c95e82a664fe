"""The server-wide queue for heavy runs (ui.queue): at most `slots` at once, first come first served, every
waiting run told how many are ahead of it, and a run that leaves (an exception, a visitor gone) frees its
place."""

from __future__ import annotations

import threading
import time

import pytest

from ui.queue import BatchWorker, Busy, HeavyQueue, heavy_run, run_rows, wait_for


def test_runs_wait_in_arrival_order_and_see_their_place():
    q = HeavyQueue(slots=1)
    order, seen = [], {}
    release = threading.Event()

    def visitor(name: str, hold: bool):
        msgs = seen.setdefault(name, [])
        with heavy_run(name, show=msgs.append, queue=q):
            order.append(name)
            if hold:
                release.wait(10)

    first = threading.Thread(target=visitor, args=("a", True))
    first.start()
    while q.snapshot() != (1, 0):
        time.sleep(0.01)
    others = []
    for name in ("b", "c"):
        t = threading.Thread(target=visitor, args=(name, False))
        t.start()
        others.append(t)
        while q.snapshot()[1] < len(others):
            time.sleep(0.01)
    time.sleep(0.7)                                    # both have been told their place at least once
    assert order == ["a"]
    said_b = [m for m in seen["b"] if m]
    said_c = [m for m in seen["c"] if m]
    assert said_b and said_b[-1].startswith("Waiting for the server: 1 heavy run ahead"), said_b
    assert said_c and said_c[-1].startswith("Waiting for the server: 2 heavy runs ahead"), said_c
    release.set()
    for t in [first, *others]:
        t.join(10)
    assert order == ["a", "b", "c"]
    assert q.snapshot() == (0, 0)
    assert seen["b"][-1] is None and seen["c"][-1] is None   # the message is cleared when the run starts


def test_a_failing_run_frees_its_place():
    q = HeavyQueue(slots=1)
    try:
        with heavy_run("boom", show=lambda m: None, queue=q):
            raise RuntimeError("model error")
    except RuntimeError:
        pass
    assert q.snapshot() == (0, 0)
    with heavy_run("next", show=lambda m: None, queue=q):
        assert q.snapshot() == (1, 0)


def test_two_slots_run_two_at_once():
    q = HeavyQueue(slots=2)
    inside, peak = [0], [0]
    lock = threading.Lock()

    def work():
        with heavy_run("w", show=lambda m: None, queue=q):
            with lock:
                inside[0] += 1
                peak[0] = max(peak[0], inside[0])
            time.sleep(0.2)
            with lock:
                inside[0] -= 1

    ts = [threading.Thread(target=work) for _ in range(5)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(10)
    assert peak[0] == 2


# ---- the batch worker ---------------------------------------------------------------------------------------

def _echo_runner(calls):
    def run(kind, context, payloads):
        calls.append((kind, context, list(payloads)))
        if context == "slow":
            time.sleep(0.3)
        return run_rows(lambda rows: [_check(r) for r in rows], payloads)
    return run


def _check(row):
    if row == "bad":
        raise ValueError("a bad row")
    return ("done", row)


def test_requests_that_arrive_together_run_as_one_batch_per_group():
    calls = []
    w = BatchWorker(run=_echo_runner(calls), max_rows=8, limit=20, window_s=0.1)
    tickets = [w.submit("next", "weights-a", "ctx", [i] * (i + 1)) for i in range(5)]
    other = w.submit("trace", "weights-a", "ctx", [9])          # another kind: its own batch
    for t in tickets + [other]:
        assert t.done.wait(5)
    assert [t.value() for t in tickets] == [("done", [i] * (i + 1)) for i in range(5)]
    assert calls[0][0] == "next" and len(calls[0][2]) == 5 and tickets[0].batch_rows == 5
    assert calls[1] == ("trace", "ctx", [[9]])
    assert w.stats["batches"] == 2 and w.stats["largest"] == 5


def test_the_stragglers_of_a_burst_join_its_batch():
    calls = []
    w = BatchWorker(run=_echo_runner(calls), max_rows=32, limit=40, window_s=0.02, burst_gap_s=0.15, max_wait_s=3.0)
    tickets = [w.submit("next", "g", "ctx", [0]), w.submit("next", "g", "ctx", [1])]    # a class presses Run ...
    for i in range(2, 6):
        time.sleep(0.05)                     # ... and the rest arrive later than a lone request's window
        tickets.append(w.submit("next", "g", "ctx", [i]))
    for t in tickets:
        assert t.done.wait(5)
    assert [len(c[2]) for c in calls] == [6]


def test_one_bad_row_fails_only_its_own_request():
    w = BatchWorker(run=_echo_runner([]), max_rows=8, limit=20, window_s=0.1)
    good, bad, also = (w.submit("next", "g", "ctx", r) for r in ([1], "bad", [2]))
    for t in (good, bad, also):
        assert t.done.wait(5)
    assert good.value() == ("done", [1]) and also.value() == ("done", [2])
    with pytest.raises(ValueError, match="a bad row"):
        bad.value()


def test_a_full_queue_says_busy_at_once_and_a_left_request_is_dropped():
    calls = []
    w = BatchWorker(run=_echo_runner(calls), max_rows=1, limit=3, window_s=0.0)
    first = w.submit("next", "g", "slow", [1])                  # runs for 0.3 s
    while w.snapshot()[0] == 0:
        time.sleep(0.01)
    left = w.submit("next", "g", "slow", [2])
    waiting = w.submit("next", "g", "slow", [3])
    assert w.ahead(waiting) == 2
    t0 = time.monotonic()
    with pytest.raises(Busy) as e:
        w.submit("next", "g", "slow", [4])
    assert time.monotonic() - t0 < 0.1 and e.value.limit == 3 and "busy" in str(e.value)
    w.join(left)
    w.leave(left)                                                 # its visitor went away before it ran
    assert waiting.done.wait(5) and first.done.wait(5)
    assert [c[2] for c in calls] == [[[1]], [[3]]]                # [2] never ran
    assert left.done.is_set() and left.cancelled and w.stats["dropped"] == 1


def test_wait_for_reports_the_place_and_a_shared_request_runs_once():
    calls = []
    w = BatchWorker(run=_echo_runner(calls), max_rows=1, limit=10, window_s=0.0)
    blocker = w.submit("next", "g", "slow", [0])
    t = w.submit("next", "g", "ctx", [5])
    seen: list = []
    results = []
    threads = [threading.Thread(target=lambda: results.append(wait_for(w, t, "a test", seen.append, quiet_s=0.0)))
               for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(5)
    assert results == [("done", [5])] * 2 and blocker.done.is_set()
    assert any(m and m.startswith("Waiting for the model: 1 request ahead") for m in seen), seen
    assert seen[-1] is None and [c[2] for c in calls].count([[5]]) == 1
