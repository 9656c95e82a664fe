"""Frozen linear probes of binding (lab/training/binding_probe.py): the texts they read, the read-out, and
`entry_reads` on a model."""

from __future__ import annotations

import re

import pytest
import torch


def test_probe_texts_label_each_fact_colour_with_its_object_and_each_answer_with_the_asked_one():
    from lab.training.binding_probe import probe_texts
    from model.heldout import COLOURS

    objects = ["key", "coin", "ring", "map", "apple", "book", "pen"]
    texts = probe_texts(12, seed=3, objects=objects)
    assert len(texts) == 12 and probe_texts(12, seed=3, objects=objects)[5].text == texts[5].text
    for item in texts:
        assert 4 <= len(item.facts) <= 6 and len(item.asks) == 3
        for at, obj in item.facts:
            colour = re.match(r"\w+", item.text[at:]).group()
            assert colour in COLOURS and item.text[at - 1] == " "
            sentence = item.text[:at].rsplit(".", 1)[-1]   # the fact sentence up to its colour
            assert re.search(rf"\b{obj}\b", sentence), (sentence, obj)
        colours = {obj: re.match(r"\w+", item.text[at:]).group() for at, obj in item.facts}
        for at, obj in item.asks:
            assert item.text[:at].endswith(f"Where is the {obj}? The {obj} is in the ")
            assert item.text[at:].startswith(colours[obj] + " ")             # the answer says the fact's colour


def test_probe_accuracy_reads_what_the_features_hold_and_no_more():
    from lab.training.binding_probe import probe_accuracy

    g = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 8, (400,), generator=g)
    noise = torch.randn(400, 32, generator=g)
    held = noise.clone()
    held[:, :8] += 4.0 * torch.nn.functional.one_hot(labels, 8)           # the label, linearly, among noise
    train = torch.arange(400) < 280
    assert probe_accuracy(held, labels, train) > 0.9
    assert probe_accuracy(noise, labels, train) < 0.3                      # chance 1/8


@pytest.mark.slow
def test_entry_reads_reports_both_reads_with_their_chance_on_a_model():
    from lab.corpus.stories import TRAIN_CAST
    from lab.training import entry_reads
    from model import random_tiny
    from model.heldout import word_token_ids

    m = random_tiny()
    reads = entry_reads(m, texts=20)
    n = len(word_token_ids(m.tokenizer, TRAIN_CAST.objects))
    assert set(reads) == {"colour entry", "answer row"}
    for acc, chance in reads.values():
        assert 0.0 <= acc <= 1.0 and abs(chance - 1.0 / n) < 1e-9
