"""The synthetic rows of a training batch (lab/training/batches.py): copies, key-value lookups, repeated
text and their answer marks; the copy-id sources; and the lookup measure that reads them back
(lab/training/evaluation.py `kv_lookup`)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lab.training import TrainConfig
from model.shipped import shipped_weights


def test_copy_rows_say_each_span_twice_with_familiar_tokens():
    from lab.training import copy_rows

    ids = torch.arange(100, 400)
    x, y, answers, _ = copy_rows(ids, 3, 64, torch.Generator().manual_seed(1), span_max=6, gap_max=0)
    assert x.shape == y.shape == answers.shape == (3, 64) and torch.equal(x[:, 1:], y[:, :-1])
    assert bool(((x >= 100) & (x < 400)).all())
    for row in torch.cat([x, y[:, -1:]], 1).tolist():
        p = 0
        while p + 12 <= len(row):  # parse [span, span] blocks; the last one may be cut off
            lengths = [n for n in range(3, 7) if row[p:p + n] == row[p + n:p + 2 * n]]
            assert lengths, f"no repeated span at {p}: {row[p:p + 12]}"
            p += 2 * lengths[0]


def test_frequent_ids_rank_by_count_and_leave_special_ids_out():
    from lab.corpus import TokenStream

    tokens = np.array([7] * 20 + [1] * 50 + [9] * 30 + [6] * 10 + [8] * 5, dtype=np.uint16)
    s = TokenStream(tokens, {})
    assert s.frequent_ids(3).tolist() == [9, 7, 6]   # id 1 is special: left out however often it appears
    assert s.frequent_ids(1, prefix=70).tolist() == [7]     # counted over the first 70 tokens only


def test_near_copies_stay_in_the_mix_while_the_gap_moves_out():
    from lab.training import copy_rows

    ids = torch.arange(100, 400)
    x, _, _, _ = copy_rows(ids, 4, 400, torch.Generator().manual_seed(0), span_max=6, gap_max=60, near_frac=0.5)
    gaps = []
    for row in x.tolist():  # spans are 3-6 tokens; find each span's second copy and its distance
        i = 0
        while i + 3 < len(row):
            for j in range(i + 3, min(len(row) - 3, i + 6 + 61)):
                if row[j:j + 3] == row[i:i + 3]:
                    gaps.append(j - i)
                    break
            i += 1
    assert min(gaps) <= 8 and max(gaps) >= 40  # some said again at once, some far


def test_answer_marks_sit_on_what_only_a_look_back_predicts():
    """Copy rows: a marked target equals the token one span back (its first copy); drill rows: marked
    targets are the colour of an answer sentence, and that colour was stated earlier in the row's drill."""
    from lab.training import copy_rows, drill_rows
    from model.heldout import COLOURS
    from model.tokenizer import load_tokenizer

    ids = torch.arange(100, 400)
    x, y, answers, _ = copy_rows(ids, 3, 120, torch.Generator().manual_seed(2), span_max=6, gap_max=5)
    assert 0.1 < float(answers.float().mean()) < 0.5
    seq = torch.cat([x, y[:, -1:]], 1)
    for r, c in answers.nonzero().tolist():   # target y[r, c] = seq[r, c + 1] was said before, 3..11 back
        assert any(int(seq[r, c + 1]) == int(seq[r, c + 1 - back]) and
                   int(seq[r, c]) == int(seq[r, c - back]) for back in range(3, 12) if c - back >= 0)
    tok = load_tokenizer("data/weights/tiny/tokenizer.json")
    x, y, answers, _ = drill_rows(tok, 2, 256, seed=4)
    marked = [tok.decode([int(t)]).strip() for t in y[answers]]
    assert marked and all(word in COLOURS for word in marked)
    unmarked_colours = [t for t, a in zip(y.flatten().tolist(), answers.flatten().tolist())
                        if not a and tok.decode([t]).strip() in COLOURS]
    assert unmarked_colours  # the facts' colours are not answers
    # binding drills: the marks still sit on the answers' colours, whatever the words before them
    x, y, answers, _ = drill_rows(tok, 2, 256, seed=4, link_max=4, link_share=1.0)
    seq = torch.cat([x, y[:, -1:]], 1)
    for r, c in answers.nonzero().tolist():
        assert tok.decode([int(y[r, c])]).strip() in COLOURS
        before = tok.decode(seq[r, max(0, c - 16):c + 1].tolist())
        assert "?" in before and " The " in before.split("?")[-1], before   # an answer, not a fact
    assert int(answers.sum()) >= 3


