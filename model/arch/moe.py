"""DeepSeekMoE as in V4.1: one shared expert plus top-k of n routed SwiGLU experts.

Follows docs/design/equations.md §9.
- Router scores: sqrt(softplus(x W^T / gate_temp)) ("sqrtsoftplus"; sigmoid/softmax also accepted).
- Selection: top-k of (scores + bias); image-span tokens use `bias_vl` instead of `bias`. The bias
  steers selection only (aux-loss-free balancing); it is updated outside gradient descent.
- Weights: the unbiased scores of the chosen experts, normalised (+1e-20) and times
  `routed_scaling_factor` (1.5).
- Experts: w2(silu(clamp(w1 x, max=L)) * clamp(w3 x, -L, L)), L = swiglu_limit.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..config import V41Config
from ..fusion import fusable


class Expert(torch.nn.Module):
    def __init__(self, dim: int, inter: int, limit: float):
        super().__init__()
        self.w1 = torch.nn.Linear(dim, inter, bias=False)
        self.w2 = torch.nn.Linear(inter, dim, bias=False)
        self.w3 = torch.nn.Linear(dim, inter, bias=False)
        self.limit = limit

    def forward(self, x: torch.Tensor, weight: torch.Tensor | None = None) -> torch.Tensor:
        return self.w2(swiglu(self.w1(x), self.w3(x), self.limit, weight).to(x.dtype))


@fusable(dynamic=True)
def swiglu(gate: torch.Tensor, up: torch.Tensor, limit: float, weight: torch.Tensor | None = None) -> torch.Tensor:
    """silu(clamp(gate, max=L)) * clamp(up, -L, L) [* routing weight], in fp32."""
    gate, up = gate.float(), up.float()
    if limit > 0:
        up = up.clamp(-limit, limit)
        gate = gate.clamp(max=limit)
    y = F.silu(gate) * up
    return y if weight is None else weight * y


@dataclass
class Routing:
    logits: torch.Tensor   # [N, E] router logits / gate_temp, before the score function
    scores: torch.Tensor   # [N, E] after the score function
    indices: torch.Tensor  # [N, k] chosen experts, by descending biased score
    weights: torch.Tensor  # [N, k] routing weights (normalised, scaled)


def score_fn(name: str, logits: torch.Tensor) -> torch.Tensor:
    if name == "sqrtsoftplus":
        return torch.sqrt(F.softplus(logits))
    if name == "sigmoid":
        return torch.sigmoid(logits)
    return torch.softmax(logits, dim=-1)


class Router(torch.nn.Module):
    def __init__(self, cfg: V41Config, n_experts: int, top_k: int):
        super().__init__()
        self.top_k = top_k
        self.scoring_func = cfg.scoring_func
        self.gate_temp = cfg.gate_temp
        self.norm_topk_prob = cfg.norm_topk_prob
        self.scaling = cfg.routed_scaling_factor
        self.weight = torch.nn.Parameter(torch.empty(n_experts, cfg.hidden_size))
        self.bias = torch.nn.Parameter(torch.zeros(n_experts, dtype=torch.float32), requires_grad=False)
        self.bias_vl = torch.nn.Parameter(torch.zeros(n_experts, dtype=torch.float32), requires_grad=False)

    def forward(self, x: torch.Tensor, image_mask: torch.Tensor | None = None) -> Routing:
        flat = x.reshape(-1, x.shape[-1]).float()
        logits = F.linear(flat, self.weight.float()) / self.gate_temp
        scores = score_fn(self.scoring_func, logits)
        bias = self.bias
        if image_mask is not None and bool(image_mask.any()):
            bias = torch.where(image_mask.reshape(-1, 1), self.bias_vl, self.bias)
        indices = (scores + bias).topk(self.top_k, dim=-1).indices
        weights = scores.gather(1, indices)
        if self.norm_topk_prob and self.top_k > 1:
            weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        return Routing(logits, scores, indices, weights * self.scaling)


class MoE(torch.nn.Module):
    """Routed experts + shared expert. `forward` returns (output, routing)."""

    def __init__(self, cfg: V41Config, n_experts: int | None = None, top_k: int | None = None):
        super().__init__()
        n_experts = n_experts or cfg.n_routed_experts
        top_k = top_k or cfg.num_experts_per_tok
        self.n_experts = n_experts
        self.gate = Router(cfg, n_experts, top_k)
        self.experts = torch.nn.ModuleList(
            Expert(cfg.hidden_size, cfg.moe_intermediate_size, cfg.swiglu_limit) for _ in range(n_experts))
        self.shared_experts = (Expert(cfg.hidden_size, cfg.moe_intermediate_size, cfg.swiglu_limit)
                               if cfg.n_shared_experts else None)

    def forward(self, x: torch.Tensor, image_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, Routing]:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        r = self.gate(x, image_mask)
        y = torch.zeros(flat.shape, dtype=torch.float32, device=x.device)
        # Sort token slots by expert once, then run each expert on its contiguous slice.
        order = r.indices.flatten().argsort(stable=True)
        counts = torch.bincount(r.indices.flatten(), minlength=self.n_experts).tolist()
        tok = order // r.indices.shape[1]
        w = r.weights.flatten()[order].unsqueeze(-1)
        start = 0
        for e, c in enumerate(counts):
            if c == 0:
                continue
            sel = tok[start:start + c]
            y.index_add_(0, sel, self.experts[e](flat[sel], w[start:start + c]).float())
            start += c
        if self.shared_experts is not None:
            y = y + self.shared_experts(flat).float()
        return y.to(x.dtype).view(shape), r

    @torch.no_grad()
    def update_bias(self, indices: torch.Tensor, gamma: float) -> None:
        """Aux-loss-free balancing (§8.1): raise the bias of under-loaded experts, lower over-loaded."""
        load = torch.bincount(indices.flatten(), minlength=self.n_experts).float()
        self.gate.bias += gamma * torch.sign(load.mean() - load)
