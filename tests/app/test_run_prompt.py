"""AppTest for the "Run a prompt" pages: prompt inspector, indexer pools, DSpark draft & verify, ablation lab.
Each renders on CPU with the random tiny weights; stepping changes what is shown; a long prompt works; a
rejected draft is shown as rejected; bad input (empty prompt, markup and control characters, out-of-range URL
values) gives a message, never a traceback."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from model.shipped import shipped_weights
from tests.conftest import run_page
from ui.text import as_shown

HOSTILE = "<script>alert('x')</script> <b>bold</b> **star** \x07\x1b[31m \u202eevil\u202c ünï 🙂 `code`"


def app(page: str, **params) -> AppTest:
    return run_page(page, timeout=300, **params)


def no_errors(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


def markup_texts(at: AppTest) -> list[str]:
    """Everything rendered as Markdown (where markup would be interpreted)."""
    out = [m.value for m in at.markdown] + [c.value for c in at.caption] + [s.value for s in at.subheader]
    out += [x.value for x in at.info] + [x.value for x in at.warning] + [x.value for x in at.error]
    out += [x.value for x in at.success]
    return out


def step(at: AppTest, key: str, delta: int) -> AppTest:
    """One click on a stepper's Back (-1) or Next (+1) arrow (ui.url.stepper, a pagination widget)."""
    p = next(w for w in at.get("pagination") if w.key == key)
    return p.set_value(p.value + delta).run()


def warnings(at: AppTest) -> str:
    return as_shown("\n".join([w.value for w in at.warning] + [e.value for e in at.error]))


# ---- prompt inspector ------------------------------------------------------------------------------------------

def test_inspector_renders_and_steps_layers():
    at = app("inspector")
    no_errors(at)
    first = at.subheader[0].value
    assert first.startswith("Layer 6 · Full")           # default: the first decoder layer
    step(at, "insp_layer_step", 1)
    no_errors(at)
    assert at.subheader[0].value.startswith("Layer 7 · Reuse") and at.select_slider(key="insp_layer").value == 7
    step(at, "insp_layer_step", -1)
    step(at, "insp_layer_step", -1)
    assert at.subheader[0].value.startswith("Layer 5 · Reuse · encoder")
    assert at.query_params["layer"] in ("5", ["5"])
    step(at, "insp_token_step", -1)            # the token stepper moves the query token
    no_errors(at)
    assert "prompt token" in at.subheader[0].value


def test_inspector_url_layer_and_one_based_numbering():
    at = app("inspector", layer=2, token=1, numbering=1)
    no_errors(at)
    assert at.subheader[0].value.startswith("Layer 3 · Full") and "token 1" in at.subheader[0].value


def test_inspector_bad_url_values_warn():
    at = app("inspector", layer=99, token=-4)
    no_errors(at)
    w = warnings(at)
    assert "layer = ‘99’" in w and "token = ‘-4’" in w
    assert at.subheader[0].value.startswith("Layer 6")
    at2 = app("inspector", layer="abc")
    no_errors(at2)
    assert "not a whole number" in warnings(at2)


def test_inspector_long_prompt_bounded_shows_missing_decoder_rows():
    at = app("inspector", sample=5, gen=2)          # the ~300-token story, past the 32-token window
    no_errors(at)
    assert any("decoder records for prompt tokens" in m.value for m in at.markdown)   # in the run's notes
    at.slider(key="insp_token").set_value(3).run()
    no_errors(at)
    assert "bounded prefill the decoder runs only over the last" in warnings(at)
    at.slider(key="insp_token").set_value(at.slider(key="insp_token").max).run()   # a generated token
    no_errors(at)
    assert "generated token" in at.subheader[0].value
    at.selectbox(key="insp_quantity").set_value("attention entropy").run()
    no_errors(at)


