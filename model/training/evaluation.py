"""Evaluation during training: held-out loss, story recall by distance bucket and copy accuracy at
three gaps (bench/quality.py has the full evaluation).
"""

from __future__ import annotations

import torch

from ..arch.context import Ablation
from ..corpus.dataset import heldout_natural_batches, heldout_natural_tokens, heldout_story_batches
from ..model import V41Model
from .step import set_window

EVAL_KEYS = ("heldout", "recall", "copy")   # the prefixes of quick_eval's keys


@torch.no_grad()
def quick_eval(m: V41Model, tok, seq_len: int = 512, max_batches: int = 4) -> dict[str, float]:
    """Held-out natural-text loss, recall accuracy per story bucket and copy accuracy at gaps 4, 40, 200
    (full window; the model is left in train mode)."""
    set_window(m, 0)
    m.eval()
    natural = heldout_natural_tokens(tok)
    tot, n = 0.0, 0
    for i, (x, y) in enumerate(heldout_natural_batches(natural, 8, seq_len)):
        if i >= max_batches:
            break
        lg = m(x).logits
        tot += float(torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), y.reshape(-1), reduction="sum"))
        n += y.numel()
    correct = {}
    for b in heldout_story_batches(tok, batch_size=25):
        lg = m(b["input_ids"]).logits
        pred = lg[torch.arange(len(b["answer_pos"])), b["answer_pos"]].argmax(-1)
        for ok, bucket in zip((pred == b["answer_id"]).tolist(), b["bucket"]):
            c = correct.setdefault(bucket, [0, 0])
            c[0] += ok
            c[1] += 1
    copy = {f"copy_gap{gap}": copy_accuracy(m, natural, gap) for gap in (4, 40, 200)}
    m.train()
    out = {"heldout_loss": tot / max(1, n)}
    out.update({f"recall_{k}": v[0] / v[1] for k, v in correct.items()})
    out.update(copy)
    return out


@torch.no_grad()
def copy_accuracy(m: V41Model, tokens, gap: int, n: int = 24, span: int = 16, seed: int = 5,
                  first: bool = False, ablation: Ablation | None = None) -> float:
    """Does the model copy? n held-out text spans of `span` tokens, said again after `gap` other
    tokens; the share of the repeat's tokens 2..span predicted exactly (argmax). A model that
    cannot look back scores what the text alone predicts (about 0.2 here); copying lifts it
    towards 1. gap + span > window means the first copy is reachable only through compressed entries.
    `first=True` scores the first time the span is seen instead: the no-copy baseline; `ablation`
    switches parts off (window only: can the far copy be made without the compressed entries?)."""
    toks = torch.as_tensor(tokens, dtype=torch.long)
    g = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(n):
        s = int(torch.randint(0, len(toks) - 2 * (span + gap) - 16, (1,), generator=g))
        said = toks[s:s + span]
        filler = toks[s + span + 8: s + span + 8 + gap]  # other text, not the span's own continuation
        rows.append(torch.cat([toks[s + span: s + span + 8].flip(0), said, filler, said]))
    x = torch.stack(rows).to(m.device)
    lg = (m(x) if ablation is None else m(x, ablation=ablation)).logits
    start = 8 if first else 8 + span + gap
    return float((lg[:, start:start + span - 1].argmax(-1) == x[:, start + 1:start + span]).float().mean())
