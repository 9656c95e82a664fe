"""Released-layout checkpoints (docs/design/checkpoints.md §3, §5): FP8 / MXFP4 formats, sharded loading, layer
streaming, errors.

Tolerance of a quantized checkpoint against the unquantized model, as derived here:
- per element, from the formats: FP8 E4M3 (3 mantissa bits, round-to-nearest) errs by at most
  2^-4 |w| in the normal range and by half a subnormal step, 2^-10 * scale, below it; MXFP4 E2M1
  errs by at most a quarter of the code spacing: max(|w| / 4, scale / 4).
- end to end, V4.1 logits are not a smooth function of the weights: the model itself rounds its
  window rows to FP8 and its latents / index keys to FP4 and makes top-k choices, so a 1e-4
  relative weight perturbation already moves the micro model's logits by ~3%. Measured on the
  micro preset (all experts active, top-k >= visible entries, 32 tokens), relative logits error
  (Frobenius): FP8 linears + FP8 experts 0.14, FP8 + MXFP4 experts 0.33, for a per-tensor weight
  error of 2.7% (FP8) and 11.6% (MXFP4). Unbiased Gaussian noise with the same per-tensor RMS gives
  0.15 / 0.31-0.34, with twice that RMS 0.26 / 0.57-0.59. The test: each format's error is at most
  that of noise of twice its RMS (the quantization error acts like noise of its own size: no bias,
  no wrong scale, no swapped nibbles), and separately the
  loaded model equals the fake-quantized model exactly.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from model import CheckpointError, load
from model.arch import drafter as dspark, vision
from model.checkpoint import INDEX, MappedEngramTable, parse_bytes, parts, read_header, save_checkpoint, write_release
from model.cli.release_layout import main
from model.quant import (
    FP4_VALUES,
    dequantize_fp8_weight,
    dequantize_mxfp4_weight,
    quantize_fp8_weight,
    quantize_mxfp4_weight,
)
from model.shipped import shipped_weights
from tests.conftest import ROOT, random_model

IDS = torch.randint(0, 256, (1, 32), generator=torch.Generator().manual_seed(0))
SMOOTH = dict(n_routed_experts=2, num_experts_per_tok=2, index_topk=64, candidate_topk_blocks=64)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


@pytest.fixture(scope="module")
def micro_model():
    return random_model("micro")


@pytest.fixture(scope="module")
def release_dir(micro_model, tmp_path_factory):
    """Sharded FP8 + MXFP4 (UE8M0 scales) checkpoint of the micro model, ~7 shards."""
    return write_release(micro_model, tmp_path_factory.mktemp("rel") / "ckpt", max_shard_bytes=200_000)


@pytest.fixture(scope="module")
def resident(release_dir):
    return load(release_dir, device="cpu", stream=False)


def copy_ckpt(src: Path, dst: Path) -> Path:
    dst.mkdir(parents=True)
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


def rewrite(ckpt: Path, name: str, fn) -> Path:
    """Replace tensor `name` in its shard by fn(dict of that shard's tensors) (in place)."""
    shard = ckpt / json.loads((ckpt / INDEX).read_text())["weight_map"][name]
    tensors = load_file(str(shard))
    fn(tensors)
    save_file(tensors, str(shard), metadata={"format": "pt"})
    return shard


# ------------------------------------------------------------------------------------------------
# Formats (model/quant.py), checked against hand-computed values
# ------------------------------------------------------------------------------------------------

def test_mxfp4_codes_nibbles_and_e8m0_by_hand():
    # one block of 32: amax 6 -> scale 2^ceil(log2(6/6)) = 1 -> byte 127; 0.5 -> code 1, 6 -> code 7,
    # -1.5 -> code 8|3 = 11, 0.3 -> 0.5 (code 1), 0.25 -> tie -> 0 (even), 0.75 -> tie -> 1.0 (code 2)
    row = torch.zeros(1, 32)
    row[0, :6] = torch.tensor([0.5, 6.0, -1.5, 0.3, 0.25, 0.75])
    packed, e = quantize_mxfp4_weight(row)
    assert packed.dtype == torch.uint8 and tuple(packed.shape) == (1, 16) and tuple(e.shape) == (1, 1)
    assert int(e[0, 0]) == 127
    assert int(packed[0, 0]) == 1 | (7 << 4)         # element 0 in the low nibble
    assert int(packed[0, 1]) == 11 | (1 << 4)
    assert int(packed[0, 2]) == 0 | (2 << 4)
    # a block with amax 12 needs scale 2: byte 128, and 12 -> code 7 (6 * 2)
    big = torch.zeros(1, 32)
    big[0, 1] = 12.0
    p2, e2 = quantize_mxfp4_weight(big)
    assert int(e2[0, 0]) == 128 and int(p2[0, 0]) == 7 << 4
    assert torch.equal(dequantize_mxfp4_weight(p2, e2), big)


def test_fp8_weight_blocks_by_hand():
    w = torch.zeros(130, 260)
    w[0, 0], w[129, 259], w[5, 200] = 448.0, -3.0, 1.0  # three different 128x128 blocks
    q, s = quantize_fp8_weight(w, ue8m0=True)
    assert q.dtype == torch.float8_e4m3fn and tuple(s.shape) == (2, 3)
    assert float(s[0, 0]) == 1.0                     # 448 / 448 = 1 = 2^0
    assert float(s[1, 2]) == 2.0 ** -7               # 2^ceil(log2(3/448)) = 2^-7
    assert float(s[0, 1]) == 2.0 ** -8               # 2^ceil(log2(1/448)) = 2^-8
    assert torch.equal(dequantize_fp8_weight(q, s), w)
    q2, s2 = quantize_fp8_weight(w, ue8m0=False)
    assert float(s2[1, 2]) == pytest.approx(3.0 / 448)
    assert torch.allclose(dequantize_fp8_weight(q2, s2), w, rtol=2 ** -4)


@pytest.mark.parametrize("shape", [(300, 200), (64, 64), (17, 129)])
def test_fp8_and_mxfp4_error_bounds(shape):
    g = torch.Generator().manual_seed(1)
    w = torch.randn(shape, generator=g) * 0.05
    w[: shape[0] // 2] *= 1e-3  # blocks of very different magnitude
    q, s = quantize_fp8_weight(w)
    big = s.repeat_interleave(128, 0).repeat_interleave(128, 1)[: shape[0], : shape[1]]
    err = (dequantize_fp8_weight(q, s) - w).abs()
    assert bool((err <= torch.maximum(w.abs() * 2 ** -4, big * 2 ** -10)).all())
    if shape[1] % 32 == 0:
        p, e = quantize_mxfp4_weight(w)
        sc = torch.exp2(e.float() - 127).repeat_interleave(32, 1)
        err4 = (dequantize_mxfp4_weight(p, e) - w).abs()
        assert bool((err4 <= torch.maximum(w.abs() / 4, sc / 4)).all())


# ------------------------------------------------------------------------------------------------
# The layout on disk
# ------------------------------------------------------------------------------------------------

def test_release_layout(release_dir, micro_model):
    cfg = json.loads((release_dir / "config.json").read_text())
    assert cfg["model_type"] == "deepseek_v41" and "text_config" in cfg and "vision_config" in cfg
    q = cfg["quantization_config"]
    assert q["quant_method"] == "fp8" and q["fmt"] == "e4m3" and q["scale_fmt"] == "ue8m0"
    assert q["weight_block_size"] == [128, 128] and q["expert_dtype"] == "fp4"
    index = json.loads((release_dir / INDEX).read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) >= 3 and all(re.fullmatch(r"model-\d{5}-of-\d{5}\.safetensors", s) for s in shards)
    info = {}
    for s in shards:
        info.update(read_header(release_dir / s))
    assert set(info) == set(index["weight_map"])
    assert index["metadata"]["total_size"] == sum(i.nbytes for i in info.values())
    assert info["layers.3.attn.wq_a.weight"].dtype == "F8_E4M3"
    assert info["layers.3.attn.wq_a.scale"].dtype == "F8_E8M0" and info["layers.3.attn.wq_a.scale"].shape == (1, 1)
    assert info["layers.3.ffn.experts.5.w2.weight"].dtype == "U8"
    assert info["layers.3.ffn.experts.5.w2.weight"].shape == (64, 16)           # [out, in/2], in = 32
    assert info["layers.3.ffn.experts.5.w2.scale"].shape == (64, 1)             # [out, in/32]
    assert info["layers.1.engram.embed.weight"].dtype == "F8_E4M3"
    for n in ("layers.0.hc_attn_fn", "layers.0.attn.attn_sink", "layers.2.ffn.gate.bias", "layers.2.ffn.gate.bias_vl"):
        assert info[n].dtype == "F32", n
    for n in ("embed.weight", "head.weight", "layers.2.attn.compressor.wkv.weight", "layers.2.ffn.gate.weight"):
        assert info[n].dtype == "F32", n  # dense, in the model's dtype

    # decode one expert independently: low nibble first, value = E2M1 * 2^(byte - 127)
    name = "layers.3.ffn.experts.5.w1.weight"
    with safe_open(str(release_dir / index["weight_map"][name]), "pt") as f:
        packed = f.get_tensor(name)
        scale = f.get_tensor("layers.3.ffn.experts.5.w1.scale").view(torch.uint8)
    codes = torch.stack([packed & 0xF, packed >> 4], -1).flatten(-2).long()
    mine = FP4_VALUES[codes] * torch.exp2(scale.float() - 127).repeat_interleave(32, 1)
    w = micro_model.state_dict()[name]
    sc = torch.exp2(scale.float() - 127).repeat_interleave(32, 1)
    assert bool(((mine - w).abs() <= torch.maximum(w.abs() / 4, sc / 4)).all())


# ------------------------------------------------------------------------------------------------
# Loading: exact against fake quantization, within the formats' tolerance against the original
# ------------------------------------------------------------------------------------------------

def fake_quantized(model, expert_fp4: bool = True, ue8m0: bool = True):
    """The model with every weight replaced by dequantize(quantize(w)) as the release formats store it."""
    m = copy.deepcopy(model)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if re.search(r"ffn\.experts\.\d+\.w[123]\.weight$", n):
                if expert_fp4:
                    p.copy_(dequantize_mxfp4_weight(*quantize_mxfp4_weight(p)))
                else:
                    p.copy_(dequantize_fp8_weight(*quantize_fp8_weight(p, ue8m0=ue8m0)))
            elif re.search(r"(attn\.(wq_a|wq_b|wkv|wo_a|wo_b)|indexer\.(wq_b|wk)|shared_experts\.w[123]|engram\.wkv)"
                           r"\.weight$", n):
                p.copy_(dequantize_fp8_weight(*quantize_fp8_weight(p, ue8m0=ue8m0)))
            elif n.endswith("engram.embed.weight"):
                b = p.unflatten(-1, (-1, 32))
                s = b.abs().amax(-1, keepdim=True).clamp_min(1e-12) / 448
                if ue8m0:
                    s = torch.exp2(torch.ceil(torch.log2(s)))
                p.copy_(((b / s).to(torch.float8_e4m3fn).float() * s).flatten(-2))
    return m


def test_quantized_checkpoint_equals_fake_quantized_model(resident, micro_model):
    assert resident.release.quant.expert_dtype == "fp4" and resident.release.shards >= 3
    assert not resident.release.streamed
    want = fake_quantized(micro_model)
    got = resident.state_dict()
    for n, v in want.state_dict().items():
        if n.endswith("engram.embed.scale"):
            assert torch.equal(got[n], torch.ones_like(v))  # dequantized table: unit scales
            continue
        assert torch.equal(got[n], v), n
    with torch.no_grad():
        assert torch.equal(resident(IDS).logits, want(IDS).logits)


@pytest.mark.parametrize("scale_fmt", ["fp32", "ue8m0"])
def test_fp8_experts_and_fp32_scales(tmp_path, micro_model, scale_fmt):
    d = write_release(micro_model, tmp_path / "c", mxfp4_experts=False, scale_fmt=scale_fmt)
    m = load(d, device="cpu")  # through model.load's dispatch
    assert m.release.quant.expert_dtype == "fp8" and m.release.quant.scale_fmt == scale_fmt
    sd = fake_quantized(micro_model, expert_fp4=False, ue8m0=scale_fmt == "ue8m0").state_dict()
    got = m.state_dict()
    assert all(torch.equal(got[n], v) for n, v in sd.items() if not n.endswith("engram.embed.scale"))


def test_dense_sharded_checkpoint_is_exact(tmp_path, micro_model):
    d = write_release(micro_model, tmp_path / "c", fp8=False, mxfp4_experts=False, max_shard_bytes=300_000)
    assert "quantization_config" not in json.loads((d / "config.json").read_text())
    m = load(d, device="cpu")
    with torch.no_grad():
        assert torch.equal(m(IDS).logits, micro_model(IDS).logits)


def test_logits_within_format_tolerance(tmp_path):
    """See the module docstring: quantized error <= the error of Gaussian noise of twice the format's RMS."""
    base = random_model("micro", **SMOOTH)
    with torch.no_grad():
        ref = base(IDS).logits
        for name, kw in (("fp8", dict(mxfp4_experts=False)), ("fp8+mxfp4", {})):
            q = load(write_release(base, tmp_path / name, **kw), device="cpu")
            err_q = rel(q(IDS).logits, ref)
            qsd = q.state_dict()
            noisy = copy.deepcopy(base)
            g = torch.Generator().manual_seed(7)
            for n, p in noisy.named_parameters():
                if n.endswith("engram.embed.scale"):
                    continue
                dq = qsd[n] - p
                p.add_(2 * dq.pow(2).mean().sqrt() * torch.randn(p.shape, generator=g))
            err_noise = rel(noisy(IDS).logits, ref)
            assert 0 < err_q <= err_noise, (name, err_q, err_noise)
            assert err_q < 0.5, (name, err_q)


# ------------------------------------------------------------------------------------------------
# Layer streaming
# ------------------------------------------------------------------------------------------------

def small_budget(m) -> int:
    """Room for the resident part plus one layer: forces streaming with one layer live at a time."""
    info = m.release
    per_layer = (info.compute_bytes - sum(p.numel() * p.element_size() for n, p in m.named_parameters()
                                          if not n.startswith("layers."))) // m.cfg.num_hidden_layers
    return info.compute_bytes - (m.cfg.num_hidden_layers - 1) * per_layer - 1


def test_streamed_logits_equal_resident(release_dir, resident):
    seen = []
    s = load(release_dir, device="cpu", budget_bytes=small_budget(resident), progress=seen.append)
    assert s.release.streamed and s.release.resident_layers == 1 and s.streamer is not None
    assert all(p.device.type == "meta" for p in s.layers.parameters())  # nothing of the layers is resident
    with torch.no_grad():
        out = s(IDS).logits
        want = resident(IDS).logits
    assert torch.equal(out, want)
    n = s.cfg.num_hidden_layers
    assert s.streamer.loads == n and [x.index for x in seen] == list(range(n))
    assert s.streamer.resident == [n - 1] and all(x.nbytes > 0 for x in seen)
    with torch.no_grad():
        s(IDS[:, :5])
    assert s.streamer.loads == 2 * n  # every forward re-reads every layer
    engram_layer = s.streamer.layer(s.cfg.engram_layer_ids[0])  # its table stays in the shard, memory-mapped
    assert isinstance(engram_layer.engram.embed, MappedEngramTable)
    assert not any("engram.embed" in k for k in engram_layer.state_dict())


def test_stream_decision_from_budget_env(release_dir, monkeypatch):
    monkeypatch.setenv("V41_MEMORY_BUDGET", "1M")
    m = load(release_dir, device="cpu")
    assert m.release.streamed and m.release.budget_bytes == 2 ** 20
    monkeypatch.setenv("V41_MEMORY_BUDGET", "4G")
    assert not load(release_dir, device="cpu").release.streamed
    assert parse_bytes("1.5G") == int(1.5 * 2 ** 30) and parse_bytes("512k") == 512 * 1024
    with pytest.raises(ValueError):
        parse_bytes("lots")


def test_streamed_generate_and_trace(release_dir, resident):
    s = load(release_dir, device="cpu", budget_bytes=small_budget(resident))
    prompt = IDS[:1, :20]
    g1 = resident.generate(prompt, max_new_tokens=4, stop_at_eos=False, prefill_mode="bounded", chunk_size=8)
    g2 = s.generate(prompt, max_new_tokens=4, stop_at_eos=False, prefill_mode="bounded", chunk_size=8)
    assert g1.tokens == g2.tokens and s.streamer.loads > s.cfg.num_hidden_layers
    t1 = resident.trace(prompt, detail="full")
    t2 = s.trace(prompt, detail="full")
    assert torch.equal(t1.logits, t2.logits)
    for a, b in zip(t1.layers, t2.layers):
        assert torch.equal(a.router_experts, b.router_experts)
        assert (a.index_keys is None) == (b.index_keys is None)
        if a.index_keys is not None:
            assert torch.equal(a.index_keys, b.index_keys)


def test_writer_reads_a_streamed_model(tmp_path, release_dir, resident):
    s = load(release_dir, device="cpu", budget_bytes=small_budget(resident))
    d = write_release(s, tmp_path / "again", fp8=False, mxfp4_experts=False)
    again = load(d, device="cpu")
    for n in ("layers.5.ffn.experts.1.w3.weight", "layers.1.engram.embed.weight"):  # the table: read row by row
        assert torch.equal(again.state_dict()[n], resident.state_dict()[n]), n


# ------------------------------------------------------------------------------------------------
# Optional parts, CLI
# ------------------------------------------------------------------------------------------------

def test_mtp_and_vision_tensors_that_cannot_be_built_are_skipped_with_a_note(tmp_path, release_dir, monkeypatch):
    d = copy_ckpt(release_dir, tmp_path / "c")
    extra = {"mtp.0.main_proj.weight": torch.zeros(64, 192), "vision.patch_embed.weight": torch.zeros(32, 48),
             "aligner.proj.weight": torch.zeros(64, 32)}
    save_file(extra, str(d / "model-extra.safetensors"))
    index = json.loads((d / INDEX).read_text())
    index["weight_map"].update({k: "model-extra.safetensors" for k in extra})
    (d / INDEX).write_text(json.dumps(index))

    # as if the parts could not be built for this config
    def cannot_build(model, part, cfg):
        raise RuntimeError(f"no {part} module")

    monkeypatch.setattr(parts, "attach_part", cannot_build)
    m = load(d, device="cpu")
    notes = " ".join(m.release.notes)
    assert "mtp.*" in notes and "vision.*/aligner.*" in notes
    assert m.mtp is None and m.vision is None


def test_drafter_and_vision_parts_survive_export_and_load(tmp_path):
    base = random_model("micro")
    vision.attach_vision(base, seed=0)
    base.set_part("mtp", dspark.Drafter(base.cfg))
    with torch.no_grad():  # the Drafter's router starts as torch.empty: give every tensor defined values
        g = torch.Generator().manual_seed(3)
        for p in base.mtp.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    want = base.state_dict()
    d = write_release(base, tmp_path / "dense", fp8=False, mxfp4_experts=False)
    m = load(d, device="cpu")
    assert m.mtp is not None and m.vision is not None and not m.release.notes
    got = m.state_dict()
    assert set(got) == set(want)
    assert [k for k, v in want.items() if not torch.equal(got[k], v)] == []
    # quantized: the drafter's experts are MXFP4 too; streamed with a tiny budget the parts are left out
    d = write_release(base, tmp_path / "q")
    m = load(d, device="cpu")
    n = "mtp.0.ffn.experts.1.w2.weight"
    assert torch.equal(m.state_dict()[n], dequantize_mxfp4_weight(*quantize_mxfp4_weight(want[n])))
    s = load(d, device="cpu", budget_bytes=1)
    assert s.release.streamed and s.mtp is None and s.vision is None
    assert any("mtp: not loaded" in x for x in s.release.notes)
    with torch.no_grad():
        assert torch.equal(s(IDS).logits, m(IDS).logits)


def test_export_cli(tmp_path, micro_model, capsys):
    src = save_checkpoint(micro_model, tmp_path / "plain")
    assert main(["export", "--weights", str(src), "--out", str(tmp_path / "rel"), "--max-shard-mb", "0.5"]) == 0
    assert "fp4" in capsys.readouterr().out
    m = load(tmp_path / "rel", device="cpu")
    assert m.release.shards >= 2 and m.release.quant.expert_dtype == "fp4"
    assert main(["export", "--weights", str(tmp_path / "nowhere"), "--out", str(tmp_path / "x")]) == 2
    assert "nowhere" in capsys.readouterr().err
    # one loader for both layouts: the native directory loads as it was saved, and cannot be streamed
    back = load(src, device="cpu")
    assert back.release is None and back.source_path == str(src)
    assert all(torch.equal(v, micro_model.state_dict()[k]) for k, v in back.state_dict().items())
    with pytest.raises(ValueError, match="release layout"):
        load(src, device="cpu", stream=True)


def test_export_shipped_tiny_weights(tmp_path):
    tiny = shipped_weights("text")
    if not (tiny / "model.safetensors").exists():
        pytest.skip("trained tiny weights not present yet")
    assert main(["export", "--weights", str(tiny), "--out", str(tmp_path / "rel")]) == 0
    m = load(tmp_path / "rel", device="cpu")
    assert m.tokenizer is not None and m.release.quant.expert_dtype == "fp4"


# ------------------------------------------------------------------------------------------------
# Errors: each names the file and the tensor
# ------------------------------------------------------------------------------------------------

@pytest.fixture()
def ckpt(tmp_path, release_dir) -> Path:
    return copy_ckpt(release_dir, tmp_path / "ckpt")


def shard_of(d: Path, name: str) -> str:
    return json.loads((d / INDEX).read_text())["weight_map"][name]


def test_missing_shard(ckpt):
    victim = shard_of(ckpt, "layers.4.attn.wq_a.weight")
    (ckpt / victim).unlink()
    with pytest.raises(CheckpointError, match=rf"{INDEX}.*tensor '.*'.*{re.escape(victim)}.*missing"):
        load(ckpt, device="cpu")


def test_index_names_a_tensor_the_shard_lacks(ckpt):
    index = json.loads((ckpt / INDEX).read_text())
    other = shard_of(ckpt, "embed.weight")
    index["weight_map"]["layers.6.attn.wo_b.weight"] = other if other != shard_of(ckpt, "layers.6.attn.wo_b.weight") \
        else shard_of(ckpt, "head.weight")
    (ckpt / INDEX).write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match=r"'layers\.6\.attn\.wo_b\.weight' is mapped to .*no such tensor"):
        load(ckpt, device="cpu")


def test_tensor_missing_everywhere(ckpt):
    name = "layers.5.attn.kv_norm.weight"
    rewrite(ckpt, name, lambda t: t.pop(name))
    index = json.loads((ckpt / INDEX).read_text())
    del index["weight_map"][name]
    (ckpt / INDEX).write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match=rf"{INDEX}: tensor '{re.escape(name)}' is needed .* no shard has it"):
        load(ckpt, device="cpu")


