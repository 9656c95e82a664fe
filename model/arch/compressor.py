"""The V4.1 compressor of a KV-source layer: pools `ratio` tokens into one latent.

Follows docs/design/equations.md §4. No overlap and no positional bias (those
were V4's). At ratio r > 1: latent = norm(sum over the r slots of softmax(gate, slot) * kv),
pooling in fp32; at ratio 1 there is no gate: latent = norm(wkv(x)). The latent is returned BEFORE
RoPE, because the indexer keys derive from the unrotated latent. Group g covers positions
[g*r, (g+1)*r) and its entry sits at position g*r; a group becomes visible to a query at position
t once (t+1)//r > g.
"""

from __future__ import annotations

import torch

from ..config import V41Config
from .norm import RMSNorm


class Compressor(torch.nn.Module):
    def __init__(self, cfg: V41Config, ratio: int):
        super().__init__()
        self.ratio = ratio
        self.wkv = torch.nn.Linear(cfg.hidden_size, cfg.head_dim, bias=False)
        self.wgate = torch.nn.Linear(cfg.hidden_size, cfg.head_dim, bias=False) if ratio > 1 else None
        self.norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps)

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Per-row (kv, gate) in fp32; gate is None at ratio 1."""
        if self.wgate is None:
            return self.wkv(x), None
        xf = x.float()
        return (torch.nn.functional.linear(xf, self.wkv.weight.float()),
                torch.nn.functional.linear(xf, self.wgate.weight.float()))

    def pool(self, kv: torch.Tensor, gate: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
        """Rows of whole groups [B, G*r, d] -> pre-RoPE latents [B, G, d]."""
        if gate is None:
            return self.norm(kv)
        b, n, d = kv.shape
        g = n // self.ratio
        kv = kv.view(b, g, self.ratio, d)
        gate = gate.view(b, g, self.ratio, d)
        latent = (kv * gate.softmax(dim=2, dtype=torch.float32)).sum(dim=2)
        return self.norm(latent.to(dtype))

    def forward_full(self, x: torch.Tensor) -> torch.Tensor:
        """All complete groups of a sequence that starts at position 0 (no cache)."""
        kv, gate = self.project(x)
        usable = (x.shape[1] // self.ratio) * self.ratio
        return self.pool(kv[:, :usable], None if gate is None else gate[:, :usable], x.dtype)
