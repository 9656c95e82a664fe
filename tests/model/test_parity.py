"""Parity with the independent reference implementation (the definition of correct)."""

from __future__ import annotations

import torch

from model import decode_step, prefill
from model.inference import FULL

ATOL = 1e-4


def test_logits_match_reference(golden):
    m, ids, exp = golden
    with torch.no_grad():
        out = m(ids)
    assert (out.logits - exp["logits"]).abs().max() < ATOL
    assert (out.hidden - exp["final_hidden"]).abs().max() < ATOL


def test_rope_and_engram_tables_match(golden):
    m, _, exp = golden
    assert torch.equal(m.rotary.compress_inv_freq, exp["rope.compress_inv_freq"])
    assert torch.equal(m.rotary.main_inv_freq, exp["rope.main_inv_freq"])
    assert torch.equal(m.hasher.token_map, exp["engram.token_map"])
    assert torch.equal(m.hasher.multipliers, exp["engram.multipliers"])
    assert torch.equal(m.hasher.primes, exp["engram.primes"])
    assert torch.equal(m.hasher.offsets, exp["engram.offsets"])


def test_prefill_then_decode_matches_reference(golden):
    m, ids, exp = golden
    for chunk in (35, 13, 4):
        pf = prefill(m, ids[:, :35], "exact", chunk_size=chunk)
        rows = [pf.logits]
        for t in range(35, 39):
            rows.append(decode_step(m, pf.cache, ids[:, t:t + 1])[:, -1])
        got = torch.stack(rows, 1)
        assert (got - exp["logits_prefill_decode"][:, 34:39]).abs().max() < ATOL


def test_intermediates_match_reference(golden):
    m, ids, exp = golden
    tr = m.trace(ids, detail=FULL)
    n = m.cfg.num_hidden_layers
    for i in range(n):
        rec = tr.layers[i]
        for key, got in (("hidden_streams", rec.streams), ("attn_out", rec.attn_out), ("ffn_out", rec.ffn_out),
                         ("pre_mix", rec.pre_mix), ("hc_attn.pre", rec.hc_attn.pre), ("hc_attn.post", rec.hc_attn.post),
                         ("hc_attn.comb", rec.hc_attn.comb), ("hc_ffn.comb", rec.hc_ffn.comb),
                         ("hc_ffn.post", rec.hc_ffn.post), ("router.logits", rec.router_logits),
                         ("router.weights", rec.router_weights)):
            assert (got - exp[f"layers.{i}.{key}"]).abs().max() < ATOL, (i, key)
        assert torch.equal(rec.router_experts, exp[f"layers.{i}.router.indices"]), i
        if f"layers.{i}.engram_out" in exp:
            assert (rec.engram_out - exp[f"layers.{i}.engram_out"]).abs().max() < ATOL
            assert torch.equal(rec.engram_hash, exp["engram.hash_ids"][:, :, 0])
        if f"layers.{i}.compressor.latent" in exp:
            assert (rec.latent - exp[f"layers.{i}.compressor.latent"]).abs().max() < ATOL
            assert (rec.entries - exp[f"layers.{i}.compressed_kv"][:, 0] if exp[f"layers.{i}.compressed_kv"].ndim == 4
                    else rec.entries - exp[f"layers.{i}.compressed_kv"]).abs().max() < ATOL
            assert (rec.index_keys - exp[f"layers.{i}.index_keys"]).abs().max() < ATOL
        if f"layers.{i}.indexer.topk_idx" in exp:
            got = rec.topk.sort(-1).values
            want = exp[f"layers.{i}.indexer.topk_idx"]
            got = torch.where(got < 0, torch.full_like(got, 10 ** 9), got).sort(-1).values
            want = torch.where(want < 0, torch.full_like(want, 10 ** 9), want).sort(-1).values
            assert torch.equal(got, want), i
            assert torch.equal(rec.topk_mask, exp[f"layers.{i}.indexer.topk_mask"]), i
            s, e = rec.index_scores, exp[f"layers.{i}.indexer.scores"]
            assert torch.equal(torch.isinf(s), torch.isinf(e))
            fin = torch.isfinite(e)
            assert (s[fin] - e[fin]).abs().max() < ATOL
        if f"layers.{i}.indexer.candidates" in exp:
            assert torch.equal(rec.candidates, exp[f"layers.{i}.indexer.candidates"]), i
