"""Released DeepSeek-V4.1-Flash checkpoints: sharded FP8 / MXFP4 safetensors, resident or layer-streamed.

Follows reference-brief.md §4.10 and §5.10 (native tensor names), §9 (FP8 128x128 block scales, MXFP4
experts) and issue 6. `model.weights.load` hands a directory here when its config has a
`quantization_config` or it has a `model.safetensors.index.json`.

Directory layout (what `write_release` writes and `load_release` reads):

    config.json                        composite: {"model_type": "deepseek_v41", "text_config": {...},
                                       "vision_config": {...}, "quantization_config": {...}}
    model.safetensors.index.json       {"metadata": {"total_size": N}, "weight_map": {tensor: shard}}
    model-00001-of-0000K.safetensors   the shards (native tensor names)
    tokenizer.json                     optional

`quantization_config`, with the field names of the released config (as vLLM's DeepseekV4FP8Config
reads them):

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
    hc_*, attn_sink, ape, ffn.gate.bias, ffn.gate.bias_vl, engram.embed.scale      float32 always
    everything else (embed, head, norms, router, compressor, indexer.weights_proj)  any float dtype

The scale of `X.weight` is named `X.scale`, as in DeepSeek's native inference code (a Linear owns
`weight` and `scale`, like `engram.embed.{weight,scale}` in §5.10); `X.weight.scale` is read too.

Loading dequantizes to the compute dtype (fp32-critical tensors stay fp32). Every tensor is checked
against the config from the shard headers before any data is read, so a bad checkpoint fails at
once with a `CheckpointError` naming the file and the tensor. When the model would not fit the
memory budget (argument, env `V41_MEMORY_BUDGET` like "2G", or 80% of free memory / 90% of free GPU
memory) only embeddings, final norm and head stay resident; `LayerStreamer.layer(i)` builds Block i
on the meta device, materializes it with `to_empty` and copies its dequantized tensors from the
shards as the forward reaches it, dropping the least recently used layer first; a streamed Engram
layer never materializes its table (3.8e8 rows in the release): `MappedEngramTable` reads the rows a
forward needs from the memory-mapped shard. Streamed and resident logits are bitwise equal.
Only safetensors are read: nothing in a checkpoint can execute code.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import struct
import sys
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from ..arch.block import Block
from ..arch.engram import NgramHasher
from ..arch.rope import Rotary
from ..config import ConfigError, V41Config
from ..quant import (
    FP8_MAX,
    dequantize_fp8_weight,
    dequantize_mxfp4_weight,
    pow2_ceil,
    quantize_fp8_weight,
    quantize_mxfp4_weight,
)
from .native import CheckpointError, default_device

if TYPE_CHECKING:
    from ..model import V41Model

INDEX = "model.safetensors.index.json"
MXFP4_BLOCK = 32
ENGRAM_BLOCK = 32
_GIB = 1 << 30

# safetensors dtype codes -> torch dtypes (the ones a V4.1 checkpoint may hold)
_ST_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
              "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2, "F8_E8M0": torch.float8_e8m0fnu,
              "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16, "I32": torch.int32, "I64": torch.int64,
              "BOOL": torch.bool}
_DENSE = {"F64", "F32", "F16", "BF16"}
_ELT_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "U8": 1, "I8": 1,
              "I16": 2, "I32": 4, "I64": 8, "BOOL": 1, "U16": 2, "U32": 4, "U64": 8}

_EXPERT = re.compile(r"(^|\.)ffn\.experts\.\d+\.w[123]\.weight$")
_FP8_LINEAR = re.compile(r"(^|\.)(attn\.(wq_a|wq_b|wkv|wo_a|wo_b)|attn\.indexer\.(wq_b|wk)|"
                         r"ffn\.shared_experts\.w[123]|engram\.wkv)\.weight$")
_ENGRAM_TABLE = re.compile(r"(^|\.)engram\.embed\.weight$")


def fp32_critical(name: str) -> bool:
    """Tensors the release keeps in float32 (HF `_keep_in_fp32_modules_strict`, brief §4.10)."""
    last = name.rsplit(".", 1)[-1]
    return (last.startswith("hc_") or last in ("attn_sink", "ape") or name.endswith(("ffn.gate.bias",
            "ffn.gate.bias_vl", "engram.embed.scale")))


def scale_names(name: str) -> tuple[str, ...]:
    """Candidate names of the block-scale tensor of `name`: `X.scale` for `X.weight`, then `X.weight.scale`."""
    if name.endswith(".weight"):
        return name[: -len(".weight")] + ".scale", name + ".scale"
    return (name + ".scale",)


# ------------------------------------------------------------------------------------------------
# quantization_config
# ------------------------------------------------------------------------------------------------

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


# ------------------------------------------------------------------------------------------------
# Shards: headers, index, reads
# ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TensorInfo:
    name: str
    file: Path
    dtype: str                 # safetensors code, e.g. "F8_E4M3"
    shape: tuple[int, ...]
    offset: int = 0            # absolute byte offset of the data in the file

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * _ELT_BYTES.get(self.dtype, 1)

    @property
    def torch_dtype(self) -> torch.dtype | None:
        return _ST_DTYPES.get(self.dtype)


def read_header(f: Path) -> dict[str, TensorInfo]:
    """Parse a safetensors header (8-byte length + JSON) and check the file holds every tensor's bytes."""
    try:
        size = f.stat().st_size
        with open(f, "rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                raise CheckpointError(f"{f}: truncated ({size} bytes): not even a safetensors header")
            n = struct.unpack("<Q", head)[0]
            if 8 + n > size:
                raise CheckpointError(f"{f}: truncated ({size} bytes): the header alone needs {8 + n}")
            meta = json.loads(fh.read(n))
    except CheckpointError:
        raise
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{f}: not a readable safetensors file ({e})") from None
    if not isinstance(meta, dict):
        raise CheckpointError(f"{f}: not a safetensors file (header is not an object)")
    data = size - 8 - n
    out = {}
    for name, v in meta.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (a, b) = v["dtype"], tuple(int(x) for x in v["shape"]), v["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise CheckpointError(f"{f}: tensor {name!r} has a malformed header entry") from None
        if b > data:
            raise CheckpointError(f"{f}: truncated: tensor {name!r} needs data bytes {a}..{b} but the file holds "
                                  f"only {data} (re-download or re-copy this shard)")
        out[name] = TensorInfo(name, f, dtype, shape, 8 + n + int(a))
    return out


class ReleaseCheckpoint:
    """The tensors of a checkpoint directory, by native name, from the index and the shard headers."""

    def __init__(self, path: Path):
        self.path = path
        index = path / INDEX
        self.index: Path | None = index if index.exists() else None
        self.tensors: dict[str, TensorInfo] = {}
        if self.index is not None:
            try:
                wm = json.loads(index.read_text())["weight_map"]
                if not isinstance(wm, dict):
                    raise TypeError("weight_map is not an object")
            except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError) as e:
                raise CheckpointError(f"{index}: not a valid safetensors index ({e})") from None
            headers: dict[str, dict[str, TensorInfo]] = {}
            for name, fname in wm.items():
                f = path / str(fname)
                if fname not in headers:
                    if not f.is_file():
                        raise CheckpointError(f"{index}: tensor {name!r} is in shard {fname!r}, which is missing "
                                              f"from {path}")
                    headers[fname] = read_header(f)
                info = headers[fname].get(name)
                if info is None:
                    raise CheckpointError(f"{index}: tensor {name!r} is mapped to {fname!r}, but that shard has "
                                          f"no such tensor")
                self.tensors[name] = info
            self.files = sorted({path / f for f in headers})
        else:
            single = path / "model.safetensors"
            self.files = [single] if single.exists() else sorted(path.glob("model*.safetensors"))
            if not self.files:
                raise CheckpointError(f"{path}: not a checkpoint: no {INDEX} and no model*.safetensors files")
            for f in self.files:
                for name, info in read_header(f).items():
                    if name in self.tensors:
                        raise CheckpointError(f"{f}: tensor {name!r} is also in {self.tensors[name].file.name}; "
                                              f"without an index the shards must not overlap")
                    self.tensors[name] = info

    def where(self) -> Path:
        return self.index or self.path

    def read(self, names: list[str]) -> dict[str, torch.Tensor]:
        """Read tensors (CPU), opening each shard once, memory-mapped, for the duration of the read."""
        by_file: dict[Path, list[str]] = {}
        for n in names:
            by_file.setdefault(self.tensors[n].file, []).append(n)
        out = {}
        for f, ns in by_file.items():
            try:
                with safe_open(str(f), framework="pt", device="cpu") as sf:
                    for n in ns:
                        out[n] = sf.get_tensor(n)
            except Exception as e:  # safetensors raises its own error types for damaged files
                raise CheckpointError(f"{f}: cannot read tensor(s) {ns[:3]} ({e}); the file may be truncated or "
                                      f"damaged") from None
        return out


# ------------------------------------------------------------------------------------------------
# Plans: how each model tensor is stored, checked against the config before reading any data
# ------------------------------------------------------------------------------------------------

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


def _plan_one(name: str, shape: tuple[int, ...], dtype: torch.dtype, ck: ReleaseCheckpoint,
              spec: QuantSpec, cfg_file: Path) -> TensorPlan:
    info = ck.tensors.get(name)
    if info is None:
        raise CheckpointError(f"{ck.where()}: tensor {name!r} is needed by the config ({cfg_file.name}) but no "
                              f"shard has it")
    f, d = info.file.name, info.dtype
    scale = next((ck.tensors[s] for s in scale_names(name) if s in ck.tensors), None)
    critical = fp32_critical(name)
    expert = bool(_EXPERT.search(name))

    def mismatch(what: str) -> CheckpointError:
        return CheckpointError(f"{f}: tensor {name!r} {what}")

    if critical and d != "F32":
        raise mismatch(f"is stored as {d}; it is fp32-critical and must be F32")
    if d in _DENSE:
        if expert and spec.expert_dtype == "fp4":
            raise mismatch(f"is stored as {d}, but quantization_config.expert_dtype is 'fp4' (MXFP4: uint8 codes "
                           f"+ E8M0 scales)")
        if info.shape != shape:
            raise mismatch(f"has shape {list(info.shape)}, the config needs {list(shape)}")
        return TensorPlan(name, "dense", info, None, shape, dtype)
    if d == "F8_E4M3":
        if not spec.fp8:
            raise mismatch(f"is stored as FP8 ({d}) but {cfg_file.name} has no quantization_config")
        if expert and spec.expert_dtype == "fp4":
            raise mismatch("is stored as FP8, but quantization_config.expert_dtype is 'fp4' (MXFP4)")
        if info.shape != shape:
            raise mismatch(f"has shape {list(info.shape)}, the config needs {list(shape)}")
        if scale is None:
            raise mismatch(f"is stored as FP8 but has no block-scale tensor {scale_names(name)[0]!r}")
        if _ENGRAM_TABLE.search(name):
            if scale.dtype != "F32" or len(scale.shape) != 2 or scale.shape[0] != shape[0] or shape[1] % scale.shape[1]:
                raise CheckpointError(f"{scale.file.name}: tensor {scale.name!r} ({scale.dtype} {list(scale.shape)}) "
                                      f"is not an F32 per-row block scale for {name!r} {list(shape)}")
            return TensorPlan(name, "engram_fp8", info, scale, shape, dtype)
        if len(shape) != 2:
            raise mismatch(f"is stored as FP8 but is not a matrix (shape {list(shape)})")
        want = [math.ceil(shape[0] / spec.block), math.ceil(shape[1] / spec.block)]
        _check_scale(scale, want, spec.scale_fmt, name)
        return TensorPlan(name, "fp8", info, scale, shape, dtype)
    if d in ("U8", "I8"):
        if not expert:
            raise mismatch(f"is stored as packed {d}; only routed expert weights (ffn.experts.*) may be MXFP4")
        if spec.expert_dtype != "fp4":
            raise mismatch(f"is stored as packed MXFP4 ({d}), but quantization_config.expert_dtype is "
                           f"{spec.expert_dtype!r}")
        if len(shape) != 2 or shape[1] % MXFP4_BLOCK:
            raise mismatch(f"cannot be MXFP4: the config's shape {list(shape)} has an input dim not divisible by 32")
        if info.shape != (shape[0], shape[1] // 2):
            raise mismatch(f"has packed shape {list(info.shape)}; the config's {list(shape)} needs "
                           f"{[shape[0], shape[1] // 2]} (two E2M1 codes per byte)")
        if scale is None:
            raise mismatch(f"is MXFP4 but has no E8M0 scale tensor {scale_names(name)[0]!r}")
        _check_scale(scale, [shape[0], shape[1] // MXFP4_BLOCK], "ue8m0", name)
        return TensorPlan(name, "mxfp4", info, scale, shape, dtype)
    raise mismatch(f"has dtype {d}, which no V4.1 weight uses (expected a float type, FP8 E4M3, or uint8 MXFP4)")


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


def _scale_values(t: torch.Tensor) -> torch.Tensor:
    """Stored scale -> fp32 multipliers (E8M0 bytes: 2^(byte-127))."""
    if t.dtype == torch.float8_e8m0fnu:
        t = t.view(torch.uint8)
    if t.dtype == torch.uint8:
        return torch.exp2(t.float() - 127.0)
    return t.float()


def dequantize(plan: TensorPlan, raw: dict[str, torch.Tensor], device: torch.device, block: int) -> torch.Tensor:
    """Stored tensor(s) -> the compute tensor on `device` (dequantized on the device)."""
    w = raw[plan.source.name].to(device)
    if plan.kind == "dense":
        return w.to(plan.dtype)
    s = raw[plan.scale.name].to(device)
    if plan.kind == "fp8":
        out = dequantize_fp8_weight(w, _scale_values(s), block)
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


# ------------------------------------------------------------------------------------------------
# Memory budget
# ------------------------------------------------------------------------------------------------

def parse_bytes(text: str) -> int:
    """'512M', '2G', '1.5GiB', '1000000' -> bytes."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*([kmgt]?)(i?b)?\s*", str(text).lower())
    if not m:
        raise ValueError(f"cannot read a memory size from {text!r} (try 512M or 2G)")
    return int(float(m.group(1)) * 1024 ** " kmgt".index(m.group(2) or " "))


def available_memory(device: torch.device) -> int:
    """Free memory where the weights will live: GPU free memory, or MemAvailable from /proc/meminfo."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 8 * _GIB


def memory_budget(device: torch.device) -> int:
    """The default budget: env V41_MEMORY_BUDGET, else 90% of free GPU memory / 80% of available RAM."""
    env = os.environ.get("V41_MEMORY_BUDGET")
    if env:
        return parse_bytes(env)
    return int(available_memory(device) * (0.9 if device.type == "cuda" else 0.8))


# ------------------------------------------------------------------------------------------------
# Engram tables, memory-mapped (streaming): the released tables have ~3.8e8 rows, and a forward reads
# only the rows its n-gram hashes name
# ------------------------------------------------------------------------------------------------

def _mapped(info: TensorInfo) -> np.memmap:
    row = math.prod(info.shape[1:]) * _ELT_BYTES[info.dtype]
    return np.memmap(info.file, dtype=np.uint8, mode="r", offset=info.offset, shape=(info.shape[0], row))


class MappedEngramTable(torch.nn.Module):
    """Stands in for `EngramEmbedding` in a streamed layer: looks rows up in the shard file (memory-mapped)
    and dequantizes just those, to the values the resident (dequantized) table holds."""

    def __init__(self, plan: TensorPlan, device: torch.device):
        super().__init__()
        self.plan, self.device = plan, device
        self.rows, self.dim = plan.shape
        self._w = _mapped(plan.source)
        self._s = _mapped(plan.scale) if plan.kind == "engram_fp8" else None

    def _gather(self, mm: np.memmap, info: TensorInfo, idx: np.ndarray) -> torch.Tensor:
        raw = torch.from_numpy(np.ascontiguousarray(mm[idx]))
        return raw.view(info.torch_dtype).reshape(len(idx), *info.shape[1:])

    def full(self) -> dict[str, torch.Tensor]:
        """The whole dequantized table as `EngramEmbedding` tensors (weight, unit scale), e.g. for writing."""
        ids = torch.arange(self.rows)
        return {"weight": self(ids), "scale": torch.ones(self.rows, max(1, self.dim // ENGRAM_BLOCK))}

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        flat = ids.reshape(-1).cpu().numpy()
        if flat.size and (flat.min() < 0 or flat.max() >= self.rows):
            raise IndexError(f"Engram row id out of range [0, {self.rows})")
        uniq, inv = np.unique(flat, return_inverse=True)
        w = self._gather(self._w, self.plan.source, uniq)
        raw = {self.plan.source.name: w}
        if self._s is not None:
            raw[self.plan.scale.name] = self._gather(self._s, self.plan.scale, uniq)
        sub = dataclasses.replace(self.plan, shape=(len(uniq), self.dim))
        rows = dequantize(sub, raw, self.device, 0)
        return rows[torch.from_numpy(inv.reshape(-1)).to(self.device)].reshape(*ids.shape, self.dim)


# ------------------------------------------------------------------------------------------------
# Layer streaming
# ------------------------------------------------------------------------------------------------

@dataclass
class LayerLoad:
    """One layer materialized from the shards (passed to the progress callback)."""

    index: int
    n_layers: int
    seconds: float
    nbytes: int


class LayerStreamer:
    """Materializes backbone layers on demand; keeps at most `capacity` of them (least recently used out).

    Hooked in through `V41Model.layer(i)`. `on_layer(LayerLoad)` is called after each load.
    """

    def __init__(self, cfg: V41Config, ck: ReleaseCheckpoint, plans: dict[str, TensorPlan], device: torch.device,
                 dtype: torch.dtype, block: int, capacity: int = 1,
                 on_layer: Callable[[LayerLoad], None] | None = None):
        self.cfg, self.ck = cfg, ck
        self.plans: dict[int, dict[str, TensorPlan]] = {}  # layer -> its plans
        for name, p in plans.items():
            self.plans.setdefault(int(name.split(".", 2)[1]), {})[name] = p
        self.device, self.dtype, self.block = device, dtype, block
        self.capacity = max(1, int(capacity))
        self.on_layer = on_layer
        self._live: OrderedDict[int, Block] = OrderedDict()
        self.loads = 0
        self.hits = 0
        self.bytes_loaded = 0
        self.seconds = 0.0

    @property
    def resident(self) -> list[int]:
        return list(self._live)

    def layer(self, i: int) -> Block:
        blk = self._live.get(i)
        if blk is not None:
            self._live.move_to_end(i)
            self.hits += 1
            return blk
        while len(self._live) >= self.capacity:  # free before loading: peak = capacity layers
            self._live.popitem(last=False)
        t0 = time.perf_counter()
        with torch.device("meta"):
            blk = Block(self.cfg, i)
        plans = dict(self.plans.get(i, {}))
        table = plans.get(f"layers.{i}.engram.embed.weight")
        if table is not None:  # never materialize the table: rows are read from the shard on use
            blk.engram.embed = MappedEngramTable(table, self.device)
            plans = {n: p for n, p in plans.items() if not n.startswith(f"layers.{i}.engram.embed.")}
        cast_params(blk, self.dtype)
        blk.to_empty(device=self.device)
        if len(plans) != len(blk.state_dict()):  # load_release checked every tensor; this guards a changed Block
            raise RuntimeError(f"internal: layer {i} has {len(blk.state_dict())} tensors, the plan {len(plans)}")
        nbytes = fill(blk, plans, self.ck, self.device, self.block, prefix=f"layers.{i}.")
        blk.requires_grad_(False)
        blk.eval()
        dt = time.perf_counter() - t0
        self.loads += 1
        self.bytes_loaded += nbytes
        self.seconds += dt
        self._live[i] = blk
        if self.on_layer is not None:
            self.on_layer(LayerLoad(i, self.cfg.num_hidden_layers, dt, nbytes))
        return blk

    def clear(self) -> None:
        self._live.clear()

    def stats(self) -> dict:
        return {"loads": self.loads, "hits": self.hits, "bytes_loaded": self.bytes_loaded,
                "seconds": round(self.seconds, 3), "capacity": self.capacity, "resident": self.resident}


# ------------------------------------------------------------------------------------------------
# Loading
# ------------------------------------------------------------------------------------------------

@dataclass
class ReleaseInfo:
    """What `load_release` found and decided (`model.release`)."""

    path: str
    quant: QuantSpec
    shards: int
    tensors: int
    stored_bytes: int          # bytes of the checkpoint tensors
    compute_bytes: int         # bytes of the model's tensors at the compute dtype
    budget_bytes: int
    streamed: bool
    resident_layers: int       # layers kept at once (all when not streamed)
    dtype: str
    notes: list[str] = field(default_factory=list)


def cast_params(module: torch.nn.Module, dtype: torch.dtype) -> None:
    """Parameters to the compute dtype, fp32-critical ones to float32 (works on the meta device too)."""
    for name, p in module.named_parameters():
        want = torch.float32 if fp32_critical(name) else dtype
        if p.is_floating_point() and p.dtype != want:
            p.data = p.data.to(want)


def _skeleton(cfg: V41Config, dtype: torch.dtype) -> "V41Model":
    from ..model import V41Model

    with torch.device("meta"):
        model = V41Model(cfg)
    cast_params(model, dtype)
    # non-persistent buffers computed at construction: rebuild them off the meta device
    model.rotary = Rotary(cfg)
    if model.hasher is not None:
        model.hasher = NgramHasher(cfg)
    return model


def _expected(module: torch.nn.Module, prefix: str = "") -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    return {prefix + k: (tuple(v.shape), v.dtype) for k, v in module.state_dict().items()}


_PART_PREFIXES = {"mtp": ("mtp.",), "vision": ("vision.", "aligner.", "image_")}


def _attach_part(model, part: str, cfg: V41Config) -> None:
    """Attach the drafter (`mtp`) or the vision tower + aligner + image markers (`vision`) to `model`,
    on the device and dtype of its embedding (the meta device for a skeleton)."""
    if part == "mtp":
        from ..arch.drafter import Drafter

        with torch.device(model.embed.weight.device):
            model.set_part("mtp", Drafter(cfg))
    else:
        from ..arch.vision import attach_vision

        attach_vision(model)


def _detach_part(model, part: str, names: set[str]) -> None:
    if part == "mtp":
        model.set_part("mtp", None)
        return
    model.set_part("vision", None)
    if hasattr(model, "aligner"):
        model.aligner = None
    for n in names:
        if "." not in n and n in model._parameters:  # the image_start/end/newline vectors
            model._parameters[n] = None


def _optional_parts(model, ck: ReleaseCheckpoint, cfg: V41Config, notes: list[str]) -> dict[str, set[str]]:
    """Attach (on the meta skeleton) each optional part the checkpoint has and the code provides;
    returns part -> its state_dict names. What cannot be attached is noted, never raised."""
    parts: dict[str, set[str]] = {}
    for part, prefixes in _PART_PREFIXES.items():
        names = [k for k in ck.tensors if k.startswith(prefixes)]
        if not names:
            continue
        label = "/".join(p + "*" for p in prefixes)
        wanted = cfg.num_nextn_predict_layers > 0 if part == "mtp" else cfg.vision_config is not None
        if not wanted:
            notes.append(f"{label}: {len(names)} tensors skipped: the config does not describe this part")
            continue
        before = set(model.state_dict())
        try:
            _attach_part(model, part, cfg)
        except ImportError:
            notes.append(f"{label}: {len(names)} tensors skipped: the {part} module is not available")
            continue
        except Exception as e:  # a part that cannot be built for this config must not stop the backbone
            notes.append(f"{label}: {len(names)} tensors skipped: building the {part} part failed ({e})")
            continue
        parts[part] = set(model.state_dict()) - before
    return parts


def load_release(path: str | Path, device: str | torch.device | None = None, dtype: torch.dtype | str | None = None,
                 *, budget_bytes: int | str | None = None, stream: bool | None = None,
                 progress: Callable[[LayerLoad], None] | None = None, strict: bool = True):
    """Load a release-layout checkpoint (sharded, FP8 / MXFP4) as a V41Model.

    `dtype`: compute dtype (default float32). `budget_bytes`: memory the weights may use (default
    `memory_budget(device)`). `stream`: force (True) or forbid (False) layer streaming; None decides
    from the budget. `progress(LayerLoad)` is called per streamed layer load.
    """
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"{path}: not a checkpoint directory")
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise CheckpointError(f"{path}: not a checkpoint directory (no config.json)")
    try:
        raw_cfg = json.loads(cfg_file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{cfg_file}: not valid JSON ({e})") from None
    archs = raw_cfg.get("architectures") if isinstance(raw_cfg, dict) else None
    if isinstance(raw_cfg, dict) and "model_type" not in raw_cfg and archs and not any("V41" in str(a) for a in archs):
        raise CheckpointError(f"{cfg_file}: architectures {archs} is not DeepSeek-V4.1 (DeepseekV41ForCausalLM)")
    try:
        cfg = V41Config.from_json(cfg_file)
    except ConfigError as e:
        msg = str(e)
        raise CheckpointError(msg if str(cfg_file) in msg else f"{cfg_file}: {msg}") from None
    spec = QuantSpec.parse(cfg.quantization_config, cfg_file)
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype.replace("torch.", ""))
    dtype = dtype or torch.float32
    device = torch.device(device) if device is not None else default_device()

    # 1. everything is checked from the headers before any tensor data is read
    ck = ReleaseCheckpoint(path)
    model = _skeleton(cfg, dtype)
    notes: list[str] = []
    parts = _optional_parts(model, ck, cfg, notes)
    plans, used = plan_checkpoint(ck, _expected(model), spec, cfg_file)
    leftover = sorted(set(ck.tensors) - used)
    skipped = [k for k in leftover if k.startswith(("mtp.", "vision.", "aligner.", "image_"))]
    unexpected = [k for k in leftover if k not in skipped]
    if unexpected and strict:
        more_txt = f" (and {len(unexpected) - 1} more)" if len(unexpected) > 1 else ""
        raise CheckpointError(f"{ck.tensors[unexpected[0]].file.name}: unexpected tensor {unexpected[0]!r}{more_txt}: "
                              f"the checkpoint does not match {cfg_file.name}")
    if unexpected:
        notes.append(f"{len(unexpected)} unexpected tensors ignored (strict=False), e.g. {unexpected[0]!r}")

    # 2. resident or streamed
    n = cfg.num_hidden_layers
    per_layer = [0] * n
    for name, p in plans.items():
        if name.startswith("layers."):
            per_layer[int(name.split(".", 2)[1])] += p.compute_bytes
    part_bytes = {k: sum(plans[x].compute_bytes for x in names) for k, names in parts.items()}
    compute = sum(p.compute_bytes for p in plans.values())
    resident_base = compute - sum(per_layer) - sum(part_bytes.values())
    budget = parse_bytes(budget_bytes) if isinstance(budget_bytes, str) else budget_bytes
    budget = int(budget) if budget is not None else memory_budget(device)
    streamed = compute > budget if stream is None else bool(stream)
    capacity = n
    dropped: set[str] = set()
    if streamed:
        capacity = max(1, min(n, (budget - resident_base) // max(1, max(per_layer, default=1))))
        room = budget - resident_base - capacity * max(per_layer, default=0)
        for part, size in list(part_bytes.items()):
            if size > room:
                notes.append(f"{part}: not loaded: {size / 2**20:.1f} MiB does not fit the memory budget beside "
                             f"the streamed layers")
                names = parts.pop(part)
                dropped |= names
                _detach_part(model, part, names)
            else:
                room -= size

    # 3. materialize the resident tensors; optional parts are rebuilt for real (their buffers)
    for part, names in parts.items():
        _detach_part(model, part, names)
    for name, child in model.named_children():
        if name in ("rotary", "hasher"):
            child.to(device)
        elif not (name == "layers" and streamed):
            child.to_empty(device=device)
    for part in parts:
        _attach_part(model, part, cfg)
        for name, child in model.named_children():
            if name in ("mtp", "vision", "aligner"):
                cast_params(child, dtype)
                child.to(device)
    layer_names = {k for k in plans if k.startswith("layers.")}
    keep = {k: p for k, p in plans.items() if not (streamed and k in layer_names)}
    keep = {k: p for k, p in keep.items() if k not in dropped}
    fill(model, keep, ck, device, spec.block)
    if streamed:
        layer_plans = {k: p for k, p in plans.items() if k in layer_names}
        model.set_layer_source(LayerStreamer(cfg, ck, layer_plans, device, dtype, spec.block, capacity,
                                             on_layer=progress))
    filled = set(keep)
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if t.device.type == "meta" and not (streamed and name.startswith("layers.")):
            raise RuntimeError(f"internal: {name} was not materialized")  # a module grew a tensor we do not fill
    missing = [k for k in model.state_dict() if k not in filled and not k.startswith(("rotary.", "hasher."))
               and not (streamed and k.startswith("layers."))]
    if missing:
        raise RuntimeError(f"internal: {missing[0]} was not filled from the checkpoint")
    model.requires_grad_(False)
    model.eval()
    tok = path / "tokenizer.json"
    if tok.exists():
        from tokenizers import Tokenizer

        try:
            model.bind_tokenizer(Tokenizer.from_file(str(tok)))
        except Exception as e:
            raise CheckpointError(f"{tok}: {e}") from None
    model.source_path = str(path)
    model.release = ReleaseInfo(
        path=str(path), quant=spec, shards=len(ck.files), tensors=len(ck.tensors),
        stored_bytes=sum(i.nbytes for i in ck.tensors.values()), compute_bytes=compute, budget_bytes=budget,
        streamed=streamed, resident_layers=capacity, dtype=str(dtype).replace("torch.", ""), notes=notes)
    return model


# ------------------------------------------------------------------------------------------------
# Writing
# ------------------------------------------------------------------------------------------------

def _model_tensors(model) -> Iterator[tuple[str, torch.Tensor]]:
    """All persistent tensors in release order (embed, layers, norm, head, mtp, vision); a streamed model
    is read one layer at a time."""
    sd = model.state_dict()
    top = [(k, v) for k, v in sd.items() if not k.startswith("layers.")]
    first = [kv for kv in top if kv[0].startswith("embed.")]
    yield from first
    for i in range(model.cfg.num_hidden_layers):
        blk = model.layer(i) if getattr(model, "streamer", None) is not None else model.layers[i]
        for k, v in blk.state_dict().items():
            yield f"layers.{i}.{k}", v
        if blk.engram is not None and isinstance(blk.engram.embed, MappedEngramTable):
            for k, v in blk.engram.embed.full().items():
                yield f"layers.{i}.engram.embed.{k}", v
    yield from (kv for kv in top if not kv[0].startswith("embed."))


def _engram_fp8(w: torch.Tensor, ue8m0: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Engram table rows -> (fp8 e4m3 [rows, d], fp32 scale [rows, d/32]), one scale per 32 channels."""
    b = w.float().unflatten(-1, (-1, ENGRAM_BLOCK))
    s = b.abs().amax(-1).clamp_min(1e-12) / FP8_MAX
    if ue8m0:
        s = pow2_ceil(s)
    q = (b / s.unsqueeze(-1)).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).flatten(-2)
    return q, s


def _ue8m0_bytes(s: torch.Tensor) -> torch.Tensor:
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
    if _EXPERT.search(name) and spec.expert_dtype == "fp4":
        if t.shape[-1] % MXFP4_BLOCK:
            raise ValueError(f"{name}: MXFP4 needs the input dim divisible by {MXFP4_BLOCK}, got {list(t.shape)}; "
                             f"write with mxfp4_experts=False")
        packed, e = quantize_mxfp4_weight(t)
        return {name: packed, scale: e.view(torch.float8_e8m0fnu)}
    fp8_here = (spec.expert_dtype == "fp8" and _EXPERT.search(name)) or (fp8_linear and _FP8_LINEAR.search(name))
    if spec.fp8 and t.ndim == 2 and fp8_here:
        ue8m0 = spec.scale_fmt == "ue8m0"
        q, s = quantize_fp8_weight(t, spec.block, ue8m0=ue8m0)
        return {name: q, scale: _ue8m0_bytes(s) if ue8m0 else s.float().contiguous()}
    if spec.fp8 and fp8_linear and _ENGRAM_TABLE.search(name) and t.shape[-1] % ENGRAM_BLOCK == 0:
        q, s = _engram_fp8(t, spec.scale_fmt == "ue8m0")
        return {name: q, scale: s}
    return {name: t.to(dense_dtype or t.dtype).contiguous()}


def write_release(model, path: str | Path, *, fp8: bool = True, mxfp4_experts: bool = True,
                  max_shard_bytes: int = 2 * _GIB, scale_fmt: str = "ue8m0", dense_dtype: torch.dtype | None = None,
                  tokenizer: bool = True) -> Path:
    """Write `model` in the release layout: composite config.json with quantization_config, sharded
    safetensors (at most `max_shard_bytes` each, a tensor's scale in the same shard) and the index.

    `fp8`: FP8 E4M3 linear weights with 128x128 block scales (`scale_fmt` "ue8m0" or "fp32");
    `mxfp4_experts`: routed experts as MXFP4 (else FP8 when `fp8`); `dense_dtype`: cast the remaining
    non-fp32-critical tensors (e.g. torch.bfloat16, as released); default keeps the model's dtype.
    """
    if scale_fmt not in ("ue8m0", "fp32"):
        raise ValueError(f"scale_fmt must be 'ue8m0' or 'fp32', got {scale_fmt!r}")
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    for old in path.glob("model*.safetensors"):
        old.unlink()
    spec = QuantSpec("fp8", "e4m3", scale_fmt, 128, "fp4" if mxfp4_experts else "fp8") if (fp8 or mxfp4_experts) \
        else QuantSpec()
    cfg = dataclasses.replace(model.cfg, quantization_config=spec.to_config())
    cfg.save_json(path / "config.json", composite=True)

    shards: list[dict[str, torch.Tensor]] = []
    cur: dict[str, torch.Tensor] = {}
    cur_bytes = 0
    written: set[str] = set()
    for name, t in _model_tensors(model):
        if name in written:  # e.g. engram.embed.scale, already written with its FP8 table
            continue
        group = release_tensors(name, t, spec, dense_dtype, fp8_linear=fp8)
        nbytes = sum(x.numel() * x.element_size() for x in group.values())
        if cur and cur_bytes + nbytes > max_shard_bytes:
            shards.append(cur)
            cur, cur_bytes = {}, 0
        cur.update(group)
        cur_bytes += nbytes
        written.update(group)
    if cur:
        shards.append(cur)
    weight_map, total = {}, 0
    for k, tensors in enumerate(shards):
        fname = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(tensors, str(path / fname), metadata={"format": "pt"})
        for n, x in tensors.items():
            weight_map[n] = fname
            total += x.numel() * x.element_size()
    (path / INDEX).write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2)
                              + "\n")
    if tokenizer and getattr(model, "tokenizer", None) is not None:
        model.tokenizer.save(str(path / "tokenizer.json"))
    return path


# ------------------------------------------------------------------------------------------------
# CLI: python -m model.release export --weights data/weights/tiny --out DIR | info DIR
# ------------------------------------------------------------------------------------------------

def describe(path: str | Path) -> str:
    """A short summary of a release directory, read from its headers only (no tensor data)."""
    path = Path(path)
    cfg = V41Config.from_json(path / "config.json")
    spec = QuantSpec.parse(cfg.quantization_config, path / "config.json")
    ck = ReleaseCheckpoint(path)
    kinds: dict[str, int] = {}
    for i in ck.tensors.values():
        kinds[i.dtype] = kinds.get(i.dtype, 0) + i.nbytes
    lines = [f"{path}: {cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, {len(ck.tensors)} tensors in "
             f"{len(ck.files)} shard(s), {sum(kinds.values()) / 2**20:.1f} MiB",
             f"quantization: {spec.to_config() or 'none (dense)'}"]
    lines += [f"  {d:8} {b / 2**20:10.2f} MiB" for d, b in sorted(kinds.items(), key=lambda kv: -kv[1])]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m model.release", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser("export", help="write a checkpoint in the release layout")
    ex.add_argument("--weights", required=True, help="checkpoint directory to read (any layout model.load reads)")
    ex.add_argument("--out", required=True)
    ex.add_argument("--no-fp8", action="store_true", help="keep linear weights dense")
    ex.add_argument("--no-mxfp4", action="store_true", help="routed experts as FP8 (or dense with --no-fp8)")
    ex.add_argument("--scale-fmt", choices=("ue8m0", "fp32"), default="ue8m0")
    ex.add_argument("--max-shard-mb", type=float, default=2048.0)
    inf = sub.add_parser("info", help="summarise a release directory")
    inf.add_argument("path")
    a = ap.parse_args(argv)
    try:
        if a.cmd == "info":
            print(describe(a.path))
            return 0
        from .native import load

        m = load(a.weights, device="cpu")
        out = write_release(m, a.out, fp8=not a.no_fp8, mxfp4_experts=not a.no_mxfp4, scale_fmt=a.scale_fmt,
                            max_shard_bytes=int(a.max_shard_mb * 2**20))
        print(describe(out))
        return 0
    except (CheckpointError, ConfigError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
