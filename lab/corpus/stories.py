"""Seeded, template-based story generator for long-range recall ("Where is the key?").

Each story is plain modern English. Early on, an object is placed in a coloured container
("Anna put the key in the blue box."); distractor facts put other objects in containers of
other colours; narrative filler of varying length and content (other characters, weather,
walks, meals, small events) follows; at the end a question is asked and answered:
"Where is the key? The key is in the blue box." The answer word is the colour.

Distance. For the evaluator, a story records character offsets of the fact sentence, of the
colour inside it, and of the answer slot (the colour in the final sentence). The distance of
a story is ``token_index(answer colour) - token_index(fact colour)``. With a sliding window
of W=32 keys (a query at position q sees keys q-31..q), the model predicts the answer from
position ``answer - 1`` and sees the fact colour iff the distance is <= 32. Buckets (exact,
inclusive) are :data:`BUCKETS`: ``inside`` 1-32, ``just_past`` 33-128, ``far`` 129-480.
Generation aims inside narrower ranges (:data:`TARGETS`) and, when a tokenizer is given,
measures exactly and retries until the distance lies in the bucket; without one it uses a
word/punctuation count (:func:`approx_tokens`), which is close for this vocabulary.

Everything is deterministic for a given seed (``random.Random(seed)``, never global random).
Seed ranges are disjoint: training stories use seeds from :data:`TRAIN_SEED_BASE`, the
held-out set from :data:`HELDOUT_SEED_BASE`, app prompts from :data:`PROMPT_SEED_BASE`.

``python -m lab stories --n 5 --seed 0`` prints examples;
``python -m lab stories --write-heldout data/heldout/stories.jsonl --tokenizer
data/weights/tiny/tokenizer.json`` writes the held-out set (100 stories per bucket), and
``--write-prompts data/prompts.json`` (with ``--tokenizer``) the app's sample prompts.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from model.heldout import BUCKETS, COLOURS, token_index_at_char

TRAIN_SEED_BASE = 0
HELDOUT_SEED_BASE = 1_000_000_000
PROMPT_SEED_BASE = 2_000_000_000

WINDOW = 32
TARGETS: dict[str, tuple[int, int]] = {"inside": (14, 28), "just_past": (40, 120), "far": (140, 465)}
BUCKET_NAMES = tuple(BUCKETS)

OBJECTS = ("key", "coin", "ring", "letter", "map", "apple", "book", "pen", "watch", "ball", "stone",
           "shell", "card", "spoon", "bell", "doll", "candle", "whistle", "ticket", "button", "feather",
           "photo", "comb", "marble")
CONTAINERS = ("box", "bag", "jar", "basket", "tin", "pot", "bowl", "chest", "bucket", "drawer", "case", "purse")
NAMES = ("Anna", "Tom", "Mia", "Sam", "Lily", "Ben", "Emma", "Jack", "Lucy", "Max", "Nora", "Leo", "Ella",
         "Finn", "Ruby", "Omar", "Zoe", "Ivan", "Maya", "Noah", "Sara", "Paul", "Kate", "Dan", "Rosa", "Hugo")
PLACES = ("the river", "the park", "the market", "the old mill", "the library", "the beach", "the hill",
          "the school", "the station", "the bakery", "the farm", "the lake", "the garden", "the village",
          "the bridge", "the woods", "the harbour", "the town square")
ANIMALS = ("dog", "cat", "horse", "goat", "duck", "rabbit", "fox", "owl", "cow", "sheep", "hen", "mouse")
FOODS = ("soup", "bread", "cheese", "rice", "a sandwich", "eggs", "a pie", "pancakes", "a salad",
         "fish", "cake", "porridge", "noodles", "beans")
THINGS = ("bicycle", "clock", "fence", "chair", "radio", "lamp", "gate", "kite", "boat", "roof", "door", "table")
FEELINGS = ("happy", "tired", "calm", "hungry", "sleepy", "cheerful", "bored", "curious", "proud", "worried")
TOPICS = ("the weather", "the harvest", "a new song", "the football match", "an old film", "the market",
          "their plans for the summer", "a funny dream", "the price of bread", "a trip to the sea")
TIMES = ("In the morning", "After breakfast", "At noon", "After lunch", "Later", "In the afternoon",
         "That evening", "Before dinner", "The next day", "A little later", "On Sunday", "Soon")
WEATHER = ("sunny", "cold", "windy", "warm", "cloudy", "quiet", "rainy", "foggy", "bright", "cool")

FACT_TEMPLATES = ("The {obj} is in the {col} {con}.", "{who} put the {obj} in the {col} {con}.",
                  "{who} hid the {obj} in the {col} {con}.", "{who} left the {obj} in the {col} {con}.",
                  "{who} kept the {obj} in the {col} {con}.", "{who} placed the {obj} in the {col} {con}.")
QUESTION_TEMPLATES = ("Where is the {obj}?", "{who2} asked, \"Where is the {obj}?\"",
                      "Question: Where is the {obj}?")
ANSWER_TEMPLATE = "The {obj} is in the {col} {con}."

# Narrative filler: short to long sentences; none contains a colour word.
FILLERS = (
    "It was a {weather} day.",
    "The morning was {weather}, and the streets were empty.",
    "It rained for a while.",
    "The wind blew hard across the fields, and the trees bent low.",
    "By noon the sun was warm, so {who} opened every window in the house.",
    "Snow fell softly on the roofs of the village all night.",
    "{who} walked to {place}.",
    "{time}, {who} went for a long walk to {place} and came back before dinner.",
    "{who} and {other} walked to {place} and sat on a bench for a while.",
    "{who} called {other} on the phone.",
    "{other} came to visit and brought {food}.",
    "{who} and {other} talked about {topic} for a long time.",
    "{other} waved from across the street.",
    "A {animal} ran past the house.",
    "{time}, a {animal} sat by the door and would not go away.",
    "{who} fed the {animal} and filled its water dish.",
    "{who} ate {food} for lunch.",
    "{time}, {who} cooked {food} for everyone, and they all ate together at the big table.",
    "{who} felt {feeling}.",
    "{who} felt {feeling} and sat down by the window to rest.",
    "{who} wondered if {other} would come home soon.",
    "{who} read a story about {topic}.",
    "{time}, {who} fixed the old {thing} with some string and a little glue.",
    "The {thing} made a strange noise.",
    "{who} cleaned the kitchen.",
    "{who} wrote a short note to {other}.",
    "{time}, {who} sang a song while washing the dishes.",
    "The kettle began to sing in the kitchen.",
    "{who} dropped a glass, but it did not break.",
    "There was a loud knock at the door, but nobody was there.",
    "{other} laughed at a joke that {who} told.",
    "{who} counted the birds on the fence.",
    "{time}, {who} and {other} played a board game until it was dark.",
    "The children played in the yard until it got dark.",
    "{who} helped {other} carry some heavy sacks of flour to {place}.",
    "When the clock struck six, {who} put on a coat and went outside.",
    "{other} told {who} a long story about a ship that sailed to a far island.",
    "{who} swept the floor and opened the curtains.",
    "The {animal} slept in the sun.",
    "{who} was late for the train, so {who} had to run.",
    "{other} said that the road to {place} was closed.",
    "{time}, {who} visited {other} and they drank tea together.",
    "The bus was late again.",
    "{who} took a nap.",
    "{other} was busy at {place} all day.",
    "{time}, the shop at the corner was closed.",
    "{who} planted some seeds in the garden and hoped for rain.",
    "{who} looked at the clouds.",
    "Nothing much happened.",
)
INTROS = (
    "{who} lived in a small house near {place}.",
    "Once there was a child named {who}.",
    "{who} and {other} were good friends.",
    "{who} had a {animal} and a little garden.",
    "This is a story about {who}.",
    "{who} worked at {place}.",
)
ENDINGS = ("{who} smiled.", "Then everyone went to bed.", "{who} was glad to know that.", "The day was over.",
           "{other} nodded.")



@dataclass(frozen=True)
class Cast:
    """The words and sentence templates a story is built from. Training uses `TRAIN_CAST`; the
    `HELDOUT_CAST` set shares only the colours, containers, places and filler with it, so recall
    measured on it is retrieval of a fact, not a memorised template or name."""

    names: tuple[str, ...]
    objects: tuple[str, ...]
    facts: tuple[str, ...]
    questions: tuple[str, ...]


TRAIN_CAST = Cast(NAMES, OBJECTS, FACT_TEMPLATES, QUESTION_TEMPLATES)
HELDOUT_CAST = Cast(
    names=("Iris", "Felix", "Hana", "Otto", "Vera", "Luca", "Greta", "Tariq", "Elif", "Bruno"),
    objects=("needle", "thimble", "locket", "compass", "acorn", "magnet", "brooch", "pebble", "ribbon", "key ring"),
    facts=("{who} tucked the {obj} into the {col} {con}.", "{who} dropped the {obj} into the {col} {con}.",
           "Somebody had stored the {obj} in the {col} {con}.", "{who} slipped the {obj} inside the {col} {con}."),
    questions=("Can you tell me where the {obj} is?", "{who2} wanted to know: where is the {obj}?"),
)
HELDOUT_TEMPLATES_SEED_BASE = 3_000_000_000

# A wide training cast for recall drills: many more names, objects and ways to state and ask a fact, so
# that answering has to find the object named in the question rather than match a memorised sentence.
# It shares no name, object, verb or question phrasing with `HELDOUT_CAST` (tests/lab/test_corpus.py).
WIDE_NAMES = NAMES + ("Alma", "Boris", "Clara", "Dario", "Edith", "Fatima", "Gus", "Helen", "Ines", "Jonas",
                      "Kira", "Lars", "Mina", "Nils", "Olga", "Pia", "Quinn", "Rami", "Sofia", "Theo", "Uma",
                      "Victor", "Wanda", "Yusuf", "Ada", "Carl", "Dina", "Eric", "Gina", "Hugh", "Jade", "Kofi")
WIDE_OBJECTS = OBJECTS + (
    "scarf", "glove", "hat", "sock", "shoe", "cup", "plate", "fork", "knife", "brush", "mirror", "clock",
    "toy", "puzzle", "kite", "drum", "flute", "violin", "lamp", "torch", "rope", "chain", "lock", "tool",
    "hammer", "nail", "screw", "bolt", "wallet", "badge", "medal", "trophy", "bottle", "flask", "kettle",
    "teapot", "mug", "glass", "vase", "jug", "notebook", "diary", "pencil", "crayon", "eraser", "ruler",
    "stamp", "envelope", "parcel", "postcard", "poster", "picture", "painting", "statue", "figure", "robot",
    "train set", "toy car", "boat", "plane", "puppet", "mask", "crown", "belt", "tie", "umbrella",
    "lemon", "pear", "plum", "peach", "carrot", "onion", "potato", "egg", "biscuit", "sweet", "cookie",
    "leaf", "flower", "seed", "nut", "bean", "cherry", "grape", "bone", "tooth", "coin purse",
    "phone", "remote", "charger", "cable", "battery", "bulb", "fuse", "switch", "plug", "lid", "cork",
    "sponge", "towel", "soap", "bead", "pin", "clip", "hook", "tag", "label", "sticker", "token", "dice",
    "chess piece", "playing card", "silver spoon", "gold ring", "old key", "small box", "lucky coin")
WIDE_FACTS = FACT_TEMPLATES + tuple(
    f"{{who}} {verb} the {{obj}} {prep} the {{col}} {{con}}."
    for verb in ("put", "hid", "left", "kept", "placed", "packed", "set", "pushed", "laid", "locked", "moved",
                 "carried", "found", "saw", "spotted", "threw", "shoved", "returned")
    for prep in ("in", "back in", "deep in")) + (
    "The {obj} was in the {col} {con}.", "The {obj} ended up in the {col} {con}.",
    "The {obj} had been in the {col} {con} all week.", "In the {col} {con} there was a {obj}.",
    "Inside the {col} {con} lay the {obj}.", "{who} said the {obj} was in the {col} {con}.",
    "{who} knew that the {obj} was in the {col} {con}.", "The {col} {con} held the {obj}.",
    "Nobody knew the {obj} was in the {col} {con}.", "{who} noticed the {obj} in the {col} {con}.")
WIDE_QUESTIONS = QUESTION_TEMPLATES + (
    "Where was the {obj}?", "{who2} asked, \"Where was the {obj}?\"", "So where is the {obj} now?",
    "Where did the {obj} go?", "Does anyone know where the {obj} is?", "{who2} said, \"Where is my {obj}?\"",
    "Where could the {obj} be?", "{who2} asked again, \"Where is the {obj}?\"", "Who remembers where the {obj} is?",
    "Remember the {obj}? Where is it?", "And the {obj}, where is that?")
WIDE_CAST = Cast(WIDE_NAMES, WIDE_OBJECTS, WIDE_FACTS, WIDE_QUESTIONS)
DRILL_CASTS = {"train": TRAIN_CAST, "wide": WIDE_CAST}

_COLOUR_RE = re.compile(r"\b(" + "|".join(COLOURS) + r")\b", re.I)


@dataclass
class Story:
    """One generated story plus everything an evaluator needs to score recall."""

    text: str
    fact: str  # the sentence that places the asked-about object
    question: str
    answer: str  # the colour word, e.g. "blue"
    obj: str
    container: str
    fact_start: int  # char offsets of the fact sentence in text
    fact_end: int
    fact_answer_start: int  # char offsets of the colour inside the fact
    fact_answer_end: int
    answer_start: int  # char offsets of the answer slot (colour in the final sentence)
    answer_end: int
    question_start: int
    bucket: str | None  # requested bucket (None if a free target was given)
    target_distance: int
    distance_tokens: int  # measured distance (exact if a tokenizer was used, else approx)
    exact: bool  # distance measured with a real tokenizer
    seed: int | None
    distractors: list[tuple[str, str, str]] = field(default_factory=list)  # (obj, colour, container)

    def prompt(self) -> str:
        """Text up to (not including) the answer slot, without the trailing space."""
        return self.text[: self.answer_start].rstrip(" ")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def approx_tokens(text: str) -> int:
    """Cheap token estimate: words and punctuation marks (close for the story vocabulary)."""
    return len(re.findall(r"\w+|[^\w\s]", text))


def bucket_of(distance: int) -> str:
    for name, (lo, hi) in BUCKETS.items():
        if lo <= distance <= hi:
            return name
    return "beyond"


def measure_distance(story: Story, tokenizer: Any) -> tuple[int, int, int]:
    """(distance, fact colour token index, answer token index) with a ``tokenizers.Tokenizer``."""
    enc = tokenizer.encode(story.text)
    f = token_index_at_char(enc.offsets, story.fact_answer_start)
    a = token_index_at_char(enc.offsets, story.answer_start)
    return a - f, f, a


# ----------------------------------------------------------------------------- generation


class _Builder:
    """Sentence-level story assembly that tracks character offsets."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.length = 0

    def add(self, sentence: str, newline: bool = False) -> int:
        """Append a sentence (space- or newline-separated); return its start offset."""
        if self.parts:
            sep = "\n" if newline else " "
            self.parts.append(sep)
            self.length += 1
        start = self.length
        self.parts.append(sentence)
        self.length += len(sentence)
        return start

    def text(self) -> str:
        return "".join(self.parts)


