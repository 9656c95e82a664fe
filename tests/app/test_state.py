"""One session, many pages (AppTest): session choices, page state and the URL.

The rule (ui.url): on arriving at a page the URL's value wins, then the session's, then the default; the page
writes its state back into the URL, so a fresh open of that URL shows the same view. AppTest runs app.py with
its navigation (`switch_page`); a browser empties the URL when it changes page, which the tests do by hand.
What only a browser shows (Streamlit dropping a page's widget values on a page change) is in
tests/browser/test_state_browser.py.
"""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from tests.conftest import ROOT
from ui.text import as_shown

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def app_at(page: str = "", **params) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.query_params.update({"weights": "random", **{k: str(v) for k, v in params.items()}})
    at.run()
    if page:
        go(at, page, keep_url=True)
    return at


def go(at: AppTest, page: str, keep_url: bool = False, **params) -> AppTest:
    """Click a page in the navigation: the browser drops the old page's URL parameters (or opens a link)."""
    at.switch_page(f"pages/{page}.py")
    if not keep_url:
        at.query_params.clear()
    at.query_params.update({k: str(v) for k, v in params.items()})
    return at.run()


def page_at(page: str, **params) -> AppTest:
    """A fresh session opening the page's URL (the page file run on its own, as the tests elsewhere do)."""
    at = AppTest.from_file(str(ROOT / "pages" / f"{page}.py"), default_timeout=300)
    at.query_params.update({k: (v[-1] if isinstance(v, list) else str(v)) for k, v in params.items()})
    return at.run()