def test_inspector_empty_and_hostile_prompts():
    at = app("inspector")
    at.text_area(key="insp_prompt").input("   ").run()
    no_errors(at)
    assert "empty" in warnings(at)
    at.text_area(key="insp_prompt").input(HOSTILE).run()
    no_errors(at)
    assert at.subheader and not any("<script>" in t or "<b>bold" in t for t in markup_texts(at))
    from model.tokenizer import load_tokenizer
    from ui.figures import show_token

    tok = load_tokenizer(shipped_weights("text") / "tokenizer.json")
    ids = tok.encode(HOSTILE).ids
    assert at.code[0].value == show_token(tok.decode([ids[-1]], skip_special_tokens=False))
    bell = next(i for i, t in enumerate(ids) if "\x07" in tok.decode([t], skip_special_tokens=False))
    at.slider(key="insp_token").set_value(bell).run()     # the control character shows as visible text
    no_errors(at)
    assert "\\x07" in at.code[0].value


# ---- indexer pools ----------------------------------------------------------------------------------------------

def test_pools_page_table_and_live_sliders():
    at = app("indexer_pools", sample=5)              # ~300 tokens: more entries than the 64-entry pool
    no_errors(at)
    table = at.dataframe[0].value
    assert list(table["layer"]) == [8, 10]
    assert (table["rows where the pool excludes entries"] > 0).all()
    assert any("equals the model's own selection" in c.value for c in at.caption)
    before = table["mean recall"].tolist()
    at.slider(key="pool_nb").set_value(at.slider(key="pool_nb").max).run()   # the pool holds every entry
    no_errors(at)
    after = at.dataframe[0].value
    assert after["mean recall"].tolist() == [1.0, 1.0] and after["mean recall"].tolist() != before
    assert (after["mean attention mass dropped"] == 0).all()
    assert at.query_params["pool"] not in (None, "")


def test_pools_bad_url_and_empty_prompt():
    at = app("indexer_pools", sample=5, layer=3, token=1)
    no_errors(at)
    w = warnings(at)
    assert "not a Reindex layer" in w and "not a query row" not in w   # exact mode: token 1 is a query row
    at.text_area(key="pool_prompt").input("").run()
    no_errors(at)
    assert "empty" in warnings(at)


# ---- DSpark --------------------------------------------------------------------------------------------------

def test_dspark_lists_the_longest_draft_once():
    at = app("dspark", draft=4)                          # a link naming the longest draft by its number
    no_errors(at)
    dl = at.selectbox(key="ds_dl")
    assert dl.value == "max" and not any("URL parameter" in w.value for w in at.warning)
    shown = [dl.format_func(o) for o in dl.options]
    assert len(shown) == len(set(shown)) and sum(s.startswith("4") for s in shown) == 1, shown


def test_dspark_step_shows_rejected_draft():
    at = app("dspark")
    no_errors(at)
    at.button(key="ds_start").click().run()
    no_errors(at)
    assert at.button(key="ds_step").disabled is False
    at.button(key="ds_step").click().run()
    no_errors(at)
    steps = at.dataframe[-1].value
    verdicts = list(steps["verdict"])
    # one row per draft, then the target's own token (the correction after a rejection, or the bonus)
    assert verdicts[-1].startswith(("correction", "bonus"))
    if "REJECTED" in verdicts:                           # a random drafter: almost always
        j = verdicts.index("REJECTED")
        assert all(v == "accepted" for v in verdicts[:j]) and verdicts[-1].startswith("correction")
        assert all(v.startswith("not checked") for v in verdicts[j + 1:-1])
        assert any("REJECTED" in e.value for e in at.warning) and not at.error   # the rule at work, not a fault
        cells = steps.to_numpy().ravel().tolist()
        assert "None" not in map(str, cells) and "–" in cells           # never-checked cells read as a dash
        rolled = {m.label: m.value for m in at.metric}["rows rolled back"]
        assert int(rolled) == len(verdicts) - 1 - j       # the rejected draft and every draft after it
    else:
        assert all(v == "accepted" for v in verdicts[:-1]) and verdicts[-1].startswith("bonus")
    at.button(key="ds_step").click().run()
    no_errors(at)
    assert at.slider(key="ds_step_view").value == 2


@pytest.mark.slow
def test_dspark_whole_run_greedy_identical():
    at = app("dspark", gen=4)
    at.button(key="ds_run").click().run()
    no_errors(at)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Identical output"] == "yes"
    assert int(metrics["Target passes (DSpark)"]) <= int(metrics["Target passes (plain)"])


