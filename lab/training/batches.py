"""Training batches: natural-text rows plus the look-back practice rows (recall drills, repeated text
spans, shuffled-token copies; lab/README.md §2-§3), each with answer marks on the targets only a
look-back can predict (the diagnosis is in lab/training/lookback.py).

The targets marked carry `answer_weight` times the loss (lab/training/step.py), without which their
signal drowns in the rest; the copies' largest gap moves in stages (`copy_gap_stages`), with near
copies kept in every batch (`copy_near_frac`). Batch n comes from a generator seeded with (seed, n),
so a resumed run sees the same batches as an uninterrupted one.
"""

from __future__ import annotations

import functools
import random
from typing import Callable, NamedTuple

import torch

from model.heldout import colour_token_ids, token_index_at_char, word_token_ids
from model.tokenizer import EOS_ID

from ..corpus.drills import recall_drill_sources
from ..corpus.stories import DRILL_CASTS, TRAIN_CAST, Cast
from .schedule import TrainConfig, batch_generator, copy_gap_at


class Rows(NamedTuple):
    """Training rows: inputs, next-token targets, which targets a look-back predicts, and where it looks."""

    x: torch.Tensor        # [B, S] input ids
    y: torch.Tensor        # [B, S] targets (x shifted by one)
    answers: torch.Tensor  # [B, S] bool: y[t] is predictable only by a look-back
    sources: torch.Tensor  # [B, S] long: for such a y[t], the position of the earlier token holding it (-1: none)


def _rows(rows: list[list[int]], marks: list[list[bool]], sources: list[list[int]]) -> Rows:
    """Token rows of seq_len + 1, per-token answer marks and per-token sources (the index in the row of the earlier
    token an answer is read from, -1 for none) -> Rows, the marks and sources aligned with y. A source index is
    also the position of its row in x (x is the row without its last token, and a source comes before y's)."""
    t = torch.tensor(rows, dtype=torch.long)
    a = torch.tensor(marks, dtype=torch.bool)
    src = torch.tensor(sources, dtype=torch.long)
    return Rows(t[:, :-1], t[:, 1:], a[:, 1:], src[:, 1:])


Piece = tuple[list[int], list[bool], list[int]]   # ids, answer marks, sources (indices within the piece, or -1)


def _packed(n: int, seq_len: int, piece: Callable[[], Piece]) -> Rows:
    """n rows of seq_len + 1 tokens, each filled with pieces drawn one after another and cut at the row's end
    -> Rows as `_rows` gives them (a piece's sources moved to row indices)."""
    rows, marks, sources = [], [], []
    for _ in range(n):
        ids: list[int] = []
        mark: list[bool] = []
        src: list[int] = []
        while len(ids) < seq_len + 1:
            i, m, r = piece()
            src += [j + len(ids) if j >= 0 else -1 for j in r]
            ids += i
            mark += m
        rows.append(ids[:seq_len + 1])
        marks.append(mark[:seq_len + 1])
        sources.append(src[:seq_len + 1])
    return _rows(rows, marks, sources)


def _copied(first: int, marks: list[bool]) -> list[int]:
    """Sources of a piece whose marked tokens repeat, in order, the tokens from index `first` on."""
    out, k = [], 0
    for m in marks:
        out.append(first + k if m else -1)
        k += m
    return out


def drill_rows(tok, n: int, seq_len: int, seed: int, cast: Cast = TRAIN_CAST, max_fillers: int = 4,
               link_max: int = -1, link_share: float = 0.5) -> Rows:
    """n rows of packed recall drills (each drill after an <|eos|>, `cast`, `max_fillers`, `link_max` and
    `link_share` as in `recall_drill`), deterministic for a seed; the answer marks sit on the colour
    tokens of the answers, their sources on the same object's colour in its fact (-1 when the row's cut
    left the fact out)."""
    rng = random.Random(seed)
    rows, marks, sources = [], [], []
    for _ in range(n):
        ids: list[int] = []
        mark: list[bool] = []
        src: list[int] = []
        while len(ids) < seq_len + 1:
            text, pairs = recall_drill_sources(rng, cast=cast, max_fillers=max_fillers, link_max=link_max,
                                               link_share=link_share)
            enc = tok.encode(text, add_special_tokens=False)
            here = [-1] * len(enc.ids)          # each answer colour token's source; the marks are where one is
            for said, fact, colour in pairs:
                # a colour of several tokens: its k-th token is read from the fact colour's k-th
                end = said + len(colour)
                a, f = token_index_at_char(enc.offsets, said), token_index_at_char(enc.offsets, fact)
                while a < len(here) and enc.offsets[a][0] < end:
                    here[a] = len(ids) + 1 + f
                    a, f = a + 1, f + 1
            ids += [EOS_ID] + enc.ids
            mark += [False] + [j >= 0 for j in here]
            src += [-1] + here
        start = rng.randrange(0, len(ids) - seq_len) if len(ids) > seq_len + 1 else 0
        rows.append(ids[start:start + seq_len + 1])
        marks.append(mark[start:start + seq_len + 1])
        sources.append([j - start if j >= start else -1 for j in src[start:start + seq_len + 1]])
    return _rows(rows, marks, sources)


