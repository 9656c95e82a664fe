"""AppTest: the far-fact panel (ui/far_fact.py) on the four pages that show it, and a reader's own story with a
mistyped fact. Random tiny weights: the panel's numbers are whatever the weights do, so only its presence, its
computed sentences and its messages are checked."""

from __future__ import annotations

import json
import re

import pytest
from streamlit.testing.v1 import AppTest

from model.shipped import SHIPPED, shipped_weights
from tests.conftest import ROOT, run_page

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

PAGES = {"inspector": "insp", "attention_shares": "sh", "indexer_pools": "pool", "ablation": "abl"}
HEADER = "Far fact: does the answer reach back?"


def ok(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


def panel_text(at: AppTest) -> str:
    """The panel's sentences as a reader sees them: its summary list is Markdown, escaped by ui.text.plain."""
    from ui.text import as_shown

    items = [re.sub(r"^- ", "", line) for m in at.markdown for line in as_shown(m.value).splitlines()]
    return "\n".join([t.value for t in at.text] + items)


@pytest.mark.parametrize("page", list(PAGES))
def test_far_fact_panel_on_every_page(page):
    at = run_page(page)
    ok(at)
    assert HEADER in [s.value for s in at.subheader]
    labels = {m.label: m.value for m in at.metric}
    for name in ("Attention to the fact", "Fact entries in the pool", "Layers whose top-k has it",
                 "Answer, global off"):
        assert name in labels, (page, list(labels))
    text = panel_text(at)
    assert re.search(r"\d+ tokens before the answer: \d+ past the \d+-token window", text), text
    assert "with the global branch switched off" in text
    assert any("⟦" in c.value and "‖" in c.value for c in at.code)
    key = PAGES[page]
    assert f"{key}_ff_fig" in [c.key for c in at.get("plotly_chart")]
    assert any(any(str(c).startswith(("share on fact entries", "mean (%)")) for c in d.value.columns)
               for d in at.dataframe)


def test_own_story_with_a_mistyped_fact_gets_a_plain_message():
    at = run_page("attention_shares")
    ok(at)
    at.radio(key="sh_ff_src").set_value("Your own story").run()
    ok(at)
    # the example story and fact are valid: the panel shows the fact's entries
    assert any("⟦" in c.value for c in at.code)
    assert "1 of the 2" in panel_text(at) or "fact entr" in panel_text(at)
    at.text_input(key="sh_ff_fact").set_value("Tom put the coin in the rde bag. **x** <b>").run()
    ok(at)
    msgs = [w.value for w in at.warning]
    assert any("The fact was not found in your story" in m for m in msgs), msgs
    assert not any("rde" in m or "**" in m or "<b>" in m for m in msgs)      # the reader's text is never rendered
    assert HEADER in [s.value for s in at.subheader]                            # the rest of the page goes on
    assert "A Reuse layer beside the layer it copies from" in [s.value for s in at.subheader]
    at.text_input(key="sh_ff_fact").set_value("").run()
    assert any("Name the fact" in w.value for w in at.warning)
    at.text_area(key="sh_ff_story").set_value("   ").run()
    assert any("Your story is empty" in w.value for w in at.warning)


def test_own_story_from_a_link_and_markdown_in_its_parameters():
    at = run_page("indexer_pools", ff="own", ffstory=STORY, fffact="the red bag")
    ok(at)
    assert at.radio(key="pool_ff_src").value == "Your own story"
    assert at.text_area(key="pool_ff_story").value == STORY and at.text_input(key="pool_ff_fact").value == "the red bag"
    assert any("⟦" in c.value for c in at.code)
    assert "'red' gets" in panel_text(at)                    # the answer defaults to the fact's colour
    evil = "[x](https://example.com) <b>bold</b> :red[red] $x^2$ " + "A" * 3000
    for params in ({"ff": evil}, {"ff": "own", "ffstory": evil, "fffact": evil}, {"ff": "own", "fffact": "zzz"}):
        at = run_page("attention_shares", **params)
        ok(at)
        shown = [x.value for k in ("warning", "error", "info", "caption", "markdown") for x in getattr(at, k)]
        for t in [t for t in shown if "example" in t or "bold" in t]:   # markup from the URL is escaped, if shown
            for pat in (r"(?<!\\)\]\(", r"(?<!\\)<b>", r"(?<!\\):red\[", r"(?<!\\)\$x", r"(?<!\\)https?:/"):
                assert not re.search(pat, t), (pat, t[:300])
        assert HEADER in [s.value for s in at.subheader]


STORY = "Tom put the coin in the red bag. Anna walked to the park. Where is the coin? The coin is in the"


TRAINED = (shipped_weights("text") / "model.safetensors").exists()


@pytest.mark.slow
@pytest.mark.skipif(not TRAINED, reason="the shipped tiny weights are not present")
@pytest.mark.parametrize("own", [False, True, "nearest"])
def test_far_fact_snippet_prints_what_the_panel_shows(tmp_path, own):
    from tests.app.test_reproduce import run_snippet

    at = AppTest.from_file(str(ROOT / "pages" / "ablation.py"), default_timeout=300)
    at.query_params.update({"weights": "trained", "numbering": "1"})
    if own == "nearest":                    # a held-out far story other than the rule's: the first by distance
        at.query_params.update({"ffrank": "1"})
    elif own:
        at.query_params.update({"ff": "own", "ffstory": STORY, "fffact": "red", "ffanswer": "red"})
    at.run()
    ok(at)
    if own == "nearest":
        assert any(c.value.startswith("Held-out far story 1 of ") for c in at.caption)
    code = [c.value for c in at.get("code") if getattr(c, "language", None) == "python"
            and "lessons.far_fact" in c.value]
    assert len(code) == 1
    out = run_snippet(code[0], tmp_path)
    from ui.text import as_shown

    summary = next(m.value for m in at.markdown if as_shown(m.value).startswith("- The fact"))
    shown = [as_shown(line)[2:] for line in summary.splitlines()]
    assert out.lines[: len(shown)] == shown
    table = next(d.value for d in at.dataframe if "in top-k" in d.value.columns)
    for _, row in table.iterrows():
        assert f"layer {row['layer']} ({row['role']})" in out
        share = row["share on fact entries (mean over heads) (%)"]
        assert out[f"layer {row['layer']} ({row['role']})"].startswith(
            f"share on fact entries {share:.2f}%; in top-k {row['in top-k']}")


def test_the_panel_offers_the_recall_checkpoints_and_says_what_each_learned():
    """From the text model, one click loads a shipped recall checkpoint (the sidebar follows), the weights line
    then reads that checkpoint's own training.json and far is placed against its window's reach; a second click
    goes back. The offer lists every shipped set, the loaded one first, each recall checkpoint with how it was
    trained."""
    at = run_page("attention_shares", weights="trained")
    ok(at)
    line = lambda: next(c.value for c in at.caption if c.value.startswith("The sidebar's weights ("))  # noqa: E731
    offer = lambda: [m.value for m in at.markdown if m.value.startswith("- Text model") or  # noqa: E731
                     m.value.startswith("- Recall checkpoint")][0].split("\n")
    first = line()
    assert first.startswith("The sidebar's weights (the text model) recall")     # which weights, by name
    assert "held-out far facts" in first and not any(i.value.startswith("What these weights do") for i in at.info)
    items = offer()
    assert len(items) == len(SHIPPED) and items[0].startswith("- Text model: English")
    assert "weights/" not in " ".join(items)
    assert "no loss on attention" in items[1] and "lookup, selection" in items[2]
    assert [b.label for b in at.button] == [f"Load the {s.title[0].lower()}{s.title[1:]}" for s in SHIPPED
                                            if s.far_recall]
    at.button(key="sh_ff_to_recall").click().run()
    ok(at)
    assert at.session_state["weights_choice"] == "checkpoint"
    assert at.session_state["ckpt_choice"] == "weights/recall"
    note = line()
    assert note != first and "clearly above a guess" in note            # the recall checkpoint's own record
    assert note.startswith("The sidebar's weights (the recall checkpoint, shown where to look) recall")
    window = json.loads((shipped_weights("recall") / "config.json").read_text())["text_config"][
        "sliding_window"]
    far = next(c.value for c in at.caption if c.value.startswith("Far means"))
    assert f"reads {window} tokens directly" in far and "every far story lies beyond that reach" in far
    assert offer()[0].startswith("- Recall checkpoint, shown where to look")
    assert HEADER in [s.value for s in at.subheader]
    at.button(key="sh_ff_to_text").click().run()
    ok(at)
    assert at.session_state["weights_choice"] == "trained" and line() == first


def test_the_measured_figures_are_stated_once_on_the_glossary():
    """The pages with a far-fact view say one sentence about the weights and link to the glossary; the glossary
    states the whole note, with the figures of the weights the sidebar has loaded."""
    from lessons.far_weights import weights_note
    from ui.far_fact import training_record

    at = run_page("glossary", weights="trained")
    ok(at)
    said = [i.value for i in at.info]
    assert weights_note("trained", training_record()) in said, said
    at = run_page("glossary", weights="checkpoint", ckpt="weights/recall")
    ok(at)
    assert any(i.value.startswith("What these weights do") and i.value not in said for i in at.info)


@pytest.mark.parametrize("rank, colour", [(96, "purple"), (88, "orange")])
def test_a_far_fact_comes_back_through_the_indexer_on_the_recall_checkpoint(rank, colour):
    """The shipped recall checkpoint, held-out far stories by deep link: 96 of 100 (455 tokens back) and 88 (430
    back, with three other objects in containers of other colours, so the asked object's fact must be the one read):
    the fact's entry is in the candidate pool and the decoder's top-k, the answer is right, and with the global
    branch off it is not."""
    at = run_page("indexer_pools", weights="checkpoint", ckpt="weights/recall", ffrank=rank)
    ok(at)
    assert any(c.value.startswith(f"Held-out far story {rank} of 100") for c in at.caption)
    text = panel_text(at)
    pool = r"The candidate pool \(layer 6's scan keeps \d+ of \d+ visible ratio-1 entries\) contains the fact"
    assert re.search(pool, text), text
    assert f"Answer with everything on: '{colour}'" in text and "is right" in text
    off = next(line for line in text.splitlines() if line.startswith("Answer with the global branch switched off"))
    assert "is wrong" in off
    labels = {m.label: m.value for m in at.metric}
    assert labels["Answer, global off"] != colour
