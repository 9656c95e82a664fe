"""`python -m bench.compare BEFORE AFTER --bench NAME [...]`: benchmarks of two checkouts, run alternately.

Not a benchmark itself: the runner behind the before/after tables in lab/runs/. Each `--bench` is a
benchmark's name and its arguments as one string (`--bench "prefill --lengths 2048 8192"`); each runs
`--runs` times per side, as `python -m bench.NAME ARGS` with the checkout as working directory (so that
checkout's `model/`, `lessons/` and `bench/` are imported), with this interpreter. The two sides take
turns, and the side that goes first swaps every round (before, after, after, before, ...), so a machine
that slows down or speeds up during the comparison slows both alike. Every run's last `NAME: key=value`
line is appended to `--log` (JSON lines, with the load average when it started) as soon as it ends, so an
interrupted comparison keeps what it measured; `--table` prints the medians and after/before ratios of a
log, flagging moves over 10%.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

FLAG = 0.10          # a ratio further than this from 1 is flagged in the table


def parse_line(name: str, stdout: str) -> dict[str, str]:
    """The key=value pairs of the last line that starts with `NAME: ` ({} when there is none)."""
    for text in reversed(stdout.splitlines()):
        if text.startswith(f"{name}: "):
            return dict(kv.split("=", 1) for kv in text[len(name) + 2:].split() if "=" in kv)
    return {}


def run_one(checkout: Path, bench: str, timeout: float) -> dict:
    """Run one benchmark in `checkout`; its figures, wall time, exit status and the load average before it."""
    name, *args = shlex.split(bench)
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-m", f"bench.{name}", *args], cwd=checkout, capture_output=True,
                           text=True, timeout=timeout)
        out, rc = p.stdout, p.returncode
        err = p.stderr[-2000:] if rc else ""
    except subprocess.TimeoutExpired:
        out, rc, err = "", -1, f"timed out after {timeout:.0f} s"
    return {"bench": bench, "name": name, "checkout": str(checkout), "rc": rc, "load": round(load, 2),
            "wall_s": round(time.perf_counter() - t0, 2), "values": parse_line(name, out), "error": err}


def number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def table(rows: list[dict], before: str, after: str) -> str:
    """Per benchmark (a heading with its arguments), per key: each side's median (n), after/before of the
    medians (`<-- >10%` past FLAG) and the range of the ratios run by run (the i-th after over the i-th
    before run, which ran next to each other), which shows how far the machine moved the figures."""
    out = [f"{'key':<30} {'before (median, n)':>20} {'after (median, n)':>20} {'after/before':>12}   run by run"]
    for bench in dict.fromkeys(r["bench"] for r in rows):
        out.append(f"python -m bench.{bench}")
        side = {s: [r["values"] for r in rows if r["bench"] == bench and r["checkout"] == s and r["values"]]
                for s in (before, after)}
        for key in dict.fromkeys(k for s in (before, after) for v in side[s] for k in v):
            cells, med, nums = [], {}, {}
            for s in (before, after):
                vals = [v.get(key) for v in side[s]]
                nums[s] = [number(x) if x is not None else None for x in vals]
                got = [x for x in nums[s] if x is not None]
                if got and len(got) == len([x for x in vals if x is not None]):
                    med[s] = statistics.median(got)
                    cells.append(f"{med[s]:.4g} (n={len(got)})")
                else:
                    cells.append(f"{'/'.join(dict.fromkeys(x for x in vals if x)) or '-'} (n={len(got)})")
            ratio, pairs = "", ""
            if len(med) == 2 and med[before] != 0:
                r = med[after] / med[before]
                ratio = f"{r:12.3f}" + ("  <-- >10%" if abs(r - 1) > FLAG else "           ")
                each = [a / b for a, b in zip(nums[after], nums[before]) if a is not None and b]
                pairs = f"{min(each):.2f}-{max(each):.2f}" if len(each) > 1 and len(set(each)) > 1 else ""
            elif len(med) == 2:
                ratio = f"{1.0:12.3f}           " if med[after] == 0 else "    (before 0)         "
            out.append(f"  {key:<28} {cells[0]:>20} {cells[1]:>20} {ratio} {pairs}".rstrip())
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__.split("\n\n")[0])
    ap.add_argument("before", help="the checkout measured as 'before'")
    ap.add_argument("after", help="the checkout measured as 'after'")
    ap.add_argument("--bench", action="append", default=[], help='a benchmark and its arguments: "NAME ARGS"')
    ap.add_argument("--runs", type=int, default=2, help="runs per side of each benchmark")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds for one run")
    ap.add_argument("--log", default="", help="JSON lines file the runs are appended to")
    ap.add_argument("--table", action="store_true", help="print the table of --log (after running any --bench)")
    a = ap.parse_args(argv)
    before, after = (str(Path(p).resolve()) for p in (a.before, a.after))
    log = Path(a.log) if a.log else None
    for bench in a.bench:
        for i in range(a.runs):
            for checkout in ((before, after) if i % 2 == 0 else (after, before)):
                r = run_one(Path(checkout), bench, a.timeout)
                side = "before" if checkout == before else "after"
                print(f"{bench} [{side} {i + 1}/{a.runs}] rc={r['rc']} {r['wall_s']}s load={r['load']} "
                      + " ".join(f"{k}={v}" for k, v in r["values"].items()), flush=True)
                if r["error"]:
                    print(r["error"], file=sys.stderr, flush=True)
                if log:
                    with log.open("a") as f:
                        f.write(json.dumps(r) + "\n")
    if a.table and log and log.exists():
        print(table([json.loads(x) for x in log.read_text().splitlines() if x.strip()], before, after))
    return 0


if __name__ == "__main__":
    sys.exit(main())
