"""Where a recall prompt's fact lies, in the prompt's own token positions, so a picture of the prompt can mark it.

A recall prompt ends by asking where an object is ("... Where is the doll? The doll is in the"); its fact is the
last sentence before that question that names the object and a colour ("Dan left the doll in the pink jar."), and
the colour word is what the answer needs. Positions are those of `tokenizer.encode(text)`, the same call
model.encode makes, so they index a trace of the prompt directly.

It finds a fact by those words alone: a prompt of another shape gets None (the picture then marks nothing). It
does not know which model reads the prompt, nor whether that model recalls the fact.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lessons.far_story import covering_positions
from model.heldout import COLOURS

QUESTION = re.compile(r"Where is the (\w+)\?")
SENTENCE = re.compile(r"[^.?!\n]+[.?!]")


@dataclass(frozen=True)
class PromptFact:
    """The fact of a recall prompt: its colour word's token positions and its sentence's."""

    colour: str                    # the colour word, e.g. "pink"
    positions: list[int]           # token positions covering the colour word
    sentence: list[int]            # token positions covering the fact sentence
    query: int                     # the last position (the token that predicts the answer)

    @property
    def distance(self) -> int:
        """Tokens from the fact's colour to the answer (the far stories' definition: query + 1 - first position)."""
        return self.query + 1 - self.positions[0]

    def entry(self, ratio: int) -> int:
        """The compressed entry that packs the colour's first token at `ratio`."""
        return self.positions[0] // ratio


def fact_chars(text: str) -> tuple[int, int, int, int, str] | None:
    """(sentence start, sentence end, colour start, colour end, colour) of the fact in `text`, or None."""
    asks = list(QUESTION.finditer(text))
    if not asks:
        return None
    obj, end = asks[-1].group(1).lower(), asks[-1].start()
    found = None
    for m in SENTENCE.finditer(text, 0, end):
        words = re.findall(r"\w+", m.group(0).lower())
        if obj not in words:
            continue
        colour = next((w for w in words if w in COLOURS), None)
        if colour is None:
            continue
        c = re.search(rf"\b{colour}\b", m.group(0), flags=re.IGNORECASE)
        found = (m.start(), m.end(), m.start() + c.start(), m.start() + c.end(), colour)
    return found


def prompt_fact(tokenizer, text: str) -> PromptFact | None:
    """The fact of a recall prompt in token positions, or None when the prompt asks no such question."""
    chars = fact_chars(text)
    if chars is None or tokenizer is None:
        return None
    s0, s1, c0, c1, colour = chars
    enc = tokenizer.encode(text)
    positions = covering_positions(enc.offsets, c0, c1)
    sentence = covering_positions(enc.offsets, s0, s1)
    if not positions or not enc.ids:
        return None
    return PromptFact(colour=colour, positions=positions, sentence=sentence, query=len(enc.ids) - 1)
