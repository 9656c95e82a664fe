"""Recall drills for training (lab/README.md §2-§3): several facts about objects in coloured containers, filler
between them, then every object asked about in a shuffled order and answered; binding drills say facts and answers
with 0..N link words between the object and its colour (`LINKS`), so that the object starts next to its colour and
moves away a word at a time. `recall_drill_sources` also says where each answer's colour was stated (the lookup
loss's targets, lab/training/step.py). The words and filler are the stories' (lab/corpus/stories.py).
"""

from __future__ import annotations

import random
import re

from .stories import ANIMALS, ANSWER_TEMPLATE, COLOURS, CONTAINERS, INTROS, PLACES, TRAIN_CAST, Cast, filler_sentence

# Link words between an object and its colour, by count: "The key blue box.", "The key in the blue box.",
# "The key is in the blue box." ... A binding drill states and answers facts with 0..N of them, so that the
# object starts next to its colour (inside a 2-token window) and moves away a word at a time.
LINKS: dict[int, tuple[str, ...]] = {
    0: ("",),
    1: ("in", "inside", "into"),
    2: ("in the", "inside the", "into the", "is in"),
    3: ("is in the", "was in the", "sat in the", "lay in the", "went into the"),
    4: ("was put in the", "is kept in the", "is now in the", "sits inside the", "was left in the"),
    5: ("was put into the", "has been in the", "is still in the", "was hidden in the", "is kept inside the"),
    6: ("has been kept in the", "was put back in the", "is still kept in the", "had been left in the"),
}


def link_sentence(rng: random.Random, obj: str, col: str, con: str, link_max: int, link_min: int = 0) -> str:
    """'The {obj} <k link words> {col} {con}.' with k drawn from link_min..link_max (at most 6)."""
    top = min(link_max, max(LINKS))
    link = rng.choice(LINKS[rng.randint(min(link_min, top), top)])
    return f"The {obj} {link} {col} {con}.".replace("  ", " ")


def recall_drill_sources(rng_or_seed: random.Random | int, n_facts: int | None = None, cast: Cast = TRAIN_CAST,
                         max_fillers: int = 4, link_max: int = -1, link_share: float = 0.5, link_min: int = 0
                         ) -> tuple[str, list[tuple[int, int, str]]]:
    """A dense recall exercise for training: several objects put in coloured containers, everyday
    filler between them, then a question about each object in a shuffled order, each followed by its
    answer. Returns the text and, per answer in the text's order, (the character offset of its colour, that
    of the same object's colour in its fact sentence, the colour): where a lookup loss points the answer's
    attention.
    One drill holds 3-6 recall events at mixed distances (a story holds one), which gives the
    copy-from-far-back behaviour many more training signals per token. `cast` gives the names, objects
    and sentences (`WIDE_CAST`: many of each); up to `max_fillers` filler sentences follow each fact (and
    up to 3/4 of that before each question): more of them puts the facts further back.

    `link_max` >= 0 makes it a binding drill: each fact and each answer is, with probability `link_share`,
    a `link_sentence` with link_min..link_max words between the object and its colour (else the cast's fact
    sentence and the usual answer). With few link words the colour's own entry holds its object and the
    answer's query holds the asked one; more words teach the model to carry the object across them."""
    rng = random.Random(rng_or_seed) if isinstance(rng_or_seed, int) else rng_or_seed
    names = rng.sample(cast.names, 3)
    who, others = names[0], names[1:]
    n = n_facts or rng.randint(3, 6)
    objs = rng.sample(cast.objects, n)
    cols = [rng.choice(COLOURS) for _ in objs]
    cons = [rng.choice(CONTAINERS) for _ in objs]
    sents = [rng.choice(INTROS).format(who=who, other=others[0], place=rng.choice(PLACES),
                                       animal=rng.choice(ANIMALS))]
    fact_at: list[int] = []                  # index in sents of each object's fact sentence
    for o, c, k in zip(objs, cols, cons):
        fact_at.append(len(sents))
        if link_max >= 0 and rng.random() < link_share:
            sents.append(link_sentence(rng, o, c, k, link_max, link_min))
        else:
            sents.append(rng.choice(cast.facts).format(who=rng.choice(names), obj=o, col=c, con=k))
        sents += [filler_sentence(rng, who, others) for _ in range(rng.randint(0, max_fillers))]
    order = list(range(n))
    rng.shuffle(order)
    asks: list[tuple[int, int]] = []         # (index in sents of an answer sentence, the object it answers)
    for i in order:
        sents += [filler_sentence(rng, who, others) for _ in range(rng.randint(0, (3 * max_fillers) // 4))]
        sents.append(rng.choice(cast.questions).format(obj=objs[i], who2=rng.choice(others)))
        asks.append((len(sents), i))
        if link_max >= 0 and rng.random() < link_share:
            sents.append(link_sentence(rng, objs[i], cols[i], cons[i], link_max, link_min))
        else:
            sents.append(ANSWER_TEMPLATE.format(obj=objs[i], col=cols[i], con=cons[i]))
    starts = [0]
    for sent in sents:
        starts.append(starts[-1] + len(sent) + 1)

    def colour_at(sent: int, col: str) -> int:
        # the one colour word of a fact or answer sentence (names, objects and filler hold none)
        return starts[sent] + re.search(rf"\b{col}\b", sents[sent]).start()

    return " ".join(sents), [(colour_at(a, cols[i]), colour_at(fact_at[i], cols[i]), cols[i]) for a, i in asks]


def recall_drill(rng_or_seed: random.Random | int, n_facts: int | None = None, cast: Cast = TRAIN_CAST,
                 max_fillers: int = 4, link_max: int = -1, link_share: float = 0.5, link_min: int = 0) -> str:
    """The text of `recall_drill_sources` (a dense recall exercise for training)."""
    return recall_drill_sources(rng_or_seed, n_facts, cast, max_fillers, link_max, link_share, link_min)[0]
