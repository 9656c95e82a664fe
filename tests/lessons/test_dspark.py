"""lessons/dspark.py: the DSpark lesson's formulas worked by hand (acceptance, leftover, expected tokens, wall
time), and its simulation showing that draft-then-verify keeps the target's distribution."""

from __future__ import annotations

import math

import pytest
import torch

from lessons import dspark as L

P = torch.tensor([0.40, 0.25, 0.15, 0.10, 0.06, 0.04])
Q = torch.tensor([[0.05, 0.10, 0.15, 0.20, 0.20, 0.30]])   # a draft unlike the target


def test_lesson_formulas():
    assert L.acceptance(P, Q[0]) == pytest.approx(0.5)   # 0.05 + 0.10 + 0.15 + 0.10 + 0.06 + 0.04
    # p - q = [.35, .15, 0, -.1, -.14, -.26] -> keep the positive part, divide by its sum 0.5
    assert L.leftover(P, Q[0]).tolist() == pytest.approx([0.7, 0.3, 0, 0, 0, 0])
    assert L.expected_tokens(0.8, 4) == pytest.approx((1 - 0.8 ** 5) / 0.2)   # 3.3616
    assert L.walltime_factor(0.5, 3, 0.1) == pytest.approx(1.875 / 1.3)
    assert L.survival([0.9, 0.5, 0.8]) == pytest.approx([0.9, 0.45, 0.36])
    assert L.auto_length([0.9, 0.5, 0.8], 0.4) == 2 and L.auto_length([0.2], 0.3) == 0
    rows = L.formula_table(0.5, [1, 2])
    assert [r["tokens_per_pass"] for r in rows] == pytest.approx([1.5, 1.75])


def test_lesson_simulation_shows_the_rule_is_lossless():
    sim = L.simulate(P.tolist(), Q[0].tolist(), n=3000, seed=1)
    n = 3000
    for emp, p in zip(sim.empirical, P.tolist()):
        assert abs(emp - p) < 4 * math.sqrt(p * (1 - p) / n) + 1e-9
    assert abs(sim.acceptance - 0.5) < 4 * math.sqrt(0.25 / n) and sim.predicted_acceptance == pytest.approx(0.5)
    with pytest.raises(ValueError):
        L.simulate([0.5, 0.5], [1.0], n=10)
