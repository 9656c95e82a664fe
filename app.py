"""V4.1 Explorer: the Streamlit entry. `streamlit run app.py` (bound to 127.0.0.1 by .streamlit/config.toml).

The entry is a frame around every page: page config, the navigation (its pages are ui.nav's list), and the shared
sidebar (weights, checkpoint, numbering) drawn here once per run so its choices belong to the session, not to a page.
"""

from pathlib import Path

import streamlit as st

from ui.nav import PAGES, sections
from ui.session import app_frame, navigation_pages
from ui.tour import PAGE_FILE
from ui.url import PAGE_TITLE

# an emoji favicon is drawn locally; a ":material/...:" one is fetched from a font CDN (fails offline)
st.set_page_config(page_title="V4.1 Explorer", page_icon="🧭", layout="wide")

HERE = Path(__file__).parent
# a page file that is missing is a broken install: say so, rather than leave a hole in the navigation
missing = [p.file for p in PAGES if not (HERE / p.file).is_file()]
if missing:
    raise FileNotFoundError(f"page files missing from {HERE}: {', '.join(missing)}")
nav = navigation_pages(HERE)
files = {page.url_path: spec.file for pages, items in zip(sections().values(), nav.values())
         for spec, page in zip(pages, items)}
page = st.navigation(nav, expanded=True)   # every section shown, no "View N more"
st.session_state[PAGE_TITLE] = page.title   # pages name each other in sentences ("your text from Home")
st.session_state[PAGE_FILE] = files.get(page.url_path, "")   # the tour finds its stops by page file
with app_frame():
    page.run()
