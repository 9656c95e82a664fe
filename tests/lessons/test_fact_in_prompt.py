"""lessons/fact_in_prompt.py: the fact of a recall prompt found in token positions, checked against the prompt's
own text and the distances the sample prompts state."""

from __future__ import annotations

import json

import pytest

from lessons.fact_in_prompt import fact_chars, prompt_fact
from model.shipped import shipped_weights
from tests.conftest import ROOT

TINY = shipped_weights("text")


def test_the_fact_is_the_last_sentence_naming_the_object_and_a_colour():
    text = ("Tom put the doll in the red box. Ann put the cup in the blue bag. Tom moved the doll to the green jar. "
            "It rained. Where is the doll? The doll is in the")
    s0, s1, c0, c1, colour = fact_chars(text)
    assert text[s0:s1].strip() == "Tom moved the doll to the green jar." and colour == "green"
    assert text[c0:c1] == "green"


def test_a_prompt_without_the_question_has_no_fact():
    assert fact_chars("The key is in the blue box. The box is") is None
    assert fact_chars("Where is the doll? Nobody knows.") is None        # no sentence before it names a colour


@pytest.mark.skipif(not (TINY / "tokenizer.json").exists(), reason="shipped tokenizer not present")
def test_the_long_samples_facts_lie_as_far_back_as_the_samples_say():
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(TINY / "tokenizer.json"))
    rows = [r for r in json.loads((ROOT / "data" / "prompts.json").read_text()) if r.get("kind") == "long"]
    assert rows
    for r in rows:
        f = prompt_fact(tok, r["text"])
        assert f is not None and f.colour == r["answer"]
        assert f.distance == r["distance_tokens"]
        assert f.query == len(tok.encode(r["text"]).ids) - 1
        assert tok.decode([tok.encode(r["text"]).ids[f.positions[0]]]).strip() == r["answer"]
        assert f.entry(2) == f.positions[0] // 2 and set(f.positions) <= set(f.sentence)