def test_truncated_shard(ckpt):
    f = ckpt / shard_of(ckpt, "layers.2.attn.wq_b.weight")
    data = f.read_bytes()
    f.write_bytes(data[: len(data) - 100])
    with pytest.raises(CheckpointError, match=rf"{re.escape(f.name)}: truncated: tensor '.+' needs data bytes"):
        load(ckpt, device="cpu")
    f.write_bytes(data[:5])
    with pytest.raises(CheckpointError, match=rf"{re.escape(f.name)}: truncated"):
        load(ckpt, device="cpu")


@pytest.mark.parametrize("name, change, message", [
    ("layers.0.hc_attn_fn", lambda t: t.to(torch.bfloat16), r"is stored as BF16; it is fp32-critical"),
    ("layers.3.ffn.experts.2.w1.weight", lambda t: torch.zeros(32, 64).to(torch.float8_e4m3fn),
     r"is stored as FP8, but quantization_config.expert_dtype is 'fp4'"),
    ("layers.3.attn.wq_a.weight", lambda t: torch.zeros(32, 64, dtype=torch.int32), r"has dtype I32"),
    ("layers.3.attn.wq_a.weight", lambda t: torch.zeros(32, 64, dtype=torch.uint8),
     r"is stored as packed U8; only routed expert weights"),
    ("layers.3.attn.q_norm.weight", lambda t: torch.ones(48), r"has shape \[48\], the config needs \[32\]"),
    ("layers.3.attn.wkv.weight", lambda t: torch.zeros(64, 65).to(torch.float8_e4m3fn),
     r"has shape \[64, 65\], the config needs \[64, 64\]"),
    ("layers.3.ffn.experts.2.w2.weight", lambda t: torch.zeros(64, 32, dtype=torch.uint8),
     r"has packed shape \[64, 32\]; the config's \[64, 32\] needs \[64, 16\]"),
])
def test_dtype_and_shape_mismatches(ckpt, name, change, message):
    shard = rewrite(ckpt, name, lambda t: t.__setitem__(name, change(t[name])))
    with pytest.raises(CheckpointError, match=rf"{re.escape(shard.name)}: tensor '{re.escape(name)}' {message}"):
        load(ckpt, device="cpu")


