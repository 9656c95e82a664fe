"""Several visitors at once, in Chromium: four tabs type their own prompt on the home page within a moment of each
other; each tab gets its own next-token chart and token count (never another tab's), no tab shows an error, and
the server ran prompts of that moment together (ui/queue.py's batch worker logs each batched forward)."""

from __future__ import annotations

import re

import pytest

from model.shipped import shipped_weights
from tests.browser.conftest import AppPage

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_several_tabs_at_once_each_get_their_own_result(app, browser):
    from model.tokenizer import load_tokenizer

    tok = load_tokenizer(shipped_weights("text") / "tokenizer.json")
    prompts = [f"Tab {i} says:" + " the key is in the blue box." * (i + 1) + " The box is" for i in range(4)]
    tabs = []
    for i in range(4):
        ui = AppPage(browser.new_page(), app, f"classroom-tab-{i}")
        ui.open()
        tabs.append(ui)
    before = app.log().count("Batched forward: kind=next")
    for ui, text in zip(tabs, prompts):           # typed one after another, without waiting for any run
        box = ui.key("home_prompt").locator("textarea").first
        box.fill(text)
        box.press("Control+Enter")
    try:
        for ui, text in zip(tabs, prompts):
            ui.settle()
            n = len(tok.encode(text).ids)
            caption = ui.wait_text('[data-testid="stCaptionContainer"]', r"prompt tokens read")
            assert caption.startswith(f"{n} prompt tokens read"), (ui.name, caption, n)
            assert ui.key("home_prompt").locator("textarea").input_value() == text
            assert ui.charts() >= 1
            assert not ui.alerts("Error") and not ui.alerts("Warning"), ui.alerts()
            ui.assert_clean()
        rows = [int(m) for m in re.findall(r"Batched forward: kind=next rows=(\d+)", app.log())]
        new = rows[before:]
        assert sum(new) >= 4 and len(new) <= 4, new     # every prompt ran, never more forwards than prompts
    finally:
        for ui in tabs:
            ui.page.close()
