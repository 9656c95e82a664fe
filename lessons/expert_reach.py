"""Experts as a batch reaches them: how many distinct routed experts the rows of one step read, from uniform routing
in closed form and measured from a running model's router on real text.

A step's rows (B sequences decoding, or the anchor and d drafts of a verify) each choose k of e routed experts. With
uniform, independent choices the expected distinct experts per layer are e·(1 - (1 - k/e)^n) for n rows
(`lessons.cost.routed_touched`). A trained router is neither uniform nor independent: consecutive tokens of one text
may share experts, and some experts are busier than others. `measured_reach` counts the distinct experts in the
router choices a traced forward records (model/inference/trace.py), for rows drawn far apart (a batch of separate
sequences) and for runs of consecutive rows (a verify). What this module does not know: the release's router (the
measurement is on the model that runs here, with its own e and k).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from model.config import V41Config

from .cost import routed_touched

BATCHES = (1, 8, 64, 256, 1024)


def expert_rows(cfg: V41Config, batches=BATCHES) -> list[dict]:
    """Distinct experts per layer at each batch, uniform routing: how much of the experts' reading the batch shares."""
    e, k = cfg.n_routed_experts, cfg.num_experts_per_tok
    out = []
    for b in batches:
        t = routed_touched(b, e, k)
        out.append({"rows in the step": f"{b:,}", "distinct experts per layer": round(t, 1),
                    "share of the experts": f"{t / e:.0%}", "expert reads per row": round(t / b, 2),
                    "shared (1 - distinct / chosen)": f"{1 - t / (b * k):.0%}"})
    return out


def sharing_starts(cfg: V41Config) -> int:
    """The smallest batch at which the rows share at least half of their expert reads (distinct <= k·B / 2)."""
    e, k = cfg.n_routed_experts, cfg.num_experts_per_tok
    b = 1
    while routed_touched(b, e, k) > k * b / 2:
        b += 1
    return b


def all_read_from(cfg: V41Config, share: float = 0.99) -> int:
    """The batch from which the step reads `share` of every layer's experts: past it, more rows read nothing new."""
    e, k = cfg.n_routed_experts, cfg.num_experts_per_tok
    return math.ceil(math.log(1 - share) / math.log(1 - k / e))


def reach_sentence(cfg: V41Config) -> str:
    e, k = cfg.n_routed_experts, cfg.num_experts_per_tok
    return (f"Each row reads {k} of {e} routed experts. Below a batch of about {sharing_starts(cfg):,}, most rows "
            f"read experts no other row reads, so the batch hardly shares the experts' bytes; from about "
            f"{all_read_from(cfg):,} rows every expert is read anyway, and each added sequence costs only its "
            f"FLOPs and its cache.")


@dataclass
class Reach:
    rows: int
    how: str               # "apart" (separate sequences) or "consecutive" (a verify's rows)
    measured: float        # mean distinct experts per layer
    uniform: float         # the closed form for the same e, k and rows


def text_ids(model, n: int = 512) -> torch.Tensor:
    """[1, n] ids of the held-out natural text's opening (real text the model did not train on)."""
    from model.heldout import HELDOUT_NATURAL_PATH  # late: only the page's button reads the text

    text = HELDOUT_NATURAL_PATH.read_text(encoding="utf-8")[:12 * n]
    ids = model.encode(text)[:n]
    return torch.tensor([ids], device=model.device)


def measured_reach(model, ids: torch.Tensor, batches=(1, 2, 4, 8, 16), runs=(2, 3, 5), draws: int = 32,
                   seed: int = 0) -> list[Reach]:
    """Distinct experts per layer in the router choices of one traced forward over `ids` [1, S]: `batches` rows
    drawn at random (separate sequences), and `runs` of consecutive rows (a verify's anchor and drafts), averaged
    over layers and `draws` draws."""
    from model.inference import run_trace  # late: the closed form above needs no model

    cfg = model.cfg
    e, k = cfg.n_routed_experts, cfg.num_experts_per_tok
    tr = run_trace(model, ids, keep_scores=False, lens=False)
    choices = [rec.router_experts[0] for rec in tr.layers if rec.router_experts is not None]   # [S, k] each
    s = choices[0].shape[0]
    g = torch.Generator().manual_seed(seed)

    def mean_distinct(pick) -> float:
        tot = 0.0
        for _ in range(draws):
            rows = pick()
            tot += sum(len(torch.unique(ch[rows])) for ch in choices) / len(choices)
        return tot / draws

    out = []
    for b in batches:
        if b <= s:
            out.append(Reach(b, "apart", mean_distinct(lambda: torch.randperm(s, generator=g)[:b]),
                             routed_touched(b, e, k)))
    for r in runs:
        if r <= s:
            def run(r: int = r) -> torch.Tensor:
                return torch.arange(r) + int(torch.randint(0, s - r + 1, (1,), generator=g))
            out.append(Reach(r, "consecutive", mean_distinct(run), routed_touched(r, e, k)))
    return out


def measured_rows(res: list[Reach], cfg: V41Config) -> list[dict]:
    return [{"rows": f"{r.rows} {'drawn apart (a batch)' if r.how == 'apart' else 'in a row (a verify)'}",
             "distinct experts, measured": round(r.measured, 2), "uniform routing": round(r.uniform, 2),
             f"of {cfg.n_routed_experts}": f"{r.measured / cfg.n_routed_experts:.0%}"} for r in res]
