"""Short text beside the view: every page, opened with its defaults (and the Figure 3 walkthrough at each of its
steps), shows no paragraph longer than 120 words, and a walkthrough step's main text stays near 80 words.

A paragraph is a block of prose as a reader meets it: the text of a Markdown element, a caption, an info /
warning / success / error box or an expander's label, split at blank lines and list items; and a block drawn
as plain or monospace text (st.text, st.code with no programming language), split at blank lines only: its lines
are not items, they run on as one block. Tables, program code and charts are not prose. The page list is
app.py's, so a new page is checked without editing this file.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ui.nav import stems

ROOT = Path(__file__).resolve().parents[2]
MAX_PARAGRAPH = 120      # words
MAX_STEP = 85            # "at most about 80" words in a walkthrough step's main text
WORD = re.compile(r"\S*[A-Za-z0-9]\S*")


def run_page(page: str, **params):
    """AppTest of a page at the app's defaults: the shipped trained weights when they are here (what a visitor
    sees), else random tiny weights; `params` as URL parameters."""
    from streamlit.testing.v1 import AppTest

    from bench.server import default_weights

    at = AppTest.from_file(str(ROOT / "pages" / f"{page}.py"), default_timeout=300)
    if default_weights():
        at.query_params["weights"] = default_weights()
    for k, v in params.items():
        at.query_params[k] = str(v)
    return at.run()


def page_stems() -> list[str]:
    return stems()


def words(text: str) -> int:
    return len(WORD.findall(text))


PLAIN_CODE = (None, "", "plaintext", "text")     # st.code languages that mark text, not a program


def paragraphs(at) -> list[str]:
    """Every prose block the run drew, in page order within each kind of element."""
    texts = [str(el.value) for kind in ("markdown", "caption", "info", "warning", "success", "error")
             for el in getattr(at, kind)] + [str(el.label) for el in at.expander]
    # each element's text is Markdown: a blank line or a list item starts a new block
    prose = [p for t in texts for p in re.split(r"\n\s*\n|\n(?=\s*(?:[-*]|\d+\.)\s)", t) if p.strip()]
    plain = [str(el.value) for el in getattr(at, "text", [])] + [
        str(el.value) for el in at.get("code") if getattr(el, "language", None) in PLAIN_CODE]
    return prose + [p for t in plain for p in re.split(r"\n\s*\n", t) if p.strip()]


def too_long(at) -> list[tuple[int, str]]:
    return [(n, p[:90] + "...") for p in paragraphs(at) if (n := words(p)) > MAX_PARAGRAPH]


def test_the_paragraph_splitter_finds_a_long_one():
    """The check itself: a 121-word block is caught, blank lines and list items split blocks."""
    class Fake:
        def __init__(self, v):
            self.value, self.label = v, v

    class At:
        markdown = [Fake(" ".join(["word"] * 121)), Fake(("two words. " * 40) + "\n\n" + ("two words. " * 40))]
        caption = info = warning = success = error = expander = text = []

        @staticmethod
        def get(kind):
            return []

    assert [n for n, _ in too_long(At)] == [121]
    assert len(paragraphs(At)) == 3


def test_the_splitter_reads_plain_text_and_text_styled_code_as_one_block():
    """st.text and a code block with no language are prose too: seven lines of 31 words make one 217-word block
    (lines do not split it, a blank line does), while a Python snippet is a program, not prose."""
    class Fake:
        def __init__(self, v, language=None):
            self.value, self.label, self.language = v, v, language

    line = " ".join(["word"] * 31)
    seven = "\n".join([line] * 7)

    class At:
        markdown = caption = info = warning = success = error = expander = []
        text = [Fake(seven)]

        @staticmethod
        def get(kind):
            return [Fake(seven, "plaintext"), Fake(seven, "python")] if kind == "code" else []

    assert [n for n, _ in too_long(At)] == [217, 217]
    At.text = [Fake(line + "\n\n" + line)]
    assert len(paragraphs(At)) == 3 and [n for n, _ in too_long(At)] == [217]


@pytest.mark.parametrize("page", page_stems())
def test_no_paragraph_over_120_words_on_a_page_at_its_defaults(page):
    at = run_page(page)
    assert not at.exception, [e.value for e in at.exception]
    assert paragraphs(at), f"{page}: no prose found (did the page draw?)"
    assert not too_long(at), f"{page}: paragraphs over {MAX_PARAGRAPH} words: {too_long(at)}"


def walkthrough_steps() -> int:
    from lessons.figure3 import steps
    from model import V41Config

    return len(steps(V41Config.preset("v4.1-flash"), False))


@pytest.mark.parametrize("step", range(1, walkthrough_steps() + 1))
def test_every_walkthrough_step_is_short(step):
    at = run_page("figure3", step=step)
    assert not at.exception, [e.value for e in at.exception]
    assert not too_long(at), f"step {step}: paragraphs over {MAX_PARAGRAPH} words: {too_long(at)}"
    heading = next(h.value for h in at.subheader if h.value.startswith(f"{step}. "))
    # the step's main text: the Markdown block drawn under its heading that opens with the step's first words
    # (its caveats sit in the fine-print box, a caption)
    main = [str(m.value) for m in at.markdown if heading_body_start(heading) in str(m.value)]
    assert main, f"{heading}: its main text was not found on the page"
    assert words(main[0]) <= MAX_STEP, f"{heading}: main text has {words(main[0])} words: {main[0][:120]}..."


def heading_body_start(heading: str) -> str:
    """The first words of the step's own text, from the walkthrough's data (the page's default config)."""
    from lessons.figure3 import steps
    from model import V41Config

    i = int(heading.split(".")[0]) - 1
    return steps(V41Config.preset("v4.1-flash"), False)[i].body[:40]
