"""Evaluation during training: held-out loss, story recall by distance bucket and copy accuracy at
three gaps, in the default (sparse) mode and with every visible entry attended (dense) side by side;
the "fact in pool" rate (is the far fact's entry in the candidate pool at the answer row?); and the
copy probe that gates a curriculum stage. The full held-out evaluation (`evaluate`: loss on natural text,
recall by distance bucket, under an ablation and a prefill mode) is here too: the quality benchmark
(bench/quality.py) prints it and the Ablation lab (lessons/ablation.py, docs/design/architecture.md §3.8)
shows it.

Dense numbers say whether the look-back circuit exists; sparse ones whether the indexer's selection
delivers it (docs/training.md).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from ..arch.context import Ablation
from ..corpus.dataset import (
    EOS_ID,
    HELDOUT_TEMPLATES_PATH,
    TokenStream,
    heldout_natural_batches,
    heldout_natural_tokens,
    heldout_story_batches,
    story_eval_batches,
)
from ..corpus.drills import recall_drill_sources
from ..corpus.stories import (
    WIDE_CAST,
    colour_token_ids,
    load_heldout_stories,
    token_index_at_char,
    word_token_ids,
)
from ..inference.engine import prefill
from ..model import V41Model
from .batches import CopyIds, Rows, copy_ids_for, copy_rows, kv_rows, kv_rows_for
from .schedule import window_at
from .step import lookup_target, set_window, window_of

EVAL_KEYS = ("heldout", "recall", "copy", "kv_lookup", "fact_in_pool", "probe")   # the prefixes of evaluation keys


@torch.no_grad()
def quick_eval(m: V41Model, tok, seq_len: int = 512, max_batches: int = 4, window: int = 0,
               modes: tuple[str, ...] = ("sparse", "dense")) -> dict[str, float]:
    """Held-out natural-text loss, recall accuracy per story bucket and copy accuracy at gaps 4, 40, 200,
    at the sliding `window` (0: the config's), once per mode: "sparse" (the default selection; plain
    keys) and "dense" (every visible entry attended; keys ending in `_dense`); the sparse mode's story answers
    also give `recall_bound` (`Binding.right`), and key-value lookups (`kv_lookup`) at up to 0 and 200 other
    tokens between the pairs and the queries; then the fact-in-pool rate. The model is left in train mode at
    the config's window."""
    set_window(m, window)
    m.eval()
    natural = heldout_natural_tokens(tok)
    stories = load_heldout_stories()
    out: dict[str, float] = {}
    for mode in modes:
        ab = Ablation(dense_compressed=True) if mode == "dense" else None
        suffix = "_dense" if mode == "dense" else ""
        tot, n = 0.0, 0
        for i, (x, y) in enumerate(heldout_natural_batches(natural, 8, seq_len)):
            if i >= max_batches:
                break
            lg = _forward(m, x, ab).logits
            tot += float(torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), y.reshape(-1).to(lg.device),
                                                           reduction="sum"))
            n += y.numel()
        out[f"heldout_loss{suffix}"] = tot / max(1, n)
        answers = list(_story_answers(m, tok, stories, ab))
        out.update({f"recall_{k}{suffix}": v for k, v in _bucket_rates(answers).items()})
        if ab is None:   # far stories holding other facts: answered with the asked object's colour, not any fact's
            far = [i for i, r in enumerate(stories) if r["bucket"] == "far"]
            out["recall_bound"] = _binding([stories[i] for i in far], [answers[i] for i in far], tok).right
        out.update({f"copy_gap{gap}{suffix}": copy_accuracy(m, natural, gap, ablation=ab) for gap in (4, 40, 200)})
        out.update({f"kv_lookup{gap}{suffix}": r
                    for gap, r in kv_lookup(m, frequent_ids(natural), seq_len=seq_len, ablation=ab).items()})
    # far recall (default selection) on stories told with names, objects and sentences never trained on
    out["recall_templates"] = _recall_by_bucket(m, tok, load_heldout_stories(HELDOUT_TEMPLATES_PATH), None)["far"]
    out["fact_in_pool"] = fact_in_pool(m, tok)
    set_window(m, 0)
    m.train()
    return out


