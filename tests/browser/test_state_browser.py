"""One session, many pages, in Chromium: what AppTest cannot reproduce.

- The sidebar's choices (weights, numbering) survive a click in the navigation (Streamlit drops a page's
  widget values on a page change; AppTest does not).
- The Cache calculator and the inspector keep their inputs when the reader leaves and comes back, and the
  URL then describes them.
- A deep link opened first on a freshly started server runs inside the app (navigation, page config, shared
  sidebar), not as a bare file found in pages/.
- Ten clicks on Next at four a second land on the eleventh step of Figure 3.
- Markdown in a URL parameter is drawn as text: no link, no image, no colour, no maths.
"""

from __future__ import annotations

import re
import time
from urllib.parse import parse_qs, urlparse

import pytest

from bench import server as app_server
from lessons.inspector import load_samples

pytestmark = pytest.mark.browser

# the inspector opens on the first long sample (a story hundreds of tokens long)
INSPECTOR_DEFAULT = next(s.text for s in load_samples() if s.kind == "long")


def params(ui) -> dict[str, str]:
    return {k: v[-1] for k, v in parse_qs(urlparse(ui.page.url).query).items()}


def nav_to(ui, title: str, path: str):
    nav = ui.page.locator('[data-testid="stSidebarNav"]')
    more = nav.locator('[data-testid="stSidebarNavViewButton"]')
    if more.count() and not nav.locator('[data-testid="stSidebarNavLink"]', has_text=title).count():
        more.click()
    nav.locator('[data-testid="stSidebarNavLink"]', has_text=title).first.click()
    ui.page.wait_for_url(re.compile(rf"/{path}(\?|$)"))
    return ui.settle()


def pick_radio(ui, key: str, text: str):
    ui.key(key).locator('[data-testid="stRadioOption"]', has_text=text).first.click()
    return ui.settle()


def checked(ui, key: str) -> str:
    return ui.key(key).locator('[data-testid="stRadioOption"]:has(input:checked)').first.inner_text().strip()


def test_sidebar_choices_survive_navigation(ui):
    ui.open("layer_map")
    pick_radio(ui, "weights_choice", "Random tiny")
    pick_radio(ui, "numbering_choice", "1-based")
    assert params(ui).get("numbering") == "1" and params(ui).get("weights") == "random"
    for title, path in (("Cache calculator", "cache_calculator"), ("Figure 3 walkthrough", "figure3"),
                        ("Layer map", "layer_map")):
        nav_to(ui, title, path)
        assert checked(ui, "weights_choice").startswith("Random tiny"), title
        assert checked(ui, "numbering_choice").startswith("1-based"), title
        p = params(ui)
        assert p.get("numbering") == "1" and p.get("weights") == "random", (title, ui.page.url)
    ui.assert_clean()


def test_cache_calculator_second_visit_keeps_its_inputs(ui):
    ui.open("cache_calculator", preset="gqa")
    ui.type_into("cc_batch", "3", submit="Enter")
    total = ui.key("cc_batch").locator("input").input_value()
    metric = ui.page.locator('[data-testid="stMetricValue"]').first.inner_text()
    nav_to(ui, "Layer map", "layer_map")
    nav_to(ui, "Cache calculator", "cache_calculator")
    assert not ui.alerts("Error"), ui.alerts("Error")
    assert ui.key("cc_batch").locator("input").input_value() == total == "3"
    assert ui.page.locator('[data-testid="stMetricValue"]').first.inner_text() == metric
    p = params(ui)
    assert p.get("preset") == "gqa" and p.get("batch") == "3", ui.page.url
    ui.assert_clean()


def test_inspector_layer_survives_navigation(ui):
    ui.open("inspector", layer=3)
    ui.page.wait_for_url(re.compile(r"[?&]layer=3"))
    ui.key("insp_layer_step").locator('[data-testid="stPaginationNext"]').click()
    ui.settle()
    assert params(ui).get("layer") == "4"
    nav_to(ui, "Layer map", "layer_map")
    nav_to(ui, "Prompt inspector", "inspector")
    assert params(ui).get("layer") == "4", ui.page.url
    assert ui.wait_text('[data-testid="stMain"] h3', r"^Layer 4 ")
    ui.assert_clean()


