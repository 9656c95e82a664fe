"""Engine behaviour: cached == uncached, bounded vs exact, rollback, packed bytes, prefix cache, trace, generate."""

from __future__ import annotations

import os

import pytest
import torch

from model import Ablation, CacheError, InputError, Sampler
from model.accounting import cache_bytes
from model.inference import PrefixCache, compare_prefill, decode_step, generate, prefill

ATOL = 1e-4


def _ids(n, seed=0, vocab=256, batch=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (batch, n), generator=g)


@pytest.mark.parametrize("chunk", [64, 7, 1])
def test_incremental_exact_prefill_and_decode_equal_one_shot(fx, chunk):
    ids = _ids(45)
    with torch.no_grad():
        full = fx(ids).logits
    pf = prefill(fx, ids[:, :37], "exact", chunk_size=chunk)
    rows = [pf.logits]
    for t in range(37, 44):
        rows.append(decode_step(fx, pf.cache, ids[:, t:t + 1])[:, -1])
    got = torch.stack(rows, 1)
    assert (got - full[:, 36:44]).abs().max() < ATOL


def test_cached_path_reads_packed_bytes_not_floats(micro):
    pf = prefill(micro, _ids(30), "exact")
    st = pf.cache.windows[0].rows
    assert st.values.dtype == torch.uint8 and st.values.shape[-1] == micro.cfg.head_dim  # FP8: one byte each
    src = pf.cache.sources[2]
    assert src.entries.values.shape[-1] == micro.cfg.head_dim // 2                     # FP4: two per byte
    assert src.keys.values.shape[-1] == micro.cfg.index_head_dim // 2


def test_bounded_equals_exact_inside_window(fx):
    ids = _ids(fx.cfg.sliding_window)
    d = compare_prefill(fx, ids, chunk_size=3)
    assert d.kl_last < 1e-9 and d.top1_agreement == 1.0
    b = prefill(fx, ids, "bounded")
    e = prefill(fx, ids, "exact")
    assert (b.logits - e.logits).abs().max() < ATOL


def test_bounded_diverges_past_window_and_is_reported(micro):
    ids = _ids(40)
    d = compare_prefill(micro, ids, chunk_size=16)
    assert d.rows_compared == micro.cfg.sliding_window
    assert d.kl_mean > 0  # the decoder no longer sees rows before the replay segment
    assert 0.0 <= d.top1_agreement <= 1.0


def test_bounded_prefill_runs_decoder_on_replay_rows_only(micro):
    ids = _ids(40)
    pf = prefill(micro, ids, "bounded", chunk_size=16)
    w, dec = micro.cfg.sliding_window, micro.cfg.decoder_start
    assert len(pf.cache.windows[0]) == min(40, w - 1 + 1)
    # decoder windows hold only the replay segment; its first layer published entries for every row
    assert len(pf.cache.windows[dec]) == w
    assert len(pf.cache.sources[dec]) == 40


def test_cache_carries_the_last_window_rows_into_the_replay(micro):
    """Bounded prefill hands the decoder its replay rows through the cache: chunk by chunk only the last W rows
    are kept, and the replay takes them, flooring the decoder's windows at the first of them."""
    from model.inference.cache import Cache
    cfg = micro.cfg
    w, d = cfg.sliding_window, cfg.hidden_size
    c = Cache(cfg, mode="bounded")
    with pytest.raises(CacheError):
        c.begin_replay()
    rows = torch.arange(3 * w, dtype=torch.float32).view(1, -1, 1, 1).expand(1, 3 * w, cfg.hc_mult, d)
    for a, b in ((0, 5), (5, w + 2), (w + 2, 3 * w)):   # uneven chunks, the last longer than W
        c.keep_carry(rows[:, a:b], rows[:, a:b, 0, :1])
        c.advance(b - a)
    streams, pre, start = c.begin_replay()
    assert start == 2 * w and c.decoder_floor == 2 * w and c.carry is None
    assert streams[0, :, 0, 0].tolist() == list(range(2 * w, 3 * w))
    assert pre.shape == (1, w, 1)