def answer_argmax(logits: torch.Tensor, answer_pos: torch.Tensor) -> torch.Tensor:
    """The top token at each row's answer position ([B, T, V] logits, [B] positions), on the CPU."""
    rows = torch.arange(len(answer_pos), device=logits.device)
    return logits[rows, answer_pos.to(logits.device)].argmax(-1).cpu()


def _story_answers(m: V41Model, tok, rows: list[dict], ablation: Ablation | None):
    """(predicted id, answer id, bucket) for each held-out story row, in order: one exact forward per batch."""
    for b in story_eval_batches(tok, rows, batch_size=25):
        pred = answer_argmax(_forward(m, b["input_ids"], ablation).logits, b["answer_pos"])
        yield from zip(pred.tolist(), b["answer_id"].tolist(), b["bucket"])


def _recall_by_bucket(m: V41Model, tok, rows: list[dict], ablation: Ablation | None) -> dict[str, float]:
    return _bucket_rates(_story_answers(m, tok, rows, ablation))


def _bucket_rates(answers) -> dict[str, float]:
    """Accuracy per bucket from (predicted id, answer id, bucket) triples."""
    correct: dict[str, list[int]] = {}
    for p, a, bucket in answers:
        c = correct.setdefault(bucket, [0, 0])
        c[0] += p == a
        c[1] += 1
    return {k: v[0] / v[1] for k, v in correct.items()}


def _forward(m: V41Model, x: torch.Tensor, ablation: Ablation | None):
    x = x.to(m.device)
    return m(x) if ablation is None else m(x, ablation=ablation)


@torch.no_grad()
def fact_in_pool(m: V41Model, tok, bucket: str = "far", max_stories: int = 24) -> float:
    """The share of held-out `bucket` stories whose fact entry (the fact's colour token's entry at the
    candidate source's ratio) is in the candidate pool at the row that predicts the answer: the first
    thing the hierarchical selection must get right to bring a far fact back (0 when the config has no
    candidate pool). One exact traced forward per story, without the logit lens."""
    hits = n = 0
    for b in heldout_story_batches(tok, batch_size=1, bucket=bucket):
        if n >= max_stories:
            break
        a, f = int(b["answer_pos"][0]), int(b["fact_pos"][0])
        tr = m.trace(b["input_ids"][:, : a + 1].to(m.device), lens=False)
        src = next((r for r in tr.layers if r.spec.candidate_source and r.candidates is not None), None)
        if src is None:
            return 0.0
        pool = src.candidates[0, a]
        entry = f // src.spec.compress_ratio
        hits += int(entry < pool.shape[-1] and bool(pool[entry]))
        n += 1
    return hits / max(1, n)


@torch.no_grad()
def copy_probe(m: V41Model, tc, stream, n: int = 16, seed: int = 99_991, broad: bool = False,
               step: int = 0) -> dict[str, float]:
    """The gate of a curriculum stage: copy accuracy on fresh synthetic copy rows made with the stage's
    own settings (rows, span, ids) at its longest distances (the top quarter of a spread row's gaps, or
    exactly `copy_gap`), read at the training window of `step`, dense and sparse. `broad` draws the ids
    from the unigram^0.5 over the whole vocabulary instead (does the copy carry to ids it was not drilled
    on?). Keys: probe, probe_sparse (or probe_broad, probe_broad_sparse)."""
    span = max(3, tc.copy_span)
    top = max(0, tc.seq_len + 1 - 2 * span) if tc.copy_spread else tc.copy_gap
    gap_min = (3 * top) // 4 if tc.copy_spread else tc.copy_gap
    ids = CopyIds(weights=stream.unigram_weights(0.5)) if broad else copy_ids_for(tc, stream)
    g = torch.Generator().manual_seed(seed)
    x, y, answers, _ = copy_rows(ids, n, tc.seq_len, g, span, top, gap_min=gap_min, spread=tc.copy_spread)
    return _probe(m, tc, step, "probe_broad" if broad else "probe", x, y, answers)


