"""The logit lens only where it is shown: a lazy or per-layer lens gives the full lens's numbers, computes nothing
until read, reads one row without the rest, and falls back to computing at once past its memory cap."""

from __future__ import annotations

import pytest
import torch

import model.inference.trace as trace_mod
from lessons.inspector import layer_view, run_prompt
from model.inference import lens_plan
from tests.conftest import random_model, random_tiny


@pytest.fixture(scope="module")
def micro():
    return random_model("micro", seed=3)


def _ids(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, 256, (1, n), generator=torch.Generator().manual_seed(seed))


def _same_lens(a, b) -> None:
    assert torch.equal(a.lens_ids, b.lens_ids)
    assert (a.lens_probs - b.lens_probs).abs().max() < 1e-6


@pytest.mark.parametrize("kw", [{}, {"mode": "bounded", "chunk_size": 16}])
def test_lazy_and_view_lens_equal_the_full_lens(micro, kw):
    ids = _ids(45)
    with torch.no_grad():
        full = micro.trace(ids, **kw)
        lazy = micro.trace(ids, lens="lazy", **kw)
        view = micro.trace(ids, lens=[2], **kw)
    for f, z, v in zip(full.layers, lazy.layers, view.layers):
        if f.lens is None:
            assert z.lens is None and v.lens is None
            continue
        row = len(f.positions) - 1
        one = z.lens_at(row)
        assert [i for i, _ in one] == f.lens_ids[0, row].tolist()
        assert max(abs(p - q) for (_, p), q in zip(one, f.lens_probs[0, row].tolist())) < 1e-6
        _same_lens(f, z)
        _same_lens(f, v)


def test_a_lazy_lens_computes_nothing_until_read_and_one_row_alone(micro):
    ids = _ids(40, seed=1)
    with torch.no_grad():
        tr = micro.trace(ids, lens=[1])
    eager, lazy = tr.layers[1].lens, tr.layers[2].lens
    assert eager.pending_bytes == 0 and eager.parts[0][1] is not None
    assert lazy.pending_bytes > 0 and lazy.parts[0][1] is None
    top = tr.layers[2].lens_at(7)
    assert len(top) == 5 and lazy.parts[0][1] is None        # one row read: the rest still pending
    assert top[0][1] >= top[-1][1]
    assert tr.layers[2].lens_ids.shape == (1, 40, 5)          # the whole layer on request
    assert lazy.pending_bytes == 0


def test_past_the_memory_cap_the_lens_is_computed_at_once(micro, monkeypatch):
    monkeypatch.setattr(trace_mod, "LAZY_LENS_BYTES", 0)
    with torch.no_grad():
        tr = micro.trace(_ids(20), lens="lazy")
    assert all(r.lens.pending_bytes == 0 for r in tr.layers)


def test_lens_choices():
    assert lens_plan(True) == (False, None)
    assert lens_plan(False) == (False, frozenset())
    assert lens_plan("lazy") == (True, frozenset())
    assert lens_plan([3, 1]) == (True, frozenset({1, 3}))
    with pytest.raises(ValueError):
        lens_plan("some")


def test_inspector_view_reads_the_lens_of_its_token():
    tiny = random_tiny()
    ids = tiny.encode("The key is in the blue box. The box is")
    lazy = run_prompt(tiny, ids, "exact", new_tokens=2)
    full = run_prompt(tiny, ids, "exact", new_tokens=2, lens=True)
    for layer in (0, tiny.cfg.num_hidden_layers - 1):
        a = layer_view(lazy, layer, len(ids), tiny.cfg)
        b = layer_view(full, layer, len(ids), tiny.cfg)
        assert [t[0] for t in a.lens] == [t[0] for t in b.lens] and len(a.lens) == 5
        assert max(abs(x[2] - y[2]) for x, y in zip(a.lens, b.lens)) < 1e-6
