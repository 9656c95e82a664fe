"""lessons/far_store.py: the far readings stored with the shipped weights stand for fresh ones only while they match
the weights and the held-out stories; a stored reading reads back to the same FarFact; the home page draws from
them without loading or running a recall checkpoint."""

from __future__ import annotations

import json

import pytest

from lessons import far_store
from model.shipped import SHIPPED
from tests.conftest import ROOT

SETS = [s for s in SHIPPED if (s.directory / far_store.FILE).is_file()]
pytestmark = pytest.mark.skipif(len(SETS) < 2, reason="no stored far readings")


def test_every_stored_reading_matches_its_weights_and_the_stories():
    windows = [json.loads((s.directory / far_store.FILE).read_text())["reading"]["window"] for s in SETS]
    for s in SETS:
        data = far_store.read(s.directory)
        assert far_store.matches(data, far_store.fingerprint(s.directory, max(windows))), (
            f"{s.kind}: run `python -m lab far-readings` after changing the weights or the held-out stories")


def test_a_stored_reading_reads_back_whole_and_a_changed_key_is_refused(tmp_path):
    data = far_store.read(SETS[0].directory)
    ff = far_store.from_json(data)
    assert json.loads(json.dumps(far_store.to_json(ff, data["key"]))) == data      # nothing lost either way
    assert all(isinstance(e, int) for lf in ff.layers for e in lf.entry_shares)
    assert ff.tokens.distance > ff.window                        # a far story: past the window
    stale = dict(data["key"], weights_sha256="0" * 64)
    assert not far_store.matches(data, stale)
    assert far_store.read(tmp_path) is None                      # no file: nothing stored


def test_the_stored_pair_is_the_one_story_in_the_side_by_side_order():
    readings = [(s.kind, far_store.from_json(far_store.read(s.directory)), None) for s in SETS]
    pair = far_store.stored_pair(readings)
    assert [s.kind for s in pair.sides] == [s.kind for s in SETS]
    assert len({s.ff.tokens.query for s in pair.sides}) == 1 and pair.distance == readings[0][1].tokens.distance


@pytest.mark.slow
def test_a_fresh_reading_equals_the_stored_one():
    import torch

    from lessons.far_compare import SideInput, compare
    from model import load

    torch.set_num_threads(1)
    pair = compare([SideInput(s.kind, s.kind, load(s.directory, device="cpu")) for s in SETS])
    for s, side in zip(SETS, pair.sides):
        stored = far_store.from_json(far_store.read(s.directory))
        assert [lf.layer for lf in stored.layers] == [lf.layer for lf in side.ff.layers]
        for a, b in zip(stored.layers, side.ff.layers):
            assert a.share == pytest.approx(b.share, abs=1e-4) and a.selected == b.selected
        assert stored.answers[0].token == side.ff.answers[0].token


def test_the_home_page_draws_the_stored_reading_without_loading_a_recall_checkpoint(monkeypatch):
    import ui.far_reading
    from tests.conftest import run_page

    def refuse(*a, **k):
        raise AssertionError("the home page loaded the recall checkpoints")

    monkeypatch.setattr(ui.far_reading, "pair_sessions", refuse)
    at = run_page("home", weights="trained")
    assert not at.exception, [e.value for e in at.exception]
    keys = {c.key for c in at.get("plotly_chart")}
    assert {"home_far_fig_unaided", "home_far_fig_recall"} <= keys
    assert ROOT.is_dir()
