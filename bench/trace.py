"""`python -m bench.trace`: traced vs untraced forward time on the tiny model (goal <= 1.3x for what a page draws).

The untraced forward pays one `is None` test per site; the traced one records every layer's
shares, selections, routing, mHC mixes and norms. The logit lens (the vocabulary head at every
layer) is the largest extra cost, so a page computes it only where it draws it: the measured
"view" trace computes the lens during the forward for the one layer an inspector view shows and
reads its token from it; the other layers keep their collapsed rows and compute a row when read.
The full lens (every layer, every row, during the forward) is measured beside it, in the same run.
Each time is the best of `--repeats`, the variants interleaved so a busy machine slows them alike.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from bench._common import add_device_option, line, pick_device, random_ids, sync, tiny_model


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.trace")
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the bench shares the machine)")
    add_device_option(ap)
    a = ap.parse_args(argv)
    dev = pick_device(a.device)
    torch.set_num_threads(a.threads)   # an OpenMP team short of cores makes every op wait for its missing thread
    model, what = tiny_model(dev)
    ids = random_ids(a.tokens, model.cfg.vocab_size, device=dev)
    view_layer = min(model.cfg.decoder_start, model.cfg.num_hidden_layers - 1)   # the inspector's first view

    def view() -> None:
        tr = model.trace(ids, lens=[view_layer])
        tr.layers[view_layer].lens_at(a.tokens - 1)

    runs = {"plain": lambda: model(ids), "view": view, "lazy": lambda: model.trace(ids, lens="lazy"),
            "full": lambda: model.trace(ids), "no_lens": lambda: model.trace(ids, lens=False)}
    best = {k: float("inf") for k in runs}
    with torch.no_grad():
        for fn in runs.values():
            fn()
        for _ in range(a.repeats):
            for k, fn in runs.items():
                sync(dev)
                t0 = time.perf_counter()
                fn()
                sync(dev)
                best[k] = min(best[k], time.perf_counter() - t0)
    plain = best["plain"]
    print(f"model: {what} on {dev.type}; {a.tokens} tokens: untraced {plain:.3f} s; traced with the lens of one view "
          f"(layer {view_layer}) {best['view']:.3f} s, lazy {best['lazy']:.3f} s, full lens {best['full']:.3f} s, "
          f"without the lens {best['no_lens']:.3f} s")
    print(line("trace", overhead=best["view"] / plain, overhead_full_lens=best["full"] / plain,
               overhead_lazy=best["lazy"] / plain, overhead_no_lens=best["no_lens"] / plain, untraced_s=plain,
               traced_s=best["view"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
