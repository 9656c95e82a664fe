"""Real-browser fixtures: the app started as the README starts it, driven by Playwright in Debian's Chromium.

- `app`: `streamlit run app.py` on a free loopback port (bench/server.py), waited for through
  /_stcore/health, stopped by its process id at the end of the session.
- `browser`: headless /usr/bin/chromium (Playwright's own browser download is not used) with a fresh
  user-data directory and no network beyond loopback.
- `ui`: one tab per test, wrapped in `AppPage` (open a page, wait for the script run and the charts,
  read text back, collect console errors, save a screenshot to artifacts/screenshots/).

Weights: the trained tiny weights when data/weights/tiny/model.safetensors exists, else `?weights=random`.
Everything waits generously (BROWSER_TIMEOUT_S, default 600 s) because a loaded 2-core machine can
take a minute to run a page; a fast machine passes through these waits at once.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import server as app_server  # noqa: E402

SHOTS = ROOT / "artifacts" / "screenshots"
TIMEOUT_MS = int(float(os.environ.get("BROWSER_TIMEOUT_S", "600")) * 1000)
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]


def chromium_path() -> str | None:
    for p in (os.environ.get("CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium")):
        if p and Path(p).exists():
            return p
    return None


@pytest.fixture(scope="session")
def app(tmp_path_factory):
    srv = app_server.start(tmp_path_factory.mktemp("server") / "server.log")
    yield srv
    srv.stop()
    loads = srv.model_loads_by_choice()   # the tests choose several weights; each is loaded once per server
    assert all(n == 1 for n in loads.values()), f"a model was loaded more than once in one server: {loads}"


@pytest.fixture(scope="session")
def browser():
    exe = chromium_path()
    if exe is None:
        msg = "Debian's chromium is not installed (apt-get install chromium)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="v41-chromium-")
    with sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(profile, executable_path=exe, headless=True, args=CHROMIUM_ARGS,
                                                    viewport={"width": 1280, "height": 900}, device_scale_factor=1)
        # loopback only: any other http(s) request is refused in the browser and reported as a failed request
        ctx.route(re.compile(r"^https?://(?!(127\.0\.0\.1|localhost)[:/])"), lambda route: route.abort())
        yield ctx
        ctx.close()
    shutil.rmtree(profile, ignore_errors=True)


class AppPage:
    """One browser tab on the app, with the waits and reads every page test needs."""

    def __init__(self, page, app, name: str):
        self.page, self.app, self.name = page, app, name
        self.console: list[str] = []
        self.failed: list[str] = []
        self.dialogs: list[str] = []
        page.on("console", self._on_console)
        page.on("pageerror", lambda e: self.console.append(f"pageerror: {e}"))
        page.on("requestfailed", self._on_failed)
        page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        page.set_default_timeout(TIMEOUT_MS)

    # Streamlit's frontend finds its base path by probing `<page path>/_stcore/health` and `/host-config`
    # before the server root; on a page's own URL (/inspector) the first probe answers 404 by design.
    BASE_PATH_PROBE = re.compile(r"/[^/?#]+/_stcore/(health|host-config)$")

    # A rerun replaces the page's media files (the "Reproduce in Python" downloads); the browser then
    # abandons a fetch of the old one (net::ERR_ABORTED). Nothing fails for the reader: a media file
    # the server does not have answers 404, which is still reported.
    SUPERSEDED_MEDIA = re.compile(r"/media/[0-9a-f]+\.\w+$")

    def _on_failed(self, r) -> None:
        if "ERR_ABORTED" in (r.failure or "") and self.SUPERSEDED_MEDIA.search(r.url.split("?")[0]):
            return
        self.failed.append(f"{r.url} {r.failure}")

    def _on_console(self, m) -> None:
        if m.type != "error":
            return
        url = (m.location or {}).get("url", "")
        if "404" in m.text and self.BASE_PATH_PROBE.search(url.split("?")[0]):
            return
        self.console.append(f"{m.type}: {m.text} ({url})" if url else f"{m.type}: {m.text}")

    # ---- navigation and waiting ----------------------------------------------------------------------------
    def open(self, path: str = "", **params) -> "AppPage":
        w = app_server.default_weights()
        if w and "weights" not in params:
            params = {"weights": w, **params}
        q = ("?" + urlencode(params)) if params else ""
        self.page.goto(f"{self.app.url}/{path}{q}")
        return self.settle()

    def settle(self, charts: bool = True) -> "AppPage":
        """Wait until the script run is over and every chart on the page has drawn."""
        p = self.page
        p.wait_for_selector('[data-testid="stApp"]')
        time.sleep(0.3)      # let a rerun that was just triggered register as running
        # a fresh server's first visit shows the bare page list and an empty, "notRunning" page before the app's
        # first run is under way: every page of the app draws its title (h1), so wait for that too
        p.wait_for_function(
            """() => { const a = document.querySelector('[data-testid="stApp"]');
                       return a && a.getAttribute('data-test-script-state') === 'notRunning'
                              && !document.querySelector('[data-testid="stSkeleton"]')
                              && document.querySelector('[data-testid="stMain"] h1'); }""",
            timeout=TIMEOUT_MS)
        if charts:  # visible charts only: those in closed tabs or expanders draw when opened
            p.wait_for_function(
                """() => [...document.querySelectorAll('[data-testid="stPlotlyChart"]')]
                          .filter(c => c.offsetParent !== null).every(c => c.querySelector('.main-svg'))""",
                timeout=TIMEOUT_MS)
        return self

    def charts(self) -> int:
        """How many plotly charts have drawn their SVG."""
        return self.page.evaluate("""() => [...document.querySelectorAll('[data-testid="stPlotlyChart"]')]
                                            .filter(c => c.querySelector('.main-svg')).length""")

    # ---- reading -------------------------------------------------------------------------------------------
    def main_text(self) -> str:
        return self.page.locator('[data-testid="stMain"]').inner_text()

    def texts(self, selector: str) -> list[str]:
        # SVG text (plotly titles) has no innerText: fall back to textContent
        return self.page.locator(selector).evaluate_all("els => els.map(e => e.innerText ?? e.textContent ?? '')")

    def key(self, key: str):
        """The element container of the widget with this key."""
        return self.page.locator(f".st-key-{key}")

    def wait_text(self, selector: str, pattern: str, timeout: int = TIMEOUT_MS) -> str:
        """Wait until some element matching `selector` has text matching the regex `pattern`; return it."""
        self.page.wait_for_function(
            """([sel, pat]) => [...document.querySelectorAll(sel)]
                                 .some(e => new RegExp(pat).test(e.innerText ?? e.textContent ?? ''))""",
            arg=[selector, pattern], timeout=timeout)
        return next(t for t in self.texts(selector) if re.search(pattern, t))

    def alerts(self, kind: str = "") -> list[str]:
        """Texts of st.warning / st.error / st.info boxes (kind: Warning, Error, Info, Success or '' for all)."""
        return self.texts(f'[data-testid="stAlertContent{kind}"]' if kind else '[data-testid="stAlert"]')

    # ---- acting --------------------------------------------------------------------------------------------
    def choose(self, key: str, option: str) -> "AppPage":
        """Pick `option` (its visible text) in the selectbox with this key."""
        opts = self.open_options(key)
        texts = [t.strip() for t in opts.all_inner_texts()]
        # the option with exactly this text, else the first that starts with it ("layer 3:" -> "layer 3: Reuse")
        i = texts.index(option) if option in texts else next(i for i, t in enumerate(texts) if t.startswith(option))
        opts.nth(i).click()
        return self.settle()

    def open_options(self, key: str):
        """Open the list of the selectbox with this key (its "Open" button; a click on the text field only
        focuses it) and return the options' locator."""
        opts = self.page.locator('[role="option"]')
        for _ in range(3):
            self.key(key).locator('button[aria-haspopup="listbox"]').first.click()
            try:
                opts.first.wait_for(timeout=5000)
                return opts
            except Exception:
                continue
        opts.first.wait_for()
        return opts

    def selected(self, key: str) -> str:
        """The shown value of the selectbox with this key (Streamlit's selectbox is a react-aria combobox)."""
        return self.key(key).locator('[role="combobox"]').first.input_value()

    def click(self, key: str) -> "AppPage":
        self.key(key).locator("button").first.click()
        return self.settle()

    def type_into(self, key: str, text: str, submit: str = "Control+Enter") -> "AppPage":
        """Replace a text area / text input / number input's content and commit it like a reader."""
        box = self.key(key).locator("textarea, input").first
        box.fill(text)
        box.press(submit)
        return self.settle()

    # ---- checks --------------------------------------------------------------------------------------------
    def assert_clean(self) -> None:
        """No Streamlit exception box, no browser console error, no failed request, no JS dialog."""
        exc = self.texts('[data-testid="stException"]')
        assert not exc, f"{self.name}: Streamlit exception box(es): {exc}"
        assert not self.console, f"{self.name}: browser console errors: {self.console}"
        assert not self.failed, f"{self.name}: failed requests: {self.failed}"
        assert not self.dialogs, f"{self.name}: a dialog opened (script ran?): {self.dialogs}"

    def shot(self, name: str | None = None) -> Path:
        SHOTS.mkdir(parents=True, exist_ok=True)
        path = SHOTS / f"{name or self.name}.png"
        self.page.screenshot(path=str(path))
        return path


@pytest.fixture
def ui(app, browser, request):
    page = browser.new_page()
    ap = AppPage(page, app, request.node.name.removeprefix("test_").replace("[", "-").rstrip("]"))
    yield ap
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:  # what the page looked like when the test failed
        try:
            ap.shot(ap.name + "-failed")
        except Exception:
            pass
    page.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call":
        item.rep_call = rep