def patchwork_span(stream, length: int, piece_max: int, generator: torch.Generator) -> list[int]:
    """`length` tokens stitched from pieces of 1..piece_max tokens taken from random places in the
    stream: text-like up close (real bigrams inside each piece), but not a passage the model can have
    memorised, so its second occurrence is predictable only by finding the first."""
    out: list[int] = []
    while len(out) < length:
        k = int(torch.randint(1, piece_max + 1, (1,), generator=generator))
        px, _ = stream.sample_batch(1, k, generator)
        out += px[0].tolist()
    return out[:length]


def repeat_rows(stream, n: int, seq_len: int, generator: torch.Generator,
                vocab: int, piece_max: int = 0) -> Rows:
    """n rows where spans of corpus text (8-24 tokens) come back after a gap of other corpus text,
    half the time inside the window (0-16 tokens), half far back (32-400 tokens): the second copy
    can only be predicted by finding the first. Real-text spans (frequent tokens with trained
    embeddings) make this the quickest way for a small model to learn to copy from far back; random
    token ids are much slower to learn from. `vocab` is kept for the signature. The answer marks sit
    on the second copy's tokens after its first, their sources on the first copy's.

    A contiguous span of the training stream can be predicted the second time from memory of the
    corpus (it is seen for several epochs), so it teaches recall of the corpus, not copying:
    `piece_max` > 0 stitches each span from pieces of 1..piece_max tokens (`patchwork_span`)."""
    def piece() -> Piece:
        span_len = int(torch.randint(8, 25, (1,), generator=generator))
        near = bool(torch.rand((), generator=generator) < 0.5)
        gap = int(torch.randint(0, 17, (1,), generator=generator)) if near else \
            int(torch.randint(32, 401, (1,), generator=generator))
        if piece_max:
            span = patchwork_span(stream, span_len, piece_max, generator)
        else:
            sx, _ = stream.sample_batch(1, span_len, generator)
            span = sx[0].tolist()
        fx, _ = stream.sample_batch(1, max(gap, 2), generator)
        marks = [False] * (span_len + gap + 1) + [True] * (span_len - 1)
        return span + fx[0, :gap].tolist() + span, marks, _copied(1, marks)

    return _packed(n, seq_len, piece)


class CopyIds:
    """Where the copy spans' ids come from: uniformly from a set of ids (the most frequent text ids,
    whose embeddings text training also uses), or i.i.d. from weights over the whole vocabulary (the
    stream's unigram counts raised to a power < 1: rare ids come up too, frequent ones less often)."""

    def __init__(self, ids: torch.Tensor | None = None, weights: torch.Tensor | None = None):
        if (ids is None) == (weights is None):
            raise ValueError("give either ids or weights")
        self.ids, self.weights = ids, weights

    @staticmethod
    def of(ids: torch.Tensor | CopyIds) -> CopyIds:
        """A source as given, or uniform over a tensor of ids."""
        return ids if isinstance(ids, CopyIds) else CopyIds(ids=ids)

    def draw(self, n: int, generator: torch.Generator) -> list[int]:
        if n <= 0:
            return []
        if self.ids is not None:
            return self.ids[torch.randint(0, len(self.ids), (n,), generator=generator)].tolist()
        return torch.multinomial(self.weights, n, replacement=True, generator=generator).tolist()


def copy_ids_for(tc: TrainConfig, stream) -> CopyIds:
    """The copy id source of a run: `copy_temper` > 0 draws from the unigram^temper over the whole
    vocabulary, else uniformly from the `copy_vocab` most frequent ids."""
    if tc.copy_temper > 0:
        return CopyIds(weights=stream.unigram_weights(tc.copy_temper))
    return CopyIds(ids=stream.frequent_ids(tc.copy_vocab))


