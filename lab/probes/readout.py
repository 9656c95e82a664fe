"""Where does a copy stop: at where the heads look, or at what they read out?

`python -m lab.probes.readout [weights] [--gap 200]`

Held-out prose spans of 16 tokens are said again `gap` tokens later (the rows of `copy_accuracy`,
lab/training/evaluation.py), and the second copy is scored (argmax on tokens 2..16) four ways:
- `sparse`: the model as it runs (the indexer's top-k);
- `dense`: every visible entry attended (is the selection what stops it?);
- `window_only`: the compressed branch off (what the text alone predicts);
- `oracle`: dense, with every head of every layer reading ratio-1 entries handed the entry of the token
  after the first copy's match, its whole output that entry's value (the readout forcing of training at
  share 1, `force_readout` in lab/training/lookup.py): what the model would copy with perfect attention.
`oracle` near `dense` and both low: the heads read the right entry and the model does not write it out (train
the readout); `oracle` high and `dense` low: the heads look elsewhere (train the attention).
Last line: `readout: gap=... sparse=... dense=... window_only=... oracle=... first=...`.
"""

from __future__ import annotations

import argparse

import torch

from model.cli import add_device_option, pick_device


def copy_target(x: torch.Tensor, start: int, distance: int, span: int, forcing: float = 1.0):
    """The second copy's rows (tokens 1..span-1 of it predict the next) and, for each, the position of the token
    after its earlier match, `distance` back, as a training lookup target with the readout forcing at `forcing`."""
    from lab.training.lookup import LookupTarget

    b, dev = x.shape[0], x.device                      # on the model's device: the layers index with them
    rows = torch.arange(start, start + span - 1, device=dev)
    batch = torch.arange(b, device=dev).repeat_interleave(len(rows))
    row = rows.repeat(b)
    return LookupTarget(batch, row, row - distance + 1, torch.full((len(row), 1), -1, device=dev), forcing=forcing)


def scores(m, tokens, gap: int = 200, span: int = 16, n: int = 24) -> dict[str, float]:
    from lab.training import copy_accuracy, said_twice
    from lab.training.lookup import LookupRecorder
    from model import Ablation

    dense = Ablation(dense_compressed=True)
    out = {"sparse": copy_accuracy(m, tokens, gap, n, span),
           "dense": copy_accuracy(m, tokens, gap, n, span, ablation=dense),
           "window_only": copy_accuracy(m, tokens, gap, n, span, ablation=Ablation(window_only=True)),
           "first": copy_accuracy(m, tokens, gap, n, span, first=True)}
    x = said_twice(tokens, gap, n, span).to(m.device)   # the rows copy_accuracy scores
    start = 8 + span + gap
    with torch.no_grad():
        lg = m(x, ablation=dense, trace=LookupRecorder(copy_target(x, start, span + gap, span))).logits
    out["oracle"] = float((lg[:, start:start + span - 1].argmax(-1) == x[:, start + 1:start + span]).float().mean())
    return out


def main(argv: list[str] | None = None) -> int:
    from model import load
    from model.heldout import heldout_natural_tokens

    ap = argparse.ArgumentParser(prog="python -m lab.probes.readout", description=__doc__.split("\n\n")[0])
    ap.add_argument("weights", nargs="?", default="data/weights/tiny")
    ap.add_argument("--gap", type=int, default=200)
    add_device_option(ap)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    m = load(args.weights, device=pick_device(args.device))
    m.eval()
    got = scores(m, heldout_natural_tokens(m.tokenizer), args.gap)
    print("readout: gap=%d " % args.gap + " ".join(f"{k}={v:.3f}" for k, v in got.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