def test_scale_problems(ckpt):
    w = "layers.4.attn.wo_a.weight"
    s = "layers.4.attn.wo_a.scale"
    shard = rewrite(ckpt, s, lambda t: t.__setitem__(s, t[s].view(torch.uint8).float()))
    with pytest.raises(CheckpointError, match=rf"{re.escape(shard.name)}: scale tensor '{s}' of '{w}' is F32; "
                                              r"scale format 'ue8m0' needs F8_E8M0 or U8"):
        load(ckpt, device="cpu")
    rewrite(ckpt, s, lambda t: t.__setitem__(s, torch.full((2, 2), 127, dtype=torch.uint8)))
    with pytest.raises(CheckpointError, match=rf"scale tensor '{s}' has shape \[2, 2\], '{w}' needs \[1, 1\]"):
        load(ckpt, device="cpu")
    rewrite(ckpt, s, lambda t: t.pop(s))
    index = json.loads((ckpt / INDEX).read_text())
    del index["weight_map"][s]
    (ckpt / INDEX).write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match=rf"tensor '{w}' is stored as FP8 but has no block-scale tensor '{s}'"):
        load(ckpt, device="cpu")


def test_unexpected_tensor(ckpt):
    name = "layers.2.attn.mystery.weight"
    shard = rewrite(ckpt, "layers.2.attn.wq_a.weight", lambda t: t.__setitem__(name, torch.zeros(3)))
    index = json.loads((ckpt / INDEX).read_text())
    index["weight_map"][name] = shard.name
    (ckpt / INDEX).write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match=rf"{re.escape(shard.name)}: unexpected tensor '{re.escape(name)}'"):
        load(ckpt, device="cpu")
    m = load(ckpt, device="cpu", strict=False)
    assert "unexpected" in " ".join(m.release.notes)


