"""Writing a model in the release layout (sharded safetensors, FP8 / MXFP4) and summarising such a directory.

Follows docs/design/checkpoints.md §1-3 (native tensor names, fp32 tensors, FP8 block scales, MXFP4 experts).
`write_release` writes the composite config.json with its `quantization_config`, the shards (each tensor's scale in
the same shard as the tensor) and the index, in the layout release.py describes; `describe` reads a directory's
headers only. A streamed model is written one layer at a time.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Iterator

import torch
from safetensors.torch import save_file

from ..config import V41Config
from .quantization import QuantSpec, release_tensors
from .shards import INDEX, ReleaseCheckpoint
from .streaming import GIB, MappedEngramTable


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


def _pack_shards(model, spec: QuantSpec, dense_dtype: torch.dtype | None, fp8_linear: bool,
                 max_shard_bytes: int) -> list[dict[str, torch.Tensor]]:
    """The checkpoint tensors grouped into shards of at most `max_shard_bytes`, a tensor and its scale together."""
    shards: list[dict[str, torch.Tensor]] = []
    cur: dict[str, torch.Tensor] = {}
    cur_bytes = 0
    written: set[str] = set()
    for name, t in _model_tensors(model):
        if name in written:  # e.g. engram.embed.scale, already written with its FP8 table
            continue
        group = release_tensors(name, t, spec, dense_dtype, fp8_linear=fp8_linear)
        nbytes = sum(x.numel() * x.element_size() for x in group.values())
        if cur and cur_bytes + nbytes > max_shard_bytes:
            shards.append(cur)
            cur, cur_bytes = {}, 0
        cur.update(group)
        cur_bytes += nbytes
        written.update(group)
    if cur:
        shards.append(cur)
    return shards


def _save_shards(shards: list[dict[str, torch.Tensor]], path: Path) -> None:
    """model-0000k-of-0000K.safetensors and the index naming each tensor's shard."""
    weight_map, total = {}, 0
    for k, tensors in enumerate(shards):
        fname = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(tensors, str(path / fname), metadata={"format": "pt"})
        for n, x in tensors.items():
            weight_map[n] = fname
            total += x.numel() * x.element_size()
    (path / INDEX).write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2)
                              + "\n")


def write_release(model, path: str | Path, *, fp8: bool = True, mxfp4_experts: bool = True,
                  max_shard_bytes: int = 2 * GIB, scale_fmt: str = "ue8m0", dense_dtype: torch.dtype | None = None,
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

    shards = _pack_shards(model, spec, dense_dtype, fp8, max_shard_bytes)
    _save_shards(shards, path)
    if tokenizer and getattr(model, "tokenizer", None) is not None:
        model.tokenizer.save(str(path / "tokenizer.json"))
    return path


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
