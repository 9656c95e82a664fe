"""How a release checkpoint stores each tensor: the `quantization_config` and the per-tensor formats.

Follows docs/design/checkpoints.md §1-3 (native tensor names, fp32 tensors, FP8 128x128 block scales, MXFP4
experts). `QuantSpec` is the parsed `quantization_config`, with the field names of the
released config (as vLLM's DeepseekV4FP8Config reads them):

    quant_method       "fp8"             linear weights may be stored FP8 with block scales
    fmt                "e4m3"            FP8 element format; only E4M3 is accepted
    activation_scheme  "dynamic"         informative: we compute in the compute dtype
    weight_block_size  [128, 128]        the FP8 scale block (square)
    scale_fmt          "ue8m0" | "fp32"  FP8 block scales stored as float8_e8m0fnu exponent bytes
                                         (uint8 accepted) or as float32
    expert_dtype       "fp4" | "fp8"     routed experts: MXFP4 (instruct release) or FP8 (Base release)

Tensor formats, by native name:

    X.weight  float8_e4m3fn [out, in]  + X.scale [ceil(out/128), ceil(in/128)]       FP8 linear
    ...ffn.experts.E.wK.weight  uint8 [out, in/2]  + ...wK.scale  E8M0 [out, in/32]   MXFP4 expert
        two E2M1 codes per byte, input 2j in the low nibble; value = E2M1(code) * 2^(byte - 127)
    engram.embed.weight  float8_e4m3fn [rows, d]  + engram.embed.scale  fp32 [rows, d/32]
    hc_*, attn_sink, ape, ffn.gate.bias, ffn.gate.bias_vl, engram.embed.scale      float32 always (parts.py)
    everything else (embed, head, norms, router, compressor, indexer.weights_proj)  any float dtype

The scale of `X.weight` is named `X.scale`, as in DeepSeek's native inference code (a Linear owns
`weight` and `scale`, like `engram.embed.{weight,scale}` in §5.10); `X.weight.scale` is read too.
`release_tensors` turns one model tensor into the checkpoint tensor(s) that store it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import CheckpointError
from ..quant import FP8_MAX, pow2_ceil, quantize_fp8_weight, quantize_mxfp4_weight
from .parts import fp32_critical

MXFP4_BLOCK = 32
ENGRAM_BLOCK = 32

# which native names may be stored in which low-precision format
EXPERT = re.compile(r"(^|\.)ffn\.experts\.\d+\.w[123]\.weight$")
FP8_LINEAR = re.compile(r"(^|\.)(attn\.(wq_a|wq_b|wkv|wo_a|wo_b)|attn\.indexer\.(wq_b|wk)|"
                        r"ffn\.shared_experts\.w[123]|engram\.wkv)\.weight$")
ENGRAM_TABLE = re.compile(r"(^|\.)engram\.embed\.weight$")


def scale_names(name: str) -> tuple[str, ...]:
    """Candidate names of the block-scale tensor of `name`: `X.scale` for `X.weight`, then `X.weight.scale`."""
    if name.endswith(".weight"):
        return name[: -len(".weight")] + ".scale", name + ".scale"
    return (name + ".scale",)


@dataclass(frozen=True)
class QuantSpec:
    """The parsed `quantization_config` (None fields: no quantization_config, dense weights only)."""

    quant_method: str | None = None
    fmt: str = "e4m3"
    scale_fmt: str = "ue8m0"
    block: int = 128
    expert_dtype: str = "dense"   # "fp4" (MXFP4), "fp8", or "dense" (no quantization_config)

    @property
    def fp8(self) -> bool:
        return self.quant_method == "fp8"

    @classmethod
    def parse(cls, qc: dict | None, where: Path) -> "QuantSpec":
        if qc is None:
            return cls()
        if not isinstance(qc, dict):
            raise CheckpointError(f"{where}: quantization_config must be an object")

        def bad(field_: str, v, allowed) -> CheckpointError:
            return CheckpointError(f"{where}: quantization_config.{field_} is {v!r}; supported: {allowed}")

        method = qc.get("quant_method", "fp8")
        if method != "fp8":
            raise bad("quant_method", method, "'fp8' (DeepSeek block FP8, with MXFP4 experts when expert_dtype='fp4')")
        fmt = qc.get("fmt", "e4m3")
        if fmt != "e4m3":
            raise bad("fmt", fmt, "'e4m3'")
        scale_fmt = qc.get("scale_fmt") or "fp32"  # V3-style configs without scale_fmt store fp32 scales
        if scale_fmt not in ("ue8m0", "fp32"):
            raise bad("scale_fmt", scale_fmt, "'ue8m0', 'fp32'")
        bs = qc.get("weight_block_size", [128, 128])
        if (not isinstance(bs, (list, tuple)) or len(bs) != 2 or bs[0] != bs[1] or not isinstance(bs[0], int)
                or bs[0] <= 0):
            raise bad("weight_block_size", bs, "a square block such as [128, 128]")
        ed = qc.get("expert_dtype", "fp8")
        if ed not in ("fp4", "fp8"):
            raise bad("expert_dtype", ed, "'fp4' (MXFP4), 'fp8'")
        return cls("fp8", fmt, scale_fmt, int(bs[0]), ed)

    def to_config(self) -> dict | None:
        if self.quant_method is None:
            return None
        return {"quant_method": self.quant_method, "fmt": self.fmt, "activation_scheme": "dynamic",
                "weight_block_size": [self.block, self.block], "scale_fmt": self.scale_fmt,
                "expert_dtype": self.expert_dtype}


def scale_values(t: torch.Tensor) -> torch.Tensor:
    """Stored scale -> fp32 multipliers (E8M0 bytes: 2^(byte-127))."""
    if t.dtype == torch.float8_e8m0fnu:
        t = t.view(torch.uint8)
    if t.dtype == torch.uint8:
        return torch.exp2(t.float() - 127.0)
    return t.float()


def engram_fp8(w: torch.Tensor, ue8m0: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Engram table rows -> (fp8 e4m3 [rows, d], fp32 scale [rows, d/32]), one scale per 32 channels."""
    b = w.float().unflatten(-1, (-1, ENGRAM_BLOCK))
    s = b.abs().amax(-1).clamp_min(1e-12) / FP8_MAX
    if ue8m0:
        s = pow2_ceil(s)
    q = (b / s.unsqueeze(-1)).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).flatten(-2)
    return q, s