def copy_rows(ids: torch.Tensor | CopyIds, n: int, seq_len: int, generator: torch.Generator, span_max: int,
              gap_max: int, near_frac: float = 0.0, gap_min: int = 0,
              spread: bool = False) -> Rows:
    """n rows of spans of shuffled familiar tokens, each said twice with gap_min..gap_max other shuffled
    tokens between. Text order gives no hint here, so the only way to predict the second copy is to
    find the first: the sharpest training signal for the copy (induction) circuit, which a small
    model trained on natural text alone does not form within our CPU budget. Familiar tokens keep
    the trained embeddings in use. A share `near_frac` of the spans comes back at once (gap 0-2), so
    the near skill keeps being practised while `gap_max` moves out. `spread` makes the gap range the
    whole row (0 .. seq_len + 1 - 2 x span): distances over everything a row can hold, the curriculum's
    way to teach a look-back that does not depend on one distance. The answer marks sit on the
    second copy's tokens after its first (the only predictable tokens here), their sources on the first copy's."""
    source = CopyIds.of(ids)

    def piece() -> Piece:
        span_len = int(torch.randint(3, max(3, span_max) + 1, (1,), generator=generator))
        near = near_frac > 0 and bool(torch.rand((), generator=generator) < near_frac)
        hi = max(0, seq_len + 1 - 2 * span_len) if spread else gap_max
        lo = 0 if near else min(gap_min, hi)
        hi = min(2, hi) if near else hi
        gap = int(torch.randint(lo, hi + 1, (1,), generator=generator))
        pick = source.draw(span_len + gap, generator)
        marks = [False] * (span_len + gap + 1) + [True] * (span_len - 1)
        return pick + pick[:span_len], marks, _copied(1, marks)

    return _packed(n, seq_len, piece)


def story_object_ids(tok) -> list[int]:
    """The drills' one-token objects (the wide cast's): the key-value rows' keys and the entry probe's objects."""
    return sorted(word_token_ids(tok, DRILL_CASTS["wide"].objects).values())


@functools.lru_cache(maxsize=4)
def _story_kv_ids(tok) -> tuple[CopyIds, CopyIds]:
    """The drills' one-token objects (keys) and one-token colours (values), encoded once per tokenizer."""
    return (CopyIds(ids=torch.tensor(story_object_ids(tok))),
            CopyIds(ids=torch.tensor(sorted(colour_token_ids(tok).values()))))


def kv_rows_for(tc: TrainConfig, stream, tok, n: int, generator: torch.Generator, gap_min: int = 0,
                broad: bool = False) -> Rows:
    """n key-value rows as a run's settings make them: keys, values and filler the copies' ids, or with `kv_vocab`
    "story" / "question" the one-token objects of the drills' wide cast as keys and the one-token colours as
    values, the copies' ids between (`question` also names each key before its query); `kv_pad`, `kv_link`. `broad`
    draws every id from the unigram^0.5 over the vocabulary instead (the probe of ids never drilled)."""
    if tc.kv_vocab not in ("frequent", "story", "question"):
        raise ValueError(f"kv_vocab {tc.kv_vocab!r}: 'frequent', 'story' or 'question'")
    familiar = CopyIds(weights=stream.unigram_weights(0.5)) if broad else copy_ids_for(tc, stream)
    keys = values = familiar
    if tc.kv_vocab != "frequent" and not broad:
        keys, values = _story_kv_ids(tok)
    return kv_rows(keys, n, tc.seq_len, generator, tc.kv_pairs, tc.kv_gap, gap_min=gap_min, values=values,
                   filler=familiar, mention=tc.kv_vocab == "question" and not broad, pad=tc.kv_pad, link=tc.kv_link)


