"""Numbers and names on one screen agree, in Chromium: what AppTest cannot see because the browser keeps it.

- The Figure 3 box list shows the open box under the drawn model's label after Draw is switched (the box keeps its
  id, "attn:8", but its label changes: "Full r2" in the release, "Reindex r1" in the running model).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.browser


def test_figure3_box_list_names_the_box_the_heading_names_after_draw_is_switched(ui):
    ui.open("figure3", box="attn:8", compact="0")   # one box per layer: the full drawing
    released = ui.selected("fig3_box")
    assert "layer 8" in released
    ui.key("fig3_config").get_by_text("The running model").click()
    ui.settle()
    shown = ui.selected("fig3_box")
    heading = ui.wait_text('[data-testid="stMain"] strong', r"^layer 8: ")
    assert shown == heading, (shown, heading, released)
    assert shown != released              # the two models give layer 8 different roles
    ui.assert_clean()