# ---- ablation lab ------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_ablation_lab_runs_two_configurations():
    at = app("ablation")
    no_errors(at)
    assert "Not run yet" in "\n".join(c.value for c in at.caption)
    at.multiselect(key="abl_configs").set_value(["full model", "window only"])
    at.selectbox(key="abl_stories").set_value(3)
    at.selectbox(key="abl_natural").set_value(512)
    at.selectbox(key="abl_cost").set_value(0)
    at.run()
    at.button(key="abl_run").click().run()
    no_errors(at)

    def results():
        return next(d.value for d in at.dataframe if "entries_read" in d.value.columns)
    table = results()
    assert list(table["configuration"]) == ["full model", "window only"]
    assert table.loc[1, "entries_read"] == 0 and table.loc[0, "Δ loss"] == 0
    heads = [h.value for h in at.subheader]              # the results right under the button, the panel after
    assert heads.index("Side by side") < next(i for i, h in enumerate(heads) if h.startswith("Far fact"))
    at.run()                                             # results stay without pressing the button again
    assert list(results()["configuration"]) == ["full model", "window only"]


# ---- look-back heads ------------------------------------------------------------------------------------------------

def _said(at: AppTest) -> str:
    return "\n".join(m.value for m in at.markdown)


@pytest.mark.skipif(not (shipped_weights("text") / "model.safetensors").exists(),
                    reason="the shipped tiny weights are not present")
def test_lookback_heads_page_follows_the_gap_past_the_window():
    """On the shipped text model a head looks back while the first copy is inside the window; moving the gap slider
    past the window says so and finds none; the head picker starts on the strongest head, its button returns there."""
    at = app("lookback_heads", weights="trained")
    no_errors(at)
    assert "inside the 32-row window" in _said(at) and "The strongest look-back head is layer" in _said(at)
    metrics = {m.label: m.value for m in at.metric}
    assert float(metrics["Strongest look-back share"]) >= 0.4
    assert set(metrics) >= {"Copied, second time", "Right, first time"}
    best = (at.selectbox(key="lb_layer").value, at.selectbox(key="lb_head").value)
    assert f"layer {best[0]}, head {best[1]}" in _said(at)
    assert len(at.get("plotly_chart")) == 5 and at.dataframe[-1].value.shape[0] == 11
    assert "At the output the second time gives the right next token" in _said(at)
    at.selectbox(key="lb_head").set_value((best[1] + 1) % 4).run()
    at.button(key="lb_best").click().run()
    assert (at.selectbox(key="lb_layer").value, at.selectbox(key="lb_head").value) == best
    at.slider(key="lb_gap").set_value(100).run()
    no_errors(at)
    assert "beyond the 32-row window" in _said(at) and "No head looks back" in _said(at)
    assert at.query_params["gap"] == "100"
    # the sweep: one click, one more chart; kept while the span stays, gone for another span
    assert "Press the button" in "\n".join(c.value for c in at.caption)
    at.button(key="lb_sweep").click().run()
    no_errors(at)
    assert len(at.get("plotly_chart")) == 6 and "beyond it, up to 0.0" in _said(at)
    at.slider(key="lb_gap").set_value(8).run()
    assert len(at.get("plotly_chart")) == 6                   # the gap is swept anyway: the sweep stays
    at.slider(key="lb_span").set_value(10).run()
    assert len(at.get("plotly_chart")) == 5


def test_lookback_heads_page_takes_the_readers_text_and_refuses_too_little():
    at = app("lookback_heads", source="own", prompt=HOSTILE)
    no_errors(at)
    assert at.text_area(key="lb_text").value == HOSTILE
    assert at.code[0].value.startswith("<script>")                # the span: the text's first tokens, as plain code
    assert not any("<script>" in t or "**star**" in t for t in markup_texts(at))
    at.text_area(key="lb_text").set_value("Hi").run()
    no_errors(at)
    assert "the span needs at least 4" in warnings(at)
    at.text_area(key="lb_text").set_value("   ").run()
    assert "empty" in warnings(at)
    at.radio(key="lb_source").set_value("passage").run()
    no_errors(at)
    assert not at.warning and "prompt" not in at.query_params
