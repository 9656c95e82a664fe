"""Every page of the app in a real browser: it draws its charts, its main interaction changes what is shown,
and no Streamlit exception box, console error or failed request appears. One screenshot per page goes to
artifacts/screenshots/ (the README's pictures are copies of some of them)."""

from __future__ import annotations

import re

import pytest

from ui.nav import PAGES

pytestmark = pytest.mark.browser


def number(text: str) -> int:
    return int(re.search(r"\d[\d,]*", text).group().replace(",", ""))


def heading(ui, pattern: str) -> str:
    return ui.wait_text('[data-testid="stMain"] h3, [data-testid="stMain"] h2', pattern)


def covered() -> set[str]:
    """The pages this module has a test for: a test named `test_<page stem>` or `test_<page stem>_...`."""
    names = [n for n in globals() if n.startswith("test_")]
    return {p.stem for p in PAGES if any(n == f"test_{p.stem}" or n.startswith(f"test_{p.stem}_") for n in names)}


def test_every_listed_page_has_a_browser_test_and_a_sidebar_link(ui):
    missing = {p.stem for p in PAGES} - covered()
    assert not missing, f"pages without a browser test: {missing}"
    ui.open()
    nav = ui.page.locator('[data-testid="stSidebarNav"]')
    # "View N more" (a nav another test expanded shows "View less" instead: clicking it would collapse the list)
    more = nav.locator('[data-testid="stSidebarNavViewButton"]', has_text=re.compile("more", re.I))
    if more.count():
        more.click()                              # wait until the list has grown
        ui.page.wait_for_function("n => document.querySelectorAll('[data-testid=\"stSidebarNavLink\"]').length >= n",
                                  arg=len(PAGES))
    links = [re.sub(r"^\S+\n+", "", t).strip()
             for t in nav.locator('[data-testid="stSidebarNavLink"]').all_inner_texts()]
    assert [p.title for p in PAGES] == links
    # a click in the sidebar opens the page (client-side navigation, no reload)
    nav.locator('[data-testid="stSidebarNavLink"]', has_text="Layer map").click()
    ui.page.wait_for_url(re.compile(r"/layer_map"))
    ui.settle()
    assert ui.page.locator("h1").first.inner_text().startswith("Layer map")
    ui.assert_clean()


def test_home(ui):
    ui.open()
    assert ui.key("home_bar").locator(".js-plotly-plot").count() == 1           # the next-token chart
    for kind in ("unaided", "recall"):                                            # the far-fact pictures
        assert ui.key(f"home_far_fig_{kind}").locator(".js-plotly-plot").count() == 1, kind
    before = number(ui.wait_text('[data-testid="stCaptionContainer"]', "prompt tokens read"))
    ui.type_into("home_prompt", "Anna put the silver key in the green box near the door. Later she opened the")
    after = number(ui.wait_text('[data-testid="stCaptionContainer"]', "prompt tokens read"))
    assert after > before
    assert "prompt=Anna" in ui.page.url                   # the prompt is mirrored in the URL
    assert ui.key("home_bar").locator(".js-plotly-plot").count() == 1
    ui.assert_clean()
    ui.shot("home")
    # the typed prompt follows the reader to the inspector, and the job keeps it when they come back
    ui.page.get_by_text("Step through this prompt layer by layer").click()
    ui.page.wait_for_url(re.compile(r"/inspector"))
    ui.settle()
    assert ui.key("insp_prompt").locator("textarea").input_value().startswith("Anna put the silver key")
    ui.page.locator('[data-testid="stSidebarNavLink"]', has_text="Home").first.click()
    ui.settle()
    assert ui.key("home_prompt").locator("textarea").input_value().startswith("Anna put the silver key")
    ui.assert_clean()


