"""AppTest for the home page and the weights choice every page shares: Home renders on CPU with the random
tiny weights and answers an empty prompt with a message; an unknown weights choice, or a checkpoint chosen
where the server offers none, gives a message on each page that needs a model, never a traceback."""

from __future__ import annotations

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from tests.conftest import ROOT, run_page
from ui.nav import stems

PAGES = stems(section="Figure 3")   # a model's pages: the Figure 3 section


def no_errors(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


def test_start_renders():
    at = run_page("home", timeout=180)
    no_errors(at)
    assert at.title


def test_start_empty_prompt():
    at = run_page("home", timeout=180)
    assert any("random weights" in i.value for i in at.info)
    at.text_area(key="home_prompt").input("").run()
    no_errors(at)
    assert any("empty" in w.value for w in at.warning)


def test_unknown_weights_choice():
    at = AppTest.from_file(str(ROOT / "pages" / "layer_map.py"), default_timeout=180)
    at.query_params["weights"] = "bogus"
    at.run()
    no_errors(at)
    assert any("is not a weights choice" in w.value for w in at.warning)
    assert isinstance(at.dataframe[0].value, pd.DataFrame)


@pytest.mark.parametrize("page", PAGES)
def test_pages_without_a_model(page, tmp_path, monkeypatch):
    """Checkpoint chosen but the server offers none: no model; every page still renders with a message."""
    monkeypatch.setenv("V41_CHECKPOINT_ROOTS", str(tmp_path))
    at = AppTest.from_file(str(ROOT / "pages" / f"{page}.py"), default_timeout=180)
    at.query_params["weights"] = "checkpoint"
    at.run()
    no_errors(at)
    assert at.error or at.info
