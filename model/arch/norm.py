"""RMSNorm computed in fp32 (docs/design/equations.md §1). V4.1 uses eps = 1e-20, as in training."""

from __future__ import annotations

import torch

from ..fusion import fusable


class RMSNorm(torch.nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)


@fusable
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    dtype = x.dtype
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(dtype)


def rms_unweighted(x: torch.Tensor, eps: float) -> torch.Tensor:
    """RMS normalisation with no weight, over the last dim (the mHC input norm)."""
    return x * torch.rsqrt(x.float().square().mean(-1, keepdim=True) + eps).to(x.dtype)
