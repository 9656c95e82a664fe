"""Far look-back practice: answer-only tasks and an answer-weighted loss (docs/design/architecture.md §5).

The compressed branch CAN learn a look-back from scratch (lab/probes/lookup.py): on the `micro` preset
with window 4, a value said once at the start and asked for 12+ tokens later (reachable only
through compressed entries) is recalled at 0.88 after 100 steps when the loss counts the answers.
With plain next-token loss over every position it stays at chance for 150+ steps, and so does the
same task with the value inside the window: the answers are a few tokens of each row, the rest is
unpredictable filler whose gradient noise fills AdamW's second moments, so the look-back direction
barely moves. Natural text and copy drills have the same problem: the tokens a look-back would
predict are a small share of all tokens. Weighting the answer tokens fixes it; nothing in the
compressed branch's forward or backward was broken.

Runs (`python -m lab.probes.lookup`, micro, batch 32, lr 3e-3, 1 thread; accuracy on answers, chance 1/64):

| task    | route (window)     | loss            | selection | quant | ratio | steps | acc   |
|---------|--------------------|-----------------|-----------|-------|-------|-------|-------|
| recall  | compressed (4)     | plain mean      | dense     | on    | 2+1   | 150   | 0.016 |
| recall  | window (64)        | plain mean      | dense     | on    | 2+1   | 125   | 0.016 |
| recall  | compressed (4)     | answers only    | dense     | on    | 2+1   | 100   | 0.88  |
| recall  | compressed (4)     | answers only    | top-4     | on    | 2+1   | 100   | 0.78  |
| recall  | compressed (4)     | answers only    | dense     | off   | 2+1   | 100   | 0.83  |
| recall  | compressed (4)     | answers only    | dense     | on    | 1     | 100   | 0.93  |
| recall  | compressed (4)     | answers only    | dense     | on    | 2     | 100   | 0.95  |
| recall  | compressed (4)     | mean, answers x20 | dense   | on    | 2+1   | 100   | 0.97  |
| lookup  | compressed (4)     | plain mean      | dense     | on    | 2+1   | 300   | 0.012 |
| lookup  | compressed (4)     | answers only    | dense     | on    | 2+1   | 200   | 0.012 |
| lookup  | window (64)        | answers only    | dense     | on    | 2+1   | 150   | 0.012 |

Key matching (lookup: find the entry whose key equals the query token) has a longer plateau than
these budgets, through the window as much as through compressed entries: it is not a defect of the
compressed branch either.

- `recall_rows`, `lookup_rows`: the two diagnostic tasks (ids of the micro vocabulary), with masks.
- `induction_mask`: for any batch, which targets a look-back predicts (the previous `match` tokens
  occurred earlier, followed by this target), optionally only those further back than the window.
- `answer_weighted_ce`: next-token cross entropy with the masked targets weighted `answer_weight`
  times (normalised by the total weight, so the loss scale stays that of a mean).
"""

from __future__ import annotations

import torch

from .step import lm_loss

KEYS = (8, 72)       # key ids [8, 72)
VALUES = (72, 136)   # value ids [72, 136)
FILLER = (136, 248)  # filler ids
QUERY = 250          # the recall task's query token


def recall_rows(n: int, nq: int, filler: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The easiest far look-back: a value id first, then `nq` times (filler ids, QUERY, the value).
    Every answer lies `filler`+ tokens after the value's previous occurrence: one entry to find, no
    key matching (no induction circuit). -> (x, y, answer mask), each [n, 1 + nq*(filler+2) - 1]."""
    rows, masks = [], []
    for _ in range(n):
        v = int(torch.randint(VALUES[0], VALUES[1], (1,), generator=g))
        row, m = [v], [False]
        for _ in range(nq):
            row += torch.randint(FILLER[0], FILLER[1], (filler,), generator=g).tolist() + [QUERY, v]
            m += [False] * (filler + 1) + [True]
        rows.append(torch.tensor(row))
        masks.append(torch.tensor(m))
    t, mk = torch.stack(rows), torch.stack(masks)
    return t[:, :-1], t[:, 1:], mk[:, 1:]


def lookup_rows(n: int, npairs: int, filler: int,
                g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Key-value lookup: `npairs` (key, value) pairs (keys at even positions, so a ratio-2 group
    holds one pair), `filler` filler ids, the same pairs again in a random order. Each repeated
    value is predictable only from its first occurrence. -> (x, y, answer mask)."""
    rows, masks = [], []
    for _ in range(n):
        k = torch.randperm(KEYS[1] - KEYS[0], generator=g)[:npairs] + KEYS[0]
        v = torch.randint(VALUES[0], VALUES[1], (npairs,), generator=g)
        fill = torch.randint(FILLER[0], FILLER[1], (filler,), generator=g)
        order = torch.randperm(npairs, generator=g)
        row = torch.cat([torch.stack([k, v], 1).flatten(), fill, torch.stack([k[order], v[order]], 1).flatten()])
        m = torch.zeros(len(row), dtype=torch.bool)
        m[2 * npairs + filler + 1::2] = True
        rows.append(row)
        masks.append(m)
    t, mk = torch.stack(rows), torch.stack(masks)
    return t[:, :-1], t[:, 1:], mk[:, 1:]


def induction_mask(x: torch.Tensor, y: torch.Tensor, match: int = 2, min_back: int = 0) -> torch.Tensor:
    """[B, S] bool: target y[t] is predictable by look-back, i.e. for some s < t the `match` tokens
    ending at s equal those ending at t and y[s] == y[t]; with `min_back` > 0 only matches at least
    that far back (t - s >= min_back: past the window) count. O(S^2) per row; fine for S <= 1024."""
    b, s = x.shape
    same = torch.ones(b, s, s, dtype=torch.bool, device=x.device)
    for j in range(match):
        xs = torch.nn.functional.pad(x, (j, 0), value=-1)[:, :s]     # token j before each position
        same &= xs.unsqueeze(2) == xs.unsqueeze(1)
        same &= (torch.arange(s, device=x.device) >= j).view(1, 1, s)  # the earlier position has j tokens before
    same &= y.unsqueeze(2) == y.unsqueeze(1)
    t = torch.arange(s, device=x.device)
    back = t.view(-1, 1) - t.view(1, -1)                              # [t, s] = t - s
    same &= (back >= max(1, min_back)).unsqueeze(0)
    return same.any(-1)


def answer_weighted_ce(logits: torch.Tensor, y: torch.Tensor, mask: torch.Tensor, answer_weight: float) -> torch.Tensor:
    """Cross entropy with masked targets weighted `answer_weight` (1 = plain mean; inf = answers only):
    lab/training/step.py's lm_loss with weights built from the mask."""
    m = mask.to(torch.float32)
    w = m if answer_weight == float("inf") else 1.0 + (answer_weight - 1.0) * m
    return lm_loss(logits.float(), y, w)[0]
