"""Plans: how each model tensor is stored, checked against the config before any data is read; dequantize, fill.

Follows docs/design/checkpoints.md §3 (FP8 128x128 block scales, MXFP4 experts). `plan_checkpoint`
matches every tensor the model expects with its checkpoint tensor (and block scale) from the shard
headers and raises a `CheckpointError` naming the file and the tensor on any mismatch of dtype, shape
or scale; `fill` then copies the dequantized tensors into a module, one shard at a time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import CheckpointError
from ..quant import dequantize_fp8_weight, dequantize_mxfp4_weight
from .parts import fp32_critical
from .quantization import ENGRAM_TABLE, EXPERT, MXFP4_BLOCK, QuantSpec, scale_names, scale_values
from .shards import DENSE, ReleaseCheckpoint, TensorInfo


@dataclass(frozen=True)
class TensorPlan:
    name: str
    kind: str                  # "dense" | "fp8" | "mxfp4" | "engram_fp8"
    source: TensorInfo
    scale: TensorInfo | None
    shape: tuple[int, ...]     # the model's shape
    dtype: torch.dtype         # the compute dtype it becomes

    @property
    def names(self) -> list[str]:
        return [self.source.name] + ([self.scale.name] if self.scale is not None else [])

    @property
    def compute_bytes(self) -> int:
        return math.prod(self.shape) * torch.empty((), dtype=self.dtype).element_size()


@dataclass(frozen=True)
class _Match:
    """One expected tensor beside what the checkpoint stores for it."""

    name: str
    shape: tuple[int, ...]     # the model's shape
    dtype: torch.dtype         # the compute dtype
    info: TensorInfo
    scale: TensorInfo | None
    spec: QuantSpec
    cfg_file: Path

    @property
    def expert(self) -> bool:
        return bool(EXPERT.search(self.name))

    def mismatch(self, what: str) -> CheckpointError:
        return CheckpointError(f"{self.info.file.name}: tensor {self.name!r} {what}")

    def plan(self, kind: str) -> TensorPlan:
        return TensorPlan(self.name, kind, self.info, self.scale if kind != "dense" else None, self.shape, self.dtype)


def _plan_one(name: str, shape: tuple[int, ...], dtype: torch.dtype, ck: ReleaseCheckpoint,
              spec: QuantSpec, cfg_file: Path) -> TensorPlan:
    info = ck.tensors.get(name)
    if info is None:
        raise CheckpointError(f"{ck.where()}: tensor {name!r} is needed by the config ({cfg_file.name}) but no "
                              f"shard has it")
    scale = next((ck.tensors[s] for s in scale_names(name) if s in ck.tensors), None)
    m = _Match(name, shape, dtype, info, scale, spec, cfg_file)
    d = info.dtype
    if fp32_critical(name) and d != "F32":
        raise m.mismatch(f"is stored as {d}; it is fp32-critical and must be F32")
    if d in DENSE:
        return _plan_dense(m)
    if d == "F8_E4M3":
        return _plan_fp8(m)
    if d in ("U8", "I8"):
        return _plan_mxfp4(m)
    raise m.mismatch(f"has dtype {d}, which no V4.1 weight uses (expected a float type, FP8 E4M3, or uint8 MXFP4)")


def _plan_dense(m: _Match) -> TensorPlan:
    if m.expert and m.spec.expert_dtype == "fp4":
        raise m.mismatch(f"is stored as {m.info.dtype}, but quantization_config.expert_dtype is 'fp4' (MXFP4: uint8 "
                         f"codes + E8M0 scales)")
    if m.info.shape != m.shape:
        raise m.mismatch(f"has shape {list(m.info.shape)}, the config needs {list(m.shape)}")
    return m.plan("dense")


def _plan_fp8(m: _Match) -> TensorPlan:
    """An FP8 linear weight with its 2-D block scale, or the Engram table with per-row block scales."""
    shape, scale = m.shape, m.scale
    if not m.spec.fp8:
        raise m.mismatch(f"is stored as FP8 ({m.info.dtype}) but {m.cfg_file.name} has no quantization_config")
    if m.expert and m.spec.expert_dtype == "fp4":
        raise m.mismatch("is stored as FP8, but quantization_config.expert_dtype is 'fp4' (MXFP4)")
    if m.info.shape != shape:
        raise m.mismatch(f"has shape {list(m.info.shape)}, the config needs {list(shape)}")
    if scale is None:
        raise m.mismatch(f"is stored as FP8 but has no block-scale tensor {scale_names(m.name)[0]!r}")
    if ENGRAM_TABLE.search(m.name):
        if scale.dtype != "F32" or len(scale.shape) != 2 or scale.shape[0] != shape[0] or shape[1] % scale.shape[1]:
            raise CheckpointError(f"{scale.file.name}: tensor {scale.name!r} ({scale.dtype} {list(scale.shape)}) "
                                  f"is not an F32 per-row block scale for {m.name!r} {list(shape)}")
        return m.plan("engram_fp8")
    if len(shape) != 2:
        raise m.mismatch(f"is stored as FP8 but is not a matrix (shape {list(shape)})")
    block = m.spec.block
    _check_scale(scale, [math.ceil(shape[0] / block), math.ceil(shape[1] / block)], m.spec.scale_fmt, m.name)
    return m.plan("fp8")


def _plan_mxfp4(m: _Match) -> TensorPlan:
    """A routed expert's packed E2M1 codes (two per byte) with E8M0 scales per 32 inputs."""
    shape, d = m.shape, m.info.dtype
    if not m.expert:
        raise m.mismatch(f"is stored as packed {d}; only routed expert weights (ffn.experts.*) may be MXFP4")
    if m.spec.expert_dtype != "fp4":
        raise m.mismatch(f"is stored as packed MXFP4 ({d}), but quantization_config.expert_dtype is "
                         f"{m.spec.expert_dtype!r}")
    if len(shape) != 2 or shape[1] % MXFP4_BLOCK:
        raise m.mismatch(f"cannot be MXFP4: the config's shape {list(shape)} has an input dim not divisible by 32")
    if m.info.shape != (shape[0], shape[1] // 2):
        raise m.mismatch(f"has packed shape {list(m.info.shape)}; the config's {list(shape)} needs "
                         f"{[shape[0], shape[1] // 2]} (two E2M1 codes per byte)")
    if m.scale is None:
        raise m.mismatch(f"is MXFP4 but has no E8M0 scale tensor {scale_names(m.name)[0]!r}")
    _check_scale(m.scale, [shape[0], shape[1] // MXFP4_BLOCK], "ue8m0", m.name)
    return m.plan("mxfp4")


def _check_scale(scale: TensorInfo, want: list[int], fmt: str, of: str) -> None:
    ok = ("F8_E8M0", "U8") if fmt == "ue8m0" else ("F32",)
    if scale.dtype not in ok:
        raise CheckpointError(f"{scale.file.name}: scale tensor {scale.name!r} of {of!r} is {scale.dtype}; scale "
                              f"format {fmt!r} needs {' or '.join(ok)}")
    if list(scale.shape) != want:
        raise CheckpointError(f"{scale.file.name}: scale tensor {scale.name!r} has shape {list(scale.shape)}, "
                              f"{of!r} needs {want}")


def plan_checkpoint(ck: ReleaseCheckpoint, expected: dict[str, tuple[tuple[int, ...], torch.dtype]],
                    spec: QuantSpec, cfg_file: Path) -> tuple[dict[str, TensorPlan], set[str]]:
    """Plans for every expected tensor; returns (plans, checkpoint names consumed)."""
    plans = {n: _plan_one(n, s, d, ck, spec, cfg_file) for n, (s, d) in expected.items()}
    used = {x for p in plans.values() for x in p.names}
    return plans, used


def dequantize(plan: TensorPlan, raw: dict[str, torch.Tensor], device: torch.device, block: int) -> torch.Tensor:
    """Stored tensor(s) -> the compute tensor on `device` (dequantized on the device)."""
    w = raw[plan.source.name].to(device)
    if plan.kind == "dense":
        return w.to(plan.dtype)
    s = raw[plan.scale.name].to(device)
    if plan.kind == "fp8":
        out = dequantize_fp8_weight(w, scale_values(s), block)
    elif plan.kind == "mxfp4":
        out = dequantize_mxfp4_weight(w.view(torch.uint8), s.view(torch.uint8))
    else:  # engram table: per-row blocks
        blk = w.shape[1] // s.shape[1]
        out = (w.float().unflatten(-1, (-1, blk)) * s.float().unsqueeze(-1)).flatten(-2)
    return out.to(plan.dtype)


def fill(module: torch.nn.Module, plans: dict[str, TensorPlan], ck: ReleaseCheckpoint, device: torch.device,
         block: int, prefix: str = "") -> int:
    """Copy every plan under `prefix` into `module` (names relative to it), one shard at a time so the
    raw bytes of at most one shard are in memory beside the model; returns compute bytes written."""
    targets = dict(module.named_parameters())
    targets.update(module.named_buffers())
    by_file: dict[Path, list[TensorPlan]] = {}
    for n, p in plans.items():
        if n.startswith(prefix) and n[len(prefix):] in targets:
            by_file.setdefault(p.source.file, []).append(p)
    total = 0
    with torch.no_grad():
        for group in by_file.values():
            raw = ck.read(sorted({x for p in group for x in p.names}))
            for p in group:
                t = targets[p.name[len(prefix):]]
                t.copy_(dequantize(p, raw, device, block))
                total += t.numel() * t.element_size()
            del raw
        for group in by_file.values():  # a dequantized FP8 Engram table has unit scales (see EngramEmbedding)
            for p in group:
                if p.kind == "engram_fp8":
                    targets[p.name[len(prefix):-len(".weight")] + ".scale"].fill_(1.0)
    return total

