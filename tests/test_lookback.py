"""The compressed branch learns a far look-back from scratch when the answers carry the loss
(docs/design/architecture.md §5).

`test_compressed_branch_learns_far_recall` trains the `micro` preset with window 4 on the recall
task of model/training/lookback.py: a value said once, asked for 12+ tokens later, reachable only through
compressed entries. With the answer-weighted loss it is recalled well above chance within 60 steps;
with the plain next-token mean over every position the same run stays at chance (1/64) for 150+
steps (bench/lookup.py, table in the diag15 report): the fix is the loss, the forward is unchanged.
"""

from __future__ import annotations

import pytest
import torch

from model import Ablation, V41Config, V41Model
from model.training import answer_weighted_ce, induction_mask, recall_rows


def test_induction_mask_marks_lookback_targets():
    t = torch.tensor([[5, 6, 7, 9, 9, 9, 5, 6, 7, 1]])
    x, y = t[:, :-1], t[:, 1:]
    assert induction_mask(x, y, match=1).int().tolist() == [[0, 0, 0, 0, 1, 0, 1, 1, 0]]
    assert induction_mask(x, y, match=2).int().tolist() == [[0, 0, 0, 0, 0, 0, 0, 1, 0]]
    assert induction_mask(x, y, match=1, min_back=6).int().tolist() == [[0, 0, 0, 0, 0, 0, 1, 1, 0]]


def test_answer_weighted_ce_reduces_to_plain_mean():
    g = torch.Generator().manual_seed(0)
    x, y, m = recall_rows(3, 2, 6, g)
    lg = torch.randn(*y.shape, 256, generator=g)
    plain = torch.nn.functional.cross_entropy(lg.reshape(-1, 256), y.reshape(-1))
    assert torch.allclose(answer_weighted_ce(lg, y, m, 1.0), plain)
    only = torch.nn.functional.cross_entropy(lg[m], y[m])
    assert torch.allclose(answer_weighted_ce(lg, y, m, float("inf")), only)


@pytest.mark.slow
def test_compressed_branch_learns_far_recall():
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        m = V41Model(V41Config.preset("micro")).init_weights(0)
        for layer in m.layers:
            layer.attn.window = 4          # every answer lies 13+ tokens back: compressed entries only
        opt = torch.optim.AdamW(m.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.0)
        g = torch.Generator().manual_seed(1)
        abl = Ablation(dense_compressed=True)
        for step in range(60):
            x, y, mk = recall_rows(32, 3, 12, g)
            for pg in opt.param_groups:
                pg["lr"] = 3e-3 * min(1.0, (step + 1) / 20)
            out = m(x, indexer_loss=True, ablation=abl)
            loss = answer_weighted_ce(out.logits, y, mk, float("inf")) + out.indexer_loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            opt.step()
        m.eval()
        xe, ye, me = recall_rows(64, 3, 12, torch.Generator().manual_seed(12345))
        with torch.no_grad():
            acc = float((m(xe, ablation=abl).logits.argmax(-1) == ye)[me].float().mean())
            acc_w = float((m(xe, ablation=Ablation(window_only=True)).logits.argmax(-1) == ye)[me].float().mean())
    finally:
        torch.set_num_threads(threads)
    assert acc > 0.3, acc          # chance is 1/64
    assert acc_w < 0.1, acc_w      # the window alone cannot see the value


def test_fake_quant_disabled_is_scoped():
    from model.quant import fake_latent, fake_quant_disabled

    x = torch.randn(2, 32, generator=torch.Generator().manual_seed(0))
    q = fake_latent(x)
    assert not torch.equal(q, x)
    with fake_quant_disabled():
        assert torch.equal(fake_latent(x), x)
    assert torch.equal(fake_latent(x), q)


def test_head_scores_find_a_previous_token_head_and_an_induction_head():
    """bench.heads: a head whose weight sits on the slot before the query scores prev 1; a head that, at
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
    """bench.heads on a narrow window: with the match beyond the window, a head that puts its entry weight on the
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


def test_readout_bench_hands_each_second_copy_row_the_token_after_its_match():
    """bench.readout: `said_twice` says a span, other text, the span again; `copy_target` points each row of the
    second copy (but its last) at the position after its match in the first, with the forcing at 1 by default."""
    from bench.readout import copy_target
    from model.training import said_twice

    tokens = torch.arange(10_000) % 997
    x = said_twice(tokens, gap=20, n=3, span=6)
    assert x.shape == (3, 8 + 6 + 20 + 6)
    assert torch.equal(x[:, 8:14], x[:, 34:40]) and not torch.equal(x[:, 8:14], x[:, 14:20])
    t = copy_target(x, start=34, distance=26, span=6)
    assert t.batch.tolist() == [0] * 5 + [1] * 5 + [2] * 5 and t.row.tolist()[:5] == [34, 35, 36, 37, 38]
    # row r holds the second copy's token k; the entry read is the first copy's token k + 1, the one r predicts
    assert torch.equal(x[t.batch, t.position], x[t.batch, t.row + 1]) and t.forcing == 1.0
    # the target lives where the rows do (the layers gather with it; on a GPU, CPU indices crashed the bench)
    on_meta = copy_target(torch.zeros(3, 40, dtype=torch.long, device="meta"), start=34, distance=26, span=6)
    assert {v.device.type for v in (on_meta.batch, on_meta.row, on_meta.position, on_meta.rivals)} == {"meta"}


def test_heads_prose_rows_put_the_span_twice_gap_tokens_apart_and_refuse_too_few_tokens():
    """bench.heads `--gap`: each row is lead, span, `gap` other tokens, the span again; the rows come from
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


def test_quality_refuses_an_ablation_name_it_does_not_know(capsys):
    """bench.quality `--only`: a name that is not one of its ablations stops it at once with the names it knows,
    instead of a run whose every figure reads nan."""
    from bench.quality import ABLATIONS, main

    assert main(["--only", "none"]) == 2
    err = capsys.readouterr().err
    assert "'none'" in err and all(repr(name) in err for name in ABLATIONS)
