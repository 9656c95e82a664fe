"""AppTest for the Figure 3 journey (Figure 3, layer map, CSA2 modes, attention shares, recurrence): each page
renders on CPU with the random tiny weights, its main controls change what is shown, the URL reopens a view, bad
input gives a message. The home page and the weights choice are in tests/app/test_home.py."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from tests.conftest import ROOT
from ui.nav import stems
from ui.text import as_shown

PAGES = stems(section="Figure 3")


def app(page: str, **params) -> AppTest:
    at = AppTest.from_file(str(ROOT / "pages" / f"{page}.py"), default_timeout=180)
    at.query_params["weights"] = "random"   # deterministic, and present before the trained ones ship
    for k, v in params.items():
        at.query_params[k] = str(v)
    return at.run()


def no_errors(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


def texts(at: AppTest) -> str:
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption] + [s.value for s in at.subheader]
    parts += [x.value for x in at.info] + [x.value for x in at.success] + [x.value for x in at.warning]
    return "\n".join(parts)


@pytest.mark.parametrize("page", PAGES)
def test_page_renders(page):
    at = app(page)
    no_errors(at)
    assert at.title


# ---- Figure 3 ------------------------------------------------------------------------------------------
def stepper(at: AppTest, delta: int) -> None:
    """Back (-1) / Next (+1) on Figure 3's stepper (a pagination widget: the browser counts the clicks)."""
    p = next(w for w in at.get("pagination") if w.key == "fig3_stepper")
    p.set_value(p.value + delta).run()


def test_figure3_back_next_and_url():
    at = app("figure3")
    no_errors(at)
    assert at.subheader[0].value.startswith("1. Start with the job")
    assert at.get("pagination")[0].value == 1
    stepper(at, 1)
    stepper(at, 1)
    assert at.subheader[0].value.startswith("3. Same information")
    assert at.query_params["step"] == ["3"] or at.query_params["step"] == "3"
    stepper(at, -1)
    assert at.subheader[0].value.startswith("2. Why change attention")
    assert "sparse attention (top-k)" in list(at.table[0].value["name in the report"])
    # the step that reaches the line opens the line's box
    at5 = app("figure3", step=5)
    assert at5.subheader[0].value.startswith("5. The line")
    stepper(at5, 1)
    stepper(at5, -1)
    assert at5.selectbox(key="fig3_box").value == "line"


def test_figure3_a_step_opens_its_own_box_or_closes_the_open_one():
    """Next from the vision step used to leave the vision box (and its panel) open on MoE, Engram, mHC and the
    pool; a step picked from the list after the drafter's left the drafter open."""
    at = app("figure3", step=7)
    box = lambda: at.selectbox(key="fig3_box").value  # noqa: E731
    vision_panel = lambda: any("Inside the vision box" in s.value for s in at.subheader)  # noqa: E731
    stepper(at, 1)
    assert at.subheader[0].value.startswith("8. Images") and box() == "vision" and vision_panel()
    for step, opened in ((9, "moe:0"), (10, "engram:1"), (11, "mhc:encoder"), (12, "attn:20"), (13, "drafter"),
                         (14, "(none)")):
        stepper(at, 1)
        no_errors(at)
        assert at.subheader[0].value.startswith(f"{step}. ") and box() == opened, step
        assert not vision_panel(), step
    at.selectbox(key="fig3_step").set_value(12).run()
    assert box() == "drafter"
    at.selectbox(key="fig3_step").set_value(2).run()                 # step 3 names no box: the drafter closes
    assert box() == "(none)" and "No box open" in texts(at)
    q = at.query_params
    assert q["step"] in ("3", ["3"]) and "box" not in q              # the URL says the same


def test_figure3_drawing_follows_the_config_and_numbering():
    at = app("figure3", compact=0)                                       # every layer drawn
    opts = at.selectbox(key="fig3_box").options
    assert sum(o.endswith("(Reuse r1)") for o in opts) == 15            # the released decoder
    assert any(o.startswith("layer 14: attention") for o in opts)
    at.radio(key="numbering_choice").set_value("1").run()
    opts1 = at.selectbox(key="fig3_box").options
    assert any(o.startswith("layer 40: attention") for o in opts1) and not any(o.startswith("layer 0:") for o in opts1)
    assert "numbered from 1" in texts(at)
    at.radio(key="fig3_config").set_value("running").run()
    opts2 = at.selectbox(key="fig3_box").options
    assert not any(o.startswith("layer 13:") for o in opts2)              # 12 layers, 1-based
    at.toggle(key="fig3_compact").set_value(True).run()
    no_errors(at)
    assert any("layers 4, 5, 6" in o for o in at.selectbox(key="fig3_box").options)


