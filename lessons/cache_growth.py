"""Why a cache is the size it is, per token: the stores that grow with the context, each as stored copies of an
entry of so many bytes, one entry per so many tokens, summed in one line ("356 B x 3 copies / 2 tokens + 356 B x
1 copy / 1 token = 890 B per further token" for DeepSeek-V4.1-Flash).

Reads a design's stores (lessons/cache_calculator.py); knows nothing of windows or persistent caches (they do not grow),
nor of rendering.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .cache_calculator import Design


@dataclass(frozen=True)
class GrowthTerm:
    """One growing store's share of the bytes a further token adds: `copies` stored copies of `entry_bytes` per
    entry, one entry per `ratio` tokens."""
    name: str
    copies: int
    entry_bytes: float
    ratio: int
    batch: int

    @property
    def per_token(self) -> float:
        return self.copies * self.entry_bytes / self.ratio * self.batch


def growth_terms(d: Design, batch: int = 1) -> list[GrowthTerm]:
    """Why a further token costs what it costs: the accelerator stores that grow with the context (no window cap),
    an entry's size summed over its parts; stores kept by the same layers at the same ratio (a layer's latents and
    its index keys) are one term, since one token adds to both."""
    terms: dict[tuple[tuple[int, ...], int], GrowthTerm] = {}
    for s in d.stores:
        if not (s.hbm and s.growth == "tokens" and s.cap is None):
            continue
        size = sum(p.numbers * p.bits / 8 for p in s.parts)
        key = (tuple(s.layers), s.ratio)
        t = terms.get(key)
        terms[key] = (GrowthTerm(s.name, s.copies, size, s.ratio, batch) if t is None else
                      dataclasses.replace(t, name=f"{t.name} + {s.name}", entry_bytes=t.entry_bytes + size))
    return list(terms.values())


def growth_sum(terms: list[GrowthTerm]) -> str:
    """The per-token sum in one line: "356 B x 3 copies / 2 tokens + 356 B x 1 copy / 1 token = 890 B"."""
    if not terms:
        return "Nothing here grows with the context: a further token adds no bytes."
    parts = [f"{t.entry_bytes:,.0f} B x {t.copies} cop{'y' if t.copies == 1 else 'ies'} / "
             f"{t.ratio} token{'' if t.ratio == 1 else 's'}" for t in terms]
    batch = terms[0].batch
    return (" + ".join(parts) + (f", x {batch} sequences" if batch > 1 else "")
            + f" = {sum(t.per_token for t in terms):,.0f} B per further token.")
