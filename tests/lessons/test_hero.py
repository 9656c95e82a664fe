"""The home page's far-fact words (lessons/hero.py): the decoder's reading said per layer or as a range, a
right colour in a near-tie said as one, and each recall checkpoint's clause read from its record."""

from __future__ import annotations

import json

from lessons import hero
from lessons.far_compare import Side
from model import shipped_set


class _LF:
    def __init__(self, layer, stack, share):
        self.layer, self.stack, self.share, self.fact_entries = layer, stack, share, [7]


class _Answer:
    def __init__(self, token, right, colour_share=None):
        self.token, self.right, self.colour_share = token, right, colour_share


class _FF:
    def __init__(self, shares, on, off):
        self.layers = [_LF(i, "encoder" if i < 2 else "decoder", s) for i, s in enumerate(shares)]
        self.answers = [on, off]


def side(shares, on, off, kind="recall") -> Side:
    return Side(name=kind, kind=kind, title=kind, learned="", ff=_FF(shares, on, off))


def test_every_decoder_layer_on_the_fact_is_a_range_else_the_best_layer():
    all_on = side([0.0, 0.0, 0.77, 0.99], _Answer(" red", True, 0.9), _Answer(" blue", False, 0.05))
    assert hero.reads(all_on).startswith("Layers 2-3: 77-99% of attention")
    one = side([0.0, 0.0, 0.09, 0.57], _Answer(" red", True, 0.9), _Answer(" blue", False, 0.05))
    assert hero.reads(one) == "Layer 3: 57% of attention on the fact's entry"
    assert hero.reads(one, lambda i: i + 1).startswith("Layer 4:")          # the reader's numbering


def test_a_right_colour_in_a_near_tie_is_not_called_right():
    """16% of the colour probability against 1 in 11 (9.1%) by chance is under twice chance: a near-tie, not a
    recall; a clear 90% stays right."""
    tie = side([0, 0, 0.5, 0.6], _Answer(" orange", True, 0.16), _Answer(" green", False, 0.08))
    said = hero.answer(tie)
    assert "(right)" not in said and "'orange' (a near-tie: 16%, a guess 9%)" in said and "'green' (wrong)" in said
    clear = side([0, 0, 0.5, 0.6], _Answer(" orange", True, 0.9), _Answer(" grey", False, 0.1))
    assert "'orange' (right)" in hero.answer(clear)


def test_each_clause_comes_from_the_record():
    def record(kind):
        return json.loads((shipped_set(kind).directory / "training.json").read_text())

    assert hero.clause(record("unaided")).startswith("No loss aimed at")
    guided = hero.clause(record("recall"))
    assert "(lookup, selection, entry probe, readout forcing)" in guided and "not evidence" in guided
    assert hero.clause({"train_config": {"select_weight": 1}}).startswith("Losses aimed at that entry (selection)")
    assert hero.clause(None) == "How it was trained is not recorded."