def _probe(m: V41Model, tc, step: int, name: str, x: torch.Tensor, y: torch.Tensor,
           answers: torch.Tensor) -> dict[str, float]:
    """A gate's reading: marked-target accuracy at the training window of `step`, dense (`name`) and sparse
    (`name`_sparse); the model is left in train mode at the config's window."""
    set_window(m, window_at(tc, step))
    m.eval()
    out = {name + suffix: _marked_accuracy(m, x, y, answers, ab)
           for suffix, ab in (("", Ablation(dense_compressed=True)), ("_sparse", None))}
    set_window(m, 0)
    m.train()
    return out


@torch.no_grad()
def kv_probe(m: V41Model, tc, stream, n: int = 16, seed: int = 99_989, broad: bool = False,
             step: int = 0, tok=None) -> dict[str, float]:
    """The gate of a stage that drills key-value rows and no copies: lookups on fresh rows made with the
    stage's own keys, values and pairs (`kv_rows_for`; the story vocabulary needs `tok`), at its longest distances
    (the top quarter of 0..`kv_gap`), read at the training window of `step`, dense and sparse; `broad` draws
    the ids from the unigram^0.5 as `copy_probe` does. Same keys as `copy_probe`."""
    x, y, answers, _ = kv_rows_for(tc, stream, tok, n, torch.Generator().manual_seed(seed),
                                gap_min=(3 * tc.kv_gap) // 4, broad=broad)
    return _probe(m, tc, step, "probe_broad" if broad else "probe", x, y, answers)


def _marked_accuracy(m: V41Model, x: torch.Tensor, y: torch.Tensor, marks: torch.Tensor,
                     ablation: Ablation | None) -> float:
    """The share of the marked targets that the model's argmax predicts exactly."""
    if not marks.any():
        return 0.0
    pred = _forward(m, x, ablation).logits.argmax(-1).cpu()
    return float((pred == y)[marks].float().mean())


def frequent_ids(tokens, n: int = 1000) -> torch.Tensor:
    """The n most frequent ids of a token array (`TokenStream.frequent_ids` over all of it): familiar tokens to
    build synthetic rows from at evaluation, as training draws them from its own stream."""
    return TokenStream(tokens, {}).frequent_ids(n, prefix=len(tokens))


@torch.no_grad()
def kv_lookup(m: V41Model, ids: torch.Tensor, gaps: tuple[int, ...] = (0, 200), rows: int = 8, seq_len: int = 512,
              seed: int = 11, ablation: Ablation | None = None) -> dict[int, float]:
    """Associative recall measured directly: for each `gap`, `rows` fresh key-value rows (`kv_rows`: 2-8 pairs,
    0..gap other tokens, then every key again) and the share of queried values predicted exactly. Apart from
    the last pair's value and the first query, every pair lies beyond a 2-token window, so at a narrow window
    only a match through the compressed entries scores above chance (1 / len(ids))."""
    out = {}
    for gap in gaps:
        x, y, marks, _ = kv_rows(ids, rows, seq_len, torch.Generator().manual_seed(seed), max_pairs=8, max_gap=gap)
        out[gap] = _marked_accuracy(m, x, y, marks, ablation)
    return out


@torch.no_grad()
def said_twice(tokens, gap: int, n: int = 24, span: int = 16, seed: int = 5) -> torch.Tensor:
    """`copy_accuracy`'s rows [n, 8 + 2 * span + gap]: 8 tokens (reversed, so they do not lead into the span), a
    held-out span, `gap` tokens of other text, the span again; the second copy starts at 8 + span + gap."""
    toks = torch.as_tensor(tokens, dtype=torch.long)
    g = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(n):
        s = int(torch.randint(0, len(toks) - 2 * (span + gap) - 16, (1,), generator=g))
        said = toks[s:s + span]
        filler = toks[s + span + 8: s + span + 8 + gap]  # other text, not the span's own continuation
        rows.append(torch.cat([toks[s + span: s + span + 8].flip(0), said, filler, said]))
    return torch.stack(rows)


def copy_accuracy(m: V41Model, tokens, gap: int, n: int = 24, span: int = 16, seed: int = 5,
                  first: bool = False, ablation: Ablation | None = None) -> float:
    """Does the model copy? n held-out text spans of `span` tokens, said again after `gap` other
    tokens; the share of the repeat's tokens 2..span predicted exactly (argmax). A model that
    cannot look back scores what the text alone predicts (about 0.2 here); copying lifts it
    towards 1. gap + span > window means the first copy is reachable only through compressed entries.
    `first=True` scores the first time the span is seen instead: the no-copy baseline; `ablation`
    switches parts off (window only: can the far copy be made without the compressed entries?)."""
    x = said_twice(tokens, gap, n, span, seed).to(m.device)
    lg = (m(x) if ablation is None else m(x, ablation=ablation)).logits
    start = 8 if first else 8 + span + gap
    return float((lg[:, start:start + span - 1].argmax(-1) == x[:, start + 1:start + span]).float().mean())


# ---- the held-out evaluation of the quality benchmark and the Ablation lab -------------------------------------
BUCKETS = ("inside", "just_past", "far")


@dataclass
class Quality:
    loss: float                         # nats per token on held-out natural text
    tokens: int
    recall: dict[str, float]            # bucket -> accuracy
    recall_n: dict[str, int]
    seconds: float
    extra: dict[str, float] = field(default_factory=dict)

    def row(self) -> dict[str, float]:
        out = {"loss": self.loss}
        out.update({f"recall_{b}": self.recall.get(b, float("nan")) for b in BUCKETS})
        out["seconds"] = self.seconds
        return out


@torch.no_grad()
def natural_loss(model, max_tokens: int | None = None, seq_len: int = 512, batch: int = 8, ablation=None,
                 progress: Callable[[float, str], None] | None = None) -> tuple[float, int, np.ndarray]:
    toks = heldout_natural_tokens(model.tokenizer)
    if max_tokens:
        toks = toks[: max_tokens + 1]
    total, n = 0.0, 0
    batches = list(heldout_natural_batches(toks, batch, seq_len))
    for i, (x, y) in enumerate(batches):
        lg = model(x.to(model.device), ablation=ablation).logits
        total += float(torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]).float(),
                                                         y.reshape(-1).to(lg.device), reduction="sum"))
        n += y.numel()
        if progress:
            progress((i + 1) / len(batches), f"natural text {n:,} tokens")
    return total / max(1, n), n, toks