def edit_config(d: Path, fn) -> None:
    c = json.loads((d / "config.json").read_text())
    fn(c)
    (d / "config.json").write_text(json.dumps(c))


@pytest.mark.parametrize("edit, message", [
    (lambda c: c.update(model_type="deepseek_v3"), r"model_type is 'deepseek_v3', not a DeepSeek-V4.1 config"),
    (lambda c: (c.pop("model_type"), c.update(architectures=["LlamaForCausalLM"])),
     r"LlamaForCausalLM.*not DeepSeek-V4.1"),
    (lambda c: c["text_config"].update(num_key_value_heads=8), r"num_key_value_heads must be 1"),
    (lambda c: c["quantization_config"].update(fmt="e5m2"), r"quantization_config.fmt is 'e5m2'"),
    (lambda c: c["quantization_config"].update(weight_block_size=[128, 64]), r"quantization_config.weight_block_size"),
    (lambda c: c["quantization_config"].update(expert_dtype="int4"), r"quantization_config.expert_dtype is 'int4'"),
    (lambda c: c["text_config"].update(hidden_size=96),
     r"tensor 'embed.weight' has shape \[256, 64\], the config needs"),
])
def test_config_problems(ckpt, edit, message):
    edit_config(ckpt, edit)
    with pytest.raises(CheckpointError, match=message) as e:
        load(ckpt, device="cpu")
    assert "config.json" in str(e.value) or ".safetensors" in str(e.value)


