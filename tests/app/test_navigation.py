"""The navigation (app.py, its list in ui.nav): every page it lists is a file of pages/, and a missing page file
stops the app with a message naming it instead of leaving a hole in the navigation."""

from __future__ import annotations

import shutil

import pytest
from streamlit.testing.v1 import AppTest

from tests.conftest import ROOT
from ui.nav import PAGES

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def test_every_listed_page_is_a_file_and_every_page_file_is_listed():
    listed = [p.file for p in PAGES]
    assert listed and all((ROOT / f).is_file() for f in listed)
    assert sorted(listed) == sorted(f"pages/{p.name}" for p in (ROOT / "pages").glob("*.py"))


def test_a_missing_page_file_stops_the_app_with_its_name(tmp_path):
    shutil.copy(ROOT / "app.py", tmp_path / "app.py")
    shutil.copytree(ROOT / "pages", tmp_path / "pages")
    (tmp_path / "pages" / "glossary.py").unlink()
    at = AppTest.from_file(str(tmp_path / "app.py"), default_timeout=120).run()
    assert at.exception and "pages/glossary.py" in at.exception[0].message
