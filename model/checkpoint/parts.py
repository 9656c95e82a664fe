"""Optional parts (the DSpark drafter, the vision tower) attached to a model being loaded, as its checkpoint has them.

Follows docs/design/checkpoints.md §4 (drafter, `mtp.*`; vision tower, aligner and image markers,
`vision.*`, `aligner.*`, `image_*`). A part is attached when the checkpoint holds its tensors and the
config describes it (the tables below name both); what cannot be attached is noted, never raised, so a part
never stops the backbone from loading (a strict native load still refuses the tensors left over).
"""

from __future__ import annotations

from typing import Iterable

import torch

from ..arch.backbone import Backbone
from ..arch.drafter import Drafter
from ..arch.vision import attach_vision
from ..config import V41Config

# What a loader keeps in float32, which tensors belong to optional parts, which it may ignore: policy as data.
# float32 whatever the compute dtype (HF `_keep_in_fp32_modules_strict`): the mHC mixing parameters, the
# attention sinks, the compressor's position bias, the router biases and the Engram table's row scales
KEEP_IN_FP32_PREFIXES = ("hc_",)                       # the last name component starts with one of these
KEEP_IN_FP32_LEAVES = ("attn_sink", "ape")             # the last name component is one of these
KEEP_IN_FP32_SUFFIXES = ("ffn.gate.bias", "ffn.gate.bias_vl", "engram.embed.scale")

# optional parts (Backbone.set_part slots) -> the prefixes of their checkpoint tensor names, and the config
# field that must describe the part for it to be built
OPTIONAL_PARTS: dict[str, tuple[str, ...]] = {"mtp": ("mtp.",), "vision": ("vision.", "aligner.", "image_")}
PART_CONFIG_FIELD = {"mtp": "num_nextn_predict_layers", "vision": "vision_config"}

# children the model computes at construction (RoPE tables, the Engram hasher): never in a checkpoint
COMPUTED_CHILDREN = ("rotary", "hasher")

# checkpoint tensors a native load ignores (HF `_keys_to_ignore_on_load_unexpected`): other exporters' scales
IGNORED_SUFFIXES = ("_scale_inv", ".weight_scale")


def fp32_critical(name: str) -> bool:
    """Tensors the release keeps in float32 (HF `_keep_in_fp32_modules_strict`, docs/design/checkpoints.md §2)."""
    last = name.rsplit(".", 1)[-1]
    return last.startswith(KEEP_IN_FP32_PREFIXES) or last in KEEP_IN_FP32_LEAVES or name.endswith(
        KEEP_IN_FP32_SUFFIXES)


def cast_params(module: torch.nn.Module, dtype: torch.dtype) -> None:
    """Parameters to the compute dtype, fp32-critical ones to float32 (works on the meta device too)."""
    for name, p in module.named_parameters():
        want = torch.float32 if fp32_critical(name) else dtype
        if p.is_floating_point() and p.dtype != want:
            p.data = p.data.to(want)


def part_of(name: str) -> str | None:
    """The optional part a checkpoint tensor belongs to, or None for the backbone."""
    return next((part for part, prefixes in OPTIONAL_PARTS.items() if name.startswith(prefixes)), None)


def part_wanted(cfg, part: str) -> bool:
    """Whether the config describes `part` (a drafter needs num_nextn_predict_layers > 0, vision a vision_config)."""
    value = getattr(cfg, PART_CONFIG_FIELD[part])
    return value > 0 if isinstance(value, int) else value is not None


def attach_part(model: Backbone, part: str, cfg: V41Config) -> None:
    """Attach the drafter (`mtp`) or the vision tower + aligner + image markers (`vision`) to `model`,
    on the device and dtype of its embedding (the meta device for a skeleton)."""
    if part == "mtp":
        with torch.device(model.embed.weight.device):
            model.set_part("mtp", Drafter(cfg))
    else:
        attach_vision(model)


def detach_part(model: Backbone, part: str, names: set[str]) -> None:
    """Drop a part attached by `attach_part`; `names` are its state_dict names."""
    if part == "mtp":
        model.set_part("mtp", None)
        return
    model.set_part("vision", None)
    model.set_part("aligner", None)
    model.set_vectors({n: None for n in names if "." not in n and n in model._parameters})   # the span markers


def attach_parts(model: Backbone, tensor_names: Iterable[str], cfg: V41Config, notes: list[str]) -> dict[str, set[str]]:
    """Attach each optional part whose tensors are among `tensor_names` and which the config describes;
    returns part -> its state_dict names. What cannot be attached is appended to `notes`."""
    tensor_names = list(tensor_names)
    parts: dict[str, set[str]] = {}
    for part, prefixes in OPTIONAL_PARTS.items():
        names = [k for k in tensor_names if k.startswith(prefixes)]
        if not names:
            continue
        label = "/".join(p + "*" for p in prefixes)
        if not part_wanted(cfg, part):
            notes.append(f"{label}: {len(names)} tensors skipped: the config does not describe this part")
            continue
        before = set(model.state_dict())
        try:
            attach_part(model, part, cfg)
        except Exception as e:  # a part that cannot be built for this config must not stop the backbone
            notes.append(f"{label}: {len(names)} tensors skipped: building the {part} part failed ({e})")
            continue
        parts[part] = set(model.state_dict()) - before
    return parts
