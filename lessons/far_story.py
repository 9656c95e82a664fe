"""The far-fact lesson's stories: a held-out recall story or the reader's own, cut right before the answer, with
the token positions of the fact and of its colour word (lessons/far_fact.py reads a trace at those positions).

Inputs follow the recall evaluation (lab/training/evaluation.py): the story's tokens after one `<|eos|>`, cut
right before the answer. The sample (`far_sample`) is chosen by a fixed rule (lessons/far_fact.py `FAR_RULE`)
from the held-out far bucket; a reader's own story goes through `own_story`, which checks the input and returns
a message instead of raising.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from model.heldout import COLOURS, load_heldout_stories, token_index_at_char
from model.tokenizer import EOS_ID

MAX_STORY_CHARS = 20000
MAX_STORY_TOKENS = 2048      # the panel traces every layer at every row of the story
MAX_FACT_CHARS = 1000


@dataclass
class FactStory:
    """A story cut right before its answer, with the fact located by character offsets."""

    name: str
    text: str                      # the prompt (no answer)
    fact_start: int                # char offsets of the fact sentence (or the reader's marked text)
    fact_end: int
    colour_start: int              # char offsets of the fact's colour word (= the fact when there is none)
    colour_end: int
    answer: str | None             # the right answer word, e.g. "orange" (None: not known)
    bucket: str | None = None
    seed: int | None = None


@dataclass
class FactTokens:
    ids: list[int]                 # model input: <|eos|> + the story's tokens
    query: int                     # the position whose logits predict the answer (the last one)
    colour_positions: list[int]    # positions of the tokens covering the fact's colour word
    sentence_positions: list[int]  # positions of the tokens covering the fact sentence
    answer_id: int | None          # token id of the right answer (None: unknown)

    @property
    def distance(self) -> int:
        """Answer position minus the fact colour's first position (lab.corpus.stories' definition)."""
        return self.query + 1 - self.colour_positions[0]


def covering_positions(offsets: list[tuple[int, int]], start: int, end: int, shift: int = 0) -> list[int]:
    """Positions (+shift) of the tokens whose character span overlaps [start, end). ByteLevel spans may include
    the preceding space, so the overlap test is on the span as given."""
    return [i + shift for i, (s, e) in enumerate(offsets) if s < end and e > start and e > s]


def tokens_of(tokenizer, story: FactStory, full_text: str | None = None, answer_start: int | None = None) -> FactTokens:
    """Token positions of a story's fact, with the same input lab/probes/quality.py scores: `<|eos|>` then the story.

    With `full_text` and `answer_start` (a held-out story that still holds its answer) the prompt is the full
    text's tokens before the answer token and the answer id is the token there, exactly as in the evaluation;
    otherwise the prompt is `story.text` and the answer id is the first token of ' ' + answer."""
    text = full_text if full_text is not None else story.text
    enc = tokenizer.encode(text, add_special_tokens=False)
    if answer_start is not None:
        a = token_index_at_char(enc.offsets, answer_start)
        ids, answer_id, offsets = enc.ids[:a], enc.ids[a], enc.offsets[:a]
    else:
        ids, offsets = enc.ids, enc.offsets
        answer_id = None
        if story.answer:
            ans = tokenizer.encode(" " + story.answer, add_special_tokens=False).ids
            answer_id = ans[0] if ans else None
    colour = covering_positions(offsets, story.colour_start, story.colour_end, shift=1)
    sentence = covering_positions(offsets, story.fact_start, story.fact_end, shift=1)
    if not colour or not sentence:
        raise ValueError("no token covers the fact")
    return FactTokens(ids=[EOS_ID] + list(ids), query=len(ids), colour_positions=colour,
                      sentence_positions=sentence, answer_id=answer_id)


def story_from_heldout(row: dict) -> FactStory:
    text = row["text"][: row["answer_start"]].rstrip(" ")
    return FactStory(name=f"Held-out far story (seed {row.get('seed')}): where is the {row['obj']}?", text=text,
                     fact_start=row["fact_start"], fact_end=row["fact_end"], colour_start=row["fact_answer_start"],
                     colour_end=row["fact_answer_end"], answer=row["answer"], bucket=row.get("bucket"),
                     seed=row.get("seed"))


def heldout_tokens(tokenizer, row: dict) -> FactTokens:
    return tokens_of(tokenizer, story_from_heldout(row), row["text"], row["answer_start"])


@dataclass
class Sample:
    story: FactStory
    tokens: FactTokens
    candidates: int                # far stories the rule chose among
    distances: list[int]           # their distances, sorted
    rank: int = 0                  # the chosen story's place in that order (0: the nearest)
    median: int = 0                # the rule's own choice (the lower median)


def far_sample(tokenizer, window: int, rows: list[dict] | None = None, rank: int | None = None) -> Sample:
    """The far-fact sample by `FAR_RULE`: the lower-median-distance far story whose distance exceeds `window`; with
    `rank`, the story at that place in the same order instead (0: the nearest; clamped to the stories there are),
    so a reader can walk through every far story, not only the rule's one."""
    rows = load_heldout_stories() if rows is None else rows
    far = []
    for r in rows:
        if r.get("bucket") != "far":
            continue
        t = heldout_tokens(tokenizer, r)
        if t.distance > window:
            far.append((t.distance, r.get("seed") if r.get("seed") is not None else 0, r, t))
    if not far:
        raise ValueError(f"the held-out set has no far-bucket story whose fact lies more than {window} tokens back")
    far.sort(key=lambda x: (x[0], x[1]))
    median = (len(far) - 1) // 2
    pick = median if rank is None else min(max(0, int(rank)), len(far) - 1)
    d, _, row, t = far[pick]
    return Sample(story=story_from_heldout(row), tokens=t, candidates=len(far), distances=[x[0] for x in far],
                  rank=pick, median=median)


