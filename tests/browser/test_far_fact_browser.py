"""The far-fact panel in a real browser: the held-out sample draws its figure and marked excerpt, a reader's story
with markup stays text, a mistyped fact gives the message and the same tab recovers. The AppTest half is
tests/app/test_far_fact.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

HOSTILE_STORY = ('<b id="injected">Tom</b> put the coin in the red bag. <img src=x onerror="window.__pwned = 1"> '
                 "**Anna** walked to the park. Where is the coin? The coin is in the")


def _pwned(ui) -> bool:
    return ui.page.evaluate("() => window.__pwned !== undefined || !!document.getElementById('injected')")



def open_panel(ui) -> None:
    """Unfold the page's own far-fact panel (its title states the sidebar's weights' result: "... the fact is ...")
    and wait for its story line."""
    ui.page.locator("summary", has_text=re.compile(r"^[^:]+: (the fact is|the far story)")).last.click()
    ui.settle()
    ui.wait_text('[data-testid="stMarkdownContainer"]', r"\d+ tokens before the answer")


def test_far_fact_sample_on_the_shares_page(ui):
    ui.open("attention_shares")
    open_panel(ui)
    ui.page.get_by_text("Far fact: does the answer reach back?").scroll_into_view_if_needed()
    ui.settle()
    code = " ".join(ui.texts('[data-testid="stCode"]'))
    assert "⟦" in code and "‖" in code
    assert ui.charts() >= 3                         # the toy, the shares map, the far-fact map
    ui.assert_clean()
    ui.shot("far_fact")


def test_far_fact_own_story_stays_text_and_a_typo_gets_the_message(ui):
    ui.open("indexer_pools", ff="own", ffstory=HOSTILE_STORY, fffact="the red bag")
    open_panel(ui)
    assert any("⟦" in c for c in ui.texts('[data-testid="stCode"]'))
    assert not _pwned(ui)
    ui.type_into("pool_ff_fact", "the rde bag", submit="Enter")
    msg = ui.wait_text('[data-testid="stAlertContentWarning"]', "The fact was not found in your story")
    assert "rde" not in msg
    ui.type_into("pool_ff_fact", "red", submit="Enter")
    ui.wait_text('[data-testid="stMarkdownContainer"]', r"right colour 'red'")
    assert not _pwned(ui)
    ui.assert_clean()


def caption_texts(ui) -> list[str]:
    return ui.page.locator('[data-testid="stCaptionContainer"]').evaluate_all(
        "els => els.map(e => e.textContent ?? '')")


def wait_content(ui, selector: str, pattern: str) -> None:
    """Wait until an element matching `selector` holds text matching `pattern`, drawn or in a closed box."""
    ui.page.wait_for_function(
        "([sel, pat]) => [...document.querySelectorAll(sel)].some(e => new RegExp(pat).test(e.textContent ?? ''))",
        arg=[selector, pattern])


def test_the_recall_checkpoint_is_one_click_from_the_panel_and_stays_chosen_across_pages(ui):
    """The text model's panel offers the recall checkpoints; the click loads the guided one (sidebar, URL and weights
    line follow), the choice survives moving to another page that shows the panel, and the other button goes back."""
    from tests.browser.test_state_browser import checked, nav_to, params

    ui.open("attention_shares", weights="trained")
    open_panel(ui)
    first = next(a for a in caption_texts(ui) if a.startswith("The sidebar's weights (the text model) recall"))
    ui.click("sh_ff_to_recall")
    # the recall checkpoint's own window: the text model's caption matches a looser pattern before the rerun ends
    window = json.loads((Path(__file__).resolve().parents[2] / "data" / "weights" / "recall" / "config.json")
                        .read_text())["text_config"]["sliding_window"]
    wait_content(ui, "[data-testid=\"stCaptionContainer\"]", rf"reads {window} tokens directly and its 12 stacked")
    ui.page.wait_for_function(
        "first => [...document.querySelectorAll('[data-testid=\"stCaptionContainer\"]')]"
        ".every(e => (e.textContent ?? '') !== first)", arg=first)
    assert checked(ui, "weights_choice").startswith("Checkpoint")
    assert ui.selected("ckpt_choice") == "weights/recall"
    ui.page.wait_for_url(re.compile(r"[?&]ckpt=weights%2Frecall(&|$)|[?&]ckpt=weights/recall(&|$)"))  # end of run
    assert params(ui).get("weights") == "checkpoint" and params(ui).get("ckpt") == "weights/recall", ui.page.url
    assert first not in caption_texts(ui) and any("held-out far facts" in a for a in caption_texts(ui))
    nav_to(ui, "Indexer pools", "indexer_pools")
    open_panel(ui)
    assert ui.selected("ckpt_choice") == "weights/recall"
    assert ui.key("pool_ff_to_text").count() == 1
    ui.click("pool_ff_to_text")
    ui.page.wait_for_function("() => [...document.querySelectorAll('summary')]"
                              ".some(e => (e.innerText ?? '').includes('Text model: the fact'))")
    open_panel(ui)          # its title names the loaded set, so the panel is drawn anew, folded
    ui.wait_text('[data-testid="stMarkdownContainer"] li', r"^Text model: English")     # the loaded set first
    assert checked(ui, "weights_choice").startswith("Trained")
    assert first in caption_texts(ui)
    ui.assert_clean()
