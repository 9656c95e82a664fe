"""V4.1 Explorer: the Streamlit entry. `streamlit run app.py` (bound to 127.0.0.1 by .streamlit/config.toml).

The entry is a frame around every page: page config, the navigation, and the shared sidebar (weights,
checkpoint, numbering) drawn here once per run so its choices belong to the session, not to a page.
"""

from pathlib import Path

import streamlit as st

from ui.common import app_frame
from ui.state import PAGE_TITLE
from ui.tour import PAGE_FILE

# an emoji favicon is drawn locally; a ":material/...:" one is fetched from a font CDN (fails offline)
st.set_page_config(page_title="V4.1 Explorer", page_icon="🧭", layout="wide")

HERE = Path(__file__).parent
SECTIONS = {
    "Start": [("pages/start.py", "Home", ":material/home:", True)],
    "Figure 3": [
        ("pages/figure3.py", "Figure 3 walkthrough", ":material/account_tree:", False),
        ("pages/layer_map.py", "Layer map", ":material/table_rows:", False),
        ("pages/csa2_modes.py", "CSA2 modes", ":material/call_split:", False),
        ("pages/attention_shares.py", "Attention shares", ":material/percent:", False),
        ("pages/recurrence.py", "Is this recurrence?", ":material/repeat:", False),
    ],
    "Memory": [
        ("pages/cache_calculator.py", "Cache calculator", ":material/calculate:", False),
        ("pages/prefill_decode.py", "Prefill vs decode", ":material/swap_horiz:", False),
        ("pages/where_time_goes.py", "Where the time goes", ":material/speed:", False),
        ("pages/compare_designs.py", "Compare designs", ":material/compare:", False),
    ],
    "Run a prompt": [
        ("pages/inspector.py", "Prompt inspector", ":material/search:", False),
        ("pages/indexer_pools.py", "Indexer pools", ":material/filter_alt:", False),
        ("pages/lookback_heads.py", "Look-back heads", ":material/history:", False),
        ("pages/dspark.py", "DSpark draft & verify", ":material/bolt:", False),
        ("pages/ablation.py", "Ablation lab", ":material/science:", False),
    ],
    "Reference": [("pages/glossary.py", "Glossary", ":material/menu_book:", False)],
}

# a page file that is missing is a broken install: say so, rather than leave a hole in the navigation
missing = [f for pages in SECTIONS.values() for f, *_ in pages if not (HERE / f).is_file()]
if missing:
    raise FileNotFoundError(f"page files missing from {HERE}: {', '.join(missing)}")
nav = {section: [st.Page(str(HERE / f), title=t, icon=i, default=d) for f, t, i, d in pages]
       for section, pages in SECTIONS.items()}
files = {p.url_path: f for pages, items in zip(SECTIONS.values(), nav.values()) for (f, *_), p in zip(pages, items)}
page = st.navigation(nav, expanded=True)   # every section shown, no "View N more"
st.session_state[PAGE_TITLE] = page.title   # pages name each other in sentences ("your text from Home")
st.session_state[PAGE_FILE] = files.get(page.url_path, "")   # the tour finds its stops by page file
with app_frame():
    page.run()
