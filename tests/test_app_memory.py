"""AppTest for the Memory journey: the cache calculator, prefill vs decode and compare designs render on CPU
with the random tiny weights, inputs change the results, the URL reopens a view and bad values give a message,
and the engine check shows formula bytes equal to measured bytes."""

from __future__ import annotations

import pytest
from conftest import run_page
from streamlit.testing.v1 import AppTest

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
    at = app("cache_calculator")
    no_errors(at)
    assert metrics(at)["HBM (accelerator)"] == "8.00 MiB"   # 16 x 4,096 x 128 x 8 bits
    at.number_input(key="cc_group").set_value(4).run()
    no_errors(at)
    assert metrics(at)["HBM (accelerator)"] == "2.00 MiB"
    assert at.query_params["group"] in (["4"], "4")               # the input is in the URL
    rows = frame(at, "entries_rule")
    assert int(rows["bytes"].sum()) == 2 * 2 ** 21 * 2 // 2        # HBM row + persistent row, 2 MiB each
    assert set(rows["memory"]) == {"HBM", "persistent"}
    at.number_input(key="cc_group").set_value(20).run()            # more than the 16 layers
    assert at.error and "larger than the 16 layers" in at.error[0].value


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
