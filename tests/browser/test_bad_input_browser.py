"""Bad input as only a browser shows it: hostile text stays text (no markup, no script runs), the browser's
own inputs refuse what is out of range, bad URLs give messages, and the same tab keeps working after each.
The fast AppTest half of the bad-input suite is tests/app/test_bad_input.py."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.browser

HOSTILE = ('<script>window.__pwned = 1; alert("s")</script><img src=x onerror="window.__pwned = 2">'
           '<b id="injected">bold?</b> **not bold** \u202eevil\u202c \U0001f511 \u200b\x07 end')


def _pwned(ui) -> bool:
    return ui.page.evaluate("() => window.__pwned !== undefined || !!document.getElementById('injected')")


def test_hostile_prompt_is_shown_as_text_everywhere(ui):
    ui.open()
    ui.type_into("home_prompt", HOSTILE)
    assert ui.key("home_prompt").locator("textarea").input_value() == HOSTILE
    assert ui.key("home_bar").locator(".js-plotly-plot").count() == 1         # the next-token chart
    assert not _pwned(ui)
    # the prompt inspector shows the tokens of the same text as literal code
    ui.open("inspector", gen=0, prompt=HOSTILE)
    assert ui.charts() >= 1
    code = " ".join(ui.texts('[data-testid="stCode"]'))
    assert code.strip()
    assert not _pwned(ui)
    assert not ui.dialogs
    ui.assert_clean()
    ui.shot("bad-input-hostile-prompt")


def test_empty_prompt_then_valid_in_the_same_tab(ui):
    ui.open()
    ui.type_into("home_prompt", "   ")
    assert any("empty" in a for a in ui.alerts("Warning"))
    assert ui.key("home_bar").count() == 0                                # no next-token chart
    ui.type_into("home_prompt", "The key is in the blue box. The box is")
    assert ui.key("home_bar").locator(".js-plotly-plot").count() == 1 and not ui.alerts("Warning")
    ui.assert_clean()


def test_calculator_field_refuses_text_and_out_of_range(ui):
    ui.open("cache_calculator", context="abc")
    assert any("context='abc' is not a whole number" in a for a in ui.alerts("Warning"))
    hbm = ui.page.locator('[data-testid="stMetricValue"]').first.inner_text()
    box = ui.key("cc_context").locator("input")
    box.fill("")
    box.type("12x!")                      # letters never reach the app
    box.press("Enter")
    ui.settle()
    assert ui.page.locator('[data-testid="stMetricValue"]').first.inner_text() == hbm or box.input_value().isdigit()
    shown = ui.page.locator('[data-testid="stMetricValue"]').first.inner_text()
    url = ui.page.url
    box.fill("99999999999")               # above what the page computes (16,777,216)
    box.press("Enter")
    ui.settle()
    # the app refuses the out-of-range number with a message and keeps the last good value: what it computed
    # before (and the URL that mirrors it) stays as it was
    said = ui.wait_text('[data-testid="stAlertContentWarning"]', r"99,999,999,999 .*not applied")
    assert "16,777,216" in said
    ui.settle()
    assert box.input_value() != "99999999999"
    assert ui.page.locator('[data-testid="stMetricValue"]').first.inner_text() == shown
    assert "99999999999" not in ui.page.url and ui.page.url == url
    ui.type_into("cc_context", "2048", submit="Enter")
    ui.page.wait_for_url("**context=2048**")
    ui.assert_clean()


def test_bad_url_values_give_messages_on_run_pages(ui):
    ui.open("inspector", layer="abc", token="-1", gen=0)
    warns = " ".join(ui.alerts("Warning"))
    assert "not a whole number" in warns and "outside" in warns
    assert ui.charts() >= 1
    ui.open("figure3", step="999", box="<b>x</b>")
    warns = " ".join(ui.alerts("Warning"))
    assert "outside" in warns and "names no box" in warns
    assert not _pwned(ui)
    ui.assert_clean()


def test_missing_checkpoint_directory_then_random(ui, tmp_path):
    ui.open("layer_map", weights="checkpoint", ckpt=str(tmp_path / "nope"))
    err = " ".join(ui.texts('[data-testid="stSidebar"] [data-testid="stAlertContentError"]'))
    # outside the allowed roots (ui.checkpoints): one message that names no path
    assert "does not offer that checkpoint" in err and "nope" not in err and str(tmp_path) not in err
    ui.page.locator('[data-testid="stSidebar"] label', has_text="Random tiny").click()
    ui.settle()
    assert not ui.texts('[data-testid="stSidebar"] [data-testid="stAlertContentError"]')
    assert ui.charts() >= 1
    ui.assert_clean()


def test_an_overlong_prompt_is_cut_with_one_click_and_runs(ui):
    """5,000 words pasted into the inspector: the page says where it stops and offers to keep the start; one click
    puts the cut text in the box and the inspector runs it (its layer chart appears), in the same tab."""
    long = "Mia put the key in the blue box and walked to the park. " * 500
    ui.open("inspector", gen=0)
    ui.type_into("insp_prompt", long)
    assert any("stops at 4,096" in a for a in ui.alerts("Warning"))
    ui.click("insp_cut")
    ui.page.wait_for_function("() => !document.querySelector('[data-testid=\"stAlertContentWarning\"]')")
    kept = ui.key("insp_prompt").locator("textarea").input_value()
    assert long.startswith(kept.rstrip()) and 1000 < len(kept) < len(long)
    assert ui.charts() >= 1
    ui.assert_clean()
