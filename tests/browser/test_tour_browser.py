"""The guided tour and the Figure 3 screen in a real browser at 1400 x 1000, cold, defaults only.

- From the home page's "Start the tour" through every stop with Next: each stop opens its page with the stop in
  the URL, shows its card and outlines its part of the page, with no error. Per stop it reports the words the
  browser draws in the main area (every word a learner scrolling the page sees: prose, labels, buttons, metrics,
  table cells; chart internals and closed expanders' bodies left out) and where the outlined part starts; the
  whole tour draws at most TOUR_WORDS, each card at most CARD_WORDS, and each outlined part starts in the upper
  LAND_PX pixels on arrival. The report goes to artifacts/tour-words.txt.
- A reload and the browser's Back keep the stop; the tour's Back returns through every stop to the home page, and
  Finish leaves the tour; a page opened without a stop (a former stop's page included) draws no outline.
- In 1-based numbering a stop's release layer is counted from 1.
- Figure 3 opens on the compact drawing with the first step's text beside it, both inside the first screen, and a
  clicked box opens its panel beside the drawing, also inside the first screen.
- The first screens of the home page and of Figure 3 carry at most about 200 words of main-area text.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lessons.tour import CARD_WORDS, stops

pytestmark = pytest.mark.browser

W, H = 1400, 1000
FIRST_SCREEN_WORDS = 200
TOUR_WORDS = 2500
LAND_PX = 600            # an outlined part's top, on arrival, in the upper 600 px of the window
ROOT = Path(__file__).resolve().parents[2]

# a text node counts when the browser draws it: in the main area, not inside a chart, a closed expander's body, an
# icon's name or a style/script; `h` > 0 keeps only what lies inside the first `h` pixels (the first screen)
WORDS_DRAWN = """(h) => { const main = document.querySelector('[data-testid="stMain"]');
  const walk = document.createTreeWalker(main, NodeFilter.SHOW_TEXT); let n = 0, node;
  while ((node = walk.nextNode())) {
    const t = node.textContent.trim(); if (!t) continue;
    const el = node.parentElement; if (!el || el.closest('[data-testid="stSidebar"]')) continue;
    if (el.closest('details:not([open])') && !el.closest('summary')) continue;     // a closed expander's body
    if (el.closest('[data-testid="stIconMaterial"]')) continue;                     // an icon's name
    if (el.closest('[data-testid="stPlotlyChart"], svg')) continue;                // a chart's own labels
    if (el.closest('style, script')) continue;
    const r = el.getBoundingClientRect(); const s = getComputedStyle(el);
    if (r.height === 0 || r.width === 0 || s.visibility === 'hidden' || s.display === 'none') continue;
    if (h < 0 || (r.top < h && r.bottom > 0)) n += t.split(/\\s+/).length;
  } return n; }"""
WORDS_ON_SCREEN = WORDS_DRAWN

FIRST_SPOT = """(keys) => keys.map(k => document.querySelector('.st-key-' + k + ', [class*="st-key-' + k + '_"]'))
                             .find(Boolean)"""
OUTLINED = """() => [...document.querySelectorAll('[data-testid="stMain"] *')]
                    .filter(e => getComputedStyle(e).outlineStyle === 'solid'
                                 && getComputedStyle(e).outlineColor === 'rgb(255, 75, 75)').length"""


def on_screen(ui, locator) -> tuple[float, float]:
    box = locator.first.bounding_box()
    assert box is not None, "not drawn"
    return box["y"], box["y"] + box["height"]


def bar_text(ui) -> str:
    return ui.key("tour_bar").first.inner_text()


def wait_stop(ui, i: int, n: int, key: str) -> None:
    ui.page.wait_for_url(re.compile(rf"[?&]stop={key}(&|$)"))
    ui.settle()
    ui.page.wait_for_function("t => { const b = document.querySelector('.st-key-tour_bar');"
                              " return b && b.innerText.includes(t); }", arg=f"Tour {i + 1}/{n}:")


def test_tour_from_the_home_page_through_every_stop_and_back(ui):
    ui.page.set_viewport_size({"width": W, "height": H})
    tour = stops()
    n = len(tour)
    ui.open()
    assert ui.key("tour_bar").count() == 0                 # no stop in the URL: no card
    ui.key("tour_start").locator("a").first.click()
    report = []
    for i, stop in enumerate(tour):
        wait_stop(ui, i, n, stop.key)
        text = bar_text(ui)
        assert stop.question in text and stop.text in text, stop.key
        # the part the stop talks about is on its page, outlined, and has landed in the upper screen
        assert ui.page.evaluate(FIRST_SPOT, list(stop.spot)), f"stop {stop.key}: no element for {stop.spot}"
        ui.page.wait_for_function(f"keys => {{ const el = ({FIRST_SPOT})(keys); const r = el.getBoundingClientRect();"
                                  f" return getComputedStyle(el).outlineStyle === 'solid' && r.top >= 0"
                                  f" && r.top < {LAND_PX}; }}", arg=list(stop.spot), timeout=30_000)
        top = ui.page.evaluate(f"keys => ({FIRST_SPOT})(keys).getBoundingClientRect().top", list(stop.spot))
        words = ui.page.evaluate(WORDS_DRAWN, -1)
        card = len(text.split())
        report.append((i + 1, stop.key, words, card, round(top)))
        ui.assert_clean()
        ui.shot(f"tour-{i + 1:02d}-{stop.key}")
        if i + 1 < n:
            ui.key("tour_next").locator("a, button").first.click()
    lines = [f"stop {k:2d} {key:12s} words {w:5d}  card {c:3d}  outline top {t:4d} px" for k, key, w, c, t in report]
    total = sum(w for _, _, w, _, _ in report)
    lines.append(f"tour: {total} words drawn on {n} stops' pages")
    (ROOT / "artifacts").mkdir(exist_ok=True)
    (ROOT / "artifacts" / "tour-words.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    assert total <= TOUR_WORDS, lines
    assert all(c <= CARD_WORDS for *_, c, _ in report), lines
    # the stop lives in the URL: a reload keeps it, and the browser's Back returns to the stop before (a page's own
    # URL writes add entries of their own: each Back shows a stop, and a few reach the one before)
    ui.page.reload()
    wait_stop(ui, n - 1, n, tour[-1].key)
    for _ in range(4):
        ui.page.go_back()
        ui.settle()
        assert "stop=" in ui.page.url and ui.key("tour_bar").count() == 1, ui.page.url
        if f"stop={tour[-2].key}" in ui.page.url:
            break
    wait_stop(ui, n - 2, n, tour[-2].key)
    ui.key("tour_next").locator("a, button").first.click()
    wait_stop(ui, n - 1, n, tour[-1].key)
    # Finish leaves the tour (the home page without its card or any outline); Back returns to the last stop
    ui.key("tour_next").locator("a, button").first.click()
    ui.page.wait_for_function("() => !location.search.includes('stop=')")
    ui.settle()
    assert ui.key("tour_bar").count() == 0 and ui.page.evaluate(OUTLINED) == 0
    for _ in range(4):
        ui.page.go_back()
        ui.settle()
        if f"stop={tour[-1].key}" in ui.page.url:
            break
    wait_stop(ui, n - 1, n, tour[-1].key)
    # the tour's own Back, stop by stop, to the home page
    for i in range(n - 1, 0, -1):
        ui.key("tour_back").locator("a, button").first.click()
        wait_stop(ui, i - 1, n, tour[i - 1].key)
        ui.assert_clean()
    ui.key("tour_back").locator("a, button").first.click()    # "Home" on the first stop
    ui.page.wait_for_function("() => !location.search.includes('stop=')")
    ui.settle()
    assert ui.page.locator("h1").first.inner_text().startswith("V4.1 Explorer")
    assert ui.key("tour_bar").count() == 0 and ui.page.evaluate(OUTLINED) == 0
    # a former stop's page opened from the home page's link, in the same browser session: whole, with no outline
    ui.page.locator('[data-testid="stMain"] a', has_text="Figure 3 walkthrough").first.click()
    ui.page.wait_for_url(re.compile(r"/figure3"))
    ui.settle()
    assert ui.key("fig3_box").count() == 1 and ui.page.evaluate(OUTLINED) == 0
    ui.assert_clean()


def test_a_stop_in_1_based_numbering(ui):
    ui.page.set_viewport_size({"width": W, "height": H})
    ui.open("csa2_modes", stop="pool", numbering="1")
    ui.page.wait_for_selector(".st-key-tour_bar")
    assert "the release, layer 21's broad scan" in bar_text(ui)
    ui.assert_clean()


def test_figure3_drawing_step_text_and_an_opened_box_share_the_first_screen(ui):
    ui.page.set_viewport_size({"width": W, "height": H})
    ui.open("figure3")
    top, bottom = on_screen(ui, ui.key("fig3_chart"))
    assert 0 <= top and bottom <= H, (top, bottom)                      # the whole compact drawing
    head = ui.page.locator('[data-testid="stMain"] h3', has_text=re.compile(r"^1\. "))
    body = ui.page.locator('[data-testid="stMain"] p', has_text="Read the drawing from the bottom")
    assert on_screen(ui, head)[1] <= H and on_screen(ui, body)[1] <= H     # the step's title and text
    assert ui.page.evaluate(WORDS_ON_SCREEN, H) <= FIRST_SCREEN_WORDS
    ui.shot("figure3-first-screen")
    # a click on a box's dot opens its panel beside the drawing, in the first screen
    dot = ui.key("fig3_chart").locator(".scatterlayer .trace").last.locator("path.point").nth(3)
    dot.click(force=True)
    ui.page.wait_for_selector(".st-key-fig3_open")
    ui.settle()
    top, bottom = on_screen(ui, ui.key("fig3_open"))
    chart_box = ui.key("fig3_chart").first.bounding_box()
    assert top < H - 150 and top >= 0, (top, bottom)
    assert ui.key("fig3_open").first.bounding_box()["x"] > chart_box["x"] + chart_box["width"] - 5   # beside it
    ui.assert_clean()
    ui.shot("figure3-box-open")


def test_home_first_screen(ui):
    ui.page.set_viewport_size({"width": W, "height": H})
    ui.open()
    for kind in ("unaided", "recall"):                                    # both far-fact pictures
        assert on_screen(ui, ui.key(f"home_far_fig_{kind}"))[1] <= H, kind
    assert on_screen(ui, ui.key("tour_start"))[1] <= H                   # the tour's button
    words = ui.page.evaluate(WORDS_ON_SCREEN, H)
    assert words <= FIRST_SCREEN_WORDS, words
    ui.assert_clean()
    ui.shot("home-first-screen")
