"""The lookup loss (model/training/step.py, docs/training.md §3): each answer row's ratio-1 attention asked onto the
entry of the token it repeats, and `lookup_reads`, which reads that target back."""

from __future__ import annotations

import pytest
import torch


def test_lookup_loss_asks_some_head_to_read_each_answers_source_over_its_rivals_and_training_on_it_does(
        monkeypatch):
    """The lookup loss leaves the forward unchanged; it is -log P(some ratio-1 head reads the source's entry) -
    log(the source's share of the attention on it and its rivals, the row's other sources), recomputed here from the
    attention itself; dense and gathered reads agree when every entry is selected; rows whose source lies inside the
    window are not asked (their sources still rival); a few steps on it alone raise the attention on the sources."""
    import model.arch.attention as attention
    from model import Ablation, random_tiny
    from model.training.step import lookup_target, set_window

    m = random_tiny()
    set_window(m, 2)
    x = torch.randint(5, 4000, (2, 64))
    sources = torch.full((2, 64), -1)
    sources[0, 40], sources[1, 60], sources[1, 20], sources[1, 50] = 7, 33, 19, 12   # 20: one row back
    target = lookup_target(sources, 2)
    assert target.row.tolist() == [40, 50, 60] and target.position.tolist() == [7, 12, 33]
    assert target.rivals.tolist() == [[-1, -1], [19, 33], [12, 19]]
    probs = {}
    real = attention.attend

    def keep(*a):
        out = real(*a)
        probs[len(probs)] = out[1].detach()
        return out

    dense = Ablation(dense_compressed=True)
    plain = m(x, ablation=dense)
    monkeypatch.setattr(attention, "attend", keep)
    out = m(x, ablation=dense, lookup=target)
    assert torch.equal(plain.logits, out.logits)
    w = m.cfg.sliding_window
    ratio1 = [i for i, layer in enumerate(m.layers) if layer.attn.ratio == 1]
    expected = []
    for b, r, e, rivals in [(0, 40, 7, []), (1, 50, 12, [19, 33]), (1, 60, 33, [12, 19])]:
        miss = torch.tensor(1.0)
        on = torch.zeros(1 + len(rivals))
        for i in ratio1:
            miss = miss * (1 - probs[i][b, r, :, w + e]).prod()
            on += probs[i][b, r, :, [w + p for p in [e] + rivals]].sum(0)
        expected.append(-torch.log(1 - miss) - torch.log(on[0] / on.sum()))
    assert abs(float(out.lookup_loss.detach()) - float(torch.stack(expected).mean())) < 1e-4
    monkeypatch.setattr(attention, "attend", real)
    gathered = m(x, ablation=Ablation(index_topk=64), lookup=lookup_target(sources, 2))
    assert abs(float(gathered.lookup_loss.detach()) - float(out.lookup_loss.detach())) < 1e-3
    opt = torch.optim.Adam(m.parameters(), lr=3e-3)
    first = None
    for _ in range(8):
        opt.zero_grad()
        loss = m(x, ablation=dense, lookup=lookup_target(sources, 2)).lookup_loss
        first = first if first is not None else float(loss.detach())
        loss.backward()
        opt.step()
    assert float(loss.detach()) < first - 1.0
    assert lookup_target(torch.full((1, 8), -1), 2) is None


def test_lookup_reads_counts_an_answer_read_when_its_source_gets_more_attention_than_its_rivals(monkeypatch):
    """lookup_reads: an attention that puts every ratio-1 row's entry mass `shift` positions back reads every source
    when the sources sit that far back, none when they sit one further; a random pick among three facts: 1/3."""
    import model.arch.attention as attention
    from model import random_tiny
    from model.training import Rows, lookup_reads, set_window

    m = random_tiny()
    set_window(m, 2)
    x = torch.randint(5, 4000, (1, 64))
    real = attention.attend

    def pointing(shift):
        def attend(q, kv, prev, values, mask, sink, w, limit):
            out, probs = real(q, kv, prev, values, mask, sink, w, limit)
            fake = torch.zeros_like(probs)
            for s in range(probs.shape[1]):
                if 0 <= s - shift < probs.shape[-1] - 1 - w:
                    fake[:, s, :, w + s - shift] = 1.0
            return out, fake
        return attend

    sources = torch.full((1, 64), -1)
    sources[0, 40], sources[0, 45], sources[0, 60] = 7, 12, 27            # each 33 back
    rows = Rows(x, x, sources >= 0, sources)
    monkeypatch.setattr(attention, "attend", pointing(33))
    assert lookup_reads(m, rows) == (1.0, pytest.approx(1 / 3))
    monkeypatch.setattr(attention, "attend", pointing(34))
    assert lookup_reads(m, rows)[0] == 0.0