def kv_rows(ids: torch.Tensor | CopyIds, n: int, seq_len: int, generator: torch.Generator,
            max_pairs: int = 8, max_gap: int = 32, gap_min: int = 0, values: torch.Tensor | CopyIds | None = None,
            filler: torch.Tensor | CopyIds | None = None,
            mention: bool = False, pad: int = 0, link: int = 0) -> Rows:
    """n rows of key-value lookups (associative recall, MQAR-style): 2..max_pairs pairs of familiar tokens, a
    key next to its value ("k1 v1 k2 v2 ..."), gap_min..max_gap other familiar tokens, then every key again in a
    shuffled order, each followed by its value. A value after its repeated key is predictable only by finding the key's
    first occurrence and reading the token next to it: the match that binding an object to its colour needs,
    with no distance between them. Keys within a group are distinct. The answer marks sit on the queried values,
    their sources on the same values in the pairs.
    `values` and `filler` draw those from other ids than the keys (the story vocabulary: objects -> colours, with
    familiar text tokens between). `mention` says each key once more, followed by a filler token, just before its
    query ("k x k v", as "Where is the key? The key ..." asks): the latest earlier occurrence of the key is then
    not the one next to its value, so only a match that finds the pair itself scores. `pad` puts 0..pad filler
    tokens before and after every pair and every query, so that no fixed layout (a key every other token) can
    stand in for the match: the pair must be found by what it says, as in a sentence. `link` puts 0..link filler
    tokens between a key and its value, in the pair and (drawn afresh) in the query, as "put the key in the blue
    box" and "the key is in the blue box" do: the query must carry its key across them, and the pair's value
    must be read a few tokens after the key it matched."""
    source = CopyIds.of(ids)
    value_source = source if values is None else CopyIds.of(values)
    filler_source = source if filler is None else CopyIds.of(filler)

    def some(most: int) -> list[int]:
        return filler_source.draw(int(torch.randint(0, most + 1, (1,), generator=generator)), generator) if most else []

    def piece() -> Piece:
        npairs = int(torch.randint(2, max(2, max_pairs) + 1, (1,), generator=generator))
        gap = int(torch.randint(min(gap_min, max_gap), max_gap + 1, (1,), generator=generator))
        keys: list[int] = []
        while len(keys) < npairs:
            k = source.draw(1, generator)[0]
            if k not in keys:
                keys.append(k)
        vals = value_source.draw(npairs, generator)
        order = torch.randperm(npairs, generator=generator).tolist()
        toks: list[int] = []
        marks: list[bool] = []
        sources: list[int] = []
        value_at: list[int] = []             # where each pair's value was said

        def say(part: list[int], source: int = -1) -> None:
            if not part:
                return
            toks.extend(part)
            marks.extend([False] * (len(part) - 1) + [source >= 0])
            sources.extend([-1] * (len(part) - 1) + [source])

        for k, v in zip(keys, vals):
            before, between = some(pad), some(link)
            value_at.append(len(toks) + len(before) + 1 + len(between))
            say(before + [k] + between + [v] + some(pad))
        say(filler_source.draw(gap, generator))
        said = filler_source.draw(npairs, generator) if mention else []
        for j, i in enumerate(order):
            say(some(pad) + ([keys[i], said[j]] if mention else []))
            say([keys[i]] + some(link) + [vals[i]], source=value_at[i])
            say(some(pad))
        return toks, marks, sources

    return _packed(n, seq_len, piece)


def make_batch(tc: TrainConfig, stream, tok, step: int) -> Rows:
    """Batch `step`: natural-text rows, then drills, repeated text spans, copy rows and key-value rows by their
    shares -> Rows: answers marks the targets a look-back can predict (weighted by `answer_weight` in the loss),
    sources where each is read from (the lookup loss's targets)."""
    n_drill = int(round(tc.batch * tc.drill_frac))
    n_rep = int(round(tc.batch * tc.repeat_frac))
    n_copy = int(round(tc.batch * tc.copy_frac))
    n_kv = int(round(tc.batch * tc.kv_frac))
    g = batch_generator(tc, step)
    x, y = stream.sample_batch(tc.batch - n_drill - n_rep - n_copy - n_kv, tc.seq_len, g)
    parts = [Rows(x, y, torch.zeros_like(y, dtype=torch.bool), torch.full_like(y, -1))]
    if n_drill:
        if tc.drill_cast not in DRILL_CASTS:
            raise ValueError(f"drill_cast {tc.drill_cast!r}: choose from {sorted(DRILL_CASTS)}")
        parts.append(drill_rows(tok, n_drill, tc.seq_len, tc.seed * 1_000_003 + step,
                                DRILL_CASTS[tc.drill_cast], tc.drill_fillers, tc.drill_link, tc.drill_link_share))
    if n_rep:
        parts.append(repeat_rows(stream, n_rep, tc.seq_len, g, tok.get_vocab_size(), tc.repeat_pieces))
    if n_copy:
        parts.append(copy_rows(copy_ids_for(tc, stream), n_copy, tc.seq_len, g, tc.copy_span,
                               copy_gap_at(tc, step), tc.copy_near_frac, spread=tc.copy_spread))
    if n_kv:
        parts.append(kv_rows_for(tc, stream, tok, n_kv, g))
    return Rows(*(torch.cat(t) for t in zip(*parts)))