def test_figure3_live_numbers_change_with_the_box():
    at = app("figure3", config="running", box="attn:2", compact=0)     # every layer its own box
    no_errors(at)
    m = {x.label: x.value for x in at.metric}
    assert m["entries read"] == "16" and int(m["entries stored"]) > 16       # Full reads a subset
    at.selectbox(key="fig3_box").set_value("attn:0").run()
    assert {x.label: x.value for x in at.metric}.get("entries stored") == "none"   # window-only layer
    at.selectbox(key="fig3_box").set_value("moe:5").run()
    assert "Experts routed for this row" in texts(at)
    at.selectbox(key="fig3_box").set_value("engram:1").run()
    assert "Gate per mHC stream" in texts(at)
    for bid in ("mhc:decoder", "line", "head", "drafter", "vision"):
        at.selectbox(key="fig3_box").set_value(bid).run()
        no_errors(at)


def test_figure3_bad_url_gives_messages():
    at = app("figure3", step="seven", box="attn:99", config="huge")
    no_errors(at)
    warn = as_shown(" ".join(w.value for w in at.warning))
    assert "step" in warn and "attn:99" in warn and "huge" in warn
    assert at.subheader[0].value.startswith("1.")
    at = app("figure3", step=999)
    no_errors(at)
    assert "outside" in " ".join(w.value for w in at.warning)


# ---- Layer map ---------------------------------------------------------------------------------------------
def test_layer_map_counts_equal_the_seed_table():
    at = app("layer_map")
    no_errors(at)
    full = at.table[0].value
    assert list(full["count"]) == [20, 20, 40]
    assert list(full["layers"])[:2] == ["2 window-only + 3x(1 Full + 5 Reuse)",
                                        "(1 Full + 3 Reuse) + 4x(1 Reindex + 3 Reuse)"]
    tiny = at.table[1].value
    assert list(tiny["count"]) == [6, 6, 12]
    assert "1 and 14 counting from 0" in texts(at) and "2 and 15 counting from 1" in texts(at)


def test_layer_map_numbering_and_table_switch():
    at = app("layer_map")
    table = at.dataframe[-1].value
    assert len(table) == 40 and table.loc[3, "KV source"] == "2"
    at.radio(key="numbering_choice").set_value("1").run()
    assert at.dataframe[-1].value.loc[3, "KV source"] == "3"
    at.radio(key="lm_table").set_value("running").run()
    assert len(at.dataframe[-1].value) == 12
    at.selectbox(key="lm_layer").set_value(6).run()
    assert "Layer 7 (decoder, Full)" in texts(at)


def test_layer_map_bad_layer_param():
    at = app("layer_map", layer=99, table="nope")
    no_errors(at)
    warn = as_shown(" ".join(w.value for w in at.warning))
    assert "layer = ‘99’" in warn and "nope" in warn


# ---- CSA2 modes ---------------------------------------------------------------------------------------------
def test_csa2_modes_counts_from_the_trace():
    at = app("csa2_modes")
    no_errors(at)
    modes = at.table[0].value
    assert list(modes["mode"]) == ["Full", "Reuse", "Reindex"]
    assert list(modes["prepared global entries"]) == ["make them", "keep them", "keep them"]
    assert list(modes["selected locations"]) == ["choose them", "keep the last choice", "choose again"]
    per_layer = at.dataframe[0].value
    assert len(per_layer) == 12
    assert (per_layer["index scores"] != "not computed").sum() == 4          # 2 Full + 2 Reindex in tiny
    assert per_layer["selection"].str.contains("identical").sum() == 6       # 6 Reuse layers
    checks = at.dataframe[1].value
    assert set(checks["agree"]) == {"yes"}
    assert "read 16" in texts(at)                                           # Full reads a selected subset


def test_csa2_modes_empty_prompt_gives_a_message():
    at = app("csa2_modes")
    sb = at.selectbox(key="live_sample")
    sb.set_value(sb.options.__len__() - 1).run()      # "Your own text"
    at.text_area(key="live_text").input("   ").run()
    no_errors(at)
    assert any("empty" in w.value for w in at.warning)


