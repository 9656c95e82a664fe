"""`python -m bench.train`: tokens per second of one full training step, eager against fast.

The step is lab.training.step.train_step on the tiny preset (forward with the indexer KL and routing,
backward, gradient clipping, AdamW, the MoE bias update), on one fixed batch of training-stream
text (random ids when the stream is absent), with the same thread count for both. "Fast" is the
same maths with model/fusion.py's compiled kernels and multi-tensor optimizer and clipping
(tests/lab/test_train.py checks the equivalence). Compile time is measured separately and not
counted; both versions are warm; the two alternate round by round so that load from other
processes falls on both, and the speed-up is the median of the per-round ratios.

Also reports what a window change costs once warm (a curriculum widens the window in stages: it
must not recompile). Last line:
`train: eager_tok_s=... fast_tok_s=... speedup=... compile_s=... window_change_s=...`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from bench._common import ROOT, TINY, line


def _setup(preset: str, batch: int, seq_len: int, fast: bool, seed: int = 0):
    from lab.corpus import TokenStream
    from lab.training import TrainConfig, build_model, make_optimizer
    from model.tokenizer import load_tokenizer

    tc = TrainConfig(preset=preset, batch=batch, seq_len=seq_len, steps=1000, dense_warmup_frac=0.0, fast=fast,
                     seed=seed)
    tok = load_tokenizer(TINY / "tokenizer.json")
    m = build_model(tc, tok)
    g = torch.Generator().manual_seed(seed)
    stream_path = ROOT / tc.stream
    if stream_path.exists():
        x, y = TokenStream.load(str(stream_path)).sample_batch(batch, seq_len, g)
        data = "training stream"
    else:
        t = torch.randint(5, m.cfg.vocab_size, (batch, seq_len + 1), generator=g)
        x, y, data = t[:, :-1], t[:, 1:], "random ids"
    return tc, m, make_optimizer(m, tc), x, y, data


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.train", description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from lab.training import set_window, train_step
    from model.fusion import compile_error, configure

    configure()
    eager = _setup(args.preset, args.batch, args.seq_len, fast=False)
    fast = _setup(args.preset, args.batch, args.seq_len, fast=True)
    tokens = args.batch * args.seq_len
    step = 100  # sparse phase, past the lr warm-up: the step a long run spends its time in

    def run(setup) -> float:
        tc, m, opt, x, y, _ = setup
        t0 = time.perf_counter()
        train_step(m, opt, x, y, tc, step)
        return time.perf_counter() - t0

    run(eager)
    t0 = time.perf_counter()
    run(fast)  # compiles every fused function for this shape
    compile_s = time.perf_counter() - t0
    run(fast)
    set_window(fast[1], fast[1].cfg.sliding_window // 2)
    window_change_s = run(fast)   # a narrower window: must cost a normal step, not a compile
    set_window(fast[1], 0)
    run(fast)
    ratios, te, tf = [], [], []
    for r in range(args.rounds):
        e, f = run(eager), run(fast)
        te.append(e)
        tf.append(f)
        ratios.append(e / f)
        print(f"round {r + 1}: eager {e:.3f} s, fast {f:.3f} s, ratio {e / f:.2f}", file=sys.stderr)
    eager_tok_s = tokens / statistics.median(te)
    fast_tok_s = tokens / statistics.median(tf)
    speedup = statistics.median(ratios)
    print(f"preset {args.preset}, batch {args.batch} x {args.seq_len}, {args.threads} threads, data: {eager[5]}; "
          f"compile {compile_s:.1f} s; window change step {window_change_s:.2f} s"
          + (f"; compiling unavailable: {compile_error()}" if compile_error() else ""))
    print(line("train", eager_tok_s=round(eager_tok_s), fast_tok_s=round(fast_tok_s), speedup=round(speedup, 2),
               compile_s=round(compile_s, 1), window_change_s=round(window_change_s, 2)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