def test_deep_link_first_on_a_fresh_server_runs_inside_the_app(browser, tmp_path):
    """Before anyone opened `/`, Streamlit ran pages/csa2_modes.py on its own: file names in the sidebar,
    the file name as the title, no wide layout. Every page, with and without parameters."""
    srv = app_server.start(tmp_path / "fresh.log")
    page = browser.new_page()
    try:
        for path, query in (("csa2_modes", "?weights=random"), ("cache_calculator", ""),
                            ("layer_map", "?weights=random&layer=3")):
            page.goto(f"{srv.url}/{path}{query}")
            page.wait_for_selector('[data-testid="stSidebarNav"]', timeout=600_000)
            page.wait_for_function("""() => document.querySelector('[data-testid="stApp"]')
                                      ?.getAttribute('data-test-script-state') === 'notRunning'""",
                                   timeout=600_000)
            time.sleep(1.0)
            links = page.locator('[data-testid="stSidebarNavLink"]').all_inner_texts()
            text = " | ".join(links)
            assert "app" not in [re.sub(r"^\S+\n+", "", t).strip().lower() for t in links], text
            assert "Home" in text, text                                  # app.py's titles
            assert page.locator('[data-testid="stSidebar"] .st-key-weights_choice').count() == 1
            assert "V4.1 Explorer" in page.title() or "CSA2" in page.title() or "Cache" in page.title() \
                or "Layer" in page.title(), page.title()
            width = page.locator('[data-testid="stMainBlockContainer"]').evaluate("e => e.clientWidth")
            assert width > 900, width                                      # layout="wide" (centered is 736 px)
    finally:
        page.close()
        srv.stop()


def test_ten_fast_clicks_on_next_reach_step_eleven(ui):
    ui.open("figure3")
    assert ui.wait_text('[data-testid="stMain"] h3', r"^1\. ")
    button = ui.key("fig3_stepper").locator('[data-testid="stPaginationNext"]')
    for _ in range(10):
        button.click()
        time.sleep(0.25)
    ui.settle()
    time.sleep(1.0)
    ui.settle()
    reached = [t for t in ui.texts('[data-testid="stMain"] h3') if re.match(r"^\d+\. ", t)]
    assert reached and reached[0].startswith("11. "), reached
    assert params(ui).get("step") == "11"
    ui.assert_clean()


def test_ten_fast_clicks_on_the_inspector_token_stepper(ui):
    ui.open("inspector", gen=0, layer=6)
    shown = ui.wait_text('[data-testid="stMain"] h3', r"prompt token \d+$")
    start = int(re.search(r"prompt token (\d+)$", shown).group(1))
    assert start >= 10 and "token" not in params(ui)       # the last prompt token is the default: not in the link
    back = ui.key("insp_token_step").locator('[data-testid="stPaginationPrev"]')
    for _ in range(10):
        back.click()
        time.sleep(0.25)
    ui.settle()
    time.sleep(1.0)
    ui.settle()
    assert int(params(ui)["token"]) == start - 10, ui.page.url
    assert ui.wait_text('[data-testid="stMain"] h3', rf"prompt token {start - 10}$")
    ui.assert_clean()


def test_figure3_stepper_is_not_cut(ui):
    """At 1400 px the Back and Next buttons were cut to "B..." and "N...": the stepper and the step list
    now share one row that fits, and nothing in it overflows."""
    ui.page.set_viewport_size({"width": 1400, "height": 900})
    ui.open("figure3")
    for sel in ('[data-testid="stPaginationPrev"]', '[data-testid="stPaginationNext"]'):
        b = ui.key("fig3_stepper").locator(sel)
        assert b.is_visible() and b.evaluate("e => e.getBoundingClientRect().width >= 24"), sel
    box = ui.key("fig3_step").locator('[role="combobox"]').first
    assert box.evaluate("e => e.getBoundingClientRect().width >= 200")
    assert ui.selected("fig3_step").startswith("1/")


