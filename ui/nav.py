"""The app's pages as data: the one list app.py's navigation, the warm-up, bench.pages and the tests read.

Each `PageSpec` says where the page's script is, how the navigation names it (title, icon, section), its URL
path, and what it needs (a model, a prompt, charts drawn at its defaults), so a test that needs a subset filters
this list by a field instead of keeping a list of its own. Adding a page is one row here and its file in pages/.

This module imports nothing from Streamlit: it is read without a server (the tests, bench.pages). It does not
know what a page draws; app.py turns the rows into `st.Page`s.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class PageSpec:
    file: str                 # relative to the repository root: "pages/inspector.py"
    title: str                # the navigation's name for it (pages name each other by it in sentences)
    icon: str
    section: str
    needs_model: bool = True  # draws from the loaded model (a page without one says so instead)
    takes_prompt: bool = False  # the reader types a prompt on it (ui.prompt)
    charts: bool = True       # draws charts at its defaults (a warm rerun must build none)
    default: bool = False     # the page `/` opens

    @property
    def stem(self) -> str:
        return Path(self.file).stem

    @property
    def url_path(self) -> str:
        """The page's path in a link: "" for the default page, else its file's stem (Streamlit's rule)."""
        return "" if self.default else self.stem

    @property
    def path(self) -> Path:
        return ROOT / self.file


PAGES: tuple[PageSpec, ...] = (
    PageSpec("pages/home.py", "Home", ":material/home:", "Start", takes_prompt=True, default=True),
    PageSpec("pages/figure3.py", "Figure 3 walkthrough", ":material/account_tree:", "Figure 3"),
    PageSpec("pages/layer_map.py", "Layer map", ":material/table_rows:", "Figure 3"),
    PageSpec("pages/csa2_modes.py", "CSA2 modes", ":material/call_split:", "Figure 3", charts=False),
    PageSpec("pages/attention_shares.py", "Attention shares", ":material/percent:", "Figure 3"),
    PageSpec("pages/recurrence.py", "Is this recurrence?", ":material/repeat:", "Figure 3"),
    PageSpec("pages/cache_calculator.py", "Cache calculator", ":material/calculate:", "Memory", needs_model=False),
    PageSpec("pages/prefill_decode.py", "Prefill vs decode", ":material/swap_horiz:", "Memory"),
    PageSpec("pages/where_time_goes.py", "Where the time goes", ":material/speed:", "Memory"),
    PageSpec("pages/compare_designs.py", "Compare designs", ":material/compare:", "Memory", needs_model=False),
    PageSpec("pages/inspector.py", "Prompt inspector", ":material/search:", "Run a prompt", takes_prompt=True),
    PageSpec("pages/indexer_pools.py", "Indexer pools", ":material/filter_alt:", "Run a prompt", takes_prompt=True),
    PageSpec("pages/lookback_heads.py", "Look-back heads", ":material/history:", "Run a prompt", takes_prompt=True),
    # its charts come after a click (tests/app/test_reruns.py checks them there)
    PageSpec("pages/dspark.py", "DSpark draft & verify", ":material/bolt:", "Run a prompt", takes_prompt=True,
             charts=False),
    PageSpec("pages/ablation.py", "Ablation lab", ":material/science:", "Run a prompt"),
    PageSpec("pages/glossary.py", "Glossary", ":material/menu_book:", "Reference", needs_model=False, charts=False),
)


def sections() -> dict[str, list[PageSpec]]:
    """The pages by section, in the navigation's order."""
    out: dict[str, list[PageSpec]] = {}
    for p in PAGES:
        out.setdefault(p.section, []).append(p)
    return out


def by_file(file: str) -> PageSpec | None:
    return next((p for p in PAGES if p.file == file), None)


def stems(**where) -> list[str]:
    """The stems of the pages whose fields equal `where` (`stems(section="Figure 3")`, `stems(charts=True)`)."""
    return [p.stem for p in PAGES if all(getattr(p, k) == v for k, v in where.items())]
