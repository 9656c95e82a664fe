"""AppTest for the Memory journey: the cache calculator, prefill vs decode and compare designs render on CPU
with the random tiny weights, inputs change the results, the URL reopens a view and bad values give a message,
and the engine check shows formula bytes equal to measured bytes."""

from __future__ import annotations

import json
import math

import pytest
from streamlit.testing.v1 import AppTest

from tests.conftest import run_page
from ui.text import as_shown


def app(page: str, **params) -> AppTest:
    return run_page(page, **params)


def no_errors(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


def frame(at: AppTest, column: str):
    """The first dataframe shown with this column (st.dataframe keys are not searchable in AppTest)."""
    for d in at.dataframe:
        if column in d.value.columns:
            return d.value
    raise AssertionError(f"no dataframe with a {column!r} column")


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


@pytest.mark.parametrize("page", ["cache_calculator", "prefill_decode", "compare_designs"])
def test_page_renders(page):
    at = app(page)
    no_errors(at)
    assert at.title and not at.error


def test_calculator_seed_example_and_sharing():
    at = app("cache_calculator", preset="teaching", context=4096)
    no_errors(at)
    assert metrics(at)["HBM (accelerator)"] == "8.00 MiB"   # 16 x 4,096 x 128 x 8 bits
    at.number_input(key="cc_group").set_value(4).run()
    no_errors(at)
    assert metrics(at)["HBM (accelerator)"] == "2.00 MiB"
    assert at.query_params["group"] in (["4"], "4")               # the input is in the URL
    rows = frame(at, "entries_rule")
    assert int(rows["bytes"].sum()) == 2 * 2 ** 21 * 2 // 2        # HBM row + persistent row, 2 MiB each
    assert set(rows["memory"]) == {"HBM", "persistent"}
    at.number_input(key="cc_group").set_value(20).run()            # more than the 16 layers: refused, kept at 4
    assert not at.error and any("larger than the 16 layers" in w.value and "not applied" in w.value
                                for w in at.warning)
    assert at.number_input(key="cc_group").value == 4 and metrics(at)["HBM (accelerator)"] == "2.00 MiB"
    # from a link the same pair is refused too, with the URL's warning and the default group
    at = app("cache_calculator", preset="teaching", context=4096, group=20)
    assert not at.error and any("larger than layers" in as_shown(w.value) for w in at.warning)
    assert at.number_input(key="cc_group").value == 1


def test_calculator_url_opens_v41_and_rejects_bad_values():
    at = app("cache_calculator", preset="v4.1-flash", context=1048576, bits="6", batch="lots")
    no_errors(at)
    warns = as_shown(" ".join(w.value for w in at.warning))
    assert "bits=6 must be one of 4, 8, 16, 32" in warns and "batch='lots' is not a whole number" in warns
    m = metrics(at)
    assert m["Per further token"] == "890.0 B"
    assert m["HBM (accelerator)"].endswith("MiB")
    before = m["HBM (accelerator)"]
    at.selectbox(key="cc_bits").set_value(8).run()
    assert metrics(at)["HBM (accelerator)"] != before
    assert "replay" in " ".join(x.value for x in at.markdown).lower()


def test_calculator_check_button_shows_equal_bytes():
    at = app("cache_calculator", preset="v4.1-flash")
    at.number_input(key="cc_checkn").set_value(45).run()
    at.button(key="cc_check").click().run()
    no_errors(at)
    assert at.success and at.success[0].value.startswith("Equal")
    table = frame(at, "measured bytes")
    assert (table["formula bytes"] == table["measured bytes"]).all()
    assert (table["difference"] == 0).all() and table["measured bytes"].iloc[-1] > 0


def test_prefill_decode_round_and_measurement():
    at = app("prefill_decode", tread=40, twritten=2)
    no_errors(at)
    m = metrics(at)
    assert m["Read : written"] == "100 : 1"
    assert m["Active / prompt token"] == "7.9B" and m["Active / generated token"] == "16.1B"
    assert m["Stored in the backbone"] == "552B"
    at.number_input(key="pd_written").set_value(1000).run()
    assert metrics(at)["Read : written"] == "10 : 1"
    at.button(key="pd_measure").click().run()
    no_errors(at)
    table = frame(at, "ms per token")
    assert list(table["tokens"]) == [40, 2] and (table["seconds"] > 0).all()


def test_compare_designs_context_and_url():
    at = app("compare_designs", designs="v4.1-flash,gqa,bogus")
    no_errors(at)
    assert any("bogus" in w.value for w in at.warning)
    table = frame(at, "HBM bytes")
    assert list(table["design"]) == ["DeepSeek-V4.1-Flash", "Plain per-layer K/V (GQA, 80 layers)"]
    before = list(table["HBM bytes"])
    at.number_input(key="cd_ctx").set_value(4096).run()
    after = list(frame(at, "HBM bytes")["HBM bytes"])
    assert after[1] == 4096 * 327_680 and after != before
    shares = at.table[0].value
    assert "update rule (weights)" in shares.columns and shares.loc["Plain per-layer K/V (GQA, 80 layers)",
                                                                     "prepared data"] == "No"


def test_calculator_opens_on_v41_at_128k_and_a_change_of_design_keeps_the_context():
    at = app("cache_calculator")
    no_errors(at)
    assert at.selectbox(key="cc_preset").value == "v4.1-flash"
    assert at.number_input(key="cc_context").value == 131072
    assert "890 B per further token" in " ".join(m.value for m in at.markdown)    # the why-this-size sum
    shown = {n.key for n in at.number_input}
    assert not shown & {"cc_layers", "cc_numbers", "cc_ratio", "cc_group"}      # V4.1 sets these itself
    said = " ".join(c.value for c in at.caption)
    assert "40 layers" in said and "512 numbers per entry" in said
    at.selectbox(key="cc_preset").set_value("v4-flash").run()
    no_errors(at)
    assert at.number_input(key="cc_context").value == 131072                     # no jump to 1,048,576
    assert any("kept your context (131,072 tokens)" in t.value for t in at.toast)
    assert "131,072 tokens" in at.metric[0].proto.help
    at.number_input(key="cc_context").set_value(65536).run()
    at.selectbox(key="cc_preset").set_value("teaching").run()
    assert at.number_input(key="cc_context").value == 65536
    at.run()                                                                      # the note was said once
    assert at.number_input(key="cc_context").value == 65536 and not at.toast


def test_calculator_shows_the_change_when_an_input_moves():
    at = app("cache_calculator")
    assert all(m.proto.delta == "" for m in at.metric)                           # nothing moved yet
    before = metrics(at)["HBM (accelerator)"]
    at.number_input(key="cc_context").set_value(262144).run()
    no_errors(at)
    m = {x.label: x for x in at.metric}
    assert m["HBM (accelerator)"].value != before
    # twice the context: the growing stores double, the fixed windows do not, so HBM grows by under 2x
    assert m["HBM (accelerator)"].proto.delta.startswith("+") and "MiB" in m["HBM (accelerator)"].proto.delta
    assert m["Per further token"].proto.delta == ""                              # the same bytes per further token
    assert any("the context (131,072 to 262,144)" in c.value for c in at.caption)
    at.run()                                                                      # a rerun without a change keeps it
    assert {x.label: x for x in at.metric}["HBM (accelerator)"].proto.delta.startswith("+")
    at.number_input(key="cc_context").set_value(131072).run()                    # back: the arrow points down
    assert {x.label: x for x in at.metric}["HBM (accelerator)"].proto.delta.startswith("-")


@pytest.mark.parametrize("key,value", [("cc_context", 10 ** 15), ("cc_context", 0), ("cc_batch", 5000)])
def test_calculator_says_when_a_typed_value_is_out_of_range(key, value):
    at = app("cache_calculator")
    was = at.number_input(key=key).value
    at.number_input(key=key).set_value(value).run()
    no_errors(at)
    assert at.number_input(key=key).value == was                                 # kept, not lost
    assert any(f"{value:,} is outside" in w.value and f"still use {was:,}" in w.value for w in at.warning)
    at.number_input(key=key).set_value(was + 1).run()                            # a value in range clears it
    assert not at.warning


def test_calculator_says_when_a_typed_number_fell_to_its_first_digits():
    at = app("cache_calculator", preset="v4.1-flash", context=131072)
    at.number_input(key="cc_context").set_value(1).run()       # what the browser sends for "1e9"
    no_errors(at)
    assert any("1e9" in w.value and "it was 131,072" in w.value for w in at.warning)
    at.number_input(key="cc_context").set_value(1000000).run()
    assert not at.warning


def test_one_token_is_said_in_the_singular():
    at = app("compare_designs", ctx=1, designs="v4.1-flash,gqa")
    no_errors(at)
    title = json.loads(next(c for c in at.get("plotly_chart") if c.key == "cd_bar").proto.spec)["layout"]["title"]
    assert title["text"] == "Cache on the accelerator at 1 token"
    assert "HBM at 1 token" in frame(at, "HBM bytes").columns
    at = app("cache_calculator", preset="v4.1-flash", context=1)
    title = json.loads(next(c for c in at.get("plotly_chart") if c.key == "cc_kind").proto.spec)["layout"]["title"]
    assert title["text"].endswith(" at 1 token") and "of 1 token" in at.metric[0].proto.help


def test_memory_charts_read_bytes_in_binary_units_and_keep_legends_clear():
    from lessons.cache_calculator import calculate
    from lessons.designs import COMPARE_DEFAULT, DESIGNS, build, defaults, with_context
    from ui.figures import ROLE_COLORS
    from ui.figures_memory import EXTRA_ROLE_COLORS, byte_ticks, compare_bar, kind_bar, layer_bar

    assert byte_ticks([8 * 2 ** 20])["ticktext"] == ["0", "2 MiB", "4 MiB", "6 MiB", "8 MiB"]   # not Plotly's "8M"
    assert byte_ticks([24 * 2 ** 10, 900 * 2 ** 20], log=True)["ticktext"] == ["4 KiB", "16 KiB", "64 KiB", "256 KiB",
                                                                                "1 MiB", "4 MiB", "16 MiB", "64 MiB",
                                                                                "256 MiB", "1 GiB"]
    hbm = calculate(build("v4.1-flash"), defaults("v4.1-flash")).hbm
    compared = [(k, calculate(build(k, with_context(k, 1 << 20)), with_context(k, 1 << 20)).hbm)
                for k in COMPARE_DEFAULT]
    names = {i: str(i) for i in hbm.by_layer}
    for axis, log in ((kind_bar(hbm, "t").layout.xaxis, False), (layer_bar(hbm, names, "t", True).layout.yaxis, True),
                      (compare_bar(compared, "t", True).layout.yaxis, True)):
        assert all(t == "0" or t.endswith(("KiB", "MiB", "GiB")) for t in axis.ticktext), axis.ticktext
        assert all(v == 0 or math.log2(v).is_integer() for v in axis.tickvals) or not log
    legend = layer_bar(hbm, names, "t", True).layout.legend            # under the axis title, not on it
    assert (legend.yref, legend.y, legend.yanchor) == ("container", 0, "bottom")
    colors = {**ROLE_COLORS, **EXTRA_ROLE_COLORS}
    roles = sorted({r for _, fn, k in DESIGNS.values() for r in fn(k).roles})
    assert len({colors[r].lower() for r in roles}) == len(roles)     # one colour per role in the strip's legend


def test_compare_designs_block_layers_follow_the_numbering():
    from lessons.designs import DESIGNS, build, with_context
    from ui.figures_memory import role_strip

    looped = [k for k in DESIGNS if any(r.startswith("Block layer") for r in build(k, with_context(k, 1024, 1)).roles)]
    assert looped
    d = build(looped[0], with_context(looped[0], 1024, 1))
    names0 = {t.name for t in role_strip([d], False).data}
    names1 = {t.name for t in role_strip([d], True).data}
    assert "Block layer 0" in names0 and "Block layer 0" not in names1 and "Block layer 1" in names1