def filler_sentence(rng: random.Random, who: str, others: Sequence[str]) -> str:
    t = rng.choice(FILLERS)
    s = t.format(who=who, other=rng.choice(others), place=rng.choice(PLACES), food=rng.choice(FOODS),
                 animal=rng.choice(ANIMALS), thing=rng.choice(THINGS), feeling=rng.choice(FEELINGS),
                 topic=rng.choice(TOPICS), time=rng.choice(TIMES), weather=rng.choice(WEATHER))
    return s


def _fact(rng: random.Random, who: str, obj: str, col: str, con: str,
          templates: Sequence[str] = FACT_TEMPLATES) -> tuple[str, int]:
    """Fact sentence and the offset of the colour within it."""
    t = rng.choice(templates)
    s = t.format(who=who, obj=obj, col=col, con=con)
    return s, s.index(f" {col} {con}") + 1


def _fill_to(rng: random.Random, budget: int, who: str, others: Sequence[str],
             count: Callable[[str], int], seen: set[str]) -> list[str]:
    """Filler sentences whose total (approximate) token count is close to ``budget``;
    sentences already in ``seen`` are skipped (and new ones added to it)."""
    out: list[str] = []
    used = 0
    tries = 0
    while used < budget and tries < 100 + 4 * budget:
        tries += 1
        s = filler_sentence(rng, who, others)
        if s in seen:  # no repeated sentences within a story
            continue
        n = count(" " + s)
        if used + n <= budget + 1:
            out.append(s)
            seen.add(s)
            used += n
        elif budget - used <= 3:
            break
    return out