# ---- Attention shares -----------------------------------------------------------------------------------------
def test_share_sliders_read_14_and_28():
    at = app("attention_shares")
    no_errors(at)
    metrics = lambda: [m.value for m in at.metric]  # noqa: E731
    assert metrics()[:2] == ["14", "28"]
    at.slider(key="toy_0").set_value(50).run()
    assert metrics()[0] == "20"
    at.slider(key="toy_0").set_value(80).run()
    at.slider(key="toy_1").set_value(30).run()
    assert metrics()[:2] == ["14", "24"]
    at.slider(key="toy_1").set_value(10).run()
    assert metrics()[:2] == ["14", "28"]


def test_share_controls_switch_layer_and_reveal_the_answer():
    at = app("attention_shares")
    cap = lambda: next(c.value for c in at.caption if c.value.startswith("Query at position"))  # noqa: E731
    assert "Layer 2 is Full" in cap()
    at.selectbox(key="sh_layer").set_value(0).run()
    assert "Layer 0 is SWA" in cap() and "0 compressed entries" in cap()
    at.slider(key="sh_pos").set_value(10).run()
    assert cap().startswith("Query at position 10")
    assert at.query_params["pos"] in ("10", ["10"])
    assert not at.success
    at.toggle(key="sh_answer").set_value(True).run()
    assert "asks its own question" in at.success[0].value
    assert "the same entries in the same order (checked)" in texts(at)


def test_share_url_out_of_range():
    at = app("attention_shares", layer=50, head=-1, pos="x", toy0=140)
    no_errors(at)
    warn = as_shown(" ".join(w.value for w in at.warning))
    for name in ("layer = ‘50’", "head = ‘-1’", "pos = ‘x’", "toy0 = ‘140’"):
        assert name in warn


# ---- Recurrence -----------------------------------------------------------------------------------------------
def test_recurrence_checks_real_tensors():
    at = app("recurrence")
    no_errors(at)
    m = {x.label: x.value for x in at.metric}
    assert m["of them the same storage"] == "0" and int(m["tensors in both layers"]) > 0
    assert "distinct storages" in at.success[0].value
    assert "identical picks on every row" in texts(at)
    at.selectbox(key="rec_layer").set_value(9).run()
    assert "entries from layer 6" in at.selectbox(key="rec_layer").format_func(9)
    no_errors(at)


def test_idle_entries_are_not_called_different_shares():
    """On the shipped text model the decoder's Reuse layers and their pickers give the entries no weight (they read
    only their windows): the pages say so instead of calling a gap of 0.000 'different shares'."""
    at = app("recurrence", layer=7, weights="trained")
    no_errors(at)
    body = texts(at)
    assert "Neither it nor layer 6 gives those entries any weight" in body and "other shares than" not in body
    at = app("recurrence", layer=3, weights="trained")        # an encoder Reuse layer: its own query at work
    assert "other shares than layer 2's" in texts(at) and "Neither it nor" not in texts(at)
    sh = app("attention_shares", reuse=9, pos=40, weights="trained")
    no_errors(sh)
    assert "Neither layer gives them any weight" in texts(sh)


def test_recurrence_non_reuse_layer_param():
    at = app("recurrence", layer=2)
    no_errors(at)
    assert any("not a Reuse layer" in w.value for w in at.warning)


def test_url_reopens_the_same_view():
    at = app("figure3", config="running", compact=1, step=4, box="attn:2", numbering=1)
    no_errors(at)
    assert at.toggle(key="fig3_compact").value is True
    assert at.radio(key="fig3_config").value == "running"
    assert at.subheader[0].value.startswith("4. The left half")
    assert at.selectbox(key="fig3_box").value == "attn:2"
    assert at.selectbox(key="fig3_box").format_func("attn:2").startswith("layer 3")   # 1-based
    sh = app("attention_shares", layer=7, head=2, pos=40, toy0=30)
    no_errors(sh)
    assert (sh.selectbox(key="sh_layer").value, sh.selectbox(key="sh_head").value, sh.slider(key="sh_pos").value) \
        == (7, 2, 40)
    assert sh.metric[0].value == "24"      # 0.3 x 10 + 0.7 x 30
