"""Research probes on a trained model: how a fact is bound to its object, and where a far read is lost.

Binding with the distance taken out (`link_binding`: 0..6 words between an object and its colour) and by how
the pairs are said (`pair_formats`, from bare pairs to the stories' own sentences); retrieval and readout apart
(`pair_reads`: does the attention find the asked colour, does the answer say it?); the selecting layers at the
answer rows of stories with rival facts (`rival_reads`); and the lookup loss's target read back
(`lookup_reads`). lab/probes/quality.py prints them; none of them runs during training.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from lab.corpus.drills import recall_drill_sources
from lab.corpus.stories import WIDE_CAST
from lab.training.batches import Rows
from lab.training.lookup import LookupRecorder, lookup_target
from lab.training.step import window_of
from model.arch.context import Ablation
from model.heldout import colour_token_ids, forward_with, load_heldout_stories, token_index_at_char, word_token_ids
from model.tokenizer import EOS_ID


def _colours_right(model, enc, answers: list[tuple[int, int | None]], colour_ids: torch.Tensor) -> int:
    """One forward of an encoded text, scored by `_colour_picks_right`."""
    logits = forward_with(model, torch.tensor([enc.ids]), None).logits[0].cpu()
    return _colour_picks_right(logits, enc, answers, colour_ids)


def _colour_picks_right(logits: torch.Tensor, enc, answers: list[tuple[int, int | None]],
                        colour_ids: torch.Tensor) -> int:
    """How many answers (character offset of the answer colour, its token id or None for the token that stands
    there) the most likely colour among `colour_ids` in the row before them gets right; `logits` [S, V]."""
    right = 0
    for at, want in answers:
        i = token_index_at_char(enc.offsets, at)
        right += int(colour_ids[logits[i - 1, colour_ids].argmax()]) == (enc.ids[i] if want is None else want)
    return right


@torch.no_grad()
def link_binding(model, links: tuple[int, ...] = (0, 3, 6), drills: int = 40, tok=None,
                 seed: int = 10_000) -> dict[int, tuple[float, float]]:
    """Binding with the distance taken out: wide-cast drills (up to 2 fillers) whose every fact and answer has
    exactly k link words between the object and its colour (`link_sentence`). For each k: (the share of answers
    whose most likely colour is the asked object's, what a random pick among the drill's colours would score).
    At k = 0 the colour stands next to its object, inside any window: a model that binds at all binds there."""
    tok = tok or model.tokenizer
    colour_ids = torch.tensor(list(colour_token_ids(tok).values()))
    out: dict[int, tuple[float, float]] = {}
    for k in links:
        right = n = 0
        guess = 0.0
        for d in range(drills):
            text, answers = recall_drill_sources(seed + d, cast=WIDE_CAST, max_fillers=2, link_max=k, link_min=k,
                                                 link_share=1.0)
            enc = tok.encode(text, add_special_tokens=False)
            right += _colours_right(model, enc, [(a, None) for a, _, _ in answers], colour_ids)
            guess += len(answers) / len({c for _, _, c in answers})   # one over the drill's colours, per answer
            n += len(answers)
        out[k] = (right / max(1, n), guess / max(1, n))
    return out


# How a fact and its question are said, from bare key-value pairs to the stories' own sentences: (fact, question
# with its answer). The colour after the last "{c}" of the question is the answer scored.
PAIR_FORMATS: dict[str, tuple[str, str]] = {
    "pairs": ("{o} {c}", "{o} {c}"),
    "the pairs": ("The {o} {c}.", "The {o} {c}."),
    "with a container": ("The {o} {c} box.", "The {o} {c} box."),
    "asked": ("The {o} {c} box.", "Where is the {o}? The {o} {c} box."),
    "story sentences": ("Tom put the {o} in the {c} box.", "Where is the {o}? The {o} is in the {c} box."),
}


def _pair_text(fact: str, ask: str, objs: list[str], cols: list[str],
               rng: random.Random) -> tuple[str, list[tuple[int, str, int]], list[int]]:
    """A pair-format text: every fact said, then every object asked in a shuffled order -> (text, the answers as
    (the answer colour's first character, the colour, the asked fact), each fact's colour's first character)."""
    text, said = "", []
    for o, c in zip(objs, cols):
        piece = (" " if text else "") + fact.format(o=o, c=c)
        said.append(len(text) + piece.rindex(" " + c) + 1)
        text += piece
    asked = []
    for i in rng.sample(range(len(objs)), len(objs)):
        q = " " + ask.format(o=objs[i], c=cols[i])
        asked.append((len(text) + q.rindex(" " + cols[i]) + 1, cols[i], i))
        text += q
    return text, asked, said


def _pair_texts(tok, rows: int, facts: int, seed: int):
    """(format name, the encoded text, its answers as (the answer colour's first character, the colour's token id,
    the asked fact), each fact's colour's first character) for every format of `PAIR_FORMATS`; the objects and
    colours of row r are the same in every format."""
    colours = colour_token_ids(tok)
    names = list(colours)
    objects = list(word_token_ids(tok, WIDE_CAST.objects))
    for name, (fact, ask) in PAIR_FORMATS.items():
        for r in range(rows):
            rng = random.Random(seed + r)
            objs = rng.sample(objects, facts)
            cols = [rng.choice(names) for _ in objs]
            text, asked, said = _pair_text(fact, ask, objs, cols, rng)
            yield (name, tok.encode(text, add_special_tokens=False), [(at, colours[c], i) for at, c, i in asked],
                   said)


@torch.no_grad()
def pair_formats(model, rows: int = 30, facts: int = 5, tok=None, seed: int = 0) -> dict[str, tuple[float, float]]:
    """Binding by how the pairs are said (`PAIR_FORMATS`): `rows` texts of `facts` one-token drill objects, each
    with a colour, then every object asked in a shuffled order. For each format: (the share of answers whose most
    likely colour is the asked object's, a random pick among the text's colours). A binding learned only for one
    layout (bare pairs) scores high there and near the random pick in the stories' own sentences."""
    tok = tok or model.tokenizer
    colour_ids = torch.tensor(list(colour_token_ids(tok).values()))
    tally: dict[str, list[float]] = {}
    for name, enc, asked, _said in _pair_texts(tok, rows, facts, seed):
        t = tally.setdefault(name, [0, 0, 0.0])
        t[0] += _colours_right(model, enc, [(at, c) for at, c, _ in asked], colour_ids)
        t[1] += len(asked)
        t[2] += len(asked) / len({c for _, c, _ in asked})
    return {name: (right / n, guess / n) for name, (right, n, guess) in tally.items()}


def attention_on(shares, row: int, at: int, positions: list[int]) -> np.ndarray:
    """The attention one recorded row (at position `at`) pays to each of `positions`, summed over heads: its
    window slot if the position is inside the window, else the selected entry that packs it (0 if none is read)."""
    w = shares.window.shape[-1]
    win = shares.window[0, row].sum(0)                     # [W]
    ent = shares.entries[0, row].sum(0)                    # [k]
    ids = shares.entry_ids[0, row].tolist()
    out = np.zeros(len(positions))
    for j, p in enumerate(positions):
        slot = p - (at - (w - 1))
        if 0 <= slot < w:
            out[j] = float(win[slot])
        else:
            e = p // max(1, shares.ratio)
            out[j] = sum(float(ent[k]) for k, i in enumerate(ids) if i == e)
    return out


@torch.no_grad()
def pair_reads(model, rows: int = 30, facts: int = 5, tok=None, seed: int = 0) -> dict[str, tuple[float, float]]:
    """Retrieval and readout apart, for each of `PAIR_FORMATS` (the texts of `pair_formats`): (the share of
    answers whose decoder attention, summed over the ratio-1 layers' heads, falls most on the asked fact's colour
    among the text's fact colours; the share whose most likely colour is the asked one). A random read scores
    1 / facts. Reading the right colour and still answering wrong says the readout, not the lookup, fails."""
    tok = tok or model.tokenizer
    colour_ids = torch.tensor(list(colour_token_ids(tok).values()))
    tally: dict[str, list[int]] = {}
    for name, enc, asked, said in _pair_texts(tok, rows, facts, seed):
        t = tally.setdefault(name, [0, 0, 0])
        tr = model.trace(torch.tensor([enc.ids]).to(model.device), lens=False)
        fact_pos = [token_index_at_char(enc.offsets, c) for c in said]
        dec = [r for r in tr.layers if r.spec.compress_ratio == 1 and r.shares is not None]
        for at_char, _, i in asked:
            a = token_index_at_char(enc.offsets, at_char) - 1          # the row that predicts the colour
            mass = sum(attention_on(r.shares, r.row(a), a, fact_pos) for r in dec)
            t[0] += int(np.argmax(mass)) == i
        t[1] += _colour_picks_right(tr.logits[0].cpu(), enc, [(at, c) for at, c, _ in asked], colour_ids)
        t[2] += len(asked)
    return {name: (read / n, said / n) for name, (read, said, n) in tally.items()}


@dataclass
class RivalRead:
    """One selecting layer at the answer rows of held-out stories that hold other facts: does its top-k hold the
    asked fact, does it hold the rivals too, and do its index scores and its attention tell them apart?"""

    layer: int
    fact_in_topk: float    # share of answer rows whose top-k holds the asked fact's entry
    rivals_in_topk: float  # mean share of the rivals' entries in that top-k
    fact_first: float      # share whose index score is higher on the asked fact than on every rival (a layer that
    #                        searches the candidate pool scores only inside it: two facts outside it tie, not first)
    read_first: float      # share whose attention (summed over heads) is larger on the asked fact than on any rival
    chance: float          # what a random pick among the story's facts scores on the last two
    stories: int


def rival_positions(text: str, enc, distractors: list, skip: int) -> list[int]:
    """Token index of each rival fact's colour in a story: "the <colour> <container>" of every distractor, the
    asked fact's own colour (`skip`) left out."""
    out = []
    for _, colour, container in distractors:
        phrase = f"the {colour} {container}"
        at = text.find(phrase)
        while at >= 0:
            t = token_index_at_char(enc.offsets, at + len("the "))
            if t != skip:
                out.append(t)
            at = text.find(phrase, at + 1)
    return out


@torch.no_grad()
def rival_reads(model, path: Path | None = None, bucket: str = "far", max_stories: int = 40,
                tok=None) -> dict[int, RivalRead]:
    """`RivalRead` per layer that selects ratio-1 entries, over the held-out `bucket` stories with other facts
    (one exact traced forward each, cut at the answer row). A fact the top-k always holds together with its
    rivals is left to the attention's match to bind; `fact_in_pool` asks the pool the same first question."""
    tok = tok or model.tokenizer
    rows = [r for r in load_heldout_stories(path) if r["bucket"] == bucket and r.get("distractors")]
    tally: dict[int, list[float]] = {}
    n, chance = 0, 0.0
    for r in rows:
        if n >= max_stories:
            break
        enc = tok.encode(r["text"], add_special_tokens=False)
        # positions after the <|eos|> that starts every story, as in the recall batches
        said = token_index_at_char(enc.offsets, r["fact_answer_start"])   # in the text without the prefix
        a = 1 + token_index_at_char(enc.offsets, r["answer_start"])     # the answer; the row before predicts it
        f = 1 + said
        rivals = [1 + p for p in rival_positions(r["text"], enc, r["distractors"], said) if 1 + p < a - 1]
        if not rivals:
            continue
        n, chance = n + 1, chance + 1 / (1 + len(rivals))
        tr = model.trace(torch.tensor([[EOS_ID] + enc.ids[:a - 1]]).to(model.device), lens=False)
        row_at = a - 1
        for rec in tr.layers:
            if rec.topk is None or rec.spec.compress_ratio != 1:
                continue
            i = rec.row(row_at)
            top = set(rec.topk[0, i].tolist())
            sc = rec.index_scores[0, i]
            t = tally.setdefault(rec.spec.index, [0.0, 0.0, 0.0, 0.0])
            t[0] += f in top
            t[1] += sum(p in top for p in rivals) / len(rivals)
            t[2] += bool(sc[f] > sc[rivals].max())
            if rec.shares is not None:
                mass = attention_on(rec.shares, i, row_at, [f] + rivals)
                t[3] += bool(mass[0] > mass[1:].max())
    return {lid: RivalRead(lid, *(v / max(1, n) for v in t), chance=chance / max(1, n), stories=n)
            for lid, t in sorted(tally.items())}


@torch.no_grad()
def lookup_reads(model, rows: Rows) -> tuple[float, float]:
    """The lookup loss's target read back (lab/README.md §3): over the answer rows of `rows` whose source lies past
    the model's window, (the share whose ratio-1 attention, dense, heads and layers summed, is larger on the source
    than on any of the row's other sources; a random pick's share). nan when no row has a source that far back."""
    target = lookup_target(rows.sources.to(model.device), window_of(model))
    if target is None:
        return float("nan"), float("nan")
    model(rows.x.to(model.device), ablation=Ablation(dense_compressed=True), trace=LookupRecorder(target))
    mass = torch.stack(target.masses, 1).sum(dim=(1, 2))                  # [N, 1 + R]
    rivals = mass[:, 1:].masked_fill(target.rivals < 0, -1.0)
    read = mass[:, 0] > rivals.max(-1).values
    return float(read.float().mean()), float((1.0 / (1 + (target.rivals >= 0).sum(-1).float())).mean())
