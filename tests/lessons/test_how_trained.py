"""How a set of weights was trained, read from its record: the shipped records name the losses they carry, the
plain-training checkpoint carries none aimed at the fact, and the clause follows the record it is given."""

from __future__ import annotations

import json
import re

import pytest

from lessons.how_trained import read_guidance, text_share, training_clause
from model import SHIPPED, shipped_set, shipped_weights
from model.shipped import KINDS


def record(kind: str) -> dict:
    return json.loads((shipped_weights(kind) / "training.json").read_text())


def raw(kind: str) -> str:
    return (shipped_weights(kind) / "training.json").read_text()


AIMED_SPELLINGS = {       # how a record can set each aimed loss: a config field, a stage's k=v, a command flag
    "lookup": (r'"lookup_weight": *([0-9.]+)', r"lookup_weight=([0-9.]+)", r"--lookup-weight[ =]([0-9.]+)"),
    "selection": (r'"select_weight": *([0-9.]+)', r"select_weight=([0-9.]+)", r"--select-weight[ =]([0-9.]+)"),
    "entry probe": (r'"entry_weight": *([0-9.]+)', r"entry_weight=([0-9.]+)", r"--entry-weight[ =]([0-9.]+)"),
    "readout forcing": (r'"readout_forcing": *([0-9.]+)', r"readout_forcing=([0-9.]+)",
                        r"--readout-forcing[ =]([0-9.]+)"),
}


def used_in_text(text: str) -> set[str]:
    """The aimed losses a record's text sets above zero anywhere, found by pattern, not by the code under test."""
    return {name for name, pats in AIMED_SPELLINGS.items()
            if any(float(v) > 0 for p in pats for v in re.findall(p, text))}


def test_every_shipped_set_is_on_disk_with_its_record():
    for s in SHIPPED:
        for f in ("config.json", "model.safetensors", "tokenizer.json", "training.json"):
            assert (s.directory / f).is_file(), (s.kind, f)
    assert shipped_weights() == shipped_set("text").directory
    with pytest.raises(KeyError, match="kinds: text"):
        shipped_weights("nonesuch")


@pytest.mark.parametrize("kind", KINDS)
def test_the_losses_read_are_the_losses_the_record_sets(kind):
    g = read_guidance(record(kind))
    named = {"lookup_weight": "lookup", "select_weight": "selection", "entry_weight": "entry probe",
             "readout_forcing": "readout forcing"}
    assert {named[f] for f in g.aimed} == used_in_text(raw(kind))


def test_the_guided_checkpoint_names_its_losses_and_what_the_picture_then_shows():
    rec = record("recall")
    assert used_in_text(raw("recall")) == {"lookup", "selection", "entry probe", "readout forcing"}
    clause = training_clause(rec)
    for words in ("lookup loss on every head", "selection loss", "entry probe", "readout forcing", "pool-KL",
                  "DeepSeek-V3.2", "x20", "not that training finds that road unaided"):
        assert words in clause, words
    short = training_clause(rec, short=True)
    assert "lookup, selection, entry probe, readout forcing" in short and "not that training finds" in short


def test_the_plain_training_checkpoint_carries_no_loss_aimed_at_the_fact_and_meets_its_bars():
    rec = record("unaided")
    assert used_in_text(raw("unaided")) == set()          # no lookup, selection, entry or readout-forcing weight
    assert '"pool_kl": true' in raw("unaided")
    g = read_guidance(rec)
    assert not g.guided and g.pool_kl and g.answer_weight == 20
    clause = training_clause(rec)
    assert clause.startswith("How it was trained: no loss on its attention, index scores or readout")
    assert "lookup" not in clause and "pool-KL" in clause
    m = rec["measured"]                                   # what lab.probes.quality measured on the shipped file
    assert m["recall_far"] >= 0.5 and m["recall_far_window_only"] <= 0.15


def test_the_text_models_last_phases_carried_a_lookup_loss_with_readout_forcing():
    g = read_guidance(record("text"))
    assert set(g.aimed) == {"lookup_weight", "readout_forcing"} and g.inside and g.every_head
    assert g.when() == "2 of its 6 phases"
    assert "look-back heads" in training_clause(record("text"), "copy")


def test_the_clause_follows_the_record_it_is_given():
    rec = record("recall")
    for stage in rec["curriculum"]["passed"]:              # take the selection loss out of every phase ...
        stage["settings"].pop("select_weight", None)
    rec["curriculum"]["spec"] = rec["curriculum"]["spec"].replace("select_weight=1", "")
    rec["command"] = rec["command"].replace("select_weight=1", "")
    for earlier in rec.get("lineage", []):
        earlier.get("train_config", {}).pop("select_weight", None)
        for stage in (earlier.get("curriculum") or {}).get("passed", []):
            stage["settings"].pop("select_weight", None)
        if isinstance((earlier.get("curriculum") or {}).get("spec"), str):
            earlier["curriculum"]["spec"] = re.sub(r"select_weight=\S+", "", earlier["curriculum"]["spec"])
        earlier["command"] = re.sub(r"select_weight=\S+|--select-weight \S+", "", earlier.get("command", ""))
    for p in rec.get("phases", []):
        p["command"] = re.sub(r"select_weight=\S+|--select-weight \S+", "", p.get("command", ""))
    rec["train_config"].pop("select_weight", None)
    clause = training_clause(rec)
    assert "selection loss" not in clause and "lookup loss" in clause


@pytest.mark.parametrize("rec, aimed", [
    ({"train_config": {"lookup_weight": 0.5}}, {"lookup_weight": 0.5}),
    ({"command": "python -m lab train --select-weight 2 --pool-kl"}, {"select_weight": 2.0}),
    ({"command": "x", "curriculum": {"spec": "lr=1e-3 entry_weight=0.1;lr=1e-4"}}, {"entry_weight": 0.1}),
    ({"curriculum": {"passed": [{"settings": {"readout_forcing": 1.0}}]}}, {"readout_forcing": 1.0}),
    ({"train_config": {"lookup_weight": 0.0, "answer_weight": 20}}, {}),
])
def test_every_spelling_of_a_loss_is_read(rec, aimed):
    assert read_guidance(rec).aimed == aimed


def test_no_record_says_so_and_the_text_share_is_one_minus_the_drills():
    assert "without a training record" in training_clause(None)
    assert read_guidance(None) is None and text_share(None) is None
    assert text_share({"train_config": {"drill_frac": 0.5, "copy_frac": 0.25}}) == pytest.approx(0.25)