def test_not_a_checkpoint(tmp_path, release_dir):
    with pytest.raises(CheckpointError, match="not a checkpoint directory"):
        load(tmp_path, device="cpu")
    with pytest.raises(CheckpointError, match="not a checkpoint directory"):
        load(release_dir / "config.json", device="cpu")
    d = tmp_path / "cfg_only"
    d.mkdir()
    (d / "config.json").write_text((release_dir / "config.json").read_text())
    with pytest.raises(CheckpointError, match=r"not a checkpoint: no model.safetensors.index.json and no model"):
        load(d, device="cpu")
    (d / INDEX).write_text("{not json")
    with pytest.raises(CheckpointError, match=rf"{INDEX}: not a valid safetensors index"):
        load(d, device="cpu")
    (d / "config.json").write_text("[1, 2")
    with pytest.raises(CheckpointError, match=r"config.json"):
        load(d, device="cpu")


# ------------------------------------------------------------------------------------------------
# No pickle anywhere
# ------------------------------------------------------------------------------------------------

def test_project_never_unpickles():
    """Weights are safetensors only: no torch.load / torch.save / pickle / allow_pickle in our sources."""
    banned = [r"\btorch\.load\s*\(", r"\btorch\.save\s*\(", r"\bimport\s+(c?pickle|dill|joblib)\b",
              r"\bfrom\s+(c?pickle|dill|joblib)\b", r"\bpickle\.", r"allow_pickle\s*=\s*True",
              r"weights_only\s*=\s*False"]
    me = Path(__file__).resolve()
    hits = []
    files = [p for p in ROOT.rglob("*.py") if not any(part.startswith(".") for part in p.relative_to(ROOT).parts)
             and "node_modules" not in p.parts and p.resolve() != me]
    assert len(files) > 20
    for p in files:
        text = p.read_text(errors="replace")
        hits += [f"{p.relative_to(ROOT)}: {pat}" for pat in banned if re.search(pat, text)]
    assert not hits, hits