def ok(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


def url(at: AppTest) -> dict:
    return {k: (v[-1] if isinstance(v, list) else v) for k, v in at.query_params.items()}


def view(at: AppTest) -> dict:
    """What a reader sees, minus what needs a click: every keyed widget's value, and the message boxes."""
    widgets = {}
    for kind in ("radio", "selectbox", "multiselect", "slider", "select_slider", "number_input", "text_area",
                 "text_input", "toggle", "checkbox"):
        for w in getattr(at, kind):
            if w.key and not w.key.startswith("$$"):
                widgets[w.key] = w.value
    msgs = sorted(as_shown(x.value) for k in ("warning", "error", "info") for x in getattr(at, k))
    return {"widgets": widgets, "messages": msgs}


# ---- session choices --------------------------------------------------------------------------------------------
def test_session_choices_survive_navigation_and_are_written_into_the_url():
    at = app_at()
    ok(at)
    at.radio(key="numbering_choice").set_value("1").run()
    for page in ("layer_map", "cache_calculator", "figure3"):
        go(at, page)
        ok(at)
        assert at.radio(key="numbering_choice").value == "1" and at.radio(key="weights_choice").value == "random"
        assert url(at)["numbering"] == "1" and url(at)["weights"] == "random", url(at)


def test_a_link_wins_over_the_session_on_arrival():
    at = app_at("layer_map")
    at.selectbox(key="lm_layer").set_value(5).run()
    assert url(at)["layer"] == "5"
    go(at, "home")
    go(at, "layer_map")                                  # back by navigation: the session's value
    assert at.selectbox(key="lm_layer").value == 5 and url(at)["layer"] == "5"
    go(at, "home")
    go(at, "layer_map", weights="random", layer=7)        # arriving through a link: the link's value
    assert at.selectbox(key="lm_layer").value == 7
    fresh = page_at("layer_map", weights="random")        # a fresh session without one: the default
    assert fresh.selectbox(key="lm_layer").value == -1


# ---- the Cache calculator's second visit ---------------------------------------------------------------------------
def test_calculator_second_visit_keeps_working_when_streamlit_drops_its_widgets():
    """Streamlit forgets a page's widget values while another page is drawn; an "already initialised" flag in
    session state outlived them, and every input fell to its minimum ("global entries: 1 numbers x 4 bits is
    not a whole number of bytes"). A session that holds the flag and none of the values is that second visit."""
    at = AppTest.from_file(str(ROOT / "pages" / "cache_calculator.py"), default_timeout=300)
    at.query_params["weights"] = "random"
    at.session_state["cc_init"] = True          # what the first visit left behind (the old flag)
    at.session_state["cc_msgs"] = []
    at.run()
    ok(at)
    assert not at.error, [e.value for e in at.error]
    assert at.selectbox(key="cc_preset").value == "v4.1-flash"
    assert at.number_input(key="cc_context").value > 1


def test_calculator_state_survives_navigation():
    at = app_at("cache_calculator", preset="gqa")
    at.number_input(key="cc_batch").set_value(3).run()
    before = (at.metric[0].value, url(at))
    go(at, "home")
    go(at, "cache_calculator")
    ok(at)
    assert not at.error
    assert (at.metric[0].value, url(at)) == before
    assert url(at)["preset"] == "gqa" and url(at)["batch"] == "3"


# ---- arriving by navigation equals a fresh open of the URL ------------------------------------------------------
CHANGES = {
    "layer_map": [("selectbox", "lm_layer", 3), ("radio", "lm_table", "running")],
    "cache_calculator": [("selectbox", "cc_preset", "gqa"), ("number_input", "cc_batch", 4)],
    "compare_designs": [("number_input", "cd_ctx", 4096), ("number_input", "cd_batch", 2)],
    "prefill_decode": [("number_input", "pd_read", 1234), ("number_input", "pd_rounds", 3)],
    "figure3": [("toggle", "fig3_compact", True), ("selectbox", "fig3_step", 4)],
    "attention_shares": [("selectbox", "sh_layer", 4), ("selectbox", "sh_head", 1), ("slider", "toy_0", 40)],
    "recurrence": [("selectbox", "rec_layer", -1)],
    "inspector": [("select_slider", "insp_layer", 3), ("radio", "insp_mode", "exact")],
    "ablation": [("slider", "abl_topk", 2), ("selectbox", "abl_stories", 15)],
    "lookback_heads": [("slider", "lb_gap", 60), ("slider", "lb_span", 8), ("number_input", "lb_passage", 3),
                       ("selectbox", "lb_head", 2)],
    "glossary": [("text_input", "glossary_find", "window")],
}


@pytest.mark.parametrize("page", list(CHANGES))
def test_arriving_by_navigation_equals_a_fresh_open_of_the_url(page):
    at = app_at(page)
    ok(at)
    for kind, key, value in CHANGES[page]:
        w = getattr(at, kind)(key=key)
        if value == -1:                           # the last option
            w.select_index(len(w.options) - 1).run()
        else:
            w.set_value(value).run()
        ok(at)
    go(at, "home")
    go(at, page)
    ok(at)
    seen = view(at)
    fresh = page_at(page, **url(at))
    ok(fresh)
    assert view(fresh) == seen, (url(at), view(fresh), seen)


def test_a_rejected_prompt_is_what_the_url_shows():
    at = app_at("home")
    at.text_area(key="home_prompt").set_value("   ").run()
    assert "empty" in " ".join(w.value for w in at.warning)
    fresh = page_at("home", **url(at))
    assert fresh.text_area(key="home_prompt").value == "   " and view(fresh) == view(at)
    long = "word " * 5000                              # 25,000 characters: over the page's limit and a link's
    at.text_area(key="home_prompt").set_value(long).run()
    assert "prompt" not in url(at)
    assert any("longer than the links this page writes keep" in c.value for c in at.caption)


# ---- messages that said the wrong thing --------------------------------------------------------------------------
def test_sample_ranges_are_the_same_on_every_page():
    said = {}
    for page in ("csa2_modes", "inspector", "indexer_pools", "dspark"):
        at = page_at(page, weights="random", sample=99)
        ok(at)
        said[page] = [w.value for w in at.warning if "sample" in w.value][0]
    ranges = {p: as_shown(m).split("outside ")[1].split(" ")[0] for p, m in said.items()}
    assert len(set(ranges.values())) == 1, ranges


def test_layer_map_range_message_has_no_internal_values():
    at = page_at("layer_map", weights="random", layer=99)
    msg = as_shown(" ".join(w.value for w in at.warning))
    assert "-1" not in msg and "outside 0..39" in msg and "no layer is highlighted" in msg, msg


def test_pool_and_dspark_limits_name_their_own_page():
    long = "the key is in the box " * 700
    for page, key in (("indexer_pools", "pool_prompt"), ("dspark", "ds_prompt")):
        at = page_at(page, weights="random")
        at.text_area(key=key).set_value(long).run()
        msg = as_shown(" ".join(w.value for w in at.warning))
        assert "inspector" not in msg and "stops at" in msg, msg


@pytest.mark.slow
@pytest.mark.parametrize("page, prefix", [("inspector", "insp"), ("indexer_pools", "pool"), ("dspark", "ds")])
def test_an_overlong_prompt_can_be_cut_to_what_the_page_runs(page, prefix):
    from lessons.prompts import first_tokens_text
    from model import random_tiny

    long = "the key is in the box. " * 1000                  # about 6,000 tokens of the random tiny's tokenizer
    at = page_at(page, weights="random")
    at.text_area(key=f"{prefix}_prompt").set_value(long).run()
    assert any("stops at" in w.value for w in at.warning)
    cut = at.button(key=f"{prefix}_cut")
    limit = int(cut.label.split("first ")[1].split(" ")[0].replace(",", ""))
    cut.click().run()
    assert not at.exception and not any("stops at" in w.value for w in at.warning), [w.value for w in at.warning]
    kept = at.text_area(key=f"{prefix}_prompt").value
    assert long.startswith(kept.rstrip()) and len(kept) < len(long)
    model = random_tiny(0)                                  # the page's random weights and tokenizer
    assert limit - 2 <= len(model.encode(kept)) <= limit                # as much as the page takes, no more
    assert first_tokens_text(model, kept, limit) is None and first_tokens_text(model, "short", limit) is None


def test_ablation_reads_its_url():
    at = page_at("ablation", weights="random", configs="full model,window only", topk=2, stories=15)
    ok(at)
    assert at.multiselect(key="abl_configs").value == ["full model", "window only"]
    assert at.slider(key="abl_topk").value == 2 and at.selectbox(key="abl_stories").value == 15
    bad = page_at("ablation", weights="random", configs="foo")   # nothing known: every configuration, as it says
    assert bad.multiselect(key="abl_configs").value == bad.multiselect(key="abl_configs").options
    assert "showing every configuration" in " ".join(w.value for w in bad.warning)
    some = page_at("ablation", weights="random", configs="foo,window only")
    assert some.multiselect(key="abl_configs").value == ["window only"]
    assert "showing the known ones" in " ".join(w.value for w in some.warning)


def test_glossary_search_narrows_the_table_and_survives_a_miss():
    at = page_at("glossary", find="indexer")
    ok(at)
    rows = at.table[0].value
    assert 0 < len(rows) and all("indexer" in f"{r.term} {r.meaning}".lower() for r in rows.itertuples())
    every = page_at("glossary")
    assert len(every.table[0].value) > len(rows)
    miss = page_at("glossary", find="zzzz-no-such-word")
    assert any("No term holds every word" in x.value for x in miss.info)
    assert len(miss.table[0].value) == len(every.table[0].value)     # everything listed, not an empty table


def test_a_link_to_another_design_opens_with_that_designs_inputs():
    """A link names only the inputs off its design's defaults: arriving by one for another design than the session
    showed, a missing input is that design's default, not the value the session held for the previous design."""
    from lessons.design_inputs import page_defaults

    at = app_at("cache_calculator")
    at.selectbox(key="cc_bits").set_value(8).run()            # V4.1 at 8 bits
    ok(at)
    go(at, "home")
    go(at, "cache_calculator", preset="v3.2", weights="random")
    ok(at)
    v32 = page_defaults("v3.2")
    assert at.number_input(key="cc_context").value == v32.context
    assert "bits" not in url(at) and "context" not in url(at)             # the link's state, not the session's
    fresh = page_at("cache_calculator", preset="v3.2", weights="random")
    assert view(fresh) == view(at)


# ---- the reader's own text follows them (by a button) --------------------------------------------------------------
def _offer(at: AppTest):
    return [b for b in at.button if b.key and b.key.endswith("_use_own")]


def test_text_typed_on_one_page_is_offered_on_the_other_prompt_pages():
    mine = "The cat sat in the red box. The box is"
    at = app_at("home")
    assert not _offer(at)                                  # nothing typed yet: nothing offered
    at.text_area(key="home_prompt").set_value(mine).run()
    assert not _offer(at)                                  # the page already shows it
    for page, key in (("inspector", "insp_prompt"), ("dspark", "ds_prompt"), ("indexer_pools", "pool_prompt")):
        go(at, page)
        ok(at)
        assert at.text_area(key=key).value != mine
        (button,) = _offer(at)
        assert button.label == "Use your text from Home"       # where it was typed, wherever it went since
        assert mine in " ".join(as_shown(c.value) for c in at.caption)
        button.click().run()
        ok(at)
        assert at.text_area(key=key).value == mine and url(at)["prompt"] == mine and "sample" not in url(at)
        assert not _offer(at)
    go(at, "attention_shares")                             # the live-sample pages take it as their own text
    (button,) = _offer(at)
    assert button.label == "Use your text from Home"
    button.click().run()
    ok(at)
    assert at.text_area(key="live_text").value == mine and url(at)["prompt"] == mine
    at.text_area(key="live_text").set_value("A second text. The box is").run()
    go(at, "home")
    (button,) = _offer(at)
    assert button.label == "Use your text from Attention shares"
    button.click().run()
    assert at.text_area(key="home_prompt").value == "A second text. The box is"


def test_a_sample_is_never_offered_and_a_text_too_long_for_the_page_is_not():
    at = app_at("inspector")
    at.selectbox(key="insp_sample").set_value(1).run()     # a sample: not the reader's text
    go(at, "dspark")
    assert not _offer(at)
    go(at, "inspector")
    long = "the key is in the box " * 1000                  # 22,000 characters: fits the inspector, not the home page
    at.text_area(key="insp_prompt").set_value(long).run()
    at.selectbox(key="insp_sample").set_value(0).run()
    (button,) = _offer(at)
    assert button.label == "Back to your text"             # the reader's own text on this very page
    go(at, "home")
    assert not _offer(at)


def test_the_offer_is_the_text_typed_last_not_the_page_seen_last():
    at = app_at("home")
    at.text_area(key="home_prompt").set_value("Zebra job text.").run()
    go(at, "inspector")
    at.text_area(key="insp_prompt").set_value("Giraffe inspector text.").run()
    assert not _offer(at)                                  # just typed here: nothing to offer
    go(at, "home")                                        # the older text shown again does not become the latest
    (button,) = _offer(at)
    assert button.label == "Use your text from Prompt inspector"
    go(at, "csa2_modes")
    (button,) = _offer(at)
    assert button.label == "Use your text from Prompt inspector"
    assert "Giraffe" in " ".join(as_shown(c.value) for c in at.caption)
    go(at, "home")
    _offer(at)[0].click().run()
    assert at.text_area(key="home_prompt").value == "Giraffe inspector text." and not _offer(at)
    at2 = app_at("inspector")                              # "(your own text)" picked, nothing typed: not offered
    at2.selectbox(key="insp_sample").set_value(-1).run()
    go(at2, "indexer_pools")
    assert not _offer(at2)
