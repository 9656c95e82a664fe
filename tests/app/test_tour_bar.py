"""AppTest for the guided tour's card: a stop named in the URL shows its counter, question and text on its own
page, with Back and Next, and the page folded to what the stop needs; a stop of another page is offered as a link;
a name that is no stop gets a message quoting it as plain text. Run through app.py, as the browser does (the card
needs the navigation)."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from lessons.tour import stops
from tests.conftest import ROOT
from ui.text import as_shown


def at_page(page: str, **params) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.query_params["weights"] = "random"
    for k, v in params.items():
        at.query_params[k] = v
    at.switch_page(page)
    return at.run()


def markdown(at: AppTest) -> str:
    return "\n".join(m.value for m in at.markdown) + "\n".join(c.value for c in at.caption)


def test_a_stop_on_its_page_shows_the_bar():
    tour = stops()
    i, stop = next((i, s) for i, s in enumerate(tour) if s.page == "pages/compare_designs.py")
    at = at_page(stop.page, stop=stop.key)
    assert not at.exception, [e.value for e in at.exception]
    text = markdown(at)
    assert f"Tour {i + 1}/{len(tour)}: {stop.title}" in text
    assert stop.question in text and stop.text in text
    links = {p.proto.label: p.proto for p in at.get("page_link")}
    assert "Back" in links and "Next" in links                                  # the neighbouring stops
    assert any(f'"{stop.spot[0]}"' in h.proto.body and f".st-key-{stop.spot[0]}" in h.proto.body
               for h in at.get("html"))                                          # the outline's rule and script


def test_a_stop_of_another_page_and_a_bad_stop():
    tour = stops()
    at = at_page("pages/compare_designs.py", stop=tour[0].key)
    assert not at.exception
    assert any("on another page" in i.value for i in at.info)
    assert "Back to the tour" in {p.proto.label for p in at.get("page_link")}
    at.button(key="tour_leave").click().run()                                  # leave it: no stop, no message
    assert not any("on another page" in i.value for i in at.info) and "stop" not in at.query_params
    bad = at_page("pages/compare_designs.py", stop="<b>nowhere</b>")
    assert not bad.exception
    assert any("is not a stop of the tour" in w.value and "<b>nowhere</b>" in as_shown(w.value) for w in bad.warning)
    assert not any("Tour " in m.value for m in bad.markdown)


def test_no_stop_no_bar():
    at = at_page("pages/compare_designs.py")
    assert not at.exception
    assert not any(m.value.startswith("**Tour ") for m in at.markdown)
    assert not any("st-key-" in h.proto.body and "outline" in h.proto.body for h in at.get("html"))


def test_a_stop_folds_its_page_and_follows_the_reader_numbering():
    """On the cache stop the compare page draws only its waterfall; on a Figure 3 stop the page opens the stop's
    story step without its own stepper; the pool stop's layer follows 1-based numbering."""
    tour = stops()
    cache = next(s for s in tour if s.key == "cache")
    at = at_page(cache.page, stop=cache.key)
    assert not at.exception
    assert not at.dataframe and not at.multiselect          # the comparison table and its controls folded away
    whole = at_page(cache.page)
    assert whole.dataframe and whole.multiselect            # off the tour, the page is whole
    moe = next(s for s in tour if s.key == "moe")
    fig = at_page(moe.page, stop=moe.key)
    assert not fig.exception
    assert any(h.value == "MoE: pick which small networks run" for h in fig.subheader)
    assert not [b for b in fig.button if b.key and b.key.startswith("fig3_stepper")]
    pool = next(s for s in tour if s.key == "pool")
    for numbering, layer in (("0", "layer 20's"), ("1", "layer 21's")):   # the release's pool layer
        at = at_page(pool.page, stop=pool.key, numbering=numbering)
        assert not at.exception
        assert layer in markdown(at), numbering