_COLOUR_RE = re.compile(r"\b(" + "|".join(COLOURS) + r")\b", re.IGNORECASE)


def own_story(text: str | None, fact: str | None, answer: str | None = None, tokenizer=None,
              max_tokens: int = MAX_STORY_TOKENS) -> tuple[FactStory | None, FactTokens | None, str | None]:
    """(story, tokens, problem) for a reader's story and the fact they marked in it.

    The fact is found as written, else ignoring case (the last occurrence: the one nearest the question is the
    one a reader means when a sentence repeats). The answer defaults to the colour word in the fact when there
    is exactly one. Problems (empty, too long, fact not found) come back as a sentence that never quotes the
    reader's text, so a page can show it as it is."""
    if text is None or not text.strip():
        return None, None, "Your story is empty: write a story first."
    if len(text) > MAX_STORY_CHARS:
        return None, None, f"Your story has {len(text):,} characters; the limit is {MAX_STORY_CHARS:,}."
    if fact is None or not fact.strip():
        return None, None, "Name the fact: copy a word or a sentence from your story into the fact box."
    fact = fact.strip()
    if len(fact) > MAX_FACT_CHARS:
        return None, None, f"The fact has {len(fact):,} characters; the limit is {MAX_FACT_CHARS:,}."
    start = text.rfind(fact)
    if start < 0:
        start = text.lower().rfind(fact.lower())
    if start < 0:
        return None, None, ("The fact was not found in your story. Copy it from the story exactly (a word or a "
                            "whole sentence); only the case of letters may differ.")
    end = start + len(fact)
    colours = list(_COLOUR_RE.finditer(text, start, end))
    if len(colours) == 1:
        cs, ce = colours[0].span()
    else:
        cs, ce = start, end
    ans = (answer or "").strip() or (colours[0].group(1).lower() if len(colours) == 1 else None)
    if ans is not None and (len(ans) > 100 or not ans.strip()):
        ans = None
    story = FactStory(name="Your story", text=text, fact_start=start, fact_end=end, colour_start=cs, colour_end=ce,
                      answer=ans)
    if tokenizer is None:
        return story, None, None
    try:
        toks = tokens_of(tokenizer, story)
    except ValueError:
        return None, None, "No token of your story covers the fact; mark a word or a sentence of the story."
    if toks.query >= max_tokens:
        return None, None, (f"Your story is {toks.query:,} tokens long; the far-fact view traces every layer at "
                            f"every token and stops at {max_tokens:,}. Shorten it.")
    if toks.sentence_positions[-1] > toks.query:
        return None, None, "The fact must come before the end of the story."
    return story, toks, None
