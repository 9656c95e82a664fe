"""Optional parts (the DSpark drafter, the vision tower) attached to a model being loaded, as its checkpoint has them.

Follows docs/design/checkpoints.md §4 (drafter, `mtp.*`; vision tower, aligner and image markers,
`vision.*`, `aligner.*`, `image_*`). A part is attached when the checkpoint holds its tensors and the
config describes it (policy.py names both); what cannot be attached is noted, never raised, so a part
never stops the backbone from loading (a strict native load still refuses the tensors left over).
"""

from __future__ import annotations

from typing import Iterable

import torch

from ..arch.backbone import Backbone
from ..arch.drafter import Drafter
from ..arch.vision import attach_vision
from ..config import V41Config
from .policy import OPTIONAL_PARTS, part_wanted


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
    if hasattr(model, "aligner"):
        model.aligner = None
    for n in names:
        if "." not in n and n in model._parameters:  # the image_start/end/newline vectors
            model._parameters[n] = None


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
