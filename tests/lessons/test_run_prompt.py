"""Lessons of the "Run a prompt" journey: inspector views, overview, trace_to_json, pool re-selection
(recall, dropped mass), DSpark statistics as the page reads them, the ablation table. Hand-made tensors
where the numbers can be worked out by hand; small random models where the lesson must agree with the
model's own records."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from lessons import ablation as abl, indexer_pools as pools, inspector as ins, prompts
from model import Ablation, layer_map
from model.arch import Mix
from model.inference import LayerRecord, Shares, Trace, speculative as ds
from tests.conftest import random_model

INF = float("inf")


# ---- hand-made trace ------------------------------------------------------------------------------------

def _tiny_trace() -> Trace:
    """Two layers over 4 positions; layer 1 only ran positions 2-3 (like a bounded decoder)."""
    from model import V41Config

    specs = layer_map(V41Config.preset("micro"))[2:4]   # a Full and a Reuse layer, ratio 2
    h, w = 2, 3
    recs = []
    for spec, pos in zip(specs, (torch.arange(4), torch.tensor([2, 3]))):
        s = len(pos)
        window = torch.full((1, s, h, w), 0.2)
        entries = torch.full((1, s, h, 1), 0.3)
        sink = torch.full((1, s, h), 0.1)
        ids = torch.tensor([[[-1], [0], [0], [1]]])[:, -s:]
        entries = entries * (ids >= 0).unsqueeze(2)
        sink = sink + 0.3 * (ids < 0).squeeze(-1).unsqueeze(-1)
        rec = LayerRecord(spec=spec, positions=pos,
                          shares=Shares(window=window, entries=entries, entry_ids=ids, sink=sink, ratio=2))
        rec.index_scores = torch.tensor([[[-INF, -INF], [1.0, -INF], [1.0, -INF], [0.5, 2.0]]])[:, -s:]
        rec.candidates = torch.ones(1, s, 2, dtype=torch.bool)
        rec.router_experts = torch.tensor([[[3, 1]] * s])
        rec.router_weights = torch.tensor([[[0.4, 1.1]] * s])
        rec.stream_norms = torch.ones(1, s, 4) * (spec.index + 1)
        rec.lens_ids = torch.tensor([[[7, 8]] * s])
        rec.lens_probs = torch.tensor([[[0.6, 0.1]] * s])
        rec.hc_attn = rec.hc_ffn = Mix(torch.ones(1, s, 4), torch.ones(1, s, 4), torch.eye(4).expand(1, s, 4, 4))
        recs.append(rec)
    return Trace(ids=torch.tensor([[5, 6, 7, 8]]), positions=torch.arange(4), layers=recs, logits=None,
                 mode="bounded", meta={"prompt_tokens": 4, "cache": object()})


def _run(tr: Trace) -> ins.Run:
    return ins.Run(trace=tr, ids=[5, 6, 7, 8], tokens=["a", "<b>", "c", "d"], n_prompt=4, mode="bounded", window=2,
                   decoder_start=1)


def test_trace_to_json_lists_nulls_and_heavy_switch():
    tr = _tiny_trace()
    doc = json.loads(ins.trace_to_json(tr, ["a", "<b>", "c", "d"]))
    assert doc["tokens"][1] == "<b>" and doc["mode"] == "bounded"
    assert doc["meta"] == {"prompt_tokens": 4}            # non-plain meta (the cache) is dropped
    l0 = doc["layers"][0]
    assert l0["index_scores"][0][0] == [None, None]        # -inf -> null
    assert l0["index_scores"][0][3] == [0.5, 2.0]
    assert l0["candidates"][0][0] == [True, True]
    assert l0["shares"]["entry_ids"][0][0] == [-1]
    assert l0["router_experts"][0][0] == [3, 1]
    assert doc["layers"][1]["positions"] == [2, 3]
    light = json.loads(ins.trace_to_json(tr, list("abcd"), include_scores=False))
    assert "index_scores" not in light["layers"][0] and "candidates" not in light["layers"][0]
    assert "shares" in light["layers"][0]


def test_trace_to_json_nan_and_unicode():
    tr = _tiny_trace()
    tr.layers[0].stream_norms[0, 0, 0] = float("nan")
    text = ins.trace_to_json(tr, ["\x00", "é", "🙂", "</script>"])
    doc = json.loads(text)                                  # strict JSON: allow_nan=False would raise otherwise
    assert doc["layers"][0]["stream_norms"][0][0][0] is None
    assert doc["tokens"] == ["\x00", "é", "🙂", "</script>"]


def test_overview_marks_absent_rows_and_reads_values():
    run = _run(_tiny_trace())
    proc = ins.overview(run, "processed")
    assert proc.tolist() == [[1, 1, 1, 1], [0, 0, 1, 1]]
    sink = ins.overview(run, "sink share")
    assert np.isnan(sink[1, 0]) and np.isnan(sink[1, 1])
    assert sink[0, 0] == pytest.approx(0.4) and sink[0, 1] == pytest.approx(0.1)
    comp = ins.overview(run, "compressed share")
    assert comp[0, 0] == pytest.approx(0.0) and comp[0, 3] == pytest.approx(0.3)
    top = ins.overview(run, "top expert")
    assert top[0, 2] == 1                                   # expert 1 has the larger weight (1.1)
    ent = ins.overview(run, "attention entropy")
    p = np.array([0.2, 0.2, 0.2, 0.3, 0.1])
    assert ent[0, 1] == pytest.approx(float(-(p * np.log(p)).sum()), rel=1e-5)
    lens = ins.overview(run, "lens prob. of final prediction")  # the last layer predicts 7 where it ran
    assert np.isnan(lens[0, 0]) and lens[0, 2] == pytest.approx(0.6) and lens[1, 3] == pytest.approx(0.6)
    with pytest.raises(ValueError):
        ins.overview(run, "nonsense")


def test_attention_view_spans_and_per_token():
    tr = _tiny_trace()
    rec = tr.layers[0]
    v = ins.attention_view(rec, 3, 3)
    assert v.window_pos == [1, 2, 3] and v.entry_ids == [1] and v.entry_spans == [(2, 4)]
    assert v.window_total + v.entries_total + v.sink == pytest.approx(1.0)
    win, ent = v.per_token(4)
    assert ent.tolist() == pytest.approx([0, 0, 0.15, 0.15])   # entry 1 packs tokens 2 and 3: 0.3 split evenly
    assert win.sum() + ent.sum() + v.sink == pytest.approx(1.0)
    v0 = ins.attention_view(rec, 0, 0)                         # slots before position 0 are not shown
    assert v0.window_pos == [0] and v0.entry_ids == []


def test_layer_view_absent_and_out_of_range():
    run = _run(_tiny_trace())
    msg = ins.layer_view(run, 1, 0, cfg=None)
    assert isinstance(msg, str) and "bounded prefill" in msg and "positions 2-3" in msg
    assert "no layer 5" in ins.layer_view(run, 5, 0, cfg=None)
    assert "no token 9" in ins.layer_view(run, 0, 9, cfg=None)


def test_encode_prompt_messages(tiny_random):
    m = tiny_random
    assert "empty" in prompts.encode_prompt(m, "  \n")[1]
    assert "tokens long" in prompts.encode_prompt(m, "word " * 50, max_tokens=10)[1]
    ids, problem = prompts.encode_prompt(m, "<script>alert(1)</script>\x07\u202e ünï 🙂 **bold**")
    assert problem is None and ids and ins.token_texts(m, ids)


@pytest.fixture(scope="module")
def tiny(tiny_random):
    return tiny_random


def test_run_prompt_bounded_records_and_generation(tiny):
    ids = tiny.encode("The key is in the blue box. " * 8)
    assert len(ids) > tiny.cfg.sliding_window + 8
    run = ins.run_prompt(tiny, ids, "bounded", new_tokens=3)
    assert run.n == len(ids) + 3 and len(run.generated) == 3
    cov = ins.covered_rows(run)
    dec = tiny.cfg.decoder_start
    assert cov[:dec].all()                                     # encoder: every token
    w = tiny.cfg.sliding_window
    assert cov[dec:, len(ids) - w:].all() and not cov[dec:, : len(ids) - w].any()
    assert cov[:, len(ids):].all()                             # generated tokens: both halves
    early = ins.layer_view(run, dec, 0, tiny.cfg)
    assert isinstance(early, str) and "bounded prefill" in early
    v = ins.layer_view(run, dec, run.n - 1, tiny.cfg)
    assert v.role == "Full" and v.attention.window_total + v.attention.entries_total + v.attention.sink == \
        pytest.approx(1.0, abs=1e-4)
    assert v.selection.pool is not None and len(v.selection.selected) == tiny.cfg.index_topk
    e = ins.layer_view(run, tiny.cfg.engram_layer_ids[0], 5, tiny.cfg).engram
    assert e is not None and e.ngrams[0]["tokens"] == run.tokens[4:6]   # the bigram ending at token 5
    # greedy generation agrees with the engine's own greedy decode
    from model.inference import generate
    assert run.generated == generate(tiny, [ids], 3, prefill_mode="bounded").tokens
    exact = ins.run_prompt(tiny, ids, "exact")
    assert ins.covered_rows(exact).all()


# ---- pools: hand-made ------------------------------------------------------------------------------------

def test_selection_recall_and_indexer_mass_by_hand():
    scores = torch.tensor([[5.0, 4.0, 3.0, 2.0, 1.0, 0.0, -INF, -INF]])
    pool = torch.tensor([[False, True, True, False, True, True, False, False]])
    r, e = pools.selections(scores, pool, 2)
    assert r[0].nonzero().flatten().tolist() == [1, 2]
    assert e[0].nonzero().flatten().tolist() == [0, 1]
    assert pools.recall(r, e).item() == pytest.approx(0.5)
    dropped = e & ~r
    p = torch.softmax(torch.tensor([5.0, 4, 3, 2, 1, 0]), 0)
    assert pools.indexer_mass(scores, dropped).item() == pytest.approx(float(p[0]))
    assert math.isnan(pools.recall(torch.zeros(1, 3, dtype=torch.bool), torch.zeros(1, 3, dtype=torch.bool)).item())


def test_stable_topk_mask_equals_the_models_selection():
    from model.arch import select_topk, topk_mask

    g = torch.Generator().manual_seed(0)
    for k in (1, 3, 7, 40):
        scores = torch.randint(-3, 4, (1, 30, 33), generator=g).float()     # many ties
        scores[:, :, 20:] = -INF                                            # and invisible entries
        scores[0, 5] = -INF                                                 # a row that sees nothing
        idx, _ = select_topk(scores, k)
        assert torch.equal(pools.stable_topk_mask(scores[0], k), topk_mask(idx, 33)[0])


def test_attention_mass_by_hand():
    # one head; against the actual denominator Z: read entries 1 and 2 got 0.2 and 0.1, entry 0 would get 0.4
    a = torch.tensor([[[0.4, 0.2, 0.1, 0.05]]])
    actual = torch.tensor([[False, True, True, False]])
    exhaustive = torch.tensor([[True, True, False, False]])
    dropped = exhaustive & ~actual
    # swapping entry 2 for entry 0: Z' / Z = 1 - 0.3 + 0.6 = 1.3; entry 0's share = 0.4 / 1.3
    assert pools.attention_mass(a, actual, exhaustive, dropped).item() == pytest.approx(0.4 / 1.3)
    assert pools.attention_mass(a, actual, actual, actual & ~actual).item() == 0.0


def test_pool_mask_pins_newest_block():
    scores = torch.tensor([[9.0, 9.0, 1.0, 1.0, 0.0, 0.0, 5.0, -INF]])   # query sees entries 0-6
    pool = pools.pool_mask(scores, torch.tensor([6]), 1, 1, 2)
    # one block kept: the pinned newest block (entries 6-7) beats the best-scoring block 0
    assert pool[0].tolist() == [False] * 6 + [True, True]
    pool2 = pools.pool_mask(scores, torch.tensor([6]), 1, 2, 2)
    assert pool2[0].tolist() == [True, True, False, False, False, False, True, True]


# ---- pools: against the model's own records --------------------------------------------------------------

@pytest.fixture(scope="module", params=["exact", "bounded"])
def micro_pools(request):
    """Both prefill modes the page offers (bounded once lost the FULL detail on the way to the engine's tracer)."""
    m = random_model("micro")
    ids = torch.randint(0, 250, (1, 40), generator=torch.Generator().manual_seed(3))
    tr = pools.trace_for_pools(m, ids, request.param)
    if request.param == "bounded":      # the decoder replayed only its window's rows
        assert len(tr.layers[m.cfg.candidate_source_layer_id].positions) == m.cfg.sliding_window < 40
    return m, tr, pools.reindex_inputs(m, tr)


def test_reindex_inputs_reproduce_the_recorded_layer(micro_pools):
    m, tr, inp = micro_pools
    assert list(inp.layers) == [i for i in m.cfg.index_source_layer_ids if i > m.cfg.candidate_source_layer_id]
    for lid, li in inp.layers.items():
        rec = tr.layers[lid]
        masked = li.scores.masked_fill(~inp.recorded_pool[:, :li.scores.shape[-1]], -INF)
        fin = torch.isfinite(rec.index_scores[0])
        assert torch.equal(fin, torch.isfinite(masked))
        assert torch.allclose(masked[fin], rec.index_scores[0][fin], atol=1e-5)
        ids = rec.shares.entry_ids[0]
        got = li.would_share.gather(-1, ids.clamp_min(0).unsqueeze(1).expand(-1, li.would_share.shape[1], -1))
        ok = (ids >= 0).unsqueeze(1)
        assert torch.allclose(got * ok, rec.shares.entries[0] * ok, atol=1e-5)


def test_reselect_matches_model_and_full_pool_loses_nothing(micro_pools):
    m, tr, inp = micro_pools
    res = pools.reselect(inp)
    assert all(r.matches_model for r in res.values())
    for r in res.values():
        # restricted picks are a subset of the pool; dropped picks all lie outside it
        assert not (r.restricted & ~r.pool).any() and not (r.dropped & r.pool).any()
    rows = pools.summary_rows(inp, res)
    assert rows[0]["rows where the pool excludes entries"] > 0      # 40 entries > 3 blocks x 2
    big = pools.reselect(inp, topk_blocks=100)                     # the pool holds every entry
    for r in big.values():
        assert torch.nanmean(r.recall).item() == 1.0
        assert r.attention_mass.abs().max().item() == 0.0 and r.indexer_mass.abs().max().item() == 0.0
    d = pools.row_detail(inp, res[next(iter(res))], len(inp.positions) - 1)
    assert d.visible == 40 and d.pinned_block == 19 and d.pinned_block in d.kept_blocks
    assert set(d.dropped) <= set(d.exhaustive) and not set(d.dropped) & set(d.pool)
    assert d.recall == pytest.approx(len(set(d.restricted) & set(d.exhaustive)) / len(d.exhaustive))
    with pytest.raises(ValueError):
        pools.reselect(inp, k=0)


def test_reindex_inputs_need_full_detail():
    m = random_model("micro")
    tr = m.trace(torch.randint(0, 250, (1, 20)), mode="exact")
    with pytest.raises(ValueError, match="detail='full'"):
        pools.reindex_inputs(m, tr)


# ---- DSpark statistics as the page reads them -------------------------------------------------------------

def test_spec_statistics_from_a_hand_made_log():

    def step(rules, drafted, conf):
        acc = rules.count("accept") if "reject" not in rules else rules.index("reject")
        return ds.StepLog(step=0, anchor=1, anchor_pos=0, drafted=drafted, q_draft=[1.0] * len(drafted),
                          p_draft=[1.0] * len(drafted), target_top=[0] * (len(drafted) + 1), confidence=conf,
                          survival=list(np.cumprod(conf)), accepted=acc, rules=rules, ratios=[], uniforms=[],
                          resampled=None, bonus=None, emitted=[0] * (acc + 1), rows_appended=len(drafted) + 1,
                          rows_rolled_back=len(drafted) - acc, cache_length=0)

    log = [step(["accept", "reject"], [5, 6, 7, 8], [0.9, 0.5, 0.5, 0.5]),
           step(["accept", "accept", "accept", "accept"], [5, 6, 7, 8], [0.9, 0.8, 0.7, 0.6])]
    s = ds.summarize(ds.SpecStats(block_size=5, draft_length="max", confidence_threshold=0.3, greedy=True, log=log))
    assert s.acceptance_by_position == [1.0, 0.5, 1.0, 1.0]
    assert s.alpha == pytest.approx(5 / 6) and s.mean_accepted_length == pytest.approx(2.5)
    assert s.tokens_per_pass == pytest.approx(3.5)
    assert s.formula_tokens_per_pass == pytest.approx((1 - (5 / 6) ** 5) / (1 - 5 / 6))
    assert s.calibration[0].predicted == pytest.approx(0.9) and s.calibration[0].observed == 1.0


# ---- ablation ------------------------------------------------------------------------------------------------

def test_make_ablation_maps_names():
    assert abl.make_ablation("window only") == (Ablation(window_only=True), "exact")
    assert abl.make_ablation("bounded prefill") == (Ablation(), "bounded")
    assert abl.make_ablation("smaller top-k", 3) == (Ablation(index_topk=3), "exact")
    assert abl.make_ablation("every layer selects")[0].reselect_all
    assert abl.make_ablation("mHC comb off")[0].mhc_identity
    with pytest.raises(ValueError):
        abl.make_ablation("no such part")
    from lab.probes.quality import ABLATIONS
    shared = set(abl.CONFIGS) & set(ABLATIONS)
    assert len(shared) >= 6 and all(abl.CONFIGS[n][:2] == ABLATIONS[n][:2] for n in shared)


def test_ablation_table_deltas():
    rows = [{"configuration": "window only", "loss": 3.5, "recall_far": 0.2, "prefill_s": 1.0, "cache_bytes": 100},
            {"configuration": "full model", "loss": 3.0, "recall_far": 0.8, "prefill_s": 2.0, "cache_bytes": 100}]
    t = abl.ablation_table(rows)
    assert [r["configuration"] for r in t] == ["full model", "window only"]
    assert t[1]["Δ loss"] == pytest.approx(0.5) and t[1]["Δ recall far (points)"] == pytest.approx(-60)
    assert t[1]["time × full"] == pytest.approx(0.5) and t[1]["bytes × full"] == 1.0
    assert t[0]["Δ loss"] == 0.0
    lone = abl.ablation_table(rows[:1])
    assert math.isnan(lone[0]["Δ loss"])
    assert any("window only" in s for s in abl.reading(t))


def test_run_config_uses_evaluate_and_measures_cost():
    from model.accounting import cache_bytes
    from model.heldout import Quality

    m = random_model("micro")
    seen = {}

    def fake_evaluate(model, ablation=None, mode="exact", max_stories=None, max_natural_tokens=None, progress=None):
        seen.update(ablation=ablation, mode=mode, max_stories=max_stories, max_natural_tokens=max_natural_tokens)
        return Quality(loss=2.5, tokens=100, recall={"inside": 1.0, "far": 0.25}, recall_n={"inside": 2, "far": 4},
                       seconds=0.1)

    ids = list(range(10, 40))
    row = abl.run_config(m, "smaller top-k", ids, topk=2, max_stories=6, max_natural_tokens=512,
                         evaluate=fake_evaluate)
    assert seen == {"ablation": Ablation(index_topk=2), "mode": "exact", "max_stories": 6, "max_natural_tokens": 512}
    assert row["configuration"] == "top-k 2" and row["loss"] == 2.5 and row["recall_far"] == 0.25
    assert math.isnan(row["recall_just_past"]) and row["stories"] == 6 and row["entries_read"] == 2
    assert row["cache_bytes"] == cache_bytes(m.cfg, len(ids), decoded=8, mode="exact").total
    row2 = abl.run_config(m, "bounded prefill", ids, evaluate=fake_evaluate)
    assert seen["mode"] == "bounded" and row2["prefill"] == "bounded"
    assert abl.run_config(m, "window only", ids, evaluate=fake_evaluate)["entries_read"] == 0


def test_plot_labels_escape_markup():
    from ui.figures_run import label
    assert label("<script>alert(1)</script>") == "&lt;script&gt;alert(1)&lt;/script&gt;"
    assert label("a\x07b") == "a\\x07b"
    assert label("x" * 100, limit=10).endswith("\u2026")
