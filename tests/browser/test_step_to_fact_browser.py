"""Step to the fact in a real browser at 1400 x 1000 on every default: the inspector's layer chart on the text model
and on a recall checkpoint side by side, the fact's entry outlined in both; one click steps the layer to the first
decoder layer that reaches the fact, where the recall side's caption says the fact's entry is picked. Writes
artifacts/screenshots/inspector_step_to_fact.png (docs/screenshots/ holds a copy for the README)."""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.browser

REACH = r"decoder layer (\d+) is the first to reach the fact (\d+) tokens back"


def test_inspector_steps_to_the_layer_that_reaches_the_fact_beside_the_text_model(ui):
    ui.page.set_viewport_size({"width": 1400, "height": 1000})
    ui.open("inspector")
    line = ui.wait_text('[data-testid="stCaptionContainer"]', REACH)
    layer = int(re.search(REACH, line).group(1))
    a, b = (ui.key(f"insp_step_{k}").bounding_box() for k in ("own", "other"))
    assert a and b and a["x"] < b["x"] and a["y"] < b["y"] + b["height"] and b["y"] < a["y"] + a["height"]
    ui.click("insp_step_go")
    ui.wait_text('[data-testid="stCaptionContainer"]', r"The fact's entry E\d+ \(tokens [\d-]+\): picked")
    assert re.search(rf"Layer {layer} ·", ui.main_text()), "the layer heading follows the step"
    ui.page.evaluate("() => document.querySelector('.st-key-insp_layer').scrollIntoView({block: 'start'})")
    ui.settle()
    ui.assert_clean()
    ui.shot("inspector_step_to_fact")
