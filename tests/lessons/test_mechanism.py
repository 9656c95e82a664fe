"""The mechanism picture (lessons/mechanism.py) on real traces of the shipped text model: every number it shows
checked against the trace's own records and the config, not against itself."""

from __future__ import annotations

import json

import pytest
import torch

from lessons.mechanism import mechanism_picture
from model import layer_map
from model.shipped import shipped_weights
from tests.conftest import ROOT

TINY = shipped_weights("text")
pytestmark = pytest.mark.skipif(not (TINY / "model.safetensors").exists(), reason="shipped weights not present")


@pytest.fixture(scope="module")
def model(tiny_trained):
    return tiny_trained


def _long_prompt() -> str:
    prompts = json.loads((ROOT / "data" / "prompts.json").read_text())
    return next(p["text"] for p in prompts if p.get("kind") == "long")


@pytest.fixture(scope="module")
def traced(model):
    ids = model.encode(_long_prompt())
    if len(ids) % 2 == 0:            # an odd count tells whole entries (floor) from a partial last one (ceil)
        ids = ids[:-1]
    return ids, model.trace(torch.tensor([ids]), lens=False)


def test_entries_per_full_layer_are_whole_groups_of_ratio_tokens(model, traced):
    ids, tr = traced
    pic = mechanism_picture(tr, model.cfg.candidate_block_size)
    n = len(ids)
    assert pic.n_tokens == n and pic.query == n - 1
    fulls = [s for s in layer_map(model.cfg) if s.role == "Full"]
    assert sorted(g.layer for g in pic.groups) == [s.index for s in fulls]
    for g in pic.groups:
        assert g.entries == n // g.ratio                      # only complete entries exist
        assert g.entries == tr.layers[g.layer].source_len     # what the layer itself recorded making
    assert any(g.ratio == 2 for g in pic.groups) and any(g.ratio == 1 for g in pic.groups)
    coarse = next(g for g in pic.groups if g.ratio == 2)
    assert coarse.entries == (n - 1) // 2 < -(-n // 2)        # the odd last token is not packed yet


def test_scores_pool_and_topk_match_the_trace(model, traced):
    ids, tr = traced
    cfg = model.cfg
    pic = mechanism_picture(tr, cfg.candidate_block_size)
    rec = tr.layers[pic.scorer]
    assert rec.spec.candidate_source                          # the group with a pool is the one drawn
    visible = [e for e, s in enumerate(pic.scores) if s is not None]
    assert len(visible) == len(ids) // pic.ratio > 100        # hundreds of entries, so the top-k chooses
    assert pic.k == cfg.index_topk < len(visible)
    assert len(pic.pool) >= pic.k                             # the pool must hold a whole top-k
    assert len(pic.pool) <= cfg.candidate_topk_blocks * cfg.candidate_block_size
    assert pic.pool_blocks <= cfg.candidate_topk_blocks and pic.block_size == cfg.candidate_block_size
    # the scorer's picks are its k best scores over every visible entry (the pool does not restrict it)
    picked = set(pic.topk)
    worst_pick = min(pic.scores[e] for e in picked)
    best_other = max(pic.scores[e] for e in visible if e not in picked)
    assert worst_pick >= best_other
    row = rec.row(pic.query)
    assert sorted(pic.topk) == sorted(int(e) for e in rec.topk[0, row] if e >= 0)


def test_each_role_reads_what_the_layer_map_says(model, traced):
    _, tr = traced
    pic = mechanism_picture(tr, model.cfg.candidate_block_size)
    roles = {r.role: r for r in pic.reads}
    assert set(roles) == {"Full", "Reuse", "Reindex"}
    full, reuse, reindex = roles["Full"], roles["Reuse"], roles["Reindex"]
    assert sorted(full.entries) == sorted(pic.topk)           # a Full layer reads its own picks
    src = tr.layers[reuse.layer].spec.index_source
    assert reuse.source == src == pic.scorer
    src_rec = tr.layers[src]
    src_picks = sorted(int(e) for e in src_rec.topk[0, src_rec.row(pic.query)] if e >= 0)
    assert sorted(reuse.entries) == src_picks and reuse.same_as == src   # Reuse reads its source's picks
    assert reindex.in_pool and set(reindex.entries) <= set(pic.pool)     # Reindex picks inside the pool
    rrec = tr.layers[reindex.layer]
    assert sorted(reindex.entries) == sorted(int(e) for e in rrec.topk[0, rrec.row(pic.query)] if e >= 0)
    for r in pic.reads:
        assert len(r.shares) == len(r.entries) and all(0 <= s <= 1 for s in r.shares) and r.total <= 1 + 1e-5
    assert [s.title for s in pic.steps] == ["Tokens", "Entries", "Index scores", "Pool", "Top-k", "Reads"]
    assert f"{len(pic.pool)} of {len(ids_visible(pic))}" in pic.steps[3].sentence


def ids_visible(pic) -> list[int]:
    return [e for e, s in enumerate(pic.scores) if s is not None]


def test_a_short_prompt_has_every_entry_picked(model):
    ids = model.encode("The key is in the blue box. The box is")
    tr = model.trace(torch.tensor([ids]), lens=False)
    pic = mechanism_picture(tr, model.cfg.candidate_block_size)
    assert len(ids_visible(pic)) < model.cfg.index_topk
    assert sorted(pic.topk) == ids_visible(pic)


def test_an_earlier_query_sees_fewer_entries(model, traced):
    _, tr = traced
    pic = mechanism_picture(tr, model.cfg.candidate_block_size, query=100)
    assert pic.query == 100
    assert len(ids_visible(pic)) == 101 // pic.ratio
    assert all(e <= 100 // pic.ratio for e in pic.topk)


def test_a_short_prompt_says_the_top_k_keeps_everything(model):
    ids = model.encode("The key is in the blue box.")
    pic = mechanism_picture(model.trace(torch.tensor([ids]), lens=False), model.cfg.candidate_block_size)
    top = next(s for s in pic.steps if s.title == "Top-k").sentence
    assert f"Only {len(ids_visible(pic))} entries are visible" in top and "keeps them all" in top
