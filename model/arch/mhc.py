"""Single-pass mHC: four residual streams mixed by doubly stochastic matrices.

Follows docs/design/equations.md §8. Each sublayer site (attention, FFN) projects the
RMS-normalised flattened streams once, giving (pre, post, comb):
- `pre` (sigmoid + eps) collapses the streams into the sublayer input, but one site LATER: the
  attention site collapses with the previous FFN site's `pre`, the FFN site with the attention's;
  the first layer starts from a one-hot mix on stream 0 and the last FFN `pre` feeds the final norm
  (there is no hc_head);
- `post` (2 sigmoid, in (0, 2)) writes the sublayer output into each stream;
- `comb` (softmax + eps, then Sinkhorn-Knopp: one column normalisation and iters-1 row/column
  pairs) mixes the residual streams: out_k = post_k * y + sum_j comb[j, k] * X_j.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..fusion import fusable
from .norm import rms_unweighted


@dataclass
class Mix:
    pre: torch.Tensor   # [B, S, n]
    post: torch.Tensor  # [B, S, n]
    comb: torch.Tensor  # [B, S, n, n], comb[j, k]: stream j -> output stream k


def sinkhorn(comb_logits: torch.Tensor, iters: int, eps: float) -> torch.Tensor:
    comb = torch.softmax(comb_logits, dim=-1) + eps
    comb = comb / (comb.sum(dim=-2, keepdim=True) + eps)
    for _ in range(iters - 1):
        comb = comb / (comb.sum(dim=-1, keepdim=True) + eps)
        comb = comb / (comb.sum(dim=-2, keepdim=True) + eps)
    return comb


@fusable
def hc_mixes(streams: torch.Tensor, fn: torch.Tensor, base: torch.Tensor, scale: torch.Tensor,
             iters: int, hc_eps: float, norm_eps: float, identity: bool = False) -> Mix:
    """One projection of the normalised flattened streams -> pre, post, comb (all fp32).

    `identity=True` is an ablation: comb becomes the identity (no direct blending; pre and post still mix).
    """
    n = streams.shape[-2]
    flat = rms_unweighted(streams.flatten(start_dim=-2).float(), norm_eps)
    mixes = torch.nn.functional.linear(flat, fn.float())
    pre = torch.sigmoid(mixes[..., :n] * scale[0].float() + base[:n].float()) + hc_eps
    post = 2 * torch.sigmoid(mixes[..., n:2 * n] * scale[1].float() + base[n:2 * n].float())
    logits = (mixes[..., 2 * n:] * scale[2].float() + base[2 * n:].float()).unflatten(-1, (n, n))
    comb = sinkhorn(logits, iters, hc_eps)
    if identity:
        comb = torch.eye(n, device=comb.device, dtype=comb.dtype).expand_as(comb)
    return Mix(pre, post, comb)


@fusable
def collapse(streams: torch.Tensor, pre: torch.Tensor) -> torch.Tensor:
    """[B, S, n, D] x [B, S, n] -> [B, S, D]."""
    return (pre.unsqueeze(-1) * streams.float()).sum(dim=-2).to(streams.dtype)


@fusable
def expand(y: torch.Tensor, residual: torch.Tensor, post: torch.Tensor, comb: torch.Tensor) -> torch.Tensor:
    """out_k = post_k * y + sum_j comb[j, k] * residual_j."""
    if torch.compiler.is_compiling():  # one fused loop; eagerly, one batched matmul is quicker
        mixed = (comb.float().unsqueeze(-1) * residual.float().unsqueeze(-2)).sum(dim=-3)
    else:
        mixed = torch.einsum("bsjk,bsjd->bskd", comb.float(), residual.float())
    return (post.unsqueeze(-1) * y.float().unsqueeze(-2) + mixed).to(residual.dtype)


def one_hot_pre(streams: torch.Tensor) -> torch.Tensor:
    pre = streams.new_zeros(streams.shape[:-1], dtype=torch.float32)
    pre[..., 0] = 1.0
    return pre
