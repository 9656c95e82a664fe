"""Look-back heads (lessons/lookback_heads.py): the row of a span said twice, the per-head shares read from a trace,
one head's pattern over the first copy, the copy check, and the page's sentences; on synthetic shares whose right
answers are known by construction, and on the shipped weights (a look-back head inside the window, none beyond it on
the text model; one beyond it, through a one-token entry, on the recall checkpoint)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from lessons.lookback_heads import (
    CopyLayout,
    copy_check,
    copy_row,
    explain,
    head_pattern,
    lens_rise,
    look_back,
    passage_count,
    passage_parts,
    reach_sweep,
)
from model.inference.trace import Shares
from model.shipped import shipped_weights

TRAINED = (shipped_weights("text") / "model.safetensors").exists()
RECALL = (shipped_weights("recall") / "model.safetensors").exists()


def test_copy_row_puts_the_span_twice_and_its_layout_says_where():
    row, lay = copy_row([1, 2, 3], [10, 11, 12, 13], [7, 8])
    assert row == [1, 2, 3, 10, 11, 12, 13, 7, 8, 10, 11, 12, 13]
    assert (lay.first_start, lay.second_start, lay.distance, lay.length) == (3, 9, 6, 13)
    assert list(lay.query_rows) == [9, 10, 11]
    for t in lay.query_rows:                      # the match lies `distance` back; the token to copy follows it
        assert row[t - lay.distance] == row[t] and row[t - lay.distance + 1] == row[t + 1]
    with pytest.raises(ValueError, match="two tokens"):
        copy_row([1], [5], [2])


def test_passages_come_from_three_places_and_the_last_one_fits():
    tokens = list(range(20_000))
    lead, span, filler = passage_parts(tokens, 0, span=12, gap=4, lead=40)
    assert span == list(range(1000, 1012)) and lead == list(range(1100, 1140)) and filler == list(range(1200, 1204))
    n = passage_count(len(tokens), span=24, gap=400, lead=40)
    assert n == 7                                   # passage 6 starts at 19,000 and needs 600 tokens
    passage_parts(tokens, n - 1, span=24, gap=400)     # the last counted passage fits ...
    with pytest.raises(ValueError, match="too few"):
        passage_parts(tokens, n, span=24, gap=400)     # ... the next does not
    with pytest.raises(ValueError, match="too few"):
        passage_parts(tokens, -1, span=12, gap=4)


def _trace(layout: CopyLayout, heads: int, window: int, ratio: int = 0, k: int = 4, logits=None, ids=None):
    """A trace-shaped object with one layer of zero shares, for the tests to fill."""
    s = layout.length
    sh = Shares(window=torch.zeros(1, s, heads, window), entries=torch.zeros(1, s, heads, k),
                entry_ids=torch.full((1, s, k), -1), sink=torch.zeros(1, s, heads), ratio=ratio)
    layer = SimpleNamespace(shares=sh, spec=SimpleNamespace(role="Full" if ratio else "SWA"))
    return SimpleNamespace(layers=[layer], logits=logits, ids=ids)


def test_head_pattern_finds_the_diagonal_the_sink_and_packed_entries():
    """Head 0 reads the token after the match through its window slot; head 1 sits on the sink; in a ratio-2 layer
    head 0 reads an entry that packs two tokens of the first copy (not a position of its own)."""
    lay = CopyLayout(lead=2, span=4, gap=0)
    w = 8
    tr = _trace(lay, heads=2, window=w)
    sh = tr.layers[0].shares
    for t in lay.query_rows:
        sh.window[0, t, 0, (t - lay.distance + 1) - (t - (w - 1))] = 1.0
        sh.sink[0, t, 1] = 1.0
    hp = head_pattern(tr, lay, 0, 0)
    assert hp.after_match == [1.0] * 3 and hp.sink == [0.0] * 3 and hp.elsewhere == [0.0] * 3
    for k, row in enumerate(hp.on_first):
        assert row == [1.0 if j == k + 1 else 0.0 for j in range(lay.span)]
    hs = head_pattern(tr, lay, 0, 1)
    assert hs.sink == [1.0] * 3 and hs.after_match == [0.0] * 3 and hs.elsewhere == [0.0] * 3

    packed = _trace(lay, heads=1, window=w, ratio=2)
    psh = packed.layers[0].shares
    for t in lay.query_rows:
        psh.entry_ids[0, t, :2] = torch.tensor([1, 2])      # entry 1 packs tokens 2-3 (the first copy's first two)
        psh.entries[0, t, 0, 0] = 0.6
        psh.window[0, t, 0, w - 1] = 0.4                    # its own row: the second copy, not the first
    pp = head_pattern(packed, lay, 0, 0)
    assert pp.packed_first == pytest.approx([0.6] * 3) and pp.after_match == [0.0] * 3
    assert pp.elsewhere == pytest.approx([0.4] * 3)


def test_look_back_reads_the_induction_head_and_its_even_spread():
    lay = CopyLayout(lead=4, span=4, gap=0)
    w = 8
    tr = _trace(lay, heads=2, window=w)
    sh = tr.layers[0].shares
    sh.window[0, :, :, :] = 1 / w
    for t in lay.query_rows:
        sh.window[0, t, 1] = 0.0
        sh.window[0, t, 1, (t - lay.distance + 1) - (t - (w - 1))] = 1.0
    lb = look_back(tr, lay)
    best = lb.best()
    assert (best.layer, best.head, best.induction) == (0, 1, pytest.approx(1.0))
    assert best.even == pytest.approx(1 / w)            # rows 8-10, a window of 8: 8 keys each (row 6 would have 7)
    assert lb.copy is None                              # no logits in this trace
    assert lb.grid("induction") == [[pytest.approx(1 / w), pytest.approx(1.0)]]


def test_copy_check_compares_the_top_guess_with_the_span_both_times():
    row, lay = copy_row([1, 2], [10, 11, 12, 13], [5])
    v = 20
    logits = torch.zeros(1, lay.length, v)
    for t in range(lay.length - 1):
        logits[0, t, 3] = 5.0                       # a wrong guess everywhere ...
    for t in lay.query_rows:
        logits[0, t, row[t + 1]] = 9.0              # ... but the copy at the second saying
    cc = copy_check(SimpleNamespace(logits=logits, ids=torch.tensor([row])), lay)
    assert cc.expected == [11, 12, 13]
    assert cc.second_top == [11, 12, 13] and cc.first_top == [3, 3, 3]
    assert (cc.second_rate, cc.first_rate) == (1.0, 0.0)
    assert all(p > 0.9 for p in cc.second_p) and all(p < 0.01 for p in cc.first_p)


def test_logit_lens_log_probs_read_the_kept_rows_and_refuse_once_they_are_gone():
    """`LogitLens.log_probs`: log p(target) at chosen rows across the recorded forward calls; None after `top` has
    dropped the collapsed rows."""
    from model.inference.trace import LogitLens

    lens = LogitLens(2, project=lambda h: h)                 # the "head" is the identity: logits = the rows
    h1, h2 = torch.randn(1, 3, 5), torch.randn(1, 2, 5)
    lens.add_hidden(h1)
    lens.add_hidden(h2)
    want = torch.log_softmax(torch.cat([h1, h2], 1)[0], -1)
    got = lens.log_probs([0, 4], [2, 1])
    assert got == pytest.approx([float(want[0, 2]), float(want[4, 1])], abs=1e-6)
    lens.top()
    assert lens.log_probs([0], [2]) is None


def test_lens_rise_averages_each_copy_and_finds_the_biggest_step():
    row, lay = copy_row([1, 2], [10, 11, 12], [5])
    class Lens:                                              # layer i: the second copy gains i nats on the target
        def __init__(self, gain):
            self.gain = gain

        def log_probs(self, rows, targets, batch=0):
            return [-5.0 + (self.gain if r >= lay.second_start else 0.0) for r in rows]

    gains = [0.0, 0.5, 3.0, 2.5]
    tr = SimpleNamespace(ids=torch.tensor([row]), layers=[SimpleNamespace(lens=Lens(g)) for g in gains])
    rise = lens_rise(tr, lay)
    assert rise.layers == [0, 1, 2, 3] and rise.first == [-5.0] * 4 and rise.rise == gains
    assert rise.biggest_step() == (2, 2.5)
    tr.layers[1].lens.log_probs = lambda *a, **k: None     # a lens whose rows are gone: no rise at all
    assert lens_rise(tr, lay) is None


def test_explain_says_where_the_match_lies_and_when_no_head_looks_back():
    lay_far = CopyLayout(lead=2, span=4, gap=20)
    tr = _trace(lay_far, heads=1, window=8)
    tr.layers[0].shares.window[0, :, :, :] = 1 / 8
    said = " ".join(explain(look_back(tr, lay_far), num=lambda i: i + 1))
    assert "24 tokens back" in said and "beyond the 8-row window" in said and "No head looks back" in said
    assert "at least 3 times what an even spread would give" in said          # the verdict's rule, stated
    lay_near = CopyLayout(lead=2, span=4, gap=3)                 # the token to copy 6 back: inside a window of 8
    near = _trace(lay_near, heads=1, window=8)
    for t in lay_near.query_rows:
        near.layers[0].shares.window[0, t, 0, (t - lay_near.distance + 1) - (t - 7)] = 1.0
    said = " ".join(explain(look_back(near, lay_near), num=lambda i: i + 1))
    assert "inside the 8-row window" in said and "layer 1, head 0" in said and "gives 1.00" in said


@pytest.mark.slow
@pytest.mark.skipif(not TRAINED, reason="the shipped tiny weights are not present")
def test_shipped_text_model_looks_back_inside_its_window_and_not_beyond(tiny_trained):
    from model.heldout import heldout_natural_tokens

    m = tiny_trained
    tokens = heldout_natural_tokens(m.tokenizer)
    for passage in (0, 1):
        near = look_back(m.trace([copy_row(*passage_parts(tokens, passage, 12, 4))[0]]), CopyLayout(40, 12, 4))
        assert near.best().induction >= 0.4, near.best()
        far_row, far = copy_row(*passage_parts(tokens, passage, 12, 100))
        lb = look_back(m.trace([far_row]), far)
        assert not lb.inside_window and lb.best().induction < 3 * lb.best().even, lb.best()
    # the sweep: the heads find the token to copy up to the window's edge (31 back), none past it
    pts = reach_sweep(m, tokens, 0, passage_parts(tokens, 0, 12, 0)[1], gaps=(0, 16, 20, 24, 100, 400))
    assert [p.back for p in pts] == [11, 27, 31, 35, 111, 411]
    assert all(p.share >= 0.4 for p in pts[:3]), pts
    assert all(p.share < 3 * p.even for p in pts[3:]), pts
    # looking is not copying: with the heads on the token to copy, the output gains under a nat on it
    row, lay = copy_row(*passage_parts(tokens, 0, 12, 4))
    assert 0.0 < lens_rise(m.trace([row], lens="lazy"), lay).rise[-1] < 1.0


@pytest.mark.skipif(not RECALL, reason="the shipped recall checkpoint is not present")
def test_recall_checkpoint_looks_back_beyond_its_window_through_a_one_token_entry():
    from model import load
    from model.heldout import heldout_natural_tokens

    m = load(str(shipped_weights("recall")))
    tokens = heldout_natural_tokens(m.tokenizer)
    row, lay = copy_row(*passage_parts(tokens, 0, 12, 100))
    tr = m.trace([row])
    lb = look_back(tr, lay)
    best = lb.best()
    assert not lb.inside_window and best.ratio == 1 and best.induction >= 0.4, best
    assert sum(head_pattern(tr, lay, best.layer, best.head).after_match) / (lay.span - 1) >= 0.4
    assert lb.copy.second_rate > lb.copy.first_rate
    rise = lens_rise(m.trace([row], lens="lazy"), lay)
    assert rise.biggest_step()[0] == 11 and rise.rise[-1] > 1.0     # the copy enters at the last layer
    far = reach_sweep(m, tokens, 0, passage_parts(tokens, 0, 12, 0)[1], gaps=(200, 400))
    assert all(p.share >= 0.4 and p.copied > p.first for p in far), far


def test_head_scores_find_a_previous_token_head_and_an_induction_head():
    """A head whose weight sits on the slot before the query scores prev 1; a head that, at
    the second copy, looks at the token after the first copy's match scores induction 1; others 0."""
    from lessons.lookback_heads import head_scores

    b, s, h, w = 2, 40, 3, 16
    span, distance, start = 6, 10, 25
    win = torch.zeros(b, s, h, w)
    win[:, :, 0, w - 2] = 1.0                               # previous-token head
    win[:, :, 1, w - 1] = 1.0                               # attends to itself
    win[:, start:start + span - 1, 1, w - 1] = 0.0
    win[:, start:start + span - 1, 1, w - distance] = 1.0   # t - distance + 1: the token after the match
    win[:, :, 2, 0] = 1.0                                   # oldest slot only
    prev, ind, sink = head_scores(win, torch.zeros(b, s, h), start, distance, span)
    assert prev == pytest.approx([1.0, 0.0, 0.0]) and ind == pytest.approx([0.0, 1.0, 0.0]) and sink == [0.0] * 3
    _, ind_far, _ = head_scores(win, torch.zeros(b, s, h), start, w + 5, span)
    assert ind_far == [0.0] * 3                             # the match is out of the window: no window share