def test_key_value_rows_mark_only_values_found_by_their_key():
    """Every marked target is the value that followed its (just seen) key at the key's first occurrence in the
    row, never the token after the key's previous query; the marks are about a quarter of the tokens or more."""
    from lab.training import kv_rows

    ids = torch.arange(100, 400)
    x, y, answers, _ = kv_rows(ids, 3, 200, torch.Generator().manual_seed(5), max_pairs=6, max_gap=10)
    assert x.shape == y.shape == answers.shape == (3, 200)
    assert 0.1 < float(answers.float().mean()) < 0.5
    seq = torch.cat([x, y[:, -1:]], 1)
    for r, c in answers.nonzero().tolist():
        key, value = int(seq[r, c]), int(seq[r, c + 1])
        earlier = [p for p in range(c) if int(seq[r, p]) == key]
        assert earlier and any(int(seq[r, p + 1]) == value for p in earlier)
    # in a batch: a quarter of the rows are lookups (their marks), the rest plain text (no marks)
    from lab.corpus import TokenStream
    from lab.training import make_batch

    stream = TokenStream(np.arange(50_000, dtype=np.int64) % 4_000, {})
    tc = TrainConfig(batch=4, seq_len=64, kv_frac=0.25, copy_vocab=300)
    x, y, answers, _ = make_batch(tc, stream, None, step=3)
    assert x.shape == (4, 64) and not answers[:3].any() and answers[3].sum() > 5


def test_key_value_rows_hold_the_asked_gap_and_the_lookup_measure_separates_a_match_from_none():
    """kv_rows puts gap_min..max_gap other tokens between the pairs and the queries; kv_lookup scores a model that
    reads the token after the key's latest earlier occurrence near 1 and one that repeats its input near 0."""
    from types import SimpleNamespace

    from lab.training import kv_lookup, kv_rows

    ids = torch.arange(100, 1100)
    x, y, answers, _ = kv_rows(ids, 2, 512, torch.Generator().manual_seed(3), max_pairs=4, max_gap=40, gap_min=30)
    seq = torch.cat([x, y[:, -1:]], 1)
    for r, c in answers.nonzero().tolist():
        key, value = int(seq[r, c]), int(seq[r, c + 1])
        first = next(p for p in range(c) if int(seq[r, p]) == key and int(seq[r, p + 1]) == value)
        assert c - first >= 30 + 2                   # the other tokens, then at least this pair's own query

    class Stub:
        device = torch.device("cpu")

        def __init__(self, match: bool):
            self.match = match

        def __call__(self, x):
            logits = torch.zeros(*x.shape, 1100)
            for r in range(x.shape[0]):
                row = x[r].tolist()
                latest: dict[int, int] = {}
                for t, tok in enumerate(row):
                    guess = row[latest[tok] + 1] if self.match and tok in latest else tok
                    logits[r, t, guess] = 1.0
                    latest[tok] = t
            return SimpleNamespace(logits=logits)

    match, none = kv_lookup(Stub(True), ids, gaps=(0, 200)), kv_lookup(Stub(False), ids, gaps=(0, 200))
    assert match[0] > 0.95 and match[200] > 0.7 and max(none.values()) < 0.05


def test_patchwork_repeats_are_not_passages_of_the_stream_and_come_back_whole():
    """repeat_rows with piece_max: each repeated span is stitched from short pieces (on a stream of
    consecutive ids, a stitch shows as a jump), is said again verbatim, and only its second copy is marked."""
    from lab.corpus import TokenStream
    from lab.training import repeat_rows

    stream = TokenStream(np.arange(50_000, dtype=np.int64) % 40_000, {})
    x, y, answers, _ = repeat_rows(stream, 4, 300, torch.Generator().manual_seed(3), 0, piece_max=3)
    seq = torch.cat([x, y[:, -1:]], 1)
    x0, y0, a0, _ = repeat_rows(stream, 4, 300, torch.Generator().manual_seed(3), 0)

    def jumps(x, y, a):  # share of marked targets (inside second copies) that do not follow on in the stream
        return float((y - x != 1)[a].float().mean())
    assert jumps(x, y, answers) > 0.3 and jumps(x0, y0, a0) < 0.05  # stitched vs a contiguous passage
    for r, c in answers.nonzero().tolist():             # a marked target repeats what followed its token before
        assert any(int(seq[r, c + 1]) == int(seq[r, c + 1 - back]) and int(seq[r, c]) == int(seq[r, c - back])
                   for back in range(9, 425) if c - back >= 0)
    assert 0.1 < float(answers.float().mean()) < 0.6


