"""The DSpark drafter: its modules and its parallel forward (architecture only).

Follows docs/design/architecture.md §1 (config fields), docs/design/checkpoints.md §4 (tensor names) and
docs/design/equations.md §12 (DSpark). The drafter is registered on the target as `model.mtp` (Backbone.set_part),
so its tensors are `mtp.{i}.*`:
- context: the target's `dspark_target_layer_ids` taps (attention inputs, mean over mHC streams)
  are concatenated and projected, h_ctx = main_norm(main_proj([h_k1; h_k2; ...])), one row per
  context position; every draft layer turns them into extra K = V rows with its own wkv/kv_norm;
- block input: the anchor token (the last token the target emitted, not yet in its cache) and
  `dspark_block_size - 1` noise tokens at the next positions; row j predicts the token AT its own
  position anchor + j (j >= 1), so one block drafts at most `dspark_block_size - 1` tokens;
- attention: every block row sees every block row (bidirectional) and the last `sliding_window`
  context rows (all before the anchor); draft layers are window-only (ratio 0), with mHC and an
  MoE of `dspark_n_routed_experts` (top `dspark_num_experts_per_tok`) plus the shared expert;
- exit: the last block's collapse (pre-norm h_j) -> its own `norm` -> the target's frozen head;
  the Markov head adds b(x_{j-1}) = head(embed[x_{j-1}]) left to right while sampling, and the
  confidence head c_j = sigmoid(proj([h_j; embed[x_{j-1}]])) estimates P(draft j accepted |
  drafts before it accepted).
Drafting and verification are model/inference/speculative.py; training is lab/training/drafter.py.
"""

from __future__ import annotations

import torch

from ..config import V41Config
from ..errors import InputError
from ..layer_map import drafter_spec
from .backbone import Backbone
from .block import Block
from .mhc import collapse, expand, hc_mixes, one_hot_pre
from .norm import RMSNorm
from .rope import Rotary, apply_rope

NEG_INF = float("-inf")


