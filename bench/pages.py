"""python -m bench.pages: every page's first draw for a new visitor, and its warm reruns, on a real app server.

The server is started as the README starts it (bench/server.py, loopback only). One visit to the home page
loads the model (timed: the cold start a first visitor waits for). Then, for each page of the
navigation (ui.nav), a fresh session (a new visitor) opens it over Streamlit's browser protocol (as bench.load does) and
the time to its `script_finished` is the page's first draw; `--reruns` reruns in the same session give its
warm time (their median; the line reports the worst page). Goals: first draw <= 3 s with the model loaded,
warm rerun <= 1 s.

Twice in one run, each on a fresh server: once with the warm-up off (V41_WARMUP=0: a page's defaults are
computed on its first visit) and once as the app runs (ui/warmup.py draws every page at its defaults once
per process when the model is loaded; this bench waits for it to finish, as a teacher opens the app before
the class). The per-page ratio is what the warm-up saves on this machine now.

Ends with one line: `pages: worst_first_s=... worst_warm_s=... worst_first_no_warmup_s=... warmup_s=...
cold_start_s=... worst_page=... n_pages=... pages_with_errors=...`.

`--home` instead measures the home page alone, on servers run side by side: as it is, with its far-fact picture
left out (V41_HERO=0: the baseline), and optionally an earlier checkout (`--before DIR`, e.g. a `git archive` of
an older commit). Cold: the first visit of `--colds` fresh servers per variant, taken in turn. Warm: after every
warm-up is done, `--rounds` fresh visitors per server, interleaved, each with 2 reruns. A first draw is never under
ui/url.ARRIVAL_WAIT_S (an arrival run waits that long before it writes the URL), so the rerun (no arrival) shows
what the page itself costs (its unchanged pictures come back as references, as a browser gets them:
bench.load.Client; reruns are tens of milliseconds: printed to the millisecond). Goal: with the picture within 1.1x
of without. Last line: `pages: home_first_s=... home_no_hero_s=... home_ratio=... home_rerun_s=...
home_rerun_no_hero_s=... home_rerun_ratio=... home_cold_s=... home_cold_no_hero_s=... home_cold_ratio=...
[home_before_s=... home_rerun_before_s=... home_rerun_before_ratio=... home_cold_before_s=...] load=...`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class PageTimes:
    path: str
    first: float
    warm: float
    problems: list[str] = field(default_factory=list)


async def _page(port: int, path: str, query: str, reruns: int) -> PageTimes:
    from bench.load import Client, _exceptions_and_errors

    c = Client(port, query)
    async with c:
        first = await c.rerun(page_name=path)
        warm = []
        problems = _exceptions_and_errors(first)
        for _ in range(reruns):
            r = await c.rerun(page_name=path)
            warm.append(r.seconds)
            problems += _exceptions_and_errors(r)
    return PageTimes(path, first.seconds, statistics.median(warm) if warm else float("nan"), problems)


def measure(warmup: bool, reruns: int, query: str, log_dir: Path) -> tuple[list[PageTimes], float, float]:
    """(per-page times, cold start s, warm-up s) on a fresh server."""
    from bench import server as app_server
    from ui.nav import PAGES
    from ui.warmup import DONE_LINE

    srv = app_server.start(log_dir / f"server-warmup-{int(warmup)}.log", env={"V41_WARMUP": "1" if warmup else "0"})
    try:
        t0 = time.perf_counter()
        cold = asyncio.run(_page(srv.port, "", query, 0)).first
        warm_s = float("nan")
        if warmup:
            deadline = time.monotonic() + 900
            while DONE_LINE not in srv.log() and time.monotonic() < deadline:
                time.sleep(0.5)
            line = next((ln for ln in srv.log().splitlines() if DONE_LINE in ln), "")
            warm_s = float(line.rsplit("seconds=", 1)[1]) if line else float("nan")
        rows = [asyncio.run(_page(srv.port, p, query, reruns)) for p in (p.url_path for p in PAGES)]
        print(f"  ({'with' if warmup else 'without'} warm-up: {time.perf_counter() - t0:.0f} s in all)")
    finally:
        srv.stop()
    return rows, cold, warm_s


def home(query: str, log_dir: Path, before: Path | None, rounds: int, colds: int) -> None:
    """The home page's first draw with and without its picture (and on an earlier checkout), one run."""
    from bench import server as app_server
    from ui.warmup import DONE_LINE

    variants = [("hero", ROOT, {}), ("no_hero", ROOT, {"V41_HERO": "0"})]
    if before is not None:
        variants.append(("before", before, {}))
    cold: dict[str, list[float]] = {name: [] for name, _, _ in variants}
    for i in range(colds):                   # cold: a fresh server's first visitor, servers taken in turn
        for name, root, env in variants:
            srv = app_server.start(log_dir / f"server-home-{name}-cold{i}.log", env=env, root=root)
            try:
                cold[name].append(asyncio.run(_page(srv.port, "", query, 0)).first)
            finally:
                srv.stop()
    servers = {}
    try:
        for name, root, env in variants:
            srv = servers[name] = app_server.start(log_dir / f"server-home-{name}.log", env=env, root=root)
            asyncio.run(_page(srv.port, "", query, 0))
            deadline = time.monotonic() + 900
            while DONE_LINE not in srv.log() and time.monotonic() < deadline:
                time.sleep(0.5)
        firsts: dict[str, list[float]] = {name: [] for name in servers}
        reruns: dict[str, list[float]] = {name: [] for name in servers}
        for _ in range(rounds):                  # interleaved, so the machine's load falls on every variant alike
            for name, srv in servers.items():
                t = asyncio.run(_page(srv.port, "", query, 2))
                firsts[name].append(t.first)
                reruns[name].append(t.warm)
    finally:
        for srv in servers.values():
            srv.stop()
    med = {name: statistics.median(v) for name, v in firsts.items()}
    again = {name: statistics.median(v) for name, v in reruns.items()}
    cmed = {name: statistics.median(v) for name, v in cold.items()}
    for name in servers:
        print(f"  {name:8s} cold {cmed[name]:6.2f} s ({' '.join(f'{x:.2f}' for x in cold[name])}); first draw "
              f"{med[name]:5.3f} s; rerun {again[name]:5.3f} s (medians; reruns "
              f"{' '.join(f'{x:.3f}' for x in reruns[name])})")
    extra = (f" home_before_s={med['before']:.3f} home_rerun_before_s={again['before']:.3f} "
             f"home_rerun_before_ratio={again['before'] / again['no_hero']:.2f} "
             f"home_cold_before_s={cmed['before']:.2f}" if "before" in med else "")
    print(f"pages: home_first_s={med['hero']:.3f} home_no_hero_s={med['no_hero']:.3f} "
          f"home_ratio={med['hero'] / med['no_hero']:.2f} home_rerun_s={again['hero']:.3f} "
          f"home_rerun_no_hero_s={again['no_hero']:.3f} home_rerun_ratio={again['hero'] / again['no_hero']:.2f} "
          f"home_cold_s={cmed['hero']:.2f} "
          f"home_cold_no_hero_s={cmed['no_hero']:.2f} home_cold_ratio={cmed['hero'] / cmed['no_hero']:.2f}{extra} "
          f"load={os.getloadavg()[0]:.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--weights", default=None, help="trained | random (default: trained if shipped, else random)")
    ap.add_argument("--reruns", type=int, default=3)
    ap.add_argument("--no-compare", action="store_true", help="only the server with the warm-up")
    ap.add_argument("--home", action="store_true", help="only the home page, with and without its picture")
    ap.add_argument("--before", type=Path, default=None, help="with --home: an earlier checkout to serve beside")
    ap.add_argument("--rounds", type=int, default=5, help="with --home: fresh visitors per server")
    ap.add_argument("--colds", type=int, default=3, help="with --home: fresh servers per variant (cold first draws)")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from bench.server import default_weights

    query = f"weights={args.weights}" if args.weights else ("" if default_weights() is None else "weights=random")
    log_dir = Path(tempfile.mkdtemp(prefix="v41-pages-"))
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {query or 'default weights'}")
    if args.home:
        home(query, log_dir, args.before, args.rounds, args.colds)
        return
    before = None
    if not args.no_compare:
        before, _, _ = measure(False, args.reruns, query, log_dir)
    rows, cold, warm_s = measure(True, args.reruns, query, log_dir)
    first_before = {r.path: r.first for r in before or []}
    for r in rows:
        b = first_before.get(r.path)
        flag = ("" if r.first <= 3.0 else "  (first over 3 s)") + ("" if r.warm <= 1.0 else "  (warm over 1 s)")
        print(f"  {r.path or '(home)':20s} first {r.first:6.2f} s"
              + (f" (without warm-up {b:6.2f} s)" if b is not None else "")
              + f"   warm {r.warm:5.2f} s{flag}" + (f"   PROBLEMS: {r.problems[:2]}" if r.problems else ""))
    worst_first = max(rows, key=lambda r: r.first)
    worst_warm = max(r.warm for r in rows)    # the slowest page's median warm rerun
    n_err = sum(bool(r.problems) for r in rows)
    before_s = f" worst_first_no_warmup_s={max(first_before.values()):.2f}" if first_before else ""
    print(f"pages: worst_first_s={worst_first.first:.2f} worst_warm_s={worst_warm:.2f}{before_s} warmup_s={warm_s:.1f} "
          f"cold_start_s={cold:.2f} worst_page={worst_first.path or 'home'} n_pages={len(rows)} "
          f"pages_with_errors={n_err}")


if __name__ == "__main__":
    main()