def test_spread_copies_use_distances_over_the_whole_row_and_gap_min_holds():
    from lab.training import copy_rows
    ids = torch.arange(100, 400)

    def first_gaps(x, y, answers):
        # spans of 3: a row opens with span, gap, span; its first mark sits on the second copy's 2nd token
        out = []
        for r in range(len(x)):
            row = x[r].tolist() + y[r, -1:].tolist()
            gap = answers[r].tolist().index(True) - 3
            assert row[gap + 3: gap + 6] == row[:3]     # the span really comes back after the gap
            out.append(gap)
        return out

    x, y, answers, _ = copy_rows(ids, 60, 32, torch.Generator().manual_seed(3), span_max=3, gap_max=0, spread=True)
    gaps = first_gaps(x, y, answers)
    assert max(gaps) >= 20 and min(gaps) <= 3 and max(gaps) <= 32 + 1 - 6   # near to far inside 32-token rows
    x, y, answers, _ = copy_rows(ids, 20, 64, torch.Generator().manual_seed(4), span_max=3, gap_max=30, gap_min=25)
    assert all(25 <= g <= 30 for g in first_gaps(x, y, answers))


def test_tempered_unigram_copy_ids_reach_rare_ids_but_never_special_ones():
    from lab.corpus import TokenStream
    from lab.training import CopyIds
    toks = np.array([7] * 900 + [9] * 90 + [11] * 10 + list(range(12, 60)), dtype=np.uint16)
    s = TokenStream(tokens=toks, manifest={})
    w = s.unigram_weights(0.5)
    assert float(w[:5].sum()) == 0 and abs(float(w.sum()) - 1) < 1e-6
    assert w[7] / w[11] == pytest.approx((901 / 11) ** 0.5, rel=1e-4)   # counts + 1, raised to the power
    drawn = set(CopyIds(weights=w).draw(4000, torch.Generator().manual_seed(0)))
    assert {7, 9, 11} <= drawn and len(drawn & set(range(12, 60))) > 30 and not drawn & set(range(5))
    g = torch.Generator()
    assert CopyIds(weights=w).draw(0, g) == [] == CopyIds(ids=torch.arange(5)).draw(0, g)   # no padding, no filler
    with pytest.raises(ValueError):
        CopyIds()


def test_story_key_value_rows_bind_drill_objects_to_colours_with_text_tokens_between():
    """kv_vocab "story": every queried key is a one-token drill object and its marked value a colour; the tokens
    between come from the familiar ids; an unknown vocabulary is refused."""
    from lab.corpus import WIDE_CAST, TokenStream
    from lab.training import make_batch
    from model.heldout import colour_token_ids, word_token_ids
    from model.tokenizer import load_tokenizer

    tok = load_tokenizer(shipped_weights("text") / "tokenizer.json")
    objects, colours = set(word_token_ids(tok, WIDE_CAST.objects).values()), set(colour_token_ids(tok).values())
    assert len(objects) >= 20 and len(colours) >= 8
    text_ids = np.array([i for i in range(5, 4_000) if i not in objects | colours], dtype=np.int64)
    stream = TokenStream(np.resize(text_ids, 50_000), {})   # text tokens that are never an object or a colour
    tc = TrainConfig(batch=2, seq_len=256, kv_frac=1.0, kv_vocab="story", kv_gap=20, copy_vocab=300)
    x, y, answers, _ = make_batch(tc, stream, tok, step=1)
    marked = answers.nonzero().tolist()
    assert len(marked) > 40
    assert all(int(x[r, c]) in objects and int(y[r, c]) in colours for r, c in marked)
    familiar = set(stream.frequent_ids(300).tolist())
    others = [int(t) for t in x.flatten() if int(t) not in objects | colours]
    assert others and set(others) <= familiar | {0, 1, 2}
    # "question": each key is said once more, followed by a text token, just before its query
    tc.kv_vocab = "question"
    x, y, answers, _ = make_batch(tc, stream, tok, step=1)
    for r, c in answers.nonzero().tolist():
        assert int(x[r, c - 2]) == int(x[r, c]) in objects and int(x[r, c - 1]) not in colours
        assert int(y[r, c]) in colours
    # kv_pad: filler tokens around every pair and query; each marked value still follows its key, and the key's
    # first occurrence in the row is followed by that value
    tc.kv_vocab, tc.kv_pad = "story", 2
    x, y, answers, _ = make_batch(tc, stream, tok, step=2)
    seq = torch.cat([x, y[:, -1:]], 1)
    gaps = set()
    for r, c in answers.nonzero().tolist():
        key, value = int(seq[r, c]), int(seq[r, c + 1])
        assert key in objects and value in colours
        first = next(p for p in range(c) if int(seq[r, p]) == key and int(seq[r, p + 1]) == value)
        gaps.add(int(seq[r, first - 1]) in objects | colours)
    assert False in gaps                     # some pairs stand after a filler token, not after another pair
    # kv_link: 0..N filler tokens between each key and its value, in the pairs and the queries alike
    tc.kv_link = 3
    x, y, answers, _ = make_batch(tc, stream, tok, step=3)
    seq = torch.cat([x, y[:, -1:]], 1)
    links = []
    for r, c in answers.nonzero().tolist():
        value = int(seq[r, c + 1])
        key_at = max(p for p in range(c - 3, c + 1) if int(seq[r, p]) in objects)
        links.append(c - key_at)
        key = int(seq[r, key_at])
        said = [p for p in range(key_at) if int(seq[r, p]) == key]   # (an earlier group may use the key too)
        assert any(value in [int(t) for t in seq[r, p + 1:p + 5]] for p in said)
    assert set(links) == {0, 1, 2, 3}
    with pytest.raises(ValueError, match="kv_vocab"):
        make_batch(TrainConfig(batch=2, seq_len=64, kv_frac=1.0, kv_vocab="nonsense"), stream, tok, step=1)


