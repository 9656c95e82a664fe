"""The first screen of every page holds the view, not a wall of text: opened cold at 1400 x 1000 with its defaults,
the main area's visible viewport carries at most about 200 words (the glossary, a reference page, excepted).

Counted in the browser: every word of text drawn inside the main area and inside the viewport (a word counts where
its box's centre lies, after the clipping of any scrolled container); chart text (SVG), the text inside the prompt
boxes, icons and the bodies of closed expanders are not prose a reader has to read and are left out.
"""

from __future__ import annotations

import pytest

from ui.nav import stems

MAX_WORDS = 200
EXCEPTED = {"glossary"}          # a reference list, read by search, not a first screen
VIEWPORT = {"width": 1400, "height": 1000}

pytestmark = pytest.mark.browser

FIRST_SCREEN_WORDS = """() => {
  const main = document.querySelector('[data-testid="stMain"]');
  const H = window.innerHeight, W = window.innerWidth;
  const clipOf = (el) => {
    let top = 0, bottom = H, left = 0, right = W;
    for (let a = el; a && a !== document.body; a = a.parentElement) {
      const cs = getComputedStyle(a);
      if (cs.display === 'none' || cs.visibility === 'hidden' || cs.opacity === '0') return null;
      if (cs.overflowY !== 'visible' || cs.overflowX !== 'visible') {
        const r = a.getBoundingClientRect();
        top = Math.max(top, r.top); bottom = Math.min(bottom, r.bottom);
        left = Math.max(left, r.left); right = Math.min(right, r.right);
      }
    }
    return {top, bottom, left, right};
  };
  const walker = document.createTreeWalker(main, NodeFilter.SHOW_TEXT);
  const words = [];
  while (walker.nextNode()) {
    const n = walker.currentNode, el = n.parentElement;
    if (!el || el.closest('svg, textarea, input, script, style, noscript, [data-testid="stIconMaterial"]')) continue;
    let shut = false;   // a closed expander's body is in the page but not drawn
    for (let d = el.closest('details'); d && !shut; d = d.parentElement && d.parentElement.closest('details')) {
      const sum = d.querySelector(':scope > summary');
      if (!d.open && !(sum && sum.contains(el))) shut = true;
    }
    if (shut) continue;
    const clip = clipOf(el);
    if (!clip) continue;
    const re = /\\S+/g; let m;
    while ((m = re.exec(n.textContent))) {
      if (!/[A-Za-z0-9]/.test(m[0])) continue;
      const r = document.createRange(); r.setStart(n, m.index); r.setEnd(n, m.index + m[0].length);
      const b = r.getBoundingClientRect();
      if (b.width <= 0 || b.height <= 0) continue;
      const cy = (b.top + b.bottom) / 2, cx = (b.left + b.right) / 2;
      if (cy >= clip.top && cy <= clip.bottom && cx >= clip.left && cx <= clip.right) words.push(m[0]);
    }
  }
  return words;
}"""


def page_stems() -> list[str]:
    return stems()


def first_screen_words(ui) -> list[str]:
    return ui.page.evaluate(FIRST_SCREEN_WORDS)


@pytest.mark.parametrize("page", [p for p in page_stems() if p not in EXCEPTED])
def test_first_screen_holds_at_most_200_words(ui, page):
    ui.page.set_viewport_size(VIEWPORT)
    ui.open("" if page == "home" else page)     # a fresh tab: a new browser session, every default
    ui.page.wait_for_timeout(1000)               # fonts and late layout settle before the count
    words = first_screen_words(ui)
    ui.shot(f"first-screen-{page}")
    assert words, f"{page}: no text counted in the first screen (did the page draw?)"
    assert len(words) <= MAX_WORDS, f"{page}: {len(words)} words in the first screen: {' '.join(words)[:600]}"
    ui.assert_clean()


def test_the_count_leaves_out_closed_expanders_and_charts(ui):
    """The counter itself, on a page known to hold a closed expander (Reproduce in Python) and a chart."""
    ui.page.set_viewport_size(VIEWPORT)
    ui.open("compare_designs")
    shown = " ".join(first_screen_words(ui))
    assert "Compare designs" in shown                   # the title is counted
    assert "import" not in shown                        # the snippet inside the closed expander is not
    assert "keyboard_arrow_right" not in shown          # nor the expander's icon


def box_in_view(ui, key: str) -> dict:
    """The element with this key: its box in the viewport, or a failure naming it."""
    box = ui.key(key).first.bounding_box()
    assert box is not None, f"{key}: not drawn"
    return box


def test_inspector_steps_layers_beside_its_chart(ui):
    """At 1400 x 1000 the inspector's controls, its layer stepper and the chart the stepper drives share the first
    screen, and stepping a layer moves nothing off it (no scrolling); the generated text is one line."""
    ui.page.set_viewport_size(VIEWPORT)
    ui.open("inspector")
    height = VIEWPORT["height"]
    for key in ("insp_prompt", "insp_layer_step", "insp_layer"):
        box = box_in_view(ui, key)
        assert box["y"] >= 0 and box["y"] + box["height"] <= height, f"{key} is not inside the first screen: {box}"
    chart = box_in_view(ui, "insp_step_own")          # the session's chart, beside a recall checkpoint's
    assert chart["y"] + 200 <= height, f"the attention chart starts below the first screen's last 200 px: {chart}"
    heading = ui.wait_text('[data-testid="stMain"] h3', r"^Layer \d+")
    ui.key("insp_layer_step").locator('[data-testid="stPaginationNext"]').click()
    ui.settle()
    assert ui.wait_text('[data-testid="stMain"] h3', r"^Layer \d+") != heading
    after = box_in_view(ui, "insp_step_own")
    assert abs(after["y"] - chart["y"]) < 60, f"the chart moved after a step: {chart} -> {after}"
    assert ui.page.evaluate("() => document.querySelector('[data-testid=\"stMain\"]').scrollTop") == 0
    generated = [t for t in ui.texts('[data-testid="stText"]') if t.startswith("Generated:")]
    assert generated and all("\n" not in t.strip() for t in generated), generated
    ui.assert_clean()