@torch.no_grad()
def story_recall(model, max_stories: int | None = None, ablation=None, mode: str = "exact",
                 progress: Callable[[float, str], None] | None = None,
                 path: Path | None = None) -> tuple[dict[str, float], dict[str, int]]:
    rows = load_heldout_stories(path)
    if max_stories:  # keep the buckets balanced when subsampling
        per = max(1, max_stories // len(BUCKETS))
        rows = [r for b in BUCKETS for r in [x for x in rows if x["bucket"] == b][:per]]
    hits: dict[str, list[int]] = {}
    done = 0
    for b in story_eval_batches(model.tokenizer, rows, batch_size=25):
        if mode == "exact":
            pred = answer_argmax(model(b["input_ids"].to(model.device), ablation=ablation).logits, b["answer_pos"])
        else:
            preds = []
            for ids, pos in zip(b["input_ids"], b["answer_pos"]):
                pf = prefill(model, ids[: int(pos) + 1].unsqueeze(0), mode, ablation=ablation)
                preds.append(int(pf.logits[0].argmax()))
            pred = torch.tensor(preds)
        for ok, bucket in zip((pred == b["answer_id"]).tolist(), b["bucket"]):
            hits.setdefault(bucket, []).append(int(ok))
        done += len(b["bucket"])
        if progress:
            progress(done / len(rows), f"stories {done}/{len(rows)}")
    return ({k: sum(v) / len(v) for k, v in hits.items()}, {k: len(v) for k, v in hits.items()})


@dataclass
class Binding:
    """Does the model answer with the asked object's fact, or with any fact? Far held-out stories that hold other
    facts (distractors, each another object in a container of another colour): the share answered right, the share
    answered with a distractor's colour, and what picking one of the story's facts at random would score."""

    right: float
    other_fact: float
    random_fact: float
    stories: int
    alone_right: float   # the far stories with no other fact in them: is a fact found at all?


@torch.no_grad()
def fact_binding(model, path: Path | None = None, bucket: str = "far", tok=None) -> Binding:
    """`Binding` over the held-out `bucket` stories; `tok` defaults to the model's own tokenizer."""
    tok = tok or model.tokenizer
    rows = [r for r in load_heldout_stories(path) if r["bucket"] == bucket]
    return _binding(rows, _story_answers(model, tok, rows, None), tok)


def _binding(rows: list[dict], answers, tok) -> Binding:
    """`Binding` from held-out story rows and their (predicted id, answer id, bucket), in the same order."""
    right = other = alone = n_alone = 0
    guess = 0.0
    for r, (p, a, _) in zip(rows, answers):
        colours = {d[1] for d in r.get("distractors", [])}
        if not colours:
            alone += p == a
            n_alone += 1
            continue
        right += p == a
        other += tok.decode([p]).strip() in colours
        guess += 1 / (1 + len(colours))
    n = len(rows) - n_alone
    return Binding(right=right / max(1, n), other_fact=other / max(1, n), random_fact=guess / max(1, n), stories=n,
                   alone_right=alone / max(1, n_alone))


def evaluate(model, ablation=None, mode: str = "exact", max_stories: int | None = None,
             max_natural_tokens: int | None = None, progress: Callable[[float, str], None] | None = None) -> Quality:
    """Held-out loss and recall by bucket for one configuration (the ablation lab's unit of work)."""
    t0 = time.perf_counter()

    def sub(lo, hi):
        return None if progress is None else (lambda f, msg: progress(lo + (hi - lo) * f, msg))

    loss, n, _ = natural_loss(model, max_natural_tokens, ablation=ablation, progress=sub(0.0, 0.4))
    recall, counts = story_recall(model, max_stories, ablation=ablation, mode=mode, progress=sub(0.4, 1.0))
    return Quality(loss=loss, tokens=n, recall=recall, recall_n=counts, seconds=time.perf_counter() - t0)


def _colours_right(model, enc, answers: list[tuple[int, int | None]], colour_ids: torch.Tensor) -> int:
    """One forward of an encoded text, scored by `_colour_picks_right`."""
    logits = _forward(model, torch.tensor([enc.ids]), None).logits[0].cpu()
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
    """The lookup loss's target read back (docs/training.md §3): over the answer rows of `rows` whose source lies past
    the model's window, (the share whose ratio-1 attention, dense, heads and layers summed, is larger on the source
    than on any of the row's other sources; a random pick's share). nan when no row has a source that far back."""
    target = lookup_target(rows.sources.to(model.device), window_of(model))
    if target is None:
        return float("nan"), float("nan")
    model(rows.x.to(model.device), ablation=Ablation(dense_compressed=True), lookup=target)
    mass = torch.stack(target.masses, 1).sum(dim=(1, 2))                  # [N, 1 + R]
    rivals = mass[:, 1:].masked_fill(target.rivals < 0, -1.0)
    read = mass[:, 0] > rivals.max(-1).values
    return float(read.float().mean()), float((1.0 / (1 + (target.rivals >= 0).sum(-1).float())).mean())