def test_sources_point_each_answer_at_the_earlier_token_it_repeats():
    """Rows' sources: every marked target has one (unless a drill's cut left its fact out) and nothing else has;
    the source comes before the answer row and holds the answer's token. Drills: it is the colour of the fact that
    put the same object away (not another fact of that colour); key-value rows with links and pads: the pair's own
    value, its key the query's key."""
    import re

    from lab.corpus.stories import DRILL_CASTS, WIDE_OBJECTS
    from lab.training import copy_rows, drill_rows, kv_rows
    from model.heldout import COLOURS
    from model.tokenizer import load_tokenizer

    def check(rows, min_share=1.0):
        x, y, answers, sources = rows
        has = sources >= 0
        assert not (has & ~answers).any()
        assert float(has.sum()) >= min_share * float(answers.sum()) > 0
        b, t = has.nonzero(as_tuple=True)
        s = sources[b, t]
        assert bool((s <= t).all()) and torch.equal(x[b, s], y[b, t])
        return x, y, b, t, s

    check(copy_rows(torch.arange(100, 400), 3, 120, torch.Generator().manual_seed(2), span_max=6, gap_max=40))
    keys, values, filler = torch.arange(100, 200), torch.arange(200, 300), torch.arange(300, 1100)
    x, y, b, t, s = check(kv_rows(keys, 3, 300, torch.Generator().manual_seed(3), max_pairs=6, max_gap=40,
                                  values=values, filler=filler, pad=2, link=3))
    for r, a, f in zip(b.tolist(), t.tolist(), s.tolist()):
        def key_before(p: int) -> int:            # the key said 1-4 tokens before position p (links between)
            return next(k for k in reversed(x[r, max(0, p - 4):p].tolist()) if 100 <= k < 200)
        assert key_before(a + 1) == key_before(f)  # the source is the value of the pair whose key was asked
    tok = load_tokenizer("data/weights/tiny/tokenizer.json")
    x, y, b, t, s = check(drill_rows(tok, 3, 400, seed=4, cast=DRILL_CASTS["wide"], link_max=3), min_share=0.6)
    for r, a, f in zip(b.tolist(), t.tolist(), s.tolist()):
        assert tok.decode([int(y[r, a])]).strip() in COLOURS
        fact = tok.decode(x[r, max(0, f - 12):f + 1].tolist()).split(".")[-1]     # the fact up to its colour
        answer = tok.decode(x[r, max(0, a - 12):a + 1].tolist()).split("?")[-1]   # the answer up to its colour
        named = [o for o in WIDE_OBJECTS if re.search(rf"\b{o}\b", answer)]
        assert named and all(re.search(rf"\b{o}\b", fact) for o in named), (fact, answer)
