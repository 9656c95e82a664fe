"""Batched forwards (model/inference/batch.py): a batch of mixed-length prompts gives each row its solo results:
logits to 1e-4 of their scale, the same routing, top-k, candidate pools and trace records (the records' shapes and
integer choices exactly, the floats to 1e-4 of their scale, attention shares to 1e-3), under the default model and
the ablations that change selection."""

from __future__ import annotations

import pytest
import torch

from model import Ablation, quant
from model.inference import batch
from tests.conftest import random_model, random_tiny

# floats to 1e-4 of their largest magnitude (at least 1e-5 absolute), attention shares to 1e-3: the same maths, but a
# batch's padded shapes change the summation order of some reductions. On AMD EPYC hosts that moves the random tiny
# model's logits by up to 2.5e-4 on a scale of 5 and a last-layer attention share by 3e-4 (Intel hosts stay under
# 1e-5); every integer choice (routing, top-k, pools) stays exact
TOL = 1e-5
REL = 1e-4
SHARES = 1e-3
# 1: a row shorter than every compression ratio (no entries at all alone); odd lengths: a pad row shares the
# last group with a real one; > sliding_window (micro: 16) and > pool widths: window, entries and pool all matter
LENGTHS = [1, 7, 33, 64, 50, 2]


@pytest.fixture(scope="module")
def micro():
    return random_model("micro", seed=5)


def _rows(lengths, seed=0, vocab=256):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, vocab, (n,), generator=g).tolist() for n in lengths]


def _close(a, b, what, rel: float = REL):
    assert (a is None) == (b is None), what
    if a is None:
        return
    assert a.shape == b.shape, (what, a.shape, b.shape)
    if a.dtype in (torch.bool, torch.long, torch.int64, torch.int32):
        assert torch.equal(a, b), what
    else:
        fin = torch.isfinite(b)
        assert torch.equal(fin, torch.isfinite(a)), what
        if fin.any():
            bound = max(TOL, rel * float(b[fin].abs().max()))
            assert float((a[fin] - b[fin]).abs().max()) <= bound, what


def _same_trace(got, want):
    _close(got.ids, want.ids, "ids")
    _close(got.positions, want.positions, "positions")
    _close(got.logits, want.logits, "logits")
    for g, w in zip(got.layers, want.layers, strict=True):
        i = w.spec.index
        _close(g.positions, w.positions, (i, "positions"))
        assert g.source_len == w.source_len, (i, "source_len", g.source_len, w.source_len)
        for name in ("pre_mix", "stream_norms", "router_logits", "router_scores", "router_experts", "router_weights",
                     "engram_gate", "engram_hash", "topk", "index_scores", "candidates", "block_scores",
                     "lens_ids", "lens_probs"):
            _close(getattr(g, name), getattr(w, name), (i, name))
        assert (g.shares is None) == (w.shares is None)
        if w.shares is not None:
            for name in ("window", "entries", "entry_ids", "sink"):
                _close(getattr(g.shares, name), getattr(w.shares, name), (i, "shares." + name), rel=SHARES)
        for site in ("hc_attn", "hc_ffn"):
            gm, wm = getattr(g, site), getattr(w, site)
            for name in ("pre", "post", "comb"):
                _close(getattr(gm, name), getattr(wm, name), (i, site, name))


@pytest.mark.parametrize("ablation", [None, Ablation(index_topk=3), Ablation(window_only=True),
                                      Ablation(dense_compressed=True), Ablation(reselect_all=True)],
                         ids=["default", "topk3", "window_only", "dense", "reselect_all"])
def test_mixed_length_batch_gives_each_row_its_solo_trace(micro, ablation):
    rows = _rows(LENGTHS)
    got = batch.batched_traces(micro, rows, ablation=ablation)
    for row, tr in zip(rows, got):
        with torch.no_grad():
            want = micro.trace(torch.tensor([row]), ablation=ablation)
        _same_trace(tr, want)


def test_mixed_length_batch_gives_each_row_its_solo_logits(micro):
    rows = _rows(LENGTHS, seed=1)
    nxt = batch.batched_next_logits(micro, rows)
    full = batch.batched_logits(micro, rows, ablation=Ablation(window_only=True))
    for row, a, b in zip(rows, nxt, full):
        with torch.no_grad():
            solo = micro(torch.tensor([row]), last_only=True).logits[0, -1]
            solo_off = micro(torch.tensor([row]), ablation=Ablation(window_only=True)).logits[0]
        assert (a - solo).abs().max() <= TOL
        assert (b - solo_off).abs().max() <= TOL and b.shape == solo_off.shape


def test_batch_on_the_tiny_model_with_a_lazy_lens():
    """The shipped architecture (Engram with a real token map, ratio-2 groups, a candidate pool) and lazy lenses."""
    tiny = random_tiny()
    texts = ["The key is in the blue box. The box is", "Hi", "A red ball. " * 12 + "The ball is",
             "Visitor 7 asks question 2: the key is in the blue box. The box is"]
    rows = [tiny.encode(t) for t in texts]
    # every float, with the fake FP4/FP8 rounding off: with it on, a 1e-6 change of summation order can cross a
    # rounding boundary (seen on AMD EPYC hosts: one index score of layer 10 moved by 1% of its scale)
    with quant.fake_quant_disabled():
        got = batch.batched_traces(tiny, rows, lens="lazy")
        for row, tr in zip(rows, got):
            with torch.no_grad():
                want = tiny.trace(torch.tensor([row]))
            _same_trace(tr, want)
    # as shipped (rounding on): every integer choice and the lazy lens exactly, the logits to 1e-4 of their scale
    got = batch.batched_traces(tiny, rows, lens="lazy")
    for row, tr in zip(rows, got):
        with torch.no_grad():
            want = tiny.trace(torch.tensor([row]))
        _close(tr.logits, want.logits, "logits")
        for g, w in zip(tr.layers, want.layers, strict=True):
            for name in ("router_experts", "engram_hash", "topk", "candidates", "lens_ids"):
                _close(getattr(g, name), getattr(w, name), (w.spec.index, name))
        last = tr.layers[-1]
        assert [i for i, _ in last.lens_at(len(row) - 1)] == want.layers[-1].lens_ids[0, -1].tolist()


def test_pad_rows_rejects_an_empty_row():
    with pytest.raises(ValueError):
        batch.pad_rows([[1, 2], []])
    ids, lengths = batch.pad_rows([[5], [6, 7, 8]])
    assert ids.tolist() == [[5, 0, 0], [6, 7, 8]] and lengths == [1, 3]
