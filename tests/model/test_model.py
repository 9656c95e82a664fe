"""Model invariants, config validation, layer map, parameter counts, quantisation, Engram, weights I/O."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from model import CheckpointError, ConfigError, InputError, V41Config, V41Model, count_params, layer_map, load
from model.arch import DEAD, NgramHasher, sinkhorn
from model.config import engram_primes, is_prime
from model.inference import FULL
from model.quant import FP4_VALUES, INDEX_FMT, LATENT_FMT, WINDOW_FMT, e2m1_codes, fake_fp4, fake_fp8, pack, unpack
from model.shipped import shipped_weights


# ---------------------------------------------------------------------------------------------- layer map
def test_full_layer_map_is_the_seeds_map():
    specs = layer_map(V41Config.preset("v4.1-flash"))
    enc = [s for s in specs if s.stack == "encoder"]
    dec = [s for s in specs if s.stack == "decoder"]
    assert len(enc) == 20 and len(dec) == 20
    assert [s.role for s in enc] == ["SWA", "SWA"] + (["Full"] + ["Reuse"] * 5) * 3
    assert [s.role for s in dec] == ["Full"] + ["Reuse"] * 3 + (["Reindex"] + ["Reuse"] * 3) * 4
    assert [s.index for s in specs if s.engram] == [1, 14]
    assert [s.number for s in specs if s.engram] == [2, 15]
    assert [s.index for s in specs if s.candidate_source] == [20]
    assert all(s.kv_source == 20 for s in dec)
    assert [s.kv_source for s in enc[2:]] == [2] * 6 + [8] * 6 + [14] * 6


def test_layer_map_follows_config_not_a_table():
    cfg = V41Config.preset("micro")
    roles = [s.role for s in layer_map(cfg)]
    assert roles == ["SWA", "SWA", "Full", "Reuse", "Full", "Reuse", "Reindex", "Reuse"]
    cfg2 = cfg.replace(index_source_layer_ids=[2, 4, 5]).validate()
    assert [s.role for s in layer_map(cfg2)][5] == "Reindex"


def test_the_attention_modules_are_built_from_the_layer_map():
    """One source of truth: each layer's attention holds its LayerSpec, owns a compressor exactly when the map
    says it makes entries and an indexer exactly when it selects; a Reuse layer after the candidate source
    searches the pool when an ablation makes it select (docs/design/architecture.md §2)."""
    cfg = V41Config.preset("micro")
    specs = layer_map(cfg)
    with torch.device("meta"):
        m = V41Model(cfg)
    for spec, blk in zip(specs, m.layers):
        a = blk.attn
        assert a.spec == spec and a.ratio == spec.compress_ratio
        assert (a.compressor is not None) == spec.makes_entries and (a.indexer is not None) == spec.selects
        assert (blk.engram is not None) == spec.engram
    assert [s.index for s in specs if s.uses_candidates] == [6]
    assert [s.index for s in specs if s.searches_pool] == [5, 6, 7]


def test_only_the_config_and_the_layer_map_read_the_wiring_fields():
    root = Path(__file__).resolve().parents[2]
    fields = ("kv_source_layer_ids", "index_source_layer_ids", "candidate_source_layer_id")
    readers = sorted(str(p.relative_to(root)) for d in ("model", "lessons", "ui", "pages", "bench")
                     for p in (root / d).rglob("*.py") if any(f in p.read_text() for f in fields))
    readers += ["app.py"] if any(f in (root / "app.py").read_text() for f in fields) else []
    assert readers == ["model/config.py", "model/layer_map.py"]


@pytest.mark.parametrize("preset", ["micro", "tiny", "small"])
def test_small_presets_keep_every_layer_kind(preset):
    cfg = V41Config.preset(preset)
    specs = layer_map(cfg)
    kinds = {(s.stack, s.role) for s in specs}
    assert {("encoder", "SWA"), ("encoder", "Full"), ("encoder", "Reuse"), ("decoder", "Full"),
            ("decoder", "Reuse"), ("decoder", "Reindex")} <= kinds
    assert {s.compress_ratio for s in specs if s.stack == "encoder" and s.role != "SWA"} == {2}
    assert {s.compress_ratio for s in specs if s.stack == "decoder"} == {1}
    assert any(s.engram for s in specs) and cfg.hc_mult == 4 and cfg.n_shared_experts == 1
    # the candidate pool must really prune at the preset's working length
    assert cfg.candidate_topk_blocks * cfg.candidate_block_size < 40 or preset != "micro"


# ---------------------------------------------------------------------------------------------- counts
def test_param_counts_reproduce_published_figures():
    pc = count_params(V41Config.preset("v4.1-flash"))
    assert 545e9 < pc.backbone < 560e9
    assert 190e9 < pc.engram < 200e9
    assert 755e9 < pc.total < 770e9
    assert 7e9 < pc.active_prefill < 9e9
    assert 15e9 < pc.active_decode < 17e9
    # computed from the module tree: the routed experts alone are 40 x 384 x 3 x 5120 x 2304
    assert pc.by_component["routed_experts"] == 40 * 384 * 3 * 5120 * 2304


def test_engram_projection_per_layer_is_the_engram_module_less_its_table():
    cfg = V41Config.preset("tiny")
    m = V41Model(cfg)
    (lid,) = cfg.engram_layer_ids
    engram = m.layers[lid].engram
    proj = sum(p.numel() for n, p in engram.named_parameters() if not n.startswith("embed."))
    assert proj > 0 and count_params(cfg).engram_proj_per_layer == proj


# ---------------------------------------------------------------------------------------------- config
@pytest.mark.parametrize("change,field", [
    (dict(kv_source_layer_ids=[1]), "kv_source_layer_ids"),
    (dict(index_source_layer_ids=[2, 4, 6, 9]), "index_source_layer_ids"),
    (dict(candidate_source_layer_id=3), "candidate_source_layer_id"),
    (dict(compress_ratios=[0, 0, 2, 1, 1, 1, 1, 1]), "compress_ratios"),
    (dict(num_experts_per_tok=9), "num_experts_per_tok"),
    (dict(hidden_size=0), "hidden_size"),
    (dict(engram_num_embeddings=[100]), "engram_num_embeddings"),
    (dict(num_key_value_heads=2), "num_key_value_heads"),
    (dict(index_source_layer_ids=[4, 6]), "index_source_layer_ids"),
])
def test_inconsistent_configs_name_the_field(change, field):
    cfg = V41Config.preset("micro").replace(**change)
    with pytest.raises(ConfigError, match=field):
        cfg.validate()


def test_config_json_round_trip(tmp_path):
    cfg = V41Config.preset("tiny")
    cfg.save_json(tmp_path)
    back = V41Config.from_json(tmp_path)
    assert back.to_dict() == cfg.to_dict()
    cfg.save_json(tmp_path / "c.json", composite=True)
    comp = json.loads((tmp_path / "c.json").read_text())
    assert "text_config" in comp and "vision_config" in comp
    assert V41Config.from_dict(comp).to_dict() == cfg.to_dict()


def test_foreign_config_is_rejected(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 8}))
    with pytest.raises(ConfigError, match="not a DeepSeek-V4.1"):
        V41Config.from_json(tmp_path)


# ---------------------------------------------------------------------------------------------- invariants
def test_causality(fx):
    # tolerance, not bitwise: a changed token can change how many rows an expert's matmul batches,
    # which moves other rows' results by an ulp
    ids = torch.randint(3, 256, (1, 36), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        base = fx(ids).logits
        for t in (5, 20, 35):
            alt = ids.clone()
            alt[0, t] = (alt[0, t] + 7) % 256
            out = fx(alt).logits
            assert (out[:, :t] - base[:, :t]).abs().max() < 1e-4, t
            assert (out[:, t:] - base[:, t:]).abs().max() > 1e-3


def test_reuse_layer_reads_its_sources_entries_and_selection(micro):
    ids = torch.randint(3, 256, (1, 30), generator=torch.Generator().manual_seed(2))
    tr = micro.trace(ids, detail=FULL)
    for s in layer_map(micro.cfg):
        if s.role != "Reuse":
            continue
        rec, src = tr.layers[s.index], tr.layers[s.index_source]
        assert torch.equal(rec.shares.entry_ids, src.shares.entry_ids), s.index  # same entries at the same positions
        assert rec.topk is None and rec.index_scores is None                     # no selection of its own
        assert not torch.allclose(rec.shares.entries, src.shares.entries)        # ... read with its own query


def test_reindex_picks_lie_inside_the_candidate_pool(micro):
    ids = torch.randint(3, 256, (1, 40), generator=torch.Generator().manual_seed(3))
    tr = micro.trace(ids)
    pool = tr.layers[micro.cfg.candidate_source_layer_id].candidates
    for s in layer_map(micro.cfg):
        if s.role == "Reindex":
            picks = tr.layers[s.index].topk
            ok = pool.gather(-1, picks.clamp_min(0)) | (picks < 0)
            assert bool(ok.all())
            assert int(pool.sum(-1).max()) <= micro.cfg.candidate_topk_blocks * micro.cfg.candidate_block_size
    assert int((~pool).sum()) > 0  # the pool really prunes at this length


def test_comb_matrices_are_doubly_stochastic(micro):
    ids = torch.randint(3, 256, (1, 20), generator=torch.Generator().manual_seed(4))
    tr = micro.trace(ids)
    for rec in tr.layers:
        for mix in (rec.hc_attn, rec.hc_ffn):
            assert torch.allclose(mix.comb.sum(-1), torch.ones(()), atol=1e-5)
            assert torch.allclose(mix.comb.sum(-2), torch.ones(()), atol=1e-5)
            assert bool((mix.comb > 0).all()) and bool((mix.post < 2).all()) and bool((mix.pre > 0).all())
    c = sinkhorn(torch.randn(100, 4, 4), 20, 1e-6)  # logits of the size the model produces
    assert torch.allclose(c.sum(-1), torch.ones(()), atol=1e-5) and torch.allclose(c.sum(-2), torch.ones(()), atol=1e-5)


# ---------------------------------------------------------------------------------------------- quantisation
def test_fp4_grid_and_ties_round_half_to_even():
    mags = torch.tensor([0.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 0.2499, 0.2501, 6.0])
    want = torch.tensor([0.0, 0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 0.0, 0.5, 6.0])
    got = FP4_VALUES[e2m1_codes(mags).long()]
    assert torch.equal(got, want)
    assert torch.equal(FP4_VALUES[e2m1_codes(-mags).long()], -want)
    grid = FP4_VALUES[:8]
    assert torch.equal(FP4_VALUES[e2m1_codes(grid).long()], grid)  # grid points are fixed points


@pytest.mark.parametrize("fmt,fake,pow2", [(LATENT_FMT, lambda x: fake_fp4(x, 16, True), False),
                                           (INDEX_FMT, lambda x: fake_fp4(x, 32, False), True),
                                           (WINDOW_FMT, lambda x: fake_fp8(x, 32), True)])
def test_pack_unpack_equals_fake_quant(fmt, fake, pow2):
    x = torch.randn(3, 5, 64) * torch.logspace(-3, 2, 64)
    v, s = pack(x, fmt)
    assert v.dtype == torch.uint8 and v.shape[-1] == 64 * fmt.element_bits // 8
    assert s.shape[-1] == 64 // fmt.block
    assert torch.equal(unpack(v, s, fmt, 64), fake(x))
    q = fake(x)
    if pow2:
        # A power-of-two scale survives requantisation, so quantised values are fixed points. An
        # E4M3 scale does not always: when amax/6 rounds up, the block's largest value may land on
        # 4 and the next pass picks a smaller scale; there the stored pair must still round-trip.
        assert torch.equal(fake(q), q)
    v2, s2 = pack(q, fmt)
    assert torch.equal(unpack(v2, s2, fmt, 64), fake(q))
    assert fmt.row_bytes(64) == v.shape[-1] + s.shape[-1]


def test_fp8_scales_are_powers_of_two():
    x = torch.randn(4, 64) * 37.0
    _, s = pack(x, WINDOW_FMT)
    scale = torch.exp2(s.float() - 127)
    assert bool((torch.log2(scale) == torch.log2(scale).round()).all())
    b = x.view(4, 2, 32).abs().amax(-1)
    assert bool((b / scale <= 448).all()) and bool((b / scale > 224).all())


# ---------------------------------------------------------------------------------------------- engram
def test_engram_primes_reproduce_released_table_sizes():
    cfg = V41Config.preset("v4.1-flash")
    rows = [sum(sum(p) for p in layer) for layer in engram_primes(cfg)]
    assert rows == [384006168, 384016682]
    flat = [p for layer in engram_primes(cfg) for order in layer for p in order]
    assert len(set(flat)) == len(flat) and all(is_prime(p) and p > cfg.engram_vocab_size for p in flat)


def test_engram_hashes_deterministic_in_range_and_blocked_at_dead_positions():
    cfg = V41Config.preset("micro")
    h = NgramHasher(cfg)
    ids = torch.randint(0, 256, (2, 30), generator=torch.Generator().manual_seed(0))
    a, b = h(h.compress(ids)), h(h.compress(ids))
    assert torch.equal(a, b)
    primes = torch.tensor(engram_primes(cfg)[0]).flatten()
    offs = torch.tensor([0] + primes.cumsum(0)[:-1].tolist())
    assert bool(((a[:, :, 0] >= offs) & (a[:, :, 0] < offs + primes)).all())
    assert int(a.max()) < cfg.engram_num_embeddings[0]
    # chunked hashing with history equals one-shot hashing
    comp = h.compress(ids)
    assert torch.equal(torch.cat([h(comp[:, :11]), h(comp[:, 11:], comp[:, :11])], 1), a)
    # a dead (image) position blocks every n-gram that would span it
    live = torch.ones_like(ids, dtype=torch.bool)
    live[:, 10] = False
    dead = h(h.compress(ids, live))
    pad = torch.full_like(ids[:, :1], h.pad_id)
    ref = h(torch.cat([pad.expand(-1, 0), h.compress(ids[:, 11:])], 1))  # tokens after the image start afresh
    assert torch.equal(dead[:, 11:], ref)
    assert torch.equal(dead[:, :10], a[:, :10])
    assert DEAD == -1


# ---------------------------------------------------------------------------------------------- weights & inputs
def _copy_fixture(fx_dir, tmp_path):
    d = tmp_path / "ckpt"
    d.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        shutil.copy(fx_dir / name, d / name)
    return d


@pytest.mark.parametrize("damage", ["missing", "extra", "shape"])
def test_bad_checkpoints_name_the_tensor(fixture_dir, tmp_path, damage):
    d = _copy_fixture(fixture_dir, tmp_path)
    t = load_file(str(d / "model.safetensors"))
    if damage == "missing":
        t.pop("layers.3.attn.wq_b.weight")
    elif damage == "extra":
        t["layers.3.attn.bogus.weight"] = torch.zeros(2)
    else:
        t["layers.3.attn.wq_b.weight"] = torch.zeros(3, 3)
    save_file(t, str(d / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"layers\.3\.attn\.(wq_b|bogus)"):
        load(d, device="cpu")


def test_truncated_checkpoint_gives_clear_error(fixture_dir, tmp_path):
    d = _copy_fixture(fixture_dir, tmp_path)
    data = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(data[: len(data) // 3])
    with pytest.raises(CheckpointError, match="model.safetensors"):
        load(d, device="cpu")


def test_save_load_round_trip(micro, tmp_path):
    from model.checkpoint import save_checkpoint
    save_checkpoint(micro, tmp_path)
    back = load(tmp_path, device="cpu")
    ids = torch.randint(3, 256, (1, 12), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        assert torch.equal(back(ids).logits, micro(ids).logits)


def test_token_ids_out_of_range(micro):
    with pytest.raises(InputError, match="out of range"):
        micro(torch.tensor([[1, 2, 999]]))
    with pytest.raises(InputError):
        micro(torch.zeros(1, 0, dtype=torch.long))


def test_tokenizer_vocab_mismatch_rejected(micro):
    from model.tokenizer import load_tokenizer
    tok = load_tokenizer(shipped_weights("text") / "tokenizer.json")
    with pytest.raises(InputError, match="vocab_size"):
        V41Model(V41Config.preset("micro")).bind_tokenizer(tok)


def test_device_choice_follows_v41_device(monkeypatch):
    from model import default_device

    monkeypatch.setenv("V41_DEVICE", "cpu")
    assert default_device().type == "cpu"
    monkeypatch.setenv("V41_DEVICE", "auto")
    assert default_device().type == ("cuda" if torch.cuda.is_available() else "cpu")
    monkeypatch.setenv("V41_DEVICE", "tpu")
    with pytest.raises(ValueError, match="cpu, cuda or auto"):
        default_device()


def test_fake_quant_disabled_is_scoped():
    from model.quant import fake_latent, fake_quant_disabled

    x = torch.randn(2, 32, generator=torch.Generator().manual_seed(0))
    q = fake_latent(x)
    assert not torch.equal(q, x)
    with fake_quant_disabled():
        assert torch.equal(fake_latent(x), x)
    assert torch.equal(fake_latent(x), q)