def ue8m0_bytes(s: torch.Tensor) -> torch.Tensor:
    """Power-of-two fp32 scales -> float8_e8m0fnu (the exponent byte)."""
    return ((s.float().contiguous().view(torch.int32) >> 23) & 0xFF).to(torch.uint8).view(torch.float8_e8m0fnu)


def release_tensors(name: str, t: torch.Tensor, spec: QuantSpec, dense_dtype: torch.dtype | None = None,
                    fp8_linear: bool = True) -> dict[str, torch.Tensor]:
    """One model tensor -> the checkpoint tensor(s) that store it under `spec` (FP8 for the linear weights
    and the Engram table only when `fp8_linear`; routed experts as `spec.expert_dtype`)."""
    t = t.detach().cpu()
    if fp32_critical(name):
        return {name: t.float().contiguous()}
    scale = scale_names(name)[0]
    if EXPERT.search(name) and spec.expert_dtype == "fp4":
        if t.shape[-1] % MXFP4_BLOCK:
            raise ValueError(f"{name}: MXFP4 needs the input dim divisible by {MXFP4_BLOCK}, got {list(t.shape)}; "
                             f"write with mxfp4_experts=False")
        packed, e = quantize_mxfp4_weight(t)
        return {name: packed, scale: e.view(torch.float8_e8m0fnu)}
    fp8_here = (spec.expert_dtype == "fp8" and EXPERT.search(name)) or (fp8_linear and FP8_LINEAR.search(name))
    if spec.fp8 and t.ndim == 2 and fp8_here:
        ue8m0 = spec.scale_fmt == "ue8m0"
        q, s = quantize_fp8_weight(t, spec.block, ue8m0=ue8m0)
        return {name: q, scale: ue8m0_bytes(s) if ue8m0 else s.float().contiguous()}
    if spec.fp8 and fp8_linear and ENGRAM_TABLE.search(name) and t.shape[-1] % ENGRAM_BLOCK == 0:
        q, s = engram_fp8(t, spec.scale_fmt == "ue8m0")
        return {name: q, scale: s}
    return {name: t.to(dense_dtype or t.dtype).contiguous()}