def test_markdown_in_url_parameters_is_drawn_as_text(ui):
    evil = "[Session expired - click here](https://example.com/login) ![x](http://127.0.0.1:9/x.png) :red[r] $x^2$"
    ui.open("figure3", box=evil, config=evil)
    boxes = ui.page.locator('[data-testid="stAlert"]')
    assert boxes.count() >= 2
    for i in range(boxes.count()):
        html = boxes.nth(i).inner_html()
        assert "<a " not in html and "<img" not in html and "katex" not in html and "stMarkdownColoredText" not in html
    shown = " ".join(ui.alerts()).replace("\u2060", "")
    assert "[Session expired - click here](https://example.com/login)" in shown
    ui.assert_clean()


def test_back_returns_to_each_page_as_it_was_left(ui):
    """Each URL write used to push a history entry of its own: Back stepped through a page one parameter at a time,
    and the entries written before the address changed put the new page's values under the old page's address
    (Back to the inspector opened it with the home page's prompt, which then replaced the inspector's). A run's writes
    are one change now: Back shows each page as it was left, with at most one press that stays on it (the bare
    address Streamlit's navigation pushes); pressed on, it undoes the page's changes one by one."""
    ui.open("")
    ui.type_into("home_prompt", "Start page prompt")
    nav_to(ui, "Prompt inspector", "inspector")
    ui.type_into("insp_prompt", "Inspector prompt typed by me")
    nav_to(ui, "Layer map", "layer_map")
    nav_to(ui, "Home", "")
    seen = []
    for _ in range(6):
        ui.page.go_back()
        ui.settle()
        title = ui.page.locator('[data-testid="stMain"] h1').first.inner_text()
        prompt = ui.page.locator(".st-key-insp_prompt textarea, .st-key-home_prompt textarea")
        seen.append((title, prompt.first.input_value() if prompt.count() else None, params(ui).get("prompt")))
    titles = [t for t, _, _ in seen]
    pages = [t for i, t in enumerate(titles) if i == 0 or t != titles[i - 1]]
    assert pages[:3] == ["V4.1 Explorer", "Layer map", "Prompt inspector"], seen
    assert titles.index("Prompt inspector") <= 4, seen            # two presses a page at most
    first = titles.index("Prompt inspector")
    assert seen[first][1] == seen[first][2] == "Inspector prompt typed by me", seen    # as it was left
    for title, prompt, in_url in seen:
        if title == "Prompt inspector":                           # later presses undo the typing: never the home page's
            assert prompt in ("Inspector prompt typed by me", INSPECTOR_DEFAULT), seen
        if title == "Layer map":
            assert in_url is None, seen                           # no other page's prompt under its address
    ui.assert_clean()


def test_own_text_is_offered_on_the_next_prompt_page(ui):
    ui.open("")
    ui.type_into("home_prompt", "Tom put the coin in the green jar. The jar is")
    nav_to(ui, "DSpark draft & verify", "dspark")
    offer = ui.key("ds_use_own").locator("button").first
    assert offer.inner_text().strip().endswith("Use your text from Home")
    offer.click()
    ui.settle()
    assert ui.key("ds_prompt").locator("textarea").input_value() == "Tom put the coin in the green jar. The jar is"
    assert params(ui).get("prompt") == "Tom put the coin in the green jar. The jar is"
    assert ui.key("ds_use_own").count() == 0
    ui.assert_clean()


def test_back_within_a_page_undoes_a_change(ui):
    """Back within a page used to press to no effect (the page wrote its current values over the older address);
    a URL this session did not write is now read again, a value it leaves out as the page's default."""
    ui.open("layer_map")
    ui.choose("lm_layer", "layer 3:")
    ui.choose("lm_layer", "layer 7:")
    assert params(ui).get("layer") == "7"
    ui.page.go_back()
    ui.settle()
    assert ui.selected("lm_layer").startswith("layer 3:") and params(ui).get("layer") == "3", ui.page.url
    ui.page.go_back()
    ui.settle()
    assert ui.selected("lm_layer") == "(none)" and "layer" not in params(ui), ui.page.url
    ui.choose("lm_layer", "layer 5:")                     # the page goes on as usual after Back
    assert params(ui).get("layer") == "5"
    ui.assert_clean()
