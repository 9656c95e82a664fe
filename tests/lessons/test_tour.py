"""The guided tour's data: every stop names a page the app lists, element keys the tour can outline, a question and
a card of at most CARD_WORDS words; Figure 3 stops open a story step that exists; the tour covers the seeds' map;
the self-check's questions link to stops that exist; layer numbers follow the reader's numbering."""

from __future__ import annotations

from pathlib import Path

from lessons.figure3 import steps
from lessons.tour import CARD_WORDS, CHECK, DEEPER, FAR_FACT, FIGURE3, HOME, index_of, neighbours, self_check, stops
from model import V41Config
from ui.nav import PAGES

ROOT = Path(__file__).resolve().parents[2]


def test_every_stop_and_every_deeper_link_is_a_page_of_the_app():
    listed = {p.file for p in PAGES}
    for s in stops():
        assert s.page in listed and (ROOT / s.page).is_file(), s.key
    for page, title, _ in DEEPER:
        assert page in listed, title
    assert {t for _, t, _ in DEEPER} >= {"Cache calculator", "Where the time goes", "Ablation lab"}


def test_cards_are_short_and_texts_present():
    for s in stops():
        assert s.words <= CARD_WORDS, (s.key, s.words)
        assert s.question.endswith("?") and s.text and s.title and s.spot, s.key


def test_figure3_stops_open_a_step_of_the_story():
    keys = [st.key for st in steps(V41Config.preset("v4.1-flash"))]
    fig = [s for s in stops() if s.page == FIGURE3]
    assert len(fig) >= 6
    for s in fig:
        assert s.step in keys, s.key
    assert all(s.step is None for s in stops() if s.page != FIGURE3)


def test_the_tour_covers_the_map():
    """The seeds' map, one stop (or story step) for each: the split, CSA2(r), modes, pool, cache, replay, MoE,
    Engram, mHC, DSpark, recurrence, where the work goes, and the far fact."""
    t = {s.key: s for s in stops()}
    text = {k: (s.title + " " + s.question + " " + s.text).lower() for k, s in t.items()}
    assert "csa2(" in text["notation"] and "r1" in text["notation"]
    assert "reuse" in text["modes"] and "bounded replay" in text["split"] and "approximation" in text["split"]
    assert "pool" in text["pool"] and "top-k" in text["pool"] and "fp4" in text["cache"]
    assert "shared expert" in text["moe"] and "lookup" in text["engram"] and "streams" in text["mhc"]
    assert "draft" in text["dspark"] and "no" in text["recurrence"]
    assert {t[k].step for k in ("moe", "engram", "mhc", "dspark")} == {"moe", "engram", "mhc", "drafter"}
    assert t["far"].text == FAR_FACT


def test_stops_are_unique_and_the_tour_ends_on_the_self_check():
    t = stops()
    assert len({s.key for s in t}) == len(t) >= 12
    assert t[-1].key == CHECK and t[-1].page == HOME
    assert index_of(t, t[2].key) == 2 and index_of(t, "nowhere") is None
    assert neighbours(t, 0) == (None, t[1])
    assert neighbours(t, len(t) - 1) == (t[-2], None)


def test_self_check_questions_link_to_stops_that_teach_them():
    keys = {s.key for s in stops()}
    qs = self_check()
    assert 4 <= len(qs) <= 8
    for q in qs:
        assert q.stop in keys and q.stop != CHECK, q.ask
        assert q.ask.endswith("?") and q.answer
    assert "28" in next(q.answer for q in qs if q.stop == "modes")       # 10 x 10% + 30 x 90%


def test_numbers_in_the_stops_follow_the_config_and_the_numbering():
    cfg = V41Config.preset("v4.1-flash").replace(index_topk=256).validate()
    pool = {s.key: s for s in stops(cfg)}["pool"]
    assert "pick 256" in pool.text and "512" not in pool.text
    zero = {s.key: s for s in stops()}["pool"].text
    one = {s.key: s for s in stops(num=lambda i: i + 1)}["pool"].text
    assert "release, layer 20's" in zero and "release, layer 21's" in one