@pytest.mark.parametrize("mode", ["exact", "bounded"])
def test_rollback_equals_never_seen(fx, mode):
    # the fixture model: its quantisation and top-k decisions have margins, so a token computed in a
    # 5-row call and in a 1-row call lands on the same FP8/FP4 codes (random weights may not)
    ids = _ids(50, seed=3)
    a = prefill(fx, ids[:, :33], mode, rollback=5)
    decode_step(fx, a.cache, ids[:, 33:38])   # five speculative tokens...
    a.cache.rollback(4)                          # ...four rejected
    la = decode_step(fx, a.cache, ids[:, 34:36])
    b = prefill(fx, ids[:, :33], mode, rollback=5)
    decode_step(fx, b.cache, ids[:, 33:34])
    lb = decode_step(fx, b.cache, ids[:, 34:36])
    assert (la - lb).abs().max() < ATOL
    sa, sb = a.cache.essential_state(), b.cache.essential_state()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k


def test_rollback_beyond_slack_is_refused(micro):
    pf = prefill(micro, _ids(20), "exact", rollback=2)
    with pytest.raises(CacheError):
        pf.cache.rollback(3)
    with pytest.raises(CacheError):
        pf.cache.rollback(-1)


@pytest.mark.parametrize("n,mode,decoded", [(1, "exact", 0), (9, "exact", 0), (33, "exact", 3), (40, "bounded", 0),
                                            (41, "bounded", 5), (7, "bounded", 2)])
def test_measured_bytes_equal_formula(micro, n, mode, decoded):
    ids = _ids(n + decoded)
    pf = prefill(micro, ids[:, :n], mode, chunk_size=8, rollback=3)
    for t in range(decoded):
        decode_step(micro, pf.cache, ids[:, n + t:n + t + 1])
    got = pf.cache.nbytes()
    want = cache_bytes(micro.cfg, n, decoded, mode=mode, rollback=3)
    assert got.by_kind == want.by_kind
    assert {k: v for k, v in got.by_layer.items()} == {k: v for k, v in want.by_layer.items()}


def test_prefix_cache_hit_reuses_and_matches(fx, tmp_path):
    pc = PrefixCache(fx, tmp_path / "pc", align=8)
    ids = _ids(30)
    first = prefill(fx, ids, "exact", prefix_cache=pc)
    assert first.reused == 0 and pc.stats().saved == 1
    longer = torch.cat([ids, _ids(10, seed=9)], 1)
    second = prefill(fx, longer, "exact", prefix_cache=pc)
    assert second.reused == 24
    plain = prefill(fx, longer, "exact")
    assert (second.logits - plain.logits).abs().max() < ATOL
    # a fresh process-like cache object reads from disk
    pc2 = PrefixCache(fx, tmp_path / "pc", align=8)
    third = prefill(fx, longer, "bounded", prefix_cache=pc2)
    assert third.reused == 0  # mode is part of the key
    fourth = prefill(fx, longer, "exact", prefix_cache=pc2)
    assert fourth.reused == 32  # the second call saved its 32-token prefix; the last token is always read
    assert (fourth.logits - plain.logits).abs().max() < ATOL
    st = pc2.stats()
    assert st.disk_bytes > 0 and st.host_bytes >= 0


def test_prefix_cache_bounded_mode_matches(fx, tmp_path):
    pc = PrefixCache(fx, tmp_path, align=8)
    ids = _ids(42, seed=4)
    prefill(fx, ids[:, :35], "bounded", prefix_cache=pc)
    hit = prefill(fx, ids, "bounded", prefix_cache=pc)
    assert hit.reused == 32
    plain = prefill(fx, ids, "bounded")
    assert (hit.logits - plain.logits).abs().max() < ATOL


@pytest.mark.parametrize("damage", ["garbage", "truncate", "foreign"])
def test_prefix_cache_detects_damage_and_recomputes(fx, tmp_path, damage):
    pc = PrefixCache(fx, tmp_path, align=8)
    ids = _ids(24, seed=5)
    prefill(fx, ids, "exact", prefix_cache=pc)
    (f,) = [p for p in tmp_path.glob("*.safetensors")]
    if damage == "garbage":
        f.write_bytes(os.urandom(f.stat().st_size))
    elif damage == "truncate":
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    else:
        import copy
        other = copy.deepcopy(fx)  # other weights, same shapes
        with torch.no_grad():
            other.head.weight.add_(0.01)
        pc_other = PrefixCache(other, tmp_path / "o", align=8)
        prefill(other, ids, "exact", prefix_cache=pc_other)
        (g,) = list((tmp_path / "o").glob("*.safetensors"))
        f.write_bytes(g.read_bytes())
        import json
        idx = json.loads((tmp_path / "index.json").read_text())
        from model.tokenizer import sha256_file
        for e in idx["entries"].values():
            e["sha256"] = sha256_file(f)
        (tmp_path / "index.json").write_text(json.dumps(idx))
    pc2 = PrefixCache(fx, tmp_path, align=8)
    out = prefill(fx, ids, "exact", prefix_cache=pc2)
    assert out.reused == 0
    assert pc2.stats().dropped == 1 and pc2.stats().warnings
    assert (out.logits - prefill(fx, ids, "exact").logits).abs().max() < ATOL


