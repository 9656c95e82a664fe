"""The research losses through the model's recorder hooks (lab/training/lookup.py) give the training step the same
losses and gradients as when they were branches of the architecture: each case of one step on random `micro` is
compared with figures recorded from that earlier code (fixtures/research_losses.json, whose note says how)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from lab.training.schedule import TrainConfig
from lab.training.step import forward_backward, set_window
from tests.conftest import random_model

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "research_losses.json"
# case -> (the TrainConfig fields it changes, dense compressed attention)
CASES = {
    "lookup": (dict(lookup_weight=1.0), True),
    "readout": (dict(readout_forcing=0.5), True),
    "pool_kl": (dict(pool_kl=True), True),
    "select": (dict(select_weight=1.0), False),
    "all": (dict(lookup_weight=1.0, select_weight=1.0, readout_forcing=0.3, lookup_every_head=True), True),
}


def batch(vocab: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Two rows of 48 tokens with four answers whose sources lie beyond a 2-token window (two in one row rival)."""
    g = torch.Generator().manual_seed(7)
    x = torch.randint(5, vocab, (2, 48), generator=g)
    y = torch.randint(5, vocab, (2, 48), generator=g)
    sources = torch.full((2, 48), -1)
    sources[0, 30], sources[0, 20], sources[1, 40], sources[1, 44] = 5, 18, 10, 22
    return x, y, sources


def step(name: str) -> dict:
    """One forward-backward of case `name`: its losses, the logits' sum, and per parameter (gradient norm, the
    gradient's dot product with a fixed random direction)."""
    changes, dense = CASES[name]
    m = random_model("micro")
    set_window(m, 2)
    x, y, sources = batch(m.cfg.vocab_size)
    losses = forward_backward(m, x, y, TrainConfig(preset="micro", **changes), dense, sources=sources)
    g = torch.Generator().manual_seed(11)
    grads = {}
    for pname, p in m.named_parameters():
        d = torch.randn(p.shape, generator=g, dtype=torch.float32)
        gr = p.grad.float() if p.grad is not None else torch.zeros_like(d)
        grads[pname] = [float(gr.norm()), float((gr * d).sum())]
    return {"loss": float(losses.plain.detach()), "indexer_kl": float(losses.indexer_kl.detach()),
            "lookup": float(losses.lookup.detach()), "select": float(losses.select.detach()),
            "logits": float(losses.out.logits.detach().double().sum()), "grads": grads}


@pytest.mark.parametrize("name", list(CASES))
def test_a_step_with_each_research_loss_matches_the_recorded_losses_and_gradients(name):
    want = json.loads(FIXTURE.read_text())["cases"][name]
    got = step(name)
    for key in ("loss", "indexer_kl", "lookup", "select", "logits"):
        assert got[key] == pytest.approx(want[key], rel=1e-5, abs=1e-6), key
    assert set(got["grads"]) == set(want["grads"])
    moved = 0
    for pname, (norm, dot) in want["grads"].items():
        g_norm, g_dot = got["grads"][pname]
        tol = 1e-4 * norm + 1e-9
        assert abs(g_norm - norm) <= tol and abs(g_dot - dot) <= tol, pname
        moved += norm > 0
    assert moved > 300      # nearly every parameter takes part: the comparison is not of zeros


def test_the_cases_switch_their_loss_on():
    """Each case's own term is on (so a recorder that stopped working would show as a zero, not pass unnoticed)."""
    cases = json.loads(FIXTURE.read_text())["cases"]
    assert cases["lookup"]["lookup"] > 0 and cases["select"]["select"] > 0 and cases["all"]["select"] > 0
    assert cases["pool_kl"]["indexer_kl"] != pytest.approx(cases["lookup"]["indexer_kl"], rel=1e-3)
    assert cases["readout"]["logits"] != pytest.approx(cases["lookup"]["logits"], rel=1e-3)
