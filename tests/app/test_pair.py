"""AppTest: the side-by-side of the shipped sets (ui/pair.py) appears by default on the views that teach the global
branch, names every set, says under each recall checkpoint how it was trained (the clause read from its record),
and a toggle turns it off, whatever weights the sidebar holds (random tiny here, as every AppTest page run)."""

from __future__ import annotations

import re

import pytest
from streamlit.testing.v1 import AppTest

from lessons.how_trained import training_clause
from model import shipped_set
from tests.conftest import ROOT, run_page
from ui.weights import PAIR_ORDER

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.skipif(not all((ROOT / "data" / "weights" / d / "model.safetensors").exists()
                                         for d in ("tiny", "recall", "unaided")), reason="shipped weights not present")]

KINDS = PAIR_ORDER                     # the side-by-side's columns, from model/shipped.py
NAMES = tuple(shipped_set(k).title for k in KINDS)


def clauses(fewest: bool = False) -> list[str]:
    """The short clause of each recall checkpoint (or its fewest-words form, lessons.hero.clause), computed from its
    training.json as shipped."""
    import json

    from lessons.hero import clause
    records = [json.loads((shipped_set(k).directory / "training.json").read_text()) for k in ("unaided", "recall")]
    return [clause(r) if fewest else training_clause(r, short=True) for r in records]


def says_how_trained(at: AppTest, fewest: bool = False) -> None:
    said = " ".join(c.value for c in at.caption)
    for clause in clauses(fewest):
        assert clause in said, clause


def ok(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


def headings(at: AppTest) -> list[str]:
    return [m.value.strip("*") for m in at.markdown]


def chart_keys(at: AppTest) -> set[str]:
    return {c.key for c in at.get("plotly_chart")}


@pytest.mark.parametrize("page,key", [("attention_shares", "sh_pair"), ("indexer_pools", "pool_pair"),
                                      ("ablation", "abl_pair")])
def test_pair_by_default_with_both_checkpoints_named_and_a_toggle_off(page, key):
    at = run_page(page)
    ok(at)
    assert all(n in headings(at) for n in NAMES), headings(at)
    assert {f"{key}_pair_{k}" for k in KINDS} <= chart_keys(at)
    learned = [c.value for c in at.caption if "Far recall" in c.value]
    assert len(set(learned)) >= 3, learned          # a line per set (a strip beside says it at more length)
    says_how_trained(at, fewest=True)
    at.toggle(key=f"{key}_pair").set_value(False).run()
    ok(at)
    assert not any(n in headings(at) for n in NAMES)
    assert not {f"{key}_pair_{k}" for k in KINDS} & chart_keys(at)
    assert at.query_params.get("pair") in ("0", ["0"])          # the link keeps the switch off
    again = run_page(page, pair="0")                                # and a link with it opens without the pair
    ok(again)
    assert not again.toggle(key=f"{key}_pair").value
    assert not any(n in headings(again) for n in NAMES)


def test_inspector_far_fact_and_selected_views_show_the_pair():
    at = run_page("inspector")
    ok(at)
    assert not {f"insp_sel_{k}" for k in KINDS} & chart_keys(at)    # a closed tab computes nothing
    at.session_state["insp_tab"] = "Selected entries"
    at.run()
    ok(at)
    # the selected-entries view: the current prompt, layer and token read by both checkpoints
    assert {f"insp_sel_{k}" for k in KINDS} <= chart_keys(at)
    assert set(NAMES) <= set(headings(at))
    kept = [m.value for m in at.markdown if m.value.startswith("Keeps ")]
    assert len(kept) == len(KINDS) and all(re.match(r"Keeps 16 of \d{3} entries", k) for k in kept), kept
    says_how_trained(at)
    # the far-fact view: one held-out story read by both
    assert all(headings(at).count(n) == 2 for n in NAMES)           # the selected-entries view and the far fact
    lines = [m.value for m in at.markdown]
    assert any("of a decoder layer's attention" in v or "under 1% of its attention" in v for v in lines)
    at.toggle(key="insp_ff_pair").set_value(False).run()
    ok(at)
    assert headings(at).count(NAMES[0]) == 1 and {f"insp_sel_{k}" for k in KINDS} <= chart_keys(at)
    at.toggle(key="insp_sel_pair").set_value(False).run()
    ok(at)
    assert not {f"insp_sel_{k}" for k in KINDS} & chart_keys(at)


def test_csa2_draws_the_mechanism_for_both_checkpoints_then_for_the_sidebar_s_weights():
    at = run_page("csa2_modes")
    ok(at)
    keys = chart_keys(at)
    assert {f"csa2_mech_fig_{k}" for k in KINDS} <= keys and "csa2_mech_fig" not in keys
    assert set(NAMES) <= set(headings(at))
    says_how_trained(at, fewest=True)
    at.toggle(key="csa2_mech_pair").set_value(False).run()
    ok(at)
    keys = chart_keys(at)
    assert "csa2_mech_fig" in keys and not {f"csa2_mech_fig_{k}" for k in KINDS} & keys
    at.segmented_control(key="csa2_mech_step").set_value("Pool").run()
    ok(at)
    assert any("candidate pool" in m.value for m in at.markdown)
