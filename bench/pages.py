"""python -m bench.pages: how fast every page of the app reruns once its model and results are cached.

For each page listed in app.py's SECTIONS whose file exists: one AppTest run to warm the caches (model
load, traces, cached results), then `--reruns` timed reruns; the page's warm time is their median.
The cold start is a fresh Python process that imports Streamlit, loads the model and renders the
Start page once (what the first visitor waits for). Goal: every page reruns in under a second.

Ends with one line: `pages: worst_warm_s=... cold_start_s=...`.
"""

from __future__ import annotations

import argparse
import ast
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def listed_pages() -> list[tuple[str, str]]:
    """(file, title) for every page in app.py's SECTIONS whose file exists, read without running app.py."""
    tree = ast.parse((ROOT / "app.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "SECTIONS" for t in node.targets):
            sections = ast.literal_eval(node.value)
            return [(f, title) for pages in sections.values() for f, title, *_ in pages if (ROOT / f).exists()]
    raise SystemExit("app.py has no SECTIONS literal")


COLD = """
import time, sys
t0 = time.perf_counter()
from streamlit.testing.v1 import AppTest
at = AppTest.from_file({page!r}, default_timeout=600)
at.query_params["weights"] = {weights!r}
at.run()
bad = len(at.exception)
print(f"COLD {{time.perf_counter() - t0:.3f}} {{bad}}")
"""


def cold_start(page: str, weights: str, threads: int) -> tuple[float, int]:
    code = f"import torch; torch.set_num_threads({threads})\n" + COLD.format(page=str(ROOT / page), weights=weights)
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - t0
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("COLD ")), None)
    if line is None:
        print(out.stderr[-2000:], file=sys.stderr)
        return wall, -1
    return wall, int(line.split()[2])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--weights", default=None, help="trained | random (default: trained if shipped, else random)")
    ap.add_argument("--reruns", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the bench shares the machine)")
    ap.add_argument("--skip-cold", action="store_true")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    sys.path.insert(0, str(ROOT))
    from streamlit.testing.v1 import AppTest

    from ui.common import trained_available

    weights = args.weights or ("trained" if trained_available() else "random")
    pages = listed_pages()
    print(f"{len(pages)} pages, weights={weights}, torch threads={args.threads}")

    cold, cold_bad = (float("nan"), 0) if args.skip_cold else cold_start(pages[0][0], weights, args.threads)
    if not args.skip_cold:
        print(f"cold start ({pages[0][0]} in a fresh process): {cold:.2f} s" + (" (ERRORS)" if cold_bad else ""))

    rows = []
    for f, title in pages:
        at = AppTest.from_file(str(ROOT / f), default_timeout=600)
        at.query_params["weights"] = weights
        t0 = time.perf_counter()
        at.run()
        first = time.perf_counter() - t0
        times = []
        for _ in range(args.reruns):
            t0 = time.perf_counter()
            at.run()
            times.append(time.perf_counter() - t0)
        warm = statistics.median(times)
        errors = len(at.exception)
        rows.append((f, title, first, warm, errors))
        flag = "" if warm < 1.0 else "  (over 1 s)"
        print(f"  {f:32s} first {first:6.2f} s   warm {warm:5.2f} s{flag}"
              + (f"   EXCEPTIONS: {errors}" if errors else ""))

    worst = max(rows, key=lambda r: r[3])
    n_err = sum(r[4] > 0 for r in rows)
    print(f"pages: worst_warm_s={worst[3]:.3f} cold_start_s={cold:.2f} worst_page={Path(worst[0]).stem} "
          f"n_pages={len(rows)} pages_with_errors={n_err} weights={weights}")


if __name__ == "__main__":
    main()
