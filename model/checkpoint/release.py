"""Released DeepSeek-V4.1-Flash checkpoints: the steps that fill a model from sharded FP8 / MXFP4 safetensors.

Follows docs/design/checkpoints.md §1-3 (native tensor names, fp32 tensors, FP8 block scales, MXFP4 experts)
and §5. loader.py reads a directory through these steps when its config has a
`quantization_config` or it has a `model.safetensors.index.json`.

Directory layout (what writer.py writes and these steps read):

    config.json                        composite: {"model_type": "deepseek_v41", "text_config": {...},
                                       "vision_config": {...}, "quantization_config": {...}}
    model.safetensors.index.json       {"metadata": {"total_size": N}, "weight_map": {tensor: shard}}
    model-00001-of-0000K.safetensors   the shards (native tensor names; formats in quantization.py)
    tokenizer.json                     optional

Every tensor is checked against the config from the shard headers before any data is read
(`check_tensors`), so a bad checkpoint fails at once with a `CheckpointError` naming the file and the
tensor. `decide_residency` keeps every layer resident when the model fits the memory budget
(streaming.py); otherwise only embeddings, final norm and head stay resident and the layers are streamed
(streaming.py). `materialize` then allocates what stays resident and `fill_resident` copies the
dequantized tensors in. Loading dequantizes to the compute dtype (fp32-critical tensors stay fp32).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from ..arch.backbone import Backbone
from ..config import V41Config
from ..errors import CheckpointError
from .parts import COMPUTED_CHILDREN, OPTIONAL_PARTS, attach_part, cast_params, detach_part, part_of
from .plans import TensorPlan, fill, plan_checkpoint
from .quantization import QuantSpec
from .shards import INDEX, ReleaseCheckpoint
from .streaming import LayerLoad, LayerStreamer, memory_budget, parse_bytes


@dataclass
class ReleaseInfo:
    """What loading a release checkpoint found and decided (`model.release`)."""

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


@dataclass
class Residency:
    """Resident or streamed, decided from the plans' compute bytes and the memory budget."""

    streamed: bool
    capacity: int              # layers held at once (all when not streamed)
    budget: int
    compute: int               # bytes of every planned tensor at the compute dtype
    dropped: set[str] = field(default_factory=set)   # tensors of optional parts left out for lack of room


def is_release(path: Path, cfg: V41Config) -> bool:
    """A release-layout directory: a quantization_config, or sharded with an index."""
    return bool(cfg.quantization_config) or (path / INDEX).exists()


def _expected(module: torch.nn.Module) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    return {k: (tuple(v.shape), v.dtype) for k, v in module.state_dict().items()}


def check_tensors(model: Backbone, ck: ReleaseCheckpoint, spec: QuantSpec, cfg_file: Path, strict: bool,
                  notes: list[str]) -> dict[str, TensorPlan]:
    """Plans for every tensor `model` (a meta skeleton with its parts) expects, from the headers alone;
    a checkpoint tensor no plan uses is an error when `strict` (optional parts' tensors are skipped)."""
    plans, used = plan_checkpoint(ck, _expected(model), spec, cfg_file)
    unexpected = [k for k in sorted(set(ck.tensors) - used) if part_of(k) is None]
    if unexpected and strict:
        more_txt = f" (and {len(unexpected) - 1} more)" if len(unexpected) > 1 else ""
        raise CheckpointError(f"{ck.tensors[unexpected[0]].file.name}: unexpected tensor {unexpected[0]!r}{more_txt}: "
                              f"the checkpoint does not match {cfg_file.name}")
    if unexpected:
        notes.append(f"{len(unexpected)} unexpected tensors ignored (strict=False), e.g. {unexpected[0]!r}")
    return plans


def decide_residency(model: Backbone, plans: dict[str, TensorPlan], parts: dict[str, set[str]],
                     budget_bytes: int | str | None, stream: bool | None, device: torch.device,
                     notes: list[str]) -> Residency:
    """Stream when the compute bytes exceed the budget (or `stream` says so); a streamed model keeps as
    many layers as fit beside the resident tensors, and drops (from `parts`) a part that does not fit."""
    n = model.cfg.num_hidden_layers
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
    res = Residency(streamed, n, budget, compute)
    if not streamed:
        return res
    largest = max(per_layer, default=0)
    res.capacity = max(1, min(n, (budget - resident_base) // max(1, largest)))
    room = budget - resident_base - res.capacity * largest
    for part, size in list(part_bytes.items()):
        if size > room:
            notes.append(f"{part}: not loaded: {size / 2**20:.1f} MiB does not fit the memory budget beside "
                         f"the streamed layers")
            names = parts.pop(part)
            res.dropped |= names
            detach_part(model, part, names)
        else:
            room -= size
    return res


def materialize(model: Backbone, parts: dict[str, set[str]], device: torch.device, dtype: torch.dtype,
                streamed: bool) -> None:
    """Allocate the resident tensors on `device` (layers stay on meta when streamed); optional parts are
    rebuilt for real, so that the buffers they compute at construction hold values."""
    for part, names in parts.items():
        detach_part(model, part, names)
    for name, child in model.named_children():
        if name in COMPUTED_CHILDREN:
            child.to(device)
        elif not (name == "layers" and streamed):
            child.to_empty(device=device)
    part_children = {p.split(".")[0] for prefixes in OPTIONAL_PARTS.values() for p in prefixes if p.endswith(".")}
    for part in parts:
        attach_part(model, part, model.cfg)
        for name, child in model.named_children():
            if name in part_children:
                cast_params(child, dtype)
                child.to(device)


def fill_resident(model: Backbone, plans: dict[str, TensorPlan], ck: ReleaseCheckpoint, spec: QuantSpec,
                  res: Residency, device: torch.device, dtype: torch.dtype,
                  progress: Callable[[LayerLoad], None] | None) -> set[str]:
    """Copy the resident tensors in; a streamed model gets a LayerStreamer for its layers. Returns the
    names filled."""
    layer_names = {k for k in plans if k.startswith("layers.")}
    keep = {k: p for k, p in plans.items() if not (res.streamed and k in layer_names) and k not in res.dropped}
    fill(model, keep, ck, device, spec.block)
    if res.streamed:
        layer_plans = {k: p for k, p in plans.items() if k in layer_names}
        model.set_layer_source(LayerStreamer(model.cfg, ck, layer_plans, device, dtype, spec.block, res.capacity,
                                             on_layer=progress))
    return set(keep)


def check_complete(model: Backbone, filled: set[str], streamed: bool) -> None:
    """Every resident tensor is materialized and filled (guards a module that grew a tensor we do not fill)."""
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if t.device.type == "meta" and not (streamed and name.startswith("layers.")):
            raise RuntimeError(f"internal: {name} was not materialized")
    computed = tuple(c + "." for c in COMPUTED_CHILDREN)
    missing = [k for k in model.state_dict() if k not in filled and not k.startswith(computed)
               and not (streamed and k.startswith("layers."))]
    if missing:
        raise RuntimeError(f"internal: {missing[0]} was not filled from the checkpoint")


def release_info(path: Path, spec: QuantSpec, ck: ReleaseCheckpoint, res: Residency, dtype: torch.dtype,
                 notes: list[str]) -> ReleaseInfo:
    return ReleaseInfo(path=str(path), quant=spec, shards=len(ck.files), tensors=len(ck.tensors),
                       stored_bytes=sum(i.nbytes for i in ck.tensors.values()), compute_bytes=res.compute,
                       budget_bytes=res.budget, streamed=res.streamed, resident_layers=res.capacity,
                       dtype=str(dtype).replace("torch.", ""), notes=notes)
