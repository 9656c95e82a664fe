"""AppTest: the side-by-side of the two shipped checkpoints (ui/pair.py) appears by default on the views that teach
the global branch, names both checkpoints, and a toggle turns it off, whatever weights the sidebar holds (random
tiny here, as every AppTest page run)."""

from __future__ import annotations

import re

import pytest
from streamlit.testing.v1 import AppTest

from tests.conftest import ROOT, run_page

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.skipif(not all((ROOT / "data" / "weights" / d / "model.safetensors").exists()
                                         for d in ("tiny", "recall")), reason="shipped weights not present")]

NAMES = ("Recall checkpoint", "Text model")        # readers' names: no file path in a title


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
    assert {f"{key}_pair_recall", f"{key}_pair_text"} <= chart_keys(at)
    learned = [c.value for c in at.caption if c.value.startswith("Learned")]
    assert len(learned) == 2 and all("Far recall" in c for c in learned)
    at.toggle(key=f"{key}_pair").set_value(False).run()
    ok(at)
    assert not any(n in headings(at) for n in NAMES)
    assert not {f"{key}_pair_recall", f"{key}_pair_text"} & chart_keys(at)
    assert at.query_params.get("pair") in ("0", ["0"])          # the link keeps the switch off
    again = run_page(page, pair="0")                                # and a link with it opens without the pair
    ok(again)
    assert not again.toggle(key=f"{key}_pair").value
    assert not any(n in headings(again) for n in NAMES)


def test_inspector_far_fact_and_selected_views_show_the_pair():
    at = run_page("inspector")
    ok(at)
    # the selected-entries view: the current prompt, layer and token read by both checkpoints
    assert {"insp_sel_recall", "insp_sel_text"} <= chart_keys(at)
    assert {"Recall checkpoint", "Text model"} <= set(headings(at))
    kept = [m.value for m in at.markdown if m.value.startswith("Keeps ")]
    assert len(kept) == 2 and all(re.match(r"Keeps 16 of \d{3} entries", k) for k in kept), kept
    # the far-fact view: one held-out story read by both
    assert headings(at).count(NAMES[0]) == 2 and headings(at).count(NAMES[1]) == 2     # selected + far fact
    lines = [m.value for m in at.markdown]
    assert any("of a decoder layer's attention" in v or "under 1% of its attention" in v for v in lines)
    at.toggle(key="insp_ff_pair").set_value(False).run()
    ok(at)
    assert headings(at).count(NAMES[0]) == 1 and {"insp_sel_recall", "insp_sel_text"} <= chart_keys(at)
    at.toggle(key="insp_sel_pair").set_value(False).run()
    ok(at)
    assert not {"insp_sel_recall", "insp_sel_text"} & chart_keys(at)


def test_csa2_draws_the_mechanism_for_both_checkpoints_then_for_the_sidebar_s_weights():
    at = run_page("csa2_modes")
    ok(at)
    keys = chart_keys(at)
    assert {"csa2_mech_fig_recall", "csa2_mech_fig_text"} <= keys and "csa2_mech_fig" not in keys
    assert {"Recall checkpoint", "Text model"} <= set(headings(at))
    at.toggle(key="csa2_mech_pair").set_value(False).run()
    ok(at)
    keys = chart_keys(at)
    assert "csa2_mech_fig" in keys and not {"csa2_mech_fig_recall", "csa2_mech_fig_text"} & keys
    at.segmented_control(key="csa2_mech_step").set_value("Pool").run()
    ok(at)
    assert any("candidate pool" in m.value for m in at.markdown)
