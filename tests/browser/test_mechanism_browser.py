"""The global branch shown working by default, in a real browser at 1400 x 1000 with every default: the
inspector's far-fact view shows the recall checkpoint's decoder attention on the fact beside the text model's,
and CSA2 modes opens on the stepped mechanism picture for both checkpoints. The AppTest half is
tests/app/test_app_pair.py."""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.browser

RECALL, TEXT = "Recall checkpoint, shown where to look", "Text model"     # model/shipped.py titles
SHARE = (r"Up to (\d+)% of a decoder layer's attention goes to the fact's entry"
         r"|Every decoder layer gives the fact's entry under 1%")


def _pair_lines(ui) -> list[str]:
    """The one-line readings under the far-fact pictures, in page order (plain training, guided, text)."""
    return [t for t in ui.texts('[data-testid="stMarkdownContainer"]') if re.search(SHARE, t)]


def test_inspector_defaults_show_the_recall_checkpoint_reaching_the_fact_beside_the_text_model(ui):
    ui.page.set_viewport_size({"width": 1400, "height": 1000})
    ui.open("inspector")                                   # every default: the sidebar's weights, sample, mode
    ui.wait_text('[data-testid="stMarkdownContainer"]', SHARE)
    text = ui.main_text()
    assert text.count(RECALL) >= 1 and text.count(TEXT) >= 1
    _, recall_line, text_line = _pair_lines(ui)[:3]
    share = int(re.search(r"Up to (\d+)%", recall_line).group(1))
    assert share >= 50, recall_line                         # some decoder layer attends to the fact
    assert "under 1%" in text_line or int(re.search(r"Up to (\d+)%", text_line).group(1)) < 50
    # the two pictures sit side by side (their heights overlap), the recall checkpoint's on the left
    a, b = (ui.key(f"insp_ff_pair_{k}").bounding_box() for k in ("recall", "text"))
    assert a and b and a["y"] < b["y"] + b["height"] and b["y"] < a["y"] + a["height"] and a["x"] < b["x"]
    ui.key("insp_ff_pair_recall").scroll_into_view_if_needed()
    ui.settle()
    ui.assert_clean()
    ui.shot("inspector_far_fact_pair")


def test_csa2_opens_on_the_mechanism_picture_for_both_checkpoints(ui):
    ui.page.set_viewport_size({"width": 1400, "height": 1000})
    ui.open("csa2_modes")            # the picture opens on its first step
    ui.wait_text('[data-testid="stMarkdownContainer"]', r"The prompt has [\d,]+ tokens; the query is")
    for k in ("recall", "text"):
        box = ui.key(f"csa2_mech_fig_{k}").bounding_box()
        assert box is not None and box["y"] < 1000, (k, box)   # the picture starts on the first screen
    ui.assert_clean()
    ui.shot("csa2_mechanism")