def generate_story(rng_or_seed: random.Random | int, target_distance_tokens: int | None = None, *,
                   bucket: str | None = None, n_distractors: int | None = None, tokenizer: Any = None,
                   ending: bool | None = None, max_attempts: int = 30, cast: Cast = TRAIN_CAST) -> Story:
    """Generate one story whose fact-to-answer distance is about ``target_distance_tokens``.

    ``rng_or_seed``: an ``int`` seed or a ``random.Random`` (consumed). ``bucket`` picks a
    random target inside that bucket's generation range; with neither target nor bucket, a
    bucket is chosen at random. ``tokenizer`` (a ``tokenizers.Tokenizer``) makes the distance
    exact: the story is rebuilt until the measured distance is in the bucket (or within 10%
    of a free target). ``cast`` chooses the names, objects and fact/question templates.
    """
    seed = rng_or_seed if isinstance(rng_or_seed, int) else None
    rng = random.Random(rng_or_seed) if isinstance(rng_or_seed, int) else rng_or_seed
    if bucket is not None and bucket not in TARGETS:
        raise ValueError(f"unknown bucket {bucket!r}; choose from {BUCKET_NAMES}")
    if target_distance_tokens is None:
        bucket = bucket or rng.choice(BUCKET_NAMES)
        target_distance_tokens = rng.randint(*TARGETS[bucket])
    target = int(target_distance_tokens)
    if target < 12:
        raise ValueError("target_distance_tokens must be >= 12 (the question itself is ~12 tokens)")
    if bucket is not None:
        lo, hi = BUCKETS[bucket]
    else:
        lo, hi = int(target * 0.9), int(target * 1.1) + 2

    # Fixed story skeleton (cast, facts); only the filler is re-drawn on a retry.
    names = rng.sample(cast.names, 4)
    who, others = names[0], names[1:]
    n_fx = n_distractors if n_distractors is not None else rng.choice((0, 1, 1, 2, 2, 3))
    objs = rng.sample(cast.objects, 1 + n_fx)
    cols = rng.sample(COLOURS, 1 + n_fx)
    cons = [rng.choice(CONTAINERS) for _ in range(1 + n_fx)]
    # Distractor facts before the target fact, or (if there is room) between fact and question.
    where = [rng.choice(("before", "after")) if target > 40 else "before" for _ in range(n_fx)]
    q_tmpl = rng.choice(cast.questions)
    n_intro = rng.randint(1, 3)
    ending = rng.random() < 0.3 if ending is None else ending
    count = approx_tokens
    budget_scale = 1.0

    best: Story | None = None
    for _attempt in range(max_attempts):
        b = _Builder()
        seen: set[str] = set()
        b.add(rng.choice(INTROS).format(who=who, other=others[0], place=rng.choice(PLACES),
                                        animal=rng.choice(ANIMALS)))
        for s in _fill_to(rng, 6 * (n_intro - 1), who, others, count, seen)[: n_intro - 1]:
            b.add(s)
        for k in range(n_fx):
            if where[k] == "before":
                b.add(_fact(rng, rng.choice(names), objs[k + 1], cols[k + 1], cons[k + 1], cast.facts)[0])
                for s in _fill_to(rng, rng.randint(0, 20), who, others, count, seen):
                    b.add(s)
        fact, col_off = _fact(rng, who, objs[0], cols[0], cons[0], cast.facts)
        fact_start = b.add(fact)
        question = q_tmpl.format(obj=objs[0], who2=others[1])
        answer_sent = ANSWER_TEMPLATE.format(obj=objs[0], col=cols[0], con=cons[0])
        # Tokens from the fact colour to the answer colour with no filler at all.
        tail = fact[col_off:] + " " + question + " " + answer_sent[: answer_sent.index(f" {cols[0]} ")]
        overhead = count(tail)
        after_facts = [_fact(rng, rng.choice(names), objs[k + 1], cols[k + 1], cons[k + 1], cast.facts)[0]
                       for k in range(n_fx) if where[k] == "after"]
        budget = max(0, round((target - overhead) * budget_scale) - sum(count(" " + f) for f in after_facts))
        gap = _fill_to(rng, budget, who, others, count, seen)
        for f in after_facts:  # insert distractor facts at random points of the gap
            gap.insert(rng.randint(0, len(gap)), f)
        for s in gap:
            b.add(s)
        q_start = b.add(question, newline=rng.random() < 0.3)
        a_start = b.add(answer_sent)
        ans_off = a_start + answer_sent.index(f" {cols[0]} ") + 1
        if ending:
            b.add(rng.choice(ENDINGS).format(who=who, other=others[0]))
        text = b.text()
        fa = fact_start + col_off
        story = Story(text=text, fact=fact, question=question, answer=cols[0], obj=objs[0], container=cons[0],
                      fact_start=fact_start, fact_end=fact_start + len(fact), fact_answer_start=fa,
                      fact_answer_end=fa + len(cols[0]), answer_start=ans_off,
                      answer_end=ans_off + len(cols[0]), question_start=q_start, bucket=bucket,
                      target_distance=target, distance_tokens=0, exact=tokenizer is not None, seed=seed,
                      distractors=[(objs[k + 1], cols[k + 1], cons[k + 1]) for k in range(n_fx)])
        if tokenizer is not None:
            d = measure_distance(story, tokenizer)[0]
        else:
            d = count(text[fa:ans_off])
        story.distance_tokens = d
        if lo <= d <= hi:
            return story
        if best is None or abs(d - target) < abs(best.distance_tokens - target):
            best = story
        budget_scale *= max(0.5, min(1.5, (target - overhead) / max(1, d - overhead)))
    assert best is not None
    if bucket is not None:
        raise RuntimeError(f"could not hit bucket {bucket} (target {target}); best distance {best.distance_tokens}")
    return best