def test_figure3(ui):
    ui.open("figure3")
    assert ui.charts() == 1
    assert heading(ui, r"^1\. ")
    ui.key("fig3_stepper").locator('[data-testid="stPaginationNext"]').click()
    ui.settle()
    assert heading(ui, r"^2\. ")
    assert "step=2" in ui.page.url
    # a click on a box's dot in the drawing opens that box (a plotly selection event: browser only)
    before = ui.selected("fig3_box")
    assert before
    dot = ui.key("fig3_chart").locator(".scatterlayer .trace").last.locator("path.point").nth(5)
    dot.click(force=True)
    ui.settle()
    ui.page.wait_for_function("([sel, old]) => document.querySelector(sel).value !== old",
                              arg=['.st-key-fig3_box [role="combobox"]', before])
    assert ui.selected("fig3_box") != before
    assert "box=" in ui.page.url
    ui.assert_clean()
    ui.shot("figure3")


def test_layer_map(ui):
    ui.open("layer_map")
    assert ui.charts() >= 1
    ui.choose("lm_layer", "layer 3:")
    info = ui.wait_text('[data-testid="stAlertContentInfo"]', r"^Layer 3 \(")
    assert "layer=3" in ui.page.url and info
    ui.assert_clean()
    ui.shot("layer_map")


def test_glossary_is_one_click_from_every_page(ui):
    ui.open("layer_map")
    ui.page.locator('[data-testid="stSidebar"] a', has_text="Glossary").first.click()
    ui.page.wait_for_url(re.compile(r"/glossary"))
    ui.settle(charts=False)
    assert ui.page.locator("h1").first.inner_text().startswith("Glossary")
    ui.wait_text('[data-testid="stMain"]', "how sure")
    ui.assert_clean()
    ui.shot("glossary")


def test_csa2_modes(ui):
    ui.open("csa2_modes")
    before = number(ui.wait_text('[data-testid="stCaptionContainer"]', "tokens traced"))
    ui.choose("live_sample", "Your own text")
    ui.type_into("live_text", "The key is in the box.")
    after = number(ui.wait_text('[data-testid="stCaptionContainer"]', "tokens traced"))
    assert after < before and after < 20
    assert not ui.alerts("Error"), ui.alerts("Error")   # the trace agrees with the layer map
    ui.assert_clean()
    ui.shot("csa2_modes")


def test_attention_shares(ui):
    ui.open("attention_shares")
    assert ui.charts() >= 2
    metric = ui.key("toy_0").locator("xpath=ancestor::*[@data-testid='stColumn'][1]").locator(
        '[data-testid="stMetricValue"]')
    before = metric.inner_text()
    thumb = ui.key("toy_0").locator('input[type="range"]')
    thumb.focus()
    thumb.press("ArrowRight")
    ui.settle()
    ui.page.wait_for_function("([el, old]) => el.innerText !== old", arg=[metric.element_handle(), before])
    assert metric.inner_text() != before
    assert "toy0=" in ui.page.url
    ui.assert_clean()
    ui.shot("attention_shares")


def test_recurrence(ui):
    ui.open("recurrence")
    assert ui.charts() >= 1
    before = heading(ui, r"^The weights of layer")
    current = ui.selected("rec_layer")
    opts = [o.strip() for o in ui.open_options("rec_layer").all_inner_texts()]
    other = next(o for o in opts if o and o != current.strip())
    ui.page.get_by_role("option", name=other, exact=True).first.click()
    ui.settle()
    after = heading(ui, r"^The weights of layer")
    assert after != before
    assert ui.alerts("Success")              # no tensor shared between layers
    ui.assert_clean()
    ui.shot("recurrence")


