"""Which heads could copy? Previous-token and induction shares per layer and head.

`python -m lab.probes.heads [weights] [--ckpt DIR]`

The textbook copy circuit has two kinds of head: a previous-token head (each position attends to the
one before it, so its state carries "the token before me was X") and, in a later layer, an induction
head (at a token X, attend to the position just after an earlier X and read what came next). Here
the values carry their position (RoPE on the shared K=V latent, the output rotated back), so even a
position-blind head tells the next layer which token came just before: on `micro` the induction head
forms while the layer below is still at the uniform share (`python -m lab.probes.micro_copy`). The
induction column is the one that decides whether the model can copy.

On held-out prose, a span of `span` tokens is said twice, `gap` tokens apart; from a trace of the
running model (model/inference/trace.py `Shares`; the reading is lessons/lookback_heads.py's, which the
Look-back heads page draws for one passage) this reports, per layer and head:
- `prev`: the mean window share on the position just before the query (uniform over a 32-row window
  is 0.03; a previous-token head in a trained model puts most of its weight there);
- `induction`: at the second copy, the mean share on the token after the first copy's match: its window
  slot, plus, in the ratio-1 layers, the selected one-token entry that holds it (the only way to it where
  the match lies beyond the window, as in a narrow-window checkpoint);
- `sink`: the mean share on the sink.
Window-only layers read their keys with the `main` RoPE (sharp positions), the others with the
`compress` RoPE (theta 160,000 instead of 10,000).
`--gap` sets the distance (default 4: the second copy starts 16 tokens after the first, inside a 32-token window);
an induction head that serves a far copy keeps its share at `--gap 200`, where the match lies beyond the window.
Last line: `heads: max_prev_window_only=... max_prev=... max_induction=... uniform=... gap=...`.
"""

from __future__ import annotations

import argparse
import sys

import torch

from lessons.lookback_heads import LEAD, CopyLayout, HeadRow, copy_rows_of_prose, look_back
from model.cli import add_device_option, pick_device


def scores(m, tokens: torch.Tensor, span: int = 12, gap: int = 4, n: int = 4) -> list[HeadRow]:
    x = copy_rows_of_prose(tokens, n, span, gap, LEAD).to(m.device)
    return look_back(m.trace(x), CopyLayout(LEAD, span, gap)).heads


def main(argv: list[str] | None = None) -> int:
    from safetensors.torch import load_file

    from lab.training import model_state
    from model import load
    from model.heldout import heldout_natural_tokens

    ap = argparse.ArgumentParser(prog="python -m lab.probes.heads", description=__doc__.split("\n\n")[0])
    ap.add_argument("weights", nargs="?", default="data/weights/tiny")
    ap.add_argument("--ckpt", default="", help="a training checkpoint dir (ckpt.safetensors) to read instead")
    ap.add_argument("--gap", type=int, default=4, help="tokens between the two copies of the span")
    add_device_option(ap)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    m = load(args.weights, device=pick_device(args.device))
    if args.ckpt:
        t = load_file(f"{args.ckpt}/ckpt.safetensors")
        m.load_state_dict(model_state(t), strict=False)  # the drafter and vision tower are not trained there
    m.eval()
    tokens = torch.as_tensor(heldout_natural_tokens(m.tokenizer)[:40000], dtype=torch.long)
    rows = scores(m, tokens, gap=args.gap)
    print("layer head kind         prev  induction  sink")
    for r in rows:
        kind = "window-only" if r.window_only else "compressed"
        print(f"{r.layer:>5} {r.head:>4} {kind:<11} {r.prev:.3f}  {r.induction:.3f}      {r.sink:.3f}")
    wo = [r.prev for r in rows if r.window_only] or [0.0]
    print(f"heads: max_prev_window_only={max(wo):.3f} max_prev={max(r.prev for r in rows):.3f} "
          f"max_induction={max(r.induction for r in rows):.3f} uniform={1 / m.cfg.sliding_window:.3f} gap={args.gap}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
