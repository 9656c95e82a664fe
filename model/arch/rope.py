"""Partial, interleaved rotary position embedding with two kinds, and its inverse.

Follows docs/design/equations.md §2. Only the trailing `qk_rope_head_dim` channels of a vector rotate,
in adjacent (even, odd) pairs. Two kinds:
- `main`: theta = rope_theta, no scaling; used by window-only layers.
- `compress`: theta = compress_rope_theta with YaRN frequency blending (mscale not applied); used by
  every layer with a compressed branch, its compressed entries and its indexer.
The attention output carries the query's rotation on its rope slice (K = V), and is rotated back
by the inverse rotation so each value's contribution depends only on the relative offset.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..config import V41Config
from ..fusion import fusable


def main_inv_freq(cfg: V41Config) -> torch.Tensor:
    dim = cfg.qk_rope_head_dim
    return 1.0 / (cfg.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))


def compress_inv_freq(cfg: V41Config) -> torch.Tensor:
    """YaRN-blended frequencies of the compress kind (plain frequencies when rope_scaling is not yarn)."""
    dim, base = cfg.qk_rope_head_dim, cfg.compress_rope_theta
    pos_freqs = base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    extrapolation = 1.0 / pos_freqs
    rs = cfg.rope_scaling or {}
    if rs.get("rope_type", rs.get("type")) != "yarn":
        return extrapolation
    factor = float(rs.get("factor", 1.0))
    original = rs.get("original_max_position_embeddings") or cfg.max_position_embeddings
    beta_fast, beta_slow = float(rs.get("beta_fast", 32)), float(rs.get("beta_slow", 1))

    def correction_dim(rotations: float) -> float:
        return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low = max(math.floor(correction_dim(beta_fast)), 0)
    high = min(math.ceil(correction_dim(beta_slow)), dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    keep = 1 - ramp  # 1 = keep the original (extrapolated) frequency
    interpolation = 1.0 / (factor * pos_freqs)
    return interpolation * (1 - keep) + extrapolation * keep


class Rotary(torch.nn.Module):
    """Holds both frequency tables; `cos_sin(positions, kind)` -> ([..., S, rd/2], [..., S, rd/2])."""

    def __init__(self, cfg: V41Config):
        super().__init__()
        self.register_buffer("main_inv_freq", main_inv_freq(cfg), persistent=False)
        self.register_buffer("compress_inv_freq", compress_inv_freq(cfg), persistent=False)

    def cos_sin(self, positions: torch.Tensor, kind: str) -> tuple[torch.Tensor, torch.Tensor]:
        inv = self.main_inv_freq if kind == "main" else self.compress_inv_freq
        freqs = positions.to(torch.float32).unsqueeze(-1) * inv.to(positions.device)
        return freqs.cos(), freqs.sin()


@fusable
def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, inverse: bool = False) -> torch.Tensor:
    """Rotate the trailing 2*cos.shape[-1] channels of x in adjacent pairs.

    x: [B, S, D] or [B, S, H, D]; cos/sin: [S, rd/2] or [B, S, rd/2].
    """
    if inverse:
        sin = -sin
    rd = cos.shape[-1] * 2
    if x.ndim == 4:
        cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)
    nope, rope = x[..., :-rd], x[..., -rd:]
    even, odd = rope[..., 0::2].float(), rope[..., 1::2].float()
    rot = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)
    return torch.cat([nope, rot.to(x.dtype)], dim=-1)



@dataclass
class RopeTables:
    """cos/sin of one forward call's rows for both kinds, plus the Rotary for other positions (entry groups).

    Built once per forward and handed to every layer: a layer reads `of(kind)`, a KV source asks
    `rotary.cos_sin` for its entries' first positions."""

    rotary: Rotary
    main: tuple[torch.Tensor, torch.Tensor]      # cos, sin [S, rd/2]
    compress: tuple[torch.Tensor, torch.Tensor]  # cos, sin [S, rd/2]

    @classmethod
    def at(cls, rotary: Rotary, positions: torch.Tensor) -> "RopeTables":
        return cls(rotary, rotary.cos_sin(positions, "main"), rotary.cos_sin(positions, "compress"))

    def of(self, kind: str) -> tuple[torch.Tensor, torch.Tensor]:
        return self.main if kind == "main" else self.compress