def generate_narrative(rng_or_seed: random.Random | int, n_sentences: int = 8) -> str:
    """A short plain narrative with no question (extra modern-English training text)."""
    rng = random.Random(rng_or_seed) if isinstance(rng_or_seed, int) else rng_or_seed
    names = rng.sample(NAMES, 3)
    who, others = names[0], names[1:]
    sents = [rng.choice(INTROS).format(who=who, other=others[0], place=rng.choice(PLACES),
                                       animal=rng.choice(ANIMALS))]
    sents += [filler_sentence(rng, who, others) for _ in range(n_sentences - 1)]
    return " ".join(sents)


def training_story_text(index: int) -> str:
    """Training document ``index`` (seed ``TRAIN_SEED_BASE + index``): mostly recall stories
    over all buckets, some plain narratives."""
    seed = TRAIN_SEED_BASE + index
    rng = random.Random(seed)
    if rng.random() < 0.1:
        return generate_narrative(rng, rng.randint(4, 14))
    return generate_story(rng).text


def heldout_stories(per_bucket: int = 100, tokenizer: Any = None) -> list[Story]:
    """The held-out recall set: ``per_bucket`` stories for each bucket, seeds from
    :data:`HELDOUT_SEED_BASE` (disjoint from training seeds)."""
    out = []
    for bi, name in enumerate(BUCKET_NAMES):
        for j in range(per_bucket):
            out.append(generate_story(HELDOUT_SEED_BASE + bi * per_bucket + j, bucket=name, tokenizer=tokenizer))
    return out


