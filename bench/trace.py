"""`python -m bench.trace`: traced vs untraced forward time on the tiny model (goal <= 1.5x).

The untraced forward pays one `is None` test per site; the traced one records every layer's
shares, selections, routing, mHC mixes, norms and the logit lens.
"""

from __future__ import annotations

import argparse
import sys

import torch

from bench._common import best_of, line, random_ids, tiny_model


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.trace")
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args(argv)
    model, what = tiny_model()
    ids = random_ids(a.tokens, model.cfg.vocab_size)
    with torch.no_grad():
        model(ids)
        model.trace(ids)
        plain = best_of(lambda: model(ids), a.repeats)
        traced = best_of(lambda: model.trace(ids), a.repeats)
        no_lens = best_of(lambda: model.trace(ids, lens=False), a.repeats)
    print(f"model: {what}; {a.tokens} tokens: untraced {plain:.3f} s, traced {traced:.3f} s "
          f"(without the logit lens {no_lens:.3f} s)")
    print(line("trace", overhead=traced / plain, overhead_no_lens=no_lens / plain, untraced_s=plain,
               traced_s=traced))
    return 0


if __name__ == "__main__":
    sys.exit(main())
