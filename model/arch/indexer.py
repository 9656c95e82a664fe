"""The CSA2 hierarchical indexer: which compressed entries each query reads.

Follows docs/design/equations.md §5-6 (and §13 for its training signal).
- Keys are owned by KV-source layers: k = fp4(rope(k_norm(wk(latent)))), one per compressed group,
  shared by every index source of the group.
- Each index source has its own queries and head weights:
  I[t, s] = sum_h w_h(x_t) * relu(q_h(t) . k_s) / sqrt(d_i), with w = weights_proj(x) / sqrt(H_i),
  and q = fp4(rope(wq_b(q_norm(wq_a(x))))).
- Visibility by absolute position: entry s is visible to a query at t iff s < (t+1)//ratio.
- Level 1 (candidate source only): block scores = max over `candidate_block_size` consecutive
  entries; the block holding the query's newest visible entry is pinned; the top
  `candidate_topk_blocks` blocks form the pool. Later index sources score only inside the pool.
- Level 2: top `index_topk` entries; picks with score -inf become -1 (never a real entry).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..config import V41Config
from ..quant import fake_index
from .norm import RMSNorm
from .rope import apply_rope

NEG_INF = float("-inf")


class Indexer(torch.nn.Module):
    def __init__(self, cfg: V41Config, layer_id: int, owns_keys: bool):
        super().__init__()
        self.n_heads, self.head_dim = cfg.index_n_heads, cfg.index_head_dim
        self.wq_b = torch.nn.Linear(cfg.q_lora_rank, self.n_heads * self.head_dim, bias=False)
        self.weights_proj = torch.nn.Linear(cfg.hidden_size, self.n_heads, bias=False)
        if owns_keys:
            self.wk = torch.nn.Linear(cfg.head_dim, self.head_dim, bias=False)
            self.k_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)

    def keys(self, latent: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """Pre-RoPE latents [B, G, d] -> quantised index keys [B, G, d_i]."""
        return fake_index(apply_rope(self.k_norm(self.wk(latent)), cos, sin))

    def queries(self, q_res: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, _ = q_res.shape
        q = self.wq_b(q_res).view(b, s, self.n_heads, self.head_dim)
        return fake_index(apply_rope(q, cos, sin))

    def scores(self, x: torch.Tensor, q_res: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
               keys: torch.Tensor) -> torch.Tensor:
        """Raw index scores [B, S, T_c] (no visibility mask yet)."""
        q = self.queries(q_res, cos, sin).float()
        w = self.weights_proj(x).float() * self.n_heads ** -0.5
        k = keys.float()
        if q.requires_grad or k.requires_grad:  # training: one einsum keeps autograd simple
            sc = torch.einsum("bshd,btd->bsht", q, k).relu() * self.head_dim ** -0.5
            return (sc * w.unsqueeze(-1)).sum(dim=2)
        out = None  # inference: accumulate head by head, never holding [B, S, H, T]
        for h in range(self.n_heads):
            term = torch.matmul(q[:, :, h], k.transpose(1, 2)).relu_() * (w[:, :, h:h + 1] * self.head_dim ** -0.5)
            out = term if out is None else out.add_(term)
        return out


def visible_counts(positions: torch.Tensor, ratio: int) -> torch.Tensor:
    """[S] -> number of compressed entries visible to each query: (t+1)//ratio."""
    return (positions.long() + 1) // ratio


def mask_visible(scores: torch.Tensor, positions: torch.Tensor, ratio: int) -> torch.Tensor:
    t = torch.arange(scores.shape[-1], device=scores.device)
    return scores.masked_fill(t.view(1, 1, -1) >= visible_counts(positions, ratio).view(1, -1, 1), NEG_INF)


