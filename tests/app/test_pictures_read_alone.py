"""AppTest: pictures that read without their caption. The stepped CSA2 picture opens on its first step, outlines the
recall prompt's fact through every row, and from the Entries step shows packing magnified (a ratio-2 entry spans 2
tokens, a ratio-1 entry 1); the inspector's short-prompt selection says so in a sentence instead of a block."""

from __future__ import annotations

import json

import pytest

from model.shipped import shipped_weights
from tests.conftest import ROOT, run_page

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def specs(at) -> dict[str, dict]:
    return {c.key: json.loads(c.proto.spec) for c in at.get("plotly_chart")}


def _doll_fact_position() -> int:
    from tokenizers import Tokenizer

    text = next(p["text"] for p in json.loads((ROOT / "data" / "prompts.json").read_text()) if p.get("kind") == "long")
    tok = Tokenizer.from_file(str(shipped_weights("text") / "tokenizer.json"))
    enc = tok.encode(text)
    start = text.index("pink")
    return next(i for i, (s, e) in enumerate(enc.offsets) if s <= start < e or (s < start + 4 and e > start))


def test_csa2_opens_on_its_first_step_outlines_the_fact_and_magnifies_packing():
    at = run_page("csa2_modes", pair="0")
    assert not at.exception, [e.value for e in at.exception]
    assert at.segmented_control(key="csa2_mech_step").value == "Tokens"
    charts = specs(at)
    assert "csa2_mech_fig" in charts and "csa2_mech_fig_pack" not in charts      # the first step: no packing yet
    fact = _doll_fact_position()
    dashed = [s for s in charts["csa2_mech_fig"]["layout"].get("shapes", []) if s.get("line", {}).get("dash") == "dash"]
    assert len(dashed) == 1 and dashed[0]["x0"] < fact < dashed[0]["x1"]         # spans every row (no y bounds set)
    assert dashed[0].get("yref", "y") == "paper" or "y0" not in dashed[0] or dashed[0]["y0"] == 0
    at.segmented_control(key="csa2_mech_step").set_value("Entries").run()
    assert not at.exception, [e.value for e in at.exception]
    pack = specs(at)["csa2_mech_fig_pack"]
    boxes = [s for s in pack["layout"]["shapes"] if s.get("fillcolor") not in (None, "#eeeeee")]
    widths = {round(s["x1"] - s["x0"] + 0.1) for s in boxes}          # an entry box spans ratio tokens, less gaps
    assert widths == {1, 2}, widths
    tokens = [s for s in pack["layout"]["shapes"] if s.get("fillcolor") == "#eeeeee"]
    assert len(tokens) == 16 and any(s["x0"] < fact < s["x1"] for s in tokens)
    labels = pack["layout"]["yaxis"]["ticktext"]
    assert any("r2" in t and "encoder" in t for t in labels) and any("r1" in t and "decoder" in t for t in labels)


def test_a_short_prompt_s_selection_is_a_sentence_not_a_solid_block():
    from lessons.inspector import SelectionView, too_short_to_choose

    short = SelectionView(True, None, 19, list(range(16)), None, [0.0] * 19, "")
    assert "19 entries are visible and the top-k keeps 16" in too_short_to_choose(short)
    long = SelectionView(True, None, 307, list(range(16)), list(range(64)), [0.0] * 307, "")
    assert too_short_to_choose(long) is None
    at = run_page("inspector", prompt="The key is in the blue box. The box is", layer=8, selpair="0")
    at.session_state["insp_tab"] = "Selected entries"       # a closed tab computes nothing
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert "insp_sel" not in specs(at)
    assert any("Too short to choose much" in c.value for c in at.caption)
