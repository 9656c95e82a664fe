"""What a loader keeps in float32, which tensors belong to optional parts, which it may ignore: policy as data.

Follows docs/design/checkpoints.md §2 (the release keeps some tensors in float32, like Hugging Face's
`_keep_in_fp32_modules_strict`) and §1 (native tensor names). The loaders (native.py, release.py,
loader.py) read these tables; they hold no rule of their own about names.
"""

from __future__ import annotations

import torch

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