def test_cache_calculator(ui):
    ui.open("cache_calculator")
    assert ui.charts() >= 1
    hbm = ui.page.locator('[data-testid="stMetricValue"]').first
    # it opens on V4.1 at 131,072 tokens, the why-this-size chart beside the inputs
    ui.wait_text('[data-testid="stPlotlyChart"] .gtitle', "DeepSeek-V4.1-Flash: .* at 131,072 tokens")
    before = hbm.inner_text()
    ui.type_into("cc_context", "65536", submit="Enter")
    # the chart's title (read back from the drawn SVG) and the HBM metric follow the new input, with the change
    ui.wait_text('[data-testid="stPlotlyChart"] .gtitle', "at 65,536 tokens")
    assert hbm.inner_text() != before
    assert ui.texts('[data-testid="stMetricDelta"]')[0].strip().startswith("-")
    assert "context=65536" in ui.page.url and "preset=" not in ui.page.url
    ui.choose("cc_preset", "DeepSeek-V4-Flash")                   # another design keeps the reader's context
    ui.wait_text('[data-testid="stPlotlyChart"] .gtitle', "DeepSeek-V4-Flash: .* at 65,536 tokens")
    ui.assert_clean()
    ui.shot("cache_calculator")


def test_prefill_decode(ui):
    ui.open("prefill_decode", tread=60, twritten=2)
    assert ui.charts() >= 2
    ratio = ui.page.locator('[data-testid="stMetricValue"]').first
    before = ratio.inner_text()
    ui.type_into("pd_read", "2000", submit="Enter")
    ui.page.wait_for_function("([el, old]) => el.innerText !== old", arg=[ratio.element_handle(), before])
    ui.click("pd_measure")
    text = ui.wait_text('[data-testid="stMarkdownContainer"]', r"reading 60 tokens took")
    assert "writing 2 took" in text
    ui.assert_clean()
    ui.shot("prefill_decode")


def test_where_time_goes(ui):
    ui.open("where_time_goes", gpu="h200", gpus=1)
    ui.wait_text('[data-testid="stPlotlyChart"] .gtitle', r"Roofline per GPU on one NVIDIA H200")
    ui.open("where_time_goes", gpu="b200", batch=64)
    assert ui.charts() >= 1
    ui.wait_text('[data-testid="stPlotlyChart"] .xtitle', "arithmetic intensity")
    text = ui.wait_text('[data-testid="stMarkdownContainer"]', r"one decode step at batch 64 is")
    assert "NVIDIA B200" in text
    title = ui.wait_text('[data-testid="stPlotlyChart"] .gtitle', r"Roofline per GPU on 8x NVIDIA B200")
    ui.choose("wt_gpu", "NVIDIA H200")                       # another deployment: the chart follows
    assert ui.wait_text('[data-testid="stPlotlyChart"] .gtitle', r"Roofline per GPU on 8x NVIDIA H200") != title
    assert "gpu=h200" in ui.page.url
    ui.click("wt_measure")
    ui.wait_text('[data-testid="stMarkdownContainer"]', r"of the measured matmul peak")
    ui.assert_clean()
    ui.shot("where_time_goes")


def test_compare_designs(ui):
    ui.open("compare_designs")
    assert ui.charts() >= 2
    ui.wait_text('[data-testid="stPlotlyChart"] .gtitle', "1,048,576 tokens")
    ui.type_into("cd_ctx", "4096", submit="Enter")
    ui.wait_text('[data-testid="stPlotlyChart"] .gtitle', "at 4,096 tokens")
    assert "ctx=4096" in ui.page.url
    ui.assert_clean()
    ui.shot("compare_designs")


def test_inspector(ui):
    ui.open("inspector", gen=2)
    assert ui.charts() >= 3
    before = heading(ui, r"^Layer \d+ ·")
    ui.key("insp_layer_step").locator('[data-testid="stPaginationNext"]').click()
    ui.settle()
    after = heading(ui, r"^Layer \d+ ·")
    assert number(after) == number(before) + 1
    assert f"layer={number(after)}" in ui.page.url
    ui.assert_clean()
    ui.shot("inspector")


