"""lessons/fact_steps.py on hand-made views: what a layer did with the fact's entry (picked, kept in the pool,
dropped, passed over, not made yet), the share it got, where a side first reaches the fact, and the folded panel's
title."""

from __future__ import annotations

from lessons.fact_in_prompt import PromptFact
from lessons.fact_steps import (
    DROPPED,
    PASSED,
    PICKED,
    POOLED,
    UNSEEN,
    FactAtLayer,
    fact_at,
    first_reaching,
    folded_title,
    in_pool_row,
    mark_fact,
    reach_line,
)
from lessons.inspector import AttentionView, SelectionView

FACT = PromptFact(colour="pink", positions=[27], sentence=[22, 23, 24, 25, 26, 27, 28, 29], query=306)


def _attn(ratio: int, ids: list[int], shares: list[float]) -> AttentionView:
    return AttentionView(ratio=ratio, window_pos=[306], window_share=[1 - sum(shares)], entry_ids=ids,
                         entry_share=shares, entry_spans=[(e * ratio, (e + 1) * ratio) for e in ids], sink=0.0, heads=4)


def _sel(visible: int, selected: list[int], pool: list[int] | None) -> SelectionView:
    return SelectionView(True, None, visible, selected, pool, None, "")


def test_the_fact_s_entry_at_each_ratio_and_what_the_layer_did_with_it():
    r2 = fact_at(3, "encoder", _attn(2, [13, 40], [0.3, 0.1]), _sel(153, [13, 40], None), FACT)
    assert (r2.entry, r2.span, r2.status) == (13, (26, 28), PICKED) and abs(r2.share - 0.3) < 1e-9
    assert fact_at(8, "decoder", _attn(1, [5], [0.2]), _sel(307, [5], list(range(100, 164))), FACT).status == DROPPED
    assert fact_at(8, "decoder", _attn(1, [5], [0.2]), _sel(307, [5], [27, 5]), FACT).status == POOLED
    passed = fact_at(6, "decoder", _attn(1, [5], [0.2]), _sel(307, [5], None), FACT)
    assert passed.status == PASSED and passed.share == 0.0
    assert fact_at(6, "decoder", _attn(1, [], []), _sel(20, [], None), FACT).status == UNSEEN
    assert fact_at(0, "encoder", _attn(0, [], []), None, FACT) is None          # a window-only layer


def test_the_first_decoder_layer_that_reaches_the_fact_and_the_line_that_says_so():
    rows = [FactAtLayer(3, "encoder", 2, 13, (26, 28), 0.5, PICKED),          # an encoder layer does not count
            FactAtLayer(6, "decoder", 1, 27, (27, 28), 0.05, PICKED),
            FactAtLayer(8, "decoder", 1, 27, (27, 28), 0.28, PICKED)]
    assert first_reaching(rows).layer == 8
    line = reach_line("Recall checkpoint", rows, 280, num=lambda i: i + 1)
    assert line.startswith("Recall checkpoint: decoder layer 9 is the first to reach the fact 280 tokens back (28%")
    none = reach_line("Text model", rows[1:2], 280)
    assert "no decoder layer reaches the fact" in none and "at most 5%" in none


def test_a_pools_row_and_the_reuse_bars_name_the_fact():
    assert in_pool_row(27, pool=[27], picked=[27], dropped=[], visible=307) == PICKED
    assert in_pool_row(27, pool=[1], picked=[1], dropped=[27], visible=307).startswith("dropped")
    assert in_pool_row(27, pool=[1], picked=[1], dropped=[], visible=307) == "outside the pool"
    assert in_pool_row(27, pool=[], picked=[], dropped=[], visible=10) == UNSEEN
    assert mark_fact(["E5: a", "E27: pink"], [5, 27], 27) == ["E5: a", "E27: pink (the fact)"]


def test_the_folded_title_states_the_result():
    assert folded_title("Text model", 0.0, 0.12, 1 / 11) == "Text model: the fact is not reached (12% far recall, " \
                                                           "a guess 9%)"
    assert folded_title("Recall checkpoint", 0.57, 0.55, 1 / 11).startswith(
        "Recall checkpoint: the fact is reached (57% of a decoder layer's attention)")
    assert folded_title("Random tiny", None, None, 1 / 11) == "Random tiny: the far story, read on these weights"