def test_prefix_cache_unwritable_dir_turns_off(micro, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    pc = PrefixCache(micro, blocker / "sub", align=8)
    assert pc.dir is None and "disabled" in pc.warnings[0]
    out = prefill(micro, _ids(20), "exact", prefix_cache=pc)  # still works, host tier only
    assert out.logits.shape[-1] == micro.cfg.vocab_size


def test_trace_is_free_when_off_and_complete_when_on(micro):
    ids = _ids(30)
    tr = micro.trace(ids)
    assert len(tr.layers) == micro.cfg.num_hidden_layers
    for rec in tr.layers:
        sh = rec.shares
        total = sh.window.sum(-1) + sh.entries.sum(-1) + sh.sink
        assert torch.allclose(total, torch.ones_like(total), atol=1e-5)
        assert rec.lens_ids.shape[:2] == (1, 30)
    sel = [r.spec.index for r in tr.layers if r.topk is not None]
    assert sel == micro.cfg.index_source_layer_ids
    assert tr.layers[micro.cfg.candidate_source_layer_id].candidates is not None


def test_trace_through_bounded_prefill_covers_replay_rows_only_in_decoder(micro):
    ids = _ids(40)
    tr = micro.trace(ids, mode="bounded", chunk_size=16)
    dec = micro.cfg.decoder_start
    assert len(tr.layers[0].positions) == 40
    assert tr.layers[dec].positions.tolist() == list(range(40 - micro.cfg.sliding_window, 40))


def test_generate_greedy_matches_manual_decode(micro):
    ids = _ids(12)
    res = generate(micro, ids, max_new_tokens=6, prefill_mode="exact", stop_at_eos=False)
    seq = ids.clone()
    for _ in range(6):
        with torch.no_grad():
            nxt = micro(seq).logits[:, -1].argmax(-1, keepdim=True)
        seq = torch.cat([seq, nxt], 1)
    assert res.tokens == seq[0, 12:].tolist()


def test_generate_sampling_is_seeded(micro):
    ids = _ids(10)
    a = generate(micro, ids, 8, sampler=Sampler(0.9, 0.9, seed=1), stop_at_eos=False)
    b = micro.generate(ids, 8, temperature=0.9, top_p=0.9, seed=1, stop_at_eos=False)  # the flat knobs
    c = generate(micro, ids, 8, sampler=Sampler(0.9, 0.9, seed=2), stop_at_eos=False)
    assert a.tokens == b.tokens and len(c.tokens) == 8


def test_generate_stops_at_eos_and_streams(micro):
    ids = _ids(10)
    seen = []
    res = generate(micro, ids, 30, stream=seen.append, stop_at_eos=False)
    assert seen == res.tokens
    eos = res.tokens[3]
    micro.cfg.eos_token_id, old = eos, micro.cfg.eos_token_id
    try:
        res2 = generate(micro, ids, 30)
        assert res2.stopped == "eos" and res2.tokens[-1] == eos and len(res2.tokens) <= 4
    finally:
        micro.cfg.eos_token_id = old


@pytest.mark.parametrize("bad", [[], [[]], [[5, 300]], [[-1, 4]]])
def test_bad_prompts_raise_clear_errors(micro, bad):
    with pytest.raises(InputError):
        prefill(micro, torch.tensor(bad, dtype=torch.long), "exact")


@pytest.mark.parametrize("n", [-1, 10 ** 6, 2.5])
def test_max_new_tokens_out_of_range(micro, n):
    with pytest.raises(InputError):
        generate(micro, _ids(5), n)


def test_prompt_longer_than_maximum(micro):
    with pytest.raises(InputError, match="maximum"):
        prefill(micro, _ids(50), "exact", max_prompt_tokens=40)


def test_ablation_changes_what_is_read(micro):
    ids = _ids(40)
    with torch.no_grad():
        base = micro(ids).logits
        wo = micro(ids, ablation=Ablation(window_only=True)).logits
    assert (base[:, -1] - wo[:, -1]).abs().max() > 1e-4
    tr = micro.trace(ids, ablation=Ablation(window_only=True))
    assert all(rec.shares.entries.numel() == 0 or float(rec.shares.entries.sum()) == 0 for rec in tr.layers)
