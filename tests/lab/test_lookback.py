"""The compressed branch learns a far look-back from scratch when the answers carry the loss
(docs/design/architecture.md §5).

`test_compressed_branch_learns_far_recall` trains the `micro` preset with window 4 on the recall
task of lab/training/lookback.py: a value said once, asked for 12+ tokens later, reachable only through
compressed entries. With the answer-weighted loss it is recalled well above chance within 60 steps;
with the plain next-token mean over every position the same run stays at chance (1/64) for 150+
steps (measured with lab/probes/lookup.py): the fix is the loss, the forward is unchanged.
"""

from __future__ import annotations

import pytest
import torch

from lab.training import answer_weighted_ce, induction_mask, recall_rows
from model import Ablation, V41Config, V41Model


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


def test_readout_bench_hands_each_second_copy_row_the_token_after_its_match():
    """lab.probes.readout: `said_twice` says a span, other text, the span again; `copy_target` points each row of the
    second copy (but its last) at the position after its match in the first, with the forcing at 1 by default."""
    from lab.probes.readout import copy_target
    from lab.training import said_twice

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


def test_quality_refuses_an_ablation_name_it_does_not_know(capsys):
    """lab.probes.quality `--only`: a name that is not one of its ablations stops it at once with the names it knows,
    instead of a run whose every figure reads nan."""
    from lab.probes.quality import ABLATIONS, main

    assert main(["--only", "none"]) == 2
    err = capsys.readouterr().err
    assert "'none'" in err and all(repr(name) in err for name in ABLATIONS)
