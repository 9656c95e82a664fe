"""The guided tour's data: every stop names a page the app lists, an element key the tour can outline, a question
and a takeaway of at most TAKEAWAY_WORDS words; stops are unique, and the neighbours walk the list."""

from __future__ import annotations

from pathlib import Path

from lessons.tour import HOME, TAKEAWAY_WORDS, index_of, neighbours, stops
from model import V41Config
from ui.nav import PAGES

ROOT = Path(__file__).resolve().parents[2]


def test_every_stop_is_on_a_page_of_the_app():
    listed = {p.file for p in PAGES}
    for s in stops():
        assert s.page in listed and (ROOT / s.page).is_file(), s.key


def test_takeaways_are_short_and_texts_present():
    for s in stops():
        assert 10 <= s.words <= TAKEAWAY_WORDS, (s.key, s.words)
        assert s.question.endswith("?") and s.look_at and s.title, s.key


def test_stops_are_unique_and_the_tour_ends_on_the_home_page():
    t = stops()
    assert len({s.key for s in t}) == len(t) >= 6
    assert t[-1].page == HOME
    assert index_of(t, t[2].key) == 2 and index_of(t, "nowhere") is None
    assert neighbours(t, 0) == (None, t[1])
    assert neighbours(t, len(t) - 1) == (t[-2], None)


def test_numbers_in_the_stops_follow_the_config():
    cfg = V41Config.preset("v4.1-flash").replace(index_topk=256).validate()
    pool = {s.key: s for s in stops(cfg)}["pool"]
    assert "top 256" in pool.takeaway and "top 512" not in pool.takeaway
