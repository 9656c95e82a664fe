"""How much of V4.1's smaller cache per token is its layout and how much its number format: the V4-Flash to V4.1
waterfall (lessons/designs.py `v4_to_v41_waterfall`) read at the step that still keeps V4-Flash's formats.

A claim that one cache is N times smaller needs its number formats beside it; this module gives the formats of
both sides and the split. It knows nothing of pages or drawing.
"""

from __future__ import annotations

import dataclasses
import re

from model import V41Config
from model.quant import LATENT_FMT

from .cache_calculator import Store
from .designs import defaults, v4_flash, v4_to_v41_waterfall


@dataclasses.dataclass(frozen=True)
class FormatSplit:
    """How much of V4.1's smaller cache per token is its layout and how much its number format, read off the
    waterfall: the V4.1 layout held in V4-Flash's formats sits between the two end points."""

    v4_bytes: float            # V4-Flash, per token
    same_layout_v4_formats: float  # V4.1's copies and ratios, V4-Flash's entry and key formats
    v41_bytes: float           # V4.1, per token
    v4_formats: str            # e.g. "FP8 + BF16"
    v41_formats: str           # e.g. "FP4"

    @property
    def total(self) -> float:
        return self.v4_bytes / self.v41_bytes

    @property
    def layout(self) -> float:
        return self.v4_bytes / self.same_layout_v4_formats

    @property
    def formats(self) -> float:
        return self.same_layout_v4_formats / self.v41_bytes


def _value_formats(store: Store) -> str:
    """The number formats of a store's values, as its parts name them ("NoPE values (FP8)" -> "FP8")."""
    found = [m.group(1) for p in store.parts if p.kind != "block_scales"
             and (m := re.search(r"\((FP\d+|BF16)\)", p.label))]
    return " + ".join(dict.fromkeys(found)) or "?"


def format_split(cfg: V41Config | None = None) -> FormatSplit:
    """V4-Flash's cache per token against V4.1's (`cfg`'s layout, the release's when None), split at the waterfall's
    step that still keeps V4-Flash's formats (the "ratios" step: V4.1's copies and ratios, V4-Flash's entries)."""
    fall = v4_to_v41_waterfall(cfg)
    middle = next(w for w in fall if w.step == "ratios")
    v4 = v4_flash(defaults("v4-flash"))
    csa = next(s for s in v4.stores if s.name.startswith("CSA latents"))
    return FormatSplit(fall[0].bytes_per_token, middle.bytes_per_token, fall[-1].bytes_per_token,
                       _value_formats(csa), f"FP{LATENT_FMT.element_bits}")