def heldout_template_stories(n: int = 100, tokenizer: Any = None, bucket: str = "far") -> list[Story]:
    """Recall stories built only from :data:`HELDOUT_CAST` (names, objects and fact/question
    templates never in training), seeds from :data:`HELDOUT_TEMPLATES_SEED_BASE`."""
    return [generate_story(HELDOUT_TEMPLATES_SEED_BASE + j, bucket=bucket, tokenizer=tokenizer, cast=HELDOUT_CAST)
            for j in range(n)]


HELDOUT_KEYS = ("text", "answer", "obj", "container", "question", "fact", "fact_start", "fact_end",
                "fact_answer_start", "fact_answer_end", "answer_start", "answer_end", "question_start",
                "bucket", "distance_tokens", "exact", "seed", "distractors")   # the fields of stories.jsonl


def write_heldout(path: str | Path, stories: Sequence[Story]) -> None:
    """Write stories as ``stories.jsonl`` (one JSON object per line, the :data:`HELDOUT_KEYS` fields)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for s in stories:
            f.write(json.dumps({k: getattr(s, k) for k in HELDOUT_KEYS}, ensure_ascii=False) + "\n")


SHORT_PROMPTS: tuple[dict[str, str], ...] = (
    {"name": "Key in the blue box", "text": "The key is in the blue box. The box is", "answer": "blue",
     "kind": "short"},
    {"name": "Where is the coin?", "text": "Tom put the coin in the red bag. Where is the coin? The coin is in the",
     "answer": "red", "kind": "short"},
    {"name": "A small house", "text": "Anna lived in a small house near the river. One morning,", "kind": "short"},
    {"name": "Shakespeare-style opening",
     "text": "ACT I.\n\nSCENE I. A room in the palace.\n\n[Enter the KING and a LORD.]\n\nKING.\n"
             "What news, my lord? Speak, and be brief.\n\nLORD.\n", "kind": "shakespeare"},
    {"name": "Bible-style verse", "text": "In the beginning, God created the heavens and the earth. Then God said,",
     "kind": "bible"},
)
LONG_PROMPT_DISTANCES = (280, 700, 1400)


def app_prompts(tokenizer: Any) -> list[dict[str, Any]]:
    """Prompts for the app: the fixed short ones plus three long recall stories (seeds from
    :data:`PROMPT_SEED_BASE`), cut right before the answer colour, with the expected answer."""
    out: list[dict[str, Any]] = [dict(p) for p in SHORT_PROMPTS]
    for i, dist in enumerate(LONG_PROMPT_DISTANCES):
        seed = PROMPT_SEED_BASE + i
        s = generate_story(seed, dist, n_distractors=2, tokenizer=tokenizer, ending=False)
        text = s.prompt()
        out.append({"name": f"Long recall: where is the {s.obj}? (~{s.distance_tokens} tokens back)",
                    "text": text, "answer": s.answer, "kind": "long", "seed": seed,
                    "distance_tokens": s.distance_tokens,
                    "n_tokens": len(tokenizer.encode(text, add_special_tokens=False).ids)})
    return out
