"""AppTest: every view that shows a shipped set's trained behaviour says how that set was trained, in the clause read
from its own training.json (lessons/how_trained.py): the home page's far-fact pictures, Figure 3's last step, the
glossary, and Look-back heads on the text model. The side-by-side pages and CSA2 modes are checked in test_pair.py.
A test fails when the clause is missing or no longer names the losses the record sets."""

from __future__ import annotations

import json

import pytest

from lessons.hero import clause
from lessons.how_trained import training_clause
from model import shipped_set
from tests.conftest import run_page

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.skipif(not all((shipped_set(k).directory / "model.safetensors").exists()
                                         for k in ("text", "unaided", "recall")), reason="shipped weights not present")]


def record(kind: str) -> dict:
    return json.loads((shipped_set(kind).directory / "training.json").read_text())


def said(at) -> str:
    parts = [e.value for kind in ("markdown", "caption", "info") for e in getattr(at, kind)]
    return "\n".join(parts)


def test_home_pictures_say_how_each_recall_checkpoint_was_trained_plain_training_first():
    at = run_page("home", timeout=300)
    assert not at.exception, [e.value for e in at.exception]
    text = said(at)
    plain, guided = (clause(record(k)) for k in ("unaided", "recall"))
    assert plain in text and guided in text
    assert text.index(plain) < text.index(guided)                       # the unaided picture comes first
    assert "lookup, selection, entry probe, readout forcing" in guided   # the loss names, from the record
    assert "No loss aimed at" in plain and "not evidence training finds it" in guided
    assert "12-layer tiny model" in text                                 # the hero says which model it is
    assert "at work" not in text.split("What is new")[0]                 # no "at work" above the clause


@pytest.mark.slow
def test_figure3_last_step_shows_the_pictures_with_their_clauses():
    at = run_page("figure3", step=15, timeout=300)
    assert not at.exception, [e.value for e in at.exception]
    text = said(at)
    for k in ("unaided", "recall"):
        assert clause(record(k)) in text, k
    assert "trained two ways" in text


def test_glossary_states_each_sets_training_in_full():
    at = run_page("glossary", timeout=300)
    assert not at.exception, [e.value for e in at.exception]
    text = said(at)
    for kind, about in (("text", "copy"), ("unaided", "far"), ("recall", "far")):
        assert training_clause(record(kind), about) in text, kind
    assert "pool-KL" in text and "DeepSeek-V3.2" in text


def test_lookback_heads_on_the_text_model_say_its_lookup_loss():
    at = run_page("lookback_heads", timeout=300, weights="trained")
    assert not at.exception, [e.value for e in at.exception]
    clause = training_clause(record("text"), "copy")
    assert clause in said(at)
    assert "lookup loss on every head" in clause and "readout forcing" in clause


def test_the_tours_far_fact_stop_draws_both_pictures_with_their_clauses():
    at = run_page("home", timeout=300, stop="far")
    assert not at.exception, [e.value for e in at.exception]
    text = said(at)
    for k in ("unaided", "recall"):
        assert clause(record(k)) in text, k
    assert "not that training finds it" in text                          # the card says the difference too
