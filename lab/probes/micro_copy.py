"""Does an induction head need a previous-token head here? `micro` from scratch on shuffled copies.

`python -m lab.probes.micro_copy [--steps 200] [--engram off]`

Trains the `micro` preset (window 8) from scratch on rows of shuffled ids in which spans of 3-5 ids
are said again 0-2 ids later (lab.training.batches.copy_rows), answers weighted x20, compressed attention
dense; every 50 steps it reports the share of a held-out copy predicted and, per layer, the
previous-token and induction shares of each head (lessons/lookback_heads.py `head_scores`). `--engram off` switches
Engram off in training and evaluation. lab/LOG.md (2026-11-30) quotes its numbers: the
induction head of layer 1 forms while layer 0 is still at the uniform share on the previous position.
Last line: `micro_copy: engram=... steps=... copy=... max_induction=... max_prev_layer0=...`.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from lab.training import answer_weighted_ce, copy_rows
from lessons.lookback_heads import head_scores
from model import Ablation, V41Config, V41Model

SPAN, GAP, LEAD = 5, 1, 40


def eval_rows(ids: torch.Tensor, n: int, g: torch.Generator) -> torch.Tensor:
    """n rows: LEAD random ids, a span of SPAN, GAP other ids, the span again."""
    rows = []
    for _ in range(n):
        r = ids[torch.randint(0, len(ids), (LEAD + SPAN + GAP,), generator=g)]
        rows.append(torch.cat([r, r[LEAD:LEAD + SPAN]]))
    return torch.stack(rows)


def evaluate(m: V41Model, x: torch.Tensor, ablation: Ablation) -> tuple[float, list[tuple[int, list, list]]]:
    m.eval()
    second = LEAD + SPAN + GAP
    with torch.no_grad():
        lg = m(x[:, :-1], ablation=ablation).logits
        acc = float((lg[:, second:].argmax(-1) == x[:, second + 1:]).float().mean())
    heads = []
    for li, rec in enumerate(m.trace(x).layers):
        if rec.shares is not None:
            prev, ind, _ = head_scores(rec.shares.window.float(), rec.shares.sink.float(), second, SPAN + GAP, SPAN)
            heads.append((li, prev, ind))
    m.train()
    return acc, heads


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lab.probes.micro_copy", description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--engram", choices=("on", "off"), default="on")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    no_engram = args.engram == "off"
    torch.manual_seed(0)
    m = V41Model(V41Config.preset("micro")).init_weights(0)
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.0)
    ids = torch.arange(10, 250)
    g = torch.Generator().manual_seed(1)
    x_eval = eval_rows(ids, 8, torch.Generator().manual_seed(99))
    train_abl = Ablation(dense_compressed=True, no_engram=no_engram)
    t0 = time.time()
    acc, heads = 0.0, []
    for step in range(args.steps):
        x, y, answers, _ = copy_rows(ids, 16, 128, g, 5, 2)
        for pg in opt.param_groups:
            pg["lr"] = 3e-3 * min(1.0, (step + 1) / 20)
        out = m(x, indexer_loss=True, collect_routing=True, ablation=train_abl)
        loss = answer_weighted_ce(out.logits, y, answers, 20.0) + out.indexer_loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        for lid, idx in out.routings:
            m.layers[lid].ffn.update_bias(idx, 1e-3)
        if (step + 1) % 50 == 0 or step + 1 == args.steps:
            acc, heads = evaluate(m, x_eval, Ablation(no_engram=no_engram))
            print(f"step {step + 1}: copy {acc:.2f} ({time.time() - t0:.0f} s)")
            for li, prev, ind in heads:
                print(f"  layer {li}: prev {[round(p, 2) for p in prev]}  induction {[round(v, 2) for v in ind]}")
    max_ind = max(max(ind) for _, _, ind in heads)
    prev0 = max(heads[0][1])
    print(f"micro_copy: engram={args.engram} steps={args.steps} copy={acc:.3f} max_induction={max_ind:.3f} "
          f"max_prev_layer0={prev0:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