def test_head_scores_read_induction_from_the_selected_entry_beyond_the_window():
    """On a narrow window, with the match beyond the window, a head that puts its entry weight on the
    one-token entry after the match scores induction 1, one that reads the match itself 0, one that splits 0.5."""
    from lessons.lookback_heads import head_scores

    b, s, h, w, k = 1, 40, 3, 2, 4
    span, distance, start = 6, 20, 25
    ent = torch.zeros(b, s, h, k)
    ids = torch.full((b, s, k), -1)
    for t in range(start, start + span - 1):
        ids[0, t, :2] = torch.tensor([t - distance + 1, t - distance])   # the token after the match, the match
        ent[0, t, 0, 0] = 1.0
        ent[0, t, 1, 1] = 1.0
        ent[0, t, 2, :2] = 0.5
    _, ind, _ = head_scores(torch.zeros(b, s, h, w), torch.zeros(b, s, h), start, distance, span, ent, ids)
    assert ind == pytest.approx([1.0, 0.0, 0.5])


def test_head_scores_inside_the_window_add_a_ratio1_layers_window_slot_and_its_entry():
    """Inside the window a ratio-1 layer reaches the token after the match twice, by its window slot and by its own
    entry: a head splitting its weight between the two scores their sum, a head on the slot alone or the entry alone
    scores that part."""
    from lessons.lookback_heads import head_scores

    b, s, h, w, k = 1, 40, 3, 16, 4
    span, distance, start = 6, 10, 25
    win = torch.zeros(b, s, h, w)
    ent = torch.zeros(b, s, h, k)
    ids = torch.full((b, s, k), -1)
    for t in range(start, start + span - 1):
        ids[0, t, :2] = torch.tensor([t - distance + 1, t - distance])
        win[0, t, 0, w - distance] = 0.3
        ent[0, t, 0, 0] = 0.4                                # head 0: 0.3 on the slot + 0.4 on the entry
        win[0, t, 1, w - distance] = 0.6                     # head 1: the slot only
        ent[0, t, 2, 0] = 0.5                                # head 2: the entry only (and the match's entry)
        ent[0, t, 2, 1] = 0.5
    _, ind, _ = head_scores(win, torch.zeros(b, s, h), start, distance, span, ent, ids)
    assert ind == pytest.approx([0.7, 0.6, 0.5])
    _, ind_window, _ = head_scores(win, torch.zeros(b, s, h), start, distance, span)
    assert ind_window == pytest.approx([0.3, 0.6, 0.0])


def test_heads_prose_rows_put_the_span_twice_gap_tokens_apart_and_refuse_too_few_tokens():
    """The rows of `lab.probes.heads --gap`: each is lead, span, `gap` other tokens, the span again; the rows come from
    different places of the held-out text; a gap the tokens cannot hold is refused with a message."""
    from lessons.lookback_heads import copy_rows_of_prose

    tokens = torch.arange(20000)
    for gap in (4, 200):
        x = copy_rows_of_prose(tokens, 4, span=12, gap=gap, lead=40)
        assert x.shape == (4, 40 + 12 + gap + 12)
        assert torch.equal(x[:, 40:52], x[:, 52 + gap:])
        assert len({int(r[40]) for r in x}) == 4
        assert not torch.isin(x[:, 52:52 + gap], x[:, 40:52]).any()
    with pytest.raises(ValueError, match="too few"):
        copy_rows_of_prose(tokens, 8, span=12, gap=200, lead=40)


