"""AppTest: step to the fact. On the far recall prompt the inspector's layer chart, the pools strip, the Reuse
comparison and the ablation run show a recall checkpoint (plain training by default) beside the text model, the
fact's entry outlined or named, its training clause beside it; a button steps the layer to the first decoder layer
that reaches the fact; the text model's own far-fact panel is folded under a title that states its result."""

from __future__ import annotations

import json
import re

import pytest

from lessons.how_trained import training_clause
from model import shipped_set
from model.shipped import SHIPPED, shipped_weights
from tests.conftest import ROOT, run_page

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.skipif(not all((ROOT / "data" / "weights" / d / "model.safetensors").exists()
                                         for d in ("tiny", "recall", "unaided")), reason="shipped weights not present")]


def ok(at) -> None:
    assert not at.exception, [e.value for e in at.exception]


def specs(at) -> dict[str, dict]:
    return {c.key: json.loads(c.proto.spec) for c in at.get("plotly_chart")}


def record(kind: str) -> dict:
    return json.loads((shipped_set(kind).directory / "training.json").read_text())


def long_prompt(i: int = 0) -> str:
    return [p["text"] for p in json.loads((ROOT / "data" / "prompts.json").read_text()) if p.get("kind") == "long"][i]


def fact_position(text: str) -> int:
    """The token position of the fact's colour word, found here from the tokenizer's offsets and the answer word."""
    from tokenizers import Tokenizer

    answer = next(p["answer"] for p in json.loads((ROOT / "data" / "prompts.json").read_text()) if p["text"] == text)
    where = text.index(f" the {answer} ") + 5          # "... the doll in the pink jar."
    enc = Tokenizer.from_file(str(shipped_weights("text") / "tokenizer.json")).encode(text)
    return next(i for i, (s, e) in enumerate(enc.offsets) if s <= where < e or (where <= s < where + len(answer)))


def dashed(spec: dict) -> list[dict]:
    return [s for s in spec["layout"].get("shapes", []) if s.get("line", {}).get("dash") == "dash"]


def test_inspector_steps_to_the_decoder_layer_that_reaches_the_fact():
    at = run_page("inspector", weights="trained")
    ok(at)
    fact = fact_position(long_prompt())
    charts = specs(at)
    for key in ("insp_step_own", "insp_step_other"):          # both sides, the fact's entry outlined (ratio 1 here)
        box = dashed(charts[key])
        assert len(box) == 1 and box[0]["x0"] < fact < box[0]["x1"], (key, box)
    said = " ".join(c.value for c in at.caption)
    assert training_clause(record("unaided"), short=True) in said
    assert "Text model: no decoder layer reaches the fact 280 tokens back" in said
    m = re.search(r"Recall checkpoint, plain training: decoder layer (\d+) is the first to reach the fact 280 tokens "
                  r"back \((\d+)% of its attention on E(\d+)\)", said)
    assert m and int(m.group(3)) == fact and int(m.group(2)) >= 10, said
    go = next(b for b in at.button if b.key == "insp_step_go")
    go.click().run()
    ok(at)
    assert at.session_state["insp_layer"] == int(m.group(1)) >= 6           # a decoder layer of the 12
    lines = [c.value for c in at.caption if c.value.startswith("Window ")]
    assert any(f"E{fact}" in v and "picked" in v for v in lines), lines
    assert not any(b.key == "insp_step_go" for b in at.button)              # there already
    at.segmented_control(key="insp_step_kind").set_value("recall").run()    # the guided one, on request
    ok(at)
    assert training_clause(record("recall"), short=True) in " ".join(c.value for c in at.caption)
    at.segmented_control(key="insp_step_kind").set_value("none").run()      # or nothing: the chart alone
    ok(at)
    assert "insp_attn" in specs(at) and "insp_step_other" not in specs(at)
    assert at.query_params.get("beside") in ("none", ["none"])


def test_inspector_runs_the_other_set_on_a_long_prompt_only_when_asked():
    import ui.step_pair as sp

    text = long_prompt(1)                                       # ~740 tokens: above a lowered threshold
    old, sp.EAGER_TOKENS = sp.EAGER_TOKENS, 400
    try:
        at = run_page("inspector", weights="trained", prompt=text, gen=0)
        ok(at)
        assert "insp_step_other" not in specs(at) and "insp_attn" in specs(at)
        next(b for b in at.button if b.key == "insp_step_ask").click().run()
        ok(at)
        assert {"insp_step_own", "insp_step_other"} <= set(specs(at))
    finally:
        sp.EAGER_TOKENS = old


def test_pools_strip_beside_a_recall_checkpoint_with_the_fact_marked_in_every_row():
    at = run_page("indexer_pools", weights="trained")
    ok(at)
    text = long_prompt(1)                                       # the page's default: the second long story
    fact = fact_position(text)
    charts = specs(at)
    for key in ("pool_strip", "pool_step_other"):
        box = dashed(charts[key])
        assert len(box) == 1 and box[0]["x0"] < fact < box[0]["x1"]
        notes = [a["text"] for a in charts[key]["layout"]["annotations"]]
        assert any(n.startswith(f"fact E{fact}: ") for n in notes), notes
    assert training_clause(record("unaided"), short=True) in " ".join(c.value for c in at.caption)


def test_the_text_model_s_far_fact_panel_is_folded_under_its_result():
    at = run_page("attention_shares", weights="trained")
    ok(at)
    far = record("text")["measured"]["recall_far"]
    title = f"Text model: the fact is not reached ({100 * far:.0f}% far recall, a guess 9%)"
    assert title in [e.label for e in at.expander]
    pair_charts = sum(1 for c in at.get("plotly_chart") if c.key.startswith("sh_pair_pair_"))
    assert pair_charts == len(SHIPPED)  # the summary, once


def test_reuse_comparison_beside_a_recall_checkpoint_names_the_fact():
    at = run_page("recurrence", weights="trained", layer=9)
    ok(at)
    charts = specs(at)
    assert {"rec_step_own", "rec_step_other"} <= set(charts)
    labels = [x for t in charts["rec_step_other"]["data"] for x in t["x"]]
    fact = fact_position(long_prompt())
    assert any(x.startswith(f"E{fact}:") and x.endswith("(the fact)") for x in labels), labels
    gaps = [c.value for c in at.caption if "largest difference" in c.value]
    assert gaps, "the recall side's own query weighs its entries"


def test_ablation_runs_beside_a_recall_checkpoint():
    at = run_page("ablation", weights="trained", stories=3, natural=512, configs="everything on")
    ok(at)
    at.button(key="abl_run").click().run()
    ok(at)
    keys = set(specs(at))
    assert {"abl_chart_text", "abl_chart_unaided"} <= keys
    assert training_clause(record("unaided"), short=True) in " ".join(c.value for c in at.caption)
