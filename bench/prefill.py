"""`python -m bench.prefill`: bounded vs exact prefill time at 2K, 8K and 32K tokens.

Uses the `small` preset (the released 40-layer map: 20 encoder + 20 decoder layers, narrow widths)
with random weights: the ratio depends on which layers run over which rows, not on the weights.
Bounded prefill runs the 20 encoder layers over every row and the decoder over the last 128 rows;
exact prefill runs all 40 layers over every row. Goal: >= 1.8x at 8K. Both run in one process,
interleaved, and the minimum of the repeats is kept.
"""

from __future__ import annotations

import argparse
import sys

import torch

from bench._common import add_device_option, best_of, line, pick_device, random_ids


def main(argv: list[str] | None = None) -> int:
    from model import V41Config, V41Model, prefill

    ap = argparse.ArgumentParser(prog="python -m bench.prefill")
    ap.add_argument("--lengths", type=int, nargs="*", default=[2048, 8192, 32768])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--chunk", type=int, default=512)
    add_device_option(ap)
    a = ap.parse_args(argv)
    dev = pick_device(a.device)
    cfg = V41Config.preset("small")
    torch.manual_seed(0)
    m = V41Model(cfg).init_weights(0).eval().to(dev)
    prefill(m, random_ids(300, cfg.vocab_size, device=dev), "exact")  # warm-up
    out = {}
    print(f"device: {dev.type}")
    print(f"{'tokens':>7} {'exact s':>9} {'bounded s':>10} {'speedup':>8}")
    for n in a.lengths:
        ids = random_ids(n, cfg.vocab_size, seed=n, device=dev)
        te = best_of(lambda: prefill(m, ids, "exact", chunk_size=a.chunk), a.repeats, dev)
        tb = best_of(lambda: prefill(m, ids, "bounded", chunk_size=a.chunk), a.repeats, dev)
        out[n] = te / tb
        print(f"{n:>7} {te:>9.2f} {tb:>10.2f} {te / tb:>7.2f}x", flush=True)
    print(line("prefill", **{f"speedup_{n // 1024}k": v for n, v in out.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
