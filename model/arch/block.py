"""One V4.1 layer: [Engram] -> attention site -> MoE site, on four mHC residual streams.

Follows docs/design/equations.md §8 (single-pass mHC order). Engram (on its layers) adds its gated
lookup to the streams before the attention site. Each site computes (pre, post, comb) from the
streams it receives; the site's sublayer input is the collapse with the PREVIOUS site's `pre`.
"""

from __future__ import annotations

import torch

from ..config import V41Config
from ..layer_map import LayerSpec
from .attention import Attention
from .context import Context
from .engram import Engram
from .mhc import collapse, expand, hc_mixes
from .moe import MoE
from .norm import RMSNorm
from .rope import RopeTables


class Block(torch.nn.Module):
    def __init__(self, cfg: V41Config, spec: LayerSpec, n_experts: int | None = None, top_k: int | None = None):
        super().__init__()
        self.cfg = cfg
        self.layer_id = spec.index
        self.attn = Attention(cfg, spec)
        self.ffn = MoE(cfg, n_experts, top_k)
        self.attn_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.ffn_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.engram = Engram(cfg, spec.index) if spec.engram else None
        n = cfg.hc_mult
        mix, flat = (2 + n) * n, n * cfg.hidden_size
        self.hc_attn_fn = torch.nn.Parameter(torch.zeros(mix, flat, dtype=torch.float32))
        self.hc_attn_base = torch.nn.Parameter(torch.zeros(mix, dtype=torch.float32))
        self.hc_attn_scale = torch.nn.Parameter(torch.ones(3, dtype=torch.float32))
        self.hc_ffn_fn = torch.nn.Parameter(torch.zeros(mix, flat, dtype=torch.float32))
        self.hc_ffn_base = torch.nn.Parameter(torch.zeros(mix, dtype=torch.float32))
        self.hc_ffn_scale = torch.nn.Parameter(torch.ones(3, dtype=torch.float32))

    def _mix(self, streams: torch.Tensor, site: str, ctx: Context):
        cfg = self.cfg
        return hc_mixes(streams, getattr(self, f"hc_{site}_fn"), getattr(self, f"hc_{site}_base"),
                        getattr(self, f"hc_{site}_scale"), cfg.hc_sinkhorn_iters, cfg.hc_eps, cfg.rms_norm_eps,
                        identity=ctx.ablation.mhc_identity)

    def forward(self, streams: torch.Tensor, pre_mix: torch.Tensor, ctx: Context, rope: RopeTables,
                hash_ids: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        tr, lid = ctx.trace, self.layer_id
        if self.engram is not None and hash_ids is not None and not ctx.ablation.no_engram:
            live = None if ctx.image_mask is None else ~ctx.image_mask
            streams, gate = self.engram(streams, hash_ids[:, :, self.engram.slot], live)
            if tr is not None:
                tr.engram(lid, gate, hash_ids[:, :, self.engram.slot], streams)
        if lid in ctx.tap_layers:
            ctx.taps[lid] = streams.float().mean(dim=2)
        x = self.attn_norm(collapse(streams, pre_mix))
        if ctx.publish_only:
            self.attn(x, ctx, rope)
            return streams, None
        a = self._mix(streams, "attn", ctx)
        y = self.attn(x, ctx, rope)
        streams = expand(y, streams, a.post, a.comb)
        f = self._mix(streams, "ffn", ctx)
        out, routing = self.ffn(self.ffn_norm(collapse(streams, a.pre)), ctx.image_mask)
        new = expand(out, streams, f.post, f.comb)
        if ctx.collect_routing:
            ctx.routings.append((lid, routing.indices))
        if tr is not None:
            tr.block(lid, a, f, y, out, routing, new)
        return new, f.pre