class MarkovHead(torch.nn.Module):
    """Rank-r bias on the next draft token from the previous one: b(x_prev) = head(embed[x_prev])."""

    def __init__(self, cfg: V41Config):
        super().__init__()
        self.embed = torch.nn.Embedding(cfg.vocab_size, cfg.dspark_markov_rank)
        self.head = torch.nn.Linear(cfg.dspark_markov_rank, cfg.vocab_size, bias=False)

    def forward(self, prev: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """prev ids [...] -> (bias [..., V] fp32, embedding [..., r])."""
        e = self.embed(prev)
        return self.head(e).float(), e


class ConfidenceHead(torch.nn.Module):
    """c_j = sigmoid(proj([h_j; markov_embed[x_{j-1}]])); returns the logit."""

    def __init__(self, cfg: V41Config):
        super().__init__()
        self.proj = torch.nn.Linear(cfg.hidden_size + cfg.dspark_markov_rank, 1)

    def forward(self, h: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        return self.proj(torch.cat([h.float(), e.float()], -1)).squeeze(-1)


class DraftBlock(Block):
    """One draft layer: the backbone block's weights and mHC, with the drafter's attention mask.

    Layer id = num_hidden_layers + i, window-only (layer_map.drafter_spec). Block 0 also owns
    main_proj / main_norm (context projection); the last block owns the heads and the exit norm."""

    def __init__(self, cfg: V41Config, index: int):
        super().__init__(cfg, drafter_spec(cfg, cfg.num_hidden_layers + index), cfg.dspark_n_routed_experts,
                         cfg.dspark_num_experts_per_tok)
        self.index = index
        d = cfg.hidden_size
        if index == 0:
            self.main_proj = torch.nn.Linear(len(cfg.dspark_target_layer_ids) * d, d, bias=False)
            self.main_norm = RMSNorm(d, cfg.rms_norm_eps)
        if index == cfg.num_nextn_predict_layers - 1:
            self.markov_head = MarkovHead(cfg)
            self.confidence_head = ConfidenceHead(cfg)
            self.norm = RMSNorm(d, cfg.rms_norm_eps)

    def _site(self, streams: torch.Tensor, site: str):
        cfg = self.cfg
        return hc_mixes(streams, getattr(self, f"hc_{site}_fn"), getattr(self, f"hc_{site}_base"),
                        getattr(self, f"hc_{site}_scale"), cfg.hc_sinkhorn_iters, cfg.hc_eps, cfg.rms_norm_eps)

    def attend(self, x: torch.Tensor, ctx_h: torch.Tensor, ctx_mask: torch.Tensor, ctx_rope, rope) -> torch.Tensor:
        """x [N, S, D] block rows; ctx_h [N, C, D] context rows (mask [N, C]); K = V, sink column."""
        at = self.attn
        n, s, _ = x.shape
        h, d = at.n_heads, at.head_dim
        cos, sin = rope
        q = apply_rope(at.wq_b(at.q_norm(at.wq_a(x))).view(n, s, h, d), cos, sin)
        kv_blk = apply_rope(at.kv_norm(at.wkv(x)), cos, sin)
        kv_ctx = apply_rope(at.kv_norm(at.wkv(ctx_h)), *ctx_rope)
        kv = torch.cat([kv_ctx, kv_blk], 1)                                     # [N, C+S, d]
        z = torch.einsum("nshd,ntd->nsht", q, kv).float() * d ** -0.5
        visible = torch.cat([ctx_mask, ctx_mask.new_ones(n, s)], 1)            # block rows: bidirectional
        z = z.masked_fill(~visible.view(n, 1, 1, -1), NEG_INF)
        z = torch.cat([z, at.attn_sink.float().view(1, 1, h, 1).expand(n, s, h, 1)], -1)
        p = torch.softmax(z, -1)[..., :-1].to(q.dtype)                         # the sink only enlarges the sum
        out = apply_rope(torch.einsum("nsht,ntd->nshd", p, kv), cos, sin, inverse=True)
        grouped = out.reshape(n, s, at.o_groups, -1)
        w = at.wo_a.weight.view(at.o_groups, -1, grouped.shape[-1])
        return at.wo_b(torch.einsum("bsgi,goi->bsgo", grouped, w).flatten(2))

    def forward(self, streams: torch.Tensor, pre_mix: torch.Tensor, ctx_h: torch.Tensor, ctx_mask: torch.Tensor,
                ctx_rope, rope, routings: list | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.attn_norm(collapse(streams, pre_mix))
        a = self._site(streams, "attn")
        streams = expand(self.attend(x, ctx_h, ctx_mask, ctx_rope, rope), streams, a.post, a.comb)
        f = self._site(streams, "ffn")
        out, routing = self.ffn(self.ffn_norm(collapse(streams, a.pre)))
        if routings is not None:
            routings.append(routing.indices)
        return expand(out, streams, f.post, f.comb), f.pre


class Drafter(torch.nn.Module):
    """The DSpark drafter: blocks registered as "0", "1", ... so `model.mtp = Drafter(cfg)` gives
    the native names mtp.{i}.*; embedding and head are the target's (passed in, never copied)."""

    def __init__(self, cfg: V41Config):
        super().__init__()
        if cfg.num_nextn_predict_layers < 1:
            raise InputError("this config has no drafter (num_nextn_predict_layers = 0)")
        self.cfg = cfg
        for i in range(cfg.num_nextn_predict_layers):
            self.add_module(str(i), DraftBlock(cfg, i))
        self.rotary = Rotary(cfg)  # buffers are not persistent: no tensors in the state dict

    @property
    def blocks(self) -> list[DraftBlock]:
        return [getattr(self, str(i)) for i in range(self.cfg.num_nextn_predict_layers)]

    @property
    def first(self) -> DraftBlock:
        return getattr(self, "0")

    @property
    def last(self) -> DraftBlock:
        return getattr(self, str(self.cfg.num_nextn_predict_layers - 1))

    @property
    def block_size(self) -> int:
        return self.cfg.dspark_block_size

    @property
    def max_draft(self) -> int:
        return self.cfg.dspark_block_size - 1

    @property
    def target_layers(self) -> list[int]:
        return list(self.cfg.dspark_target_layer_ids)

    def init_weights(self, target: Backbone | None = None, seed: int = 0) -> "Drafter":
        """Fresh weights: small normal matrices, unit norms (the exit norm copies the target's),
        zero biases; the Markov head's output and the confidence head start at zero (b = 0, c = 0.5)."""
        g = torch.Generator().manual_seed(seed)
        std = self.cfg.initializer_range
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("norm.weight") or name.endswith("scale"):
                    p.fill_(1.0)
                elif name.endswith((".bias", ".bias_vl", "attn_sink", "_base")) or "confidence_head" in name \
                        or name.endswith("markov_head.head.weight"):
                    p.zero_()
                else:
                    fan_in = p.shape[-1] if p.ndim > 1 else 1
                    p.copy_(torch.randn(p.shape, generator=g) * min(std, fan_in ** -0.5))
            if target is not None:
                self.last.norm.weight.copy_(target.norm.weight)
        return self

    # ---------------------------------------------------------------------------------------------
    def project_context(self, taps: dict[int, torch.Tensor] | torch.Tensor) -> torch.Tensor:
        """Target taps (layer -> [..., D], or already concatenated [..., L*D]) -> h_ctx [..., D]."""
        if isinstance(taps, dict):
            taps = torch.cat([taps[i].float() for i in self.target_layers], -1)
        b0 = self.first
        return b0.main_norm(b0.main_proj(taps.to(b0.main_proj.weight.dtype)))

    def hidden(self, target: Backbone, anchor: torch.Tensor, anchor_pos: torch.Tensor, ctx_h: torch.Tensor,
               ctx_pos: torch.Tensor, ctx_mask: torch.Tensor, routings: list | None = None) -> torch.Tensor:
        """One parallel pass over N blocks -> pre-norm hidden [N, block_size, D].

        anchor [N] ids, anchor_pos [N]; ctx_h [N, C, D] at positions ctx_pos [N, C] (mask [N, C])."""
        cfg = self.cfg
        n, s = anchor.shape[0], self.block_size
        ids = torch.full((n, s), cfg.dspark_noise_token_id, dtype=torch.long, device=anchor.device)
        ids[:, 0] = anchor
        h = target.embed(ids)
        streams = h.unsqueeze(2).expand(-1, -1, cfg.hc_mult, -1).contiguous()
        pre = one_hot_pre(streams)
        pos = anchor_pos.view(-1, 1) + torch.arange(s, device=anchor.device)
        rope = self.rotary.cos_sin(pos, "main")
        ctx_rope = self.rotary.cos_sin(ctx_pos, "main")
        for blk in self.blocks:
            streams, pre = blk(streams, pre, ctx_h, ctx_mask, ctx_rope, rope, routings)
        return collapse(streams, pre)

    def logits(self, target: Backbone, h: torch.Tensor) -> torch.Tensor:
        """Parallel logits U_j = head(norm(h_j)) through the target's (frozen) head."""
        return target.head(self.last.norm(h)).float()


def attach_drafter(target: Backbone, seed: int = 0) -> Drafter:
    """Give `target` a freshly initialised drafter (model.mtp) and return it."""
    d = Drafter(target.cfg).init_weights(target, seed).to(target.device)
    target.set_part("mtp", d)
    return d