def test_indexer_pools(ui):
    ui.open("indexer_pools")
    if ui.alerts("Info") and any("no candidate pool" in a for a in ui.alerts("Info")):
        pytest.skip("this model has no candidate pool")
    assert ui.charts() >= 3
    title = ui.wait_text('[data-testid="stPlotlyChart"] .gtitle', "every query row")
    radios = ui.key("pool_layer").locator("label")
    if radios.count() >= 2:                 # another Reindex layer: its own rows
        radios.filter(has=ui.page.locator("input:not(:checked)")).first.click()   # a layer not shown now
        ui.settle()
        ui.page.wait_for_function(
            """([sel, old]) => [...document.querySelectorAll(sel)].some(e => /every query row/.test(e.textContent)
                                                                             && e.textContent !== old)""",
            arg=['[data-testid="stPlotlyChart"] .gtitle', title])
        assert ui.wait_text('[data-testid="stPlotlyChart"] .gtitle', "every query row") != title
    thumb = ui.key("pool_nb").locator('input[type="range"]')
    before = thumb.input_value()
    thumb.focus()
    thumb.press("ArrowLeft" if before != thumb.get_attribute("min") else "ArrowRight")
    ui.settle()
    assert thumb.input_value() != before
    assert "pool=" in ui.page.url
    ui.assert_clean()
    ui.shot("indexer_pools")


def test_lookback_heads(ui):
    """The gap slider moved by keyboard past the window redraws the reading; the strongest-head button puts the
    head picker back on that head."""
    ui.open("lookback_heads", gap=16)
    assert ui.charts() == 5
    ui.wait_text('[data-testid="stMarkdownContainer"]', r"^Each token of the second copy has its match 28 tokens "
                                                          r"back.*inside the")
    ui.key("lb_pattern").scroll_into_view_if_needed()       # the picture: one head's diagonal over the first copy
    ui.shot("lookback_heads")
    thumb = ui.key("lb_gap").locator('input[type="range"]')
    for _ in range(6):          # one step at a time: a key pressed while the page reruns can be lost
        thumb.focus()
        thumb.press("ArrowRight")
        ui.settle()
    ui.wait_text('[data-testid="stMarkdownContainer"]', r"has its match 34 tokens back.*beyond the")
    assert "gap=22" in ui.page.url
    ui.click("lb_best")
    ui.wait_text('[data-testid="stPlotlyChart"] .gtitle', r"each token of the second copy")
    ui.assert_clean()


def test_dspark(ui):
    ui.open("dspark", gen=6)
    ui.click("ds_start")
    ui.wait_text('[data-testid="stText"]', "Output so far")
    ui.wait_text('[data-testid="stCaptionContainer"]', r"\b0 steps")
    ui.click("ds_step")
    cap = ui.wait_text('[data-testid="stCaptionContainer"]', r"\b1 steps")
    assert "cache length" in cap
    ui.wait_text('[data-testid="stMarkdownContainer"]', r"^Step 1: the drafter proposed")
    ui.click("ds_run")
    ui.wait_text('[data-testid="stPlotlyChart"] .gtitle', "Acceptance per draft position")
    ui.assert_clean()
    ui.shot("dspark")


def test_ablation(ui):
    ui.open("ablation")
    # the cheapest run: one configuration (Backspace removes the last chosen one), 3 stories, 512 natural tokens
    tags = ui.key("abl_configs").locator('[data-tag]')
    while tags.count() > 1:
        n = tags.count()
        tags.last.locator('button[aria-label^="Remove"]').click()
        ui.page.wait_for_function("([sel, n]) => document.querySelectorAll(sel).length < n",
                                  arg=['.st-key-abl_configs [data-tag]', n])
        ui.settle(charts=False)
    ui.choose("abl_stories", "3")
    ui.choose("abl_natural", "512")
    before = ui.charts()  # the far-fact panel draws its own map
    ui.click("abl_run")
    ui.wait_text('[data-testid="stMain"] h3', "Side by side")
    assert ui.charts() == before + 2          # one per set run: the sidebar's and a recall checkpoint beside it
    ui.assert_clean()
    ui.shot("ablation")
