"""The server-wide queue for heavy runs (ui.queue): at most `slots` at once, first come first served, every
waiting run told how many are ahead of it, and a run that leaves (an exception, a visitor gone) frees its
place."""

from __future__ import annotations

import threading
import time

from ui.queue import HeavyQueue, heavy_run


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