def candidate_pool(scores: torch.Tensor, positions: torch.Tensor, ratio: int, topk_blocks: int,
                   block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Level 1. scores [B, S, T] (visibility applied) -> (pool mask [B, S, T], block scores [B, S, nb])."""
    width = scores.shape[-1]
    bs = F.pad(scores, (0, -width % block), value=NEG_INF).unflatten(-1, (-1, block)).amax(dim=-1)
    nb = bs.shape[-1]
    newest = (visible_counts(positions, ratio) - 1).div(block, rounding_mode="floor")  # -1 -> nothing pinned
    pinned = torch.arange(nb, device=scores.device).view(1, 1, -1) == newest.view(1, -1, 1)
    ranked = bs.masked_fill(pinned, float("inf"))
    values, indices = stable_topk(ranked, min(topk_blocks, nb))
    keep = torch.zeros_like(ranked, dtype=torch.bool).scatter_(-1, indices, values > NEG_INF)
    return keep.repeat_interleave(block, dim=-1)[..., :width], bs


def select_topk(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Level 2. -> (indices [B, S, min(k, T)] with -1 for no pick, their scores)."""
    k = min(k, scores.shape[-1])
    if k == 0:
        empty = scores.new_zeros((*scores.shape[:-1], 0))
        return empty.long(), empty
    values, indices = stable_topk(scores, k)
    idx = torch.where(values > NEG_INF, indices, torch.full_like(indices, -1))
    return idx, values


def stable_topk(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top k along the last dim; among equal scores the lower index wins. `torch.topk` breaks ties in an
    order that depends on the tensor's width, so entries that a query cannot see yet (masked -inf,
    but present in a multi-row forward) could change which of two tied entries it picks: future
    rows would change past logits (speculative verification depends on this never happening).
    Linear time (two top-k passes and a cumulative sum), not a full sort: contexts can be long."""
    k = min(k, scores.shape[-1])
    kth = scores.topk(k, dim=-1).values[..., -1:]
    above = scores > kth
    ties = scores == kth
    need = k - above.sum(-1, keepdim=True)
    chosen = above | (ties & (ties.cumsum(-1) <= need))
    keyed = torch.where(chosen, scores, torch.full_like(scores, float("-inf")))
    # order by score; ties (and the -inf picks) by index, via a second key on the chosen set only
    idx = torch.arange(scores.shape[-1], device=scores.device).expand_as(scores)
    rank = torch.where(chosen, idx, torch.full_like(idx, scores.shape[-1]))
    order = rank.topk(k, dim=-1, largest=False).indices                  # chosen positions, ascending index
    vals = keyed.gather(-1, order)
    resort = vals.sort(dim=-1, descending=True, stable=True).indices      # only k elements: cheap
    return vals.gather(-1, resort), order.gather(-1, resort)


def topk_mask(idx: torch.Tensor, width: int) -> torch.Tensor:
    """Selected indices (-1 = none) -> bool mask [B, S, width]."""
    m = torch.zeros((*idx.shape[:-1], width + 1), dtype=torch.bool, device=idx.device)
    m.scatter_(-1, torch.where(idx < 0, torch.full_like(idx, width), idx), True)
    return m[..., :width]


def indexer_kl(attn_probs: torch.Tensor, index_scores: torch.Tensor, support: torch.Tensor) -> torch.Tensor:
    """KL(p || softmax(I)) over `support` (§3.3): p = main attention summed over heads, L1-normalised.

    attn_probs [B, S, T] (detached), index_scores [B, S, T], support [B, S, T] bool.
    """
    p = attn_probs.masked_fill(~support, 0.0)
    total = p.sum(-1, keepdim=True)
    rows = total.squeeze(-1) > 0
    p = p / total.clamp_min(1e-20)
    logq = torch.log_softmax(index_scores.masked_fill(~support, NEG_INF), dim=-1)
    kl = torch.where(support & (p > 0), p * (torch.log(p.clamp_min(1e-20)) - logq), torch.zeros_like(p)).sum(-1)
    return kl[rows].mean() if bool(rows.any()) else index_scores.sum() * 0.0
