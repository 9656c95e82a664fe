"""DSpark: the V4.1 drafter, draft-then-verify decoding with cache rollback, and drafter training.

Follows reference-brief.md §5.8 (config fields), §5.10 (tensor names), §8.3 (verification rules)
and §8.4 (DSpark).

Drafter (`Drafter`, registered on the target as `model.mtp`, so its tensors are `mtp.{i}.*`):
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

Decoding (`speculative_generate`, one sequence): the target verifies [anchor, x_1..x_g] in one
forward through its cache (§8.3: greedy = accept while x_j is the target's argmax; stochastic =
accept with min(1, p/q), else resample from norm(max(0, p - q)); a bonus token when all are
accepted), then `cache.rollback` drops the rejected rows. `start` + `verify_step` run the same
loop one step at a time for the app.

Training (`train_drafter`, target frozen): loss 0.1 CE + 0.9 TV + 1.0 confidence BCE, position
weights exp(-(j-1)/gamma), on continuations the target itself generated (§8.4; see `build_pool`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from ..arch.backbone import Backbone
from ..arch.block import Block
from ..arch.mhc import collapse, expand, hc_mixes, one_hot_pre
from ..arch.norm import RMSNorm
from ..arch.rope import Rotary, apply_rope
from ..config import V41Config
from ..errors import InputError
from .engine import GenerateResult, Sampler, _eos_ids, prefill

NEG_INF = float("-inf")


# ================================================================================================
# The drafter
# ================================================================================================

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

    Layer id = num_hidden_layers + i, so the attention is window-only (ratio 0). Block 0 also owns
    main_proj / main_norm (context projection); the last block owns the heads and the exit norm."""

    def __init__(self, cfg: V41Config, index: int):
        super().__init__(cfg, cfg.num_hidden_layers + index, cfg.dspark_n_routed_experts,
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


# ================================================================================================
# Drafting one block
# ================================================================================================

@dataclass
class DraftContext:
    """The drafter's view of the sequence: projected context rows (at most `sliding_window`) that
    end at `end`, the position of the next anchor (= the target cache's length)."""

    h: torch.Tensor   # [1, R, D]
    end: int

    @property
    def rows(self) -> int:
        return self.h.shape[1]

    def extend(self, drafter: Drafter, taps: dict[int, torch.Tensor], n: int) -> None:
        """Append the first n rows of a verify forward's taps (the anchor and accepted drafts)."""
        if n <= 0:
            return
        new = drafter.project_context({k: v[:, :n] for k, v in taps.items()})
        self.h = torch.cat([self.h, new], 1)[:, -drafter.cfg.sliding_window:]
        self.end += n


def context_from_prefill(drafter: Drafter, taps: dict[int, torch.Tensor], end: int) -> DraftContext:
    rows = min(t.shape[1] for t in taps.values()) if taps else 0
    d = drafter.cfg.hidden_size
    if rows == 0:
        return DraftContext(torch.zeros(1, 0, d, device=drafter.first.main_proj.weight.device), end)
    h = drafter.project_context({k: v[:, -rows:] for k, v in taps.items()})
    return DraftContext(h[:, -drafter.cfg.sliding_window:], end)


@dataclass
class Draft:
    tokens: list[int]            # x_1..x_g
    q: torch.Tensor              # [g, V] the distributions they were drawn from (one-hot when greedy)
    confidence: list[float]      # c_j for every block position that was scored (>= g)
    survival: list[float]        # running products of the confidences
    seconds: float = 0.0
    dist: torch.Tensor | None = None  # [g, V] softmax of the drafter's logits (what a page shows)


def draft_block(drafter: Drafter, target: Backbone, dctx: DraftContext, anchor: int, sampler: Sampler,
                draft_length: int | str = "max", threshold: float = 0.3, limit: int | None = None) -> Draft:
    """Draft up to `limit` tokens after `anchor`: one parallel pass, then the Markov head left to right.

    draft_length: an int (fixed), "max" (the whole block) or "auto" (stop before the first position
    whose running product of confidences falls under `threshold`)."""
    t0 = time.perf_counter()
    dev = drafter.first.main_proj.weight.device
    gmax = drafter.max_draft
    if isinstance(draft_length, int) and not isinstance(draft_length, bool):
        gmax = min(gmax, draft_length)
    if limit is not None:
        gmax = min(gmax, limit)
    auto = draft_length == "auto"
    v = drafter.cfg.vocab_size
    if gmax <= 0:  # nothing to draft (the last token of a request): the step is a plain decode step
        return Draft([], torch.zeros(0, v, device=dev), [], [], time.perf_counter() - t0)
    with torch.no_grad():
        r = dctx.rows
        ctx_pos = torch.arange(dctx.end - r, dctx.end, device=dev).view(1, -1)
        h = drafter.hidden(target, torch.tensor([anchor], device=dev), torch.tensor([dctx.end], device=dev),
                           dctx.h, ctx_pos, torch.ones(1, r, dtype=torch.bool, device=dev))
        u = drafter.logits(target, h[:, 1:1 + max(gmax, 0)])[0]               # [gmax, V]
        last = drafter.last
        tokens, qs, dists, conf, surv = [], [], [], [], []
        prev, run = anchor, 1.0
        for j in range(gmax):
            bias, e = last.markov_head(torch.tensor([prev], device=dev))
            c = float(torch.sigmoid(last.confidence_head(h[:, j + 1], e))[0])
            run *= c
            conf.append(c)
            surv.append(run)
            if auto and run < threshold:
                break
            z = u[j] + bias[0]
            q = sampler.probs(z)
            dists.append(torch.softmax(z, -1))
            x = int(q.argmax()) if sampler.greedy else int(torch.multinomial(q.cpu(), 1, generator=sampler.generator))
            tokens.append(x)
            qs.append(q)
            prev = x
    empty = torch.zeros(0, v, device=dev)
    return Draft(tokens=tokens, q=torch.stack(qs) if qs else empty, confidence=conf, survival=surv,
                 seconds=time.perf_counter() - t0, dist=torch.stack(dists) if dists else empty)


# ================================================================================================
# Verification (§8.3)
# ================================================================================================

@dataclass
class Verdict:
    accepted: int                     # drafts accepted (k)
    tokens: list[int]                 # emitted: the k accepted drafts + the correction or bonus token
    rules: list[str]                  # per examined position: "accept" | "reject"
    ratios: list[float] = field(default_factory=list)    # stochastic: min(1, p/q) per examined position
    uniforms: list[float] = field(default_factory=list)  # stochastic: the uniform draws
    resampled: int | None = None      # the token drawn after a rejection
    bonus: int | None = None          # the token drawn after full acceptance


def verify(p: torch.Tensor, q: torch.Tensor | None, drafts: list[int], greedy: bool,
           generator: torch.Generator | None = None) -> Verdict:
    """The verification rules of §8.3 on one block.

    p: [g+1, V] target distributions (greedy: logits or probs, only the argmax matters) for the
    positions of x_1..x_g and the bonus; q: [g, V] draft distributions (unused when greedy)."""
    g = len(drafts)
    rules: list[str] = []
    out: list[int] = []
    if greedy:
        top = p.argmax(-1).tolist()
        for j, x in enumerate(drafts):
            if x == top[j]:
                rules.append("accept")
                out.append(x)
            else:
                rules.append("reject")
                return Verdict(j, out + [top[j]], rules, resampled=top[j])
        return Verdict(g, out + [top[g]], rules, bonus=top[g])
    pc, qc = p.float().cpu(), (q.float().cpu() if q is not None else None)
    ratios, uniforms = [], []
    for j, x in enumerate(drafts):
        ratio = 1.0 if qc[j, x] <= 0 else min(1.0, float(pc[j, x] / qc[j, x]))
        u = float(torch.rand((), generator=generator))
        ratios.append(ratio)
        uniforms.append(u)
        if u < ratio:
            rules.append("accept")
            out.append(x)
            continue
        rules.append("reject")
        res = (pc[j] - qc[j]).clamp_min(0)
        res = res / res.sum() if float(res.sum()) > 0 else pc[j]  # p == q never rejects; guard anyway
        y = int(torch.multinomial(res, 1, generator=generator))
        return Verdict(j, out + [y], rules, ratios, uniforms, resampled=y)
    y = int(torch.multinomial(pc[g], 1, generator=generator))
    return Verdict(g, out + [y], rules, ratios, uniforms, bonus=y)


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)): where a rejected position's token is drawn from."""
    r = (p.float() - q.float()).clamp_min(0)
    s = r.sum(-1, keepdim=True)
    return torch.where(s > 0, r / s.clamp_min(1e-30), p.float())


# ================================================================================================
# Step-by-step decoding and statistics
# ================================================================================================

@dataclass
class StepLog:
    """One draft-and-verify step, everything the app shows."""

    step: int
    anchor: int
    anchor_pos: int
    drafted: list[int]
    q_draft: list[float]              # q_j(x_j) (greedy: the drafter's softmax, not the one-hot it drew from)
    p_draft: list[float]              # p_j(x_j) (greedy: the target's softmax)
    target_top: list[int]             # the target's argmax at each drafted position (+ bonus position)
    confidence: list[float]
    survival: list[float]
    accepted: int
    rules: list[str]
    ratios: list[float]
    uniforms: list[float]
    resampled: int | None
    bonus: int | None
    emitted: list[int]                # tokens this step added to the output (after eos / length cuts)
    rows_appended: int                # target cache rows written by the verify forward (g + 1)
    rows_rolled_back: int             # rows dropped again (rejected drafts, plus rows after an eos)
    cache_length: int                 # target cache length after the step
    p_top: list[list[tuple[int, float]]] = field(default_factory=list)   # top-5 of p per position
    q_top: list[list[tuple[int, float]]] = field(default_factory=list)   # top-5 of q per position
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0


@dataclass
class CalibrationRow:
    position: int                 # draft position j (1-based)
    n: int                        # steps that examined position j
    predicted: float              # mean confidence c_j there
    observed: float               # acceptance rate there
    predicted_survival: float     # mean running product over steps that drafted >= j tokens
    observed_survival: float      # fraction of those steps whose first j drafts were all accepted


@dataclass
class SpecStats:
    block_size: int
    draft_length: int | str
    confidence_threshold: float
    greedy: bool
    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    emitted: int = 0                       # tokens emitted by verify steps (not the first token)
    reached: list[int] = field(default_factory=list)       # steps that examined position j
    accepted_at: list[int] = field(default_factory=list)   # ... and accepted it
    acceptance_by_position: list[float] = field(default_factory=list)
    mean_accepted_length: float = 0.0      # accepted drafts per step
    mean_draft_length: float = 0.0
    tokens_per_pass: float = 0.0           # tokens emitted per verify forward
    alpha: float = 0.0                     # per-token acceptance rate (accepted / examined)
    formula_tokens_per_pass: float = 0.0   # (1 - a^(g+1)) / (1 - a) with g = mean draft length
    calibration: list[CalibrationRow] = field(default_factory=list)
    prefill_seconds: float = 0.0
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0
    wall_seconds: float = 0.0
    log: list[StepLog] = field(default_factory=list)

    def summary(self) -> dict:
        d = asdict(self)
        d.pop("log")
        return d


def expected_tokens_per_pass(alpha: float, gamma: float) -> float:
    """(1 - a^(g+1)) / (1 - a): tokens per target pass with i.i.d. acceptance a and g drafts."""
    if alpha >= 1.0:
        return gamma + 1.0
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)


def summarize(stats: SpecStats) -> SpecStats:
    """Fill the derived fields from the per-step log."""
    g = stats.block_size - 1
    reached, acc = [0] * g, [0] * g
    conf_sum, surv_n, surv_pred, surv_obs = [0.0] * g, [0] * g, [0.0] * g, [0] * g
    for s in stats.log:
        for j, rule in enumerate(s.rules):
            reached[j] += 1
            acc[j] += rule == "accept"
            conf_sum[j] += s.confidence[j] if j < len(s.confidence) else 0.0
        for j in range(len(s.drafted)):
            surv_n[j] += 1
            surv_pred[j] += s.survival[j] if j < len(s.survival) else 0.0
            surv_obs[j] += s.accepted > j
    stats.steps = len(stats.log)
    stats.drafted = sum(len(s.drafted) for s in stats.log)
    stats.accepted = sum(s.accepted for s in stats.log)
    stats.emitted = sum(len(s.emitted) for s in stats.log)
    stats.reached, stats.accepted_at = reached, acc
    stats.acceptance_by_position = [a / r if r else float("nan") for a, r in zip(acc, reached)]
    n = max(1, stats.steps)
    stats.mean_accepted_length = stats.accepted / n
    stats.mean_draft_length = stats.drafted / n
    stats.tokens_per_pass = stats.emitted / n
    stats.alpha = sum(acc) / max(1, sum(reached))
    stats.formula_tokens_per_pass = expected_tokens_per_pass(stats.alpha, stats.mean_draft_length)
    stats.calibration = [CalibrationRow(j + 1, reached[j], conf_sum[j] / reached[j] if reached[j] else float("nan"),
                                        stats.acceptance_by_position[j],
                                        surv_pred[j] / surv_n[j] if surv_n[j] else float("nan"),
                                        surv_obs[j] / surv_n[j] if surv_n[j] else float("nan"))
                         for j in range(g)]
    stats.draft_seconds = sum(s.draft_seconds for s in stats.log)
    stats.verify_seconds = sum(s.verify_seconds for s in stats.log)
    return stats


@dataclass
class SpecState:
    """A speculative decoding session between steps (what `verify_step` advances)."""

    model: Backbone
    drafter: Drafter
    sampler: Sampler
    cache: object
    dctx: DraftContext
    anchor: int                      # the last emitted token, not yet in the target's cache
    tokens: list[int]                # emitted so far (the anchor is the last one)
    max_new_tokens: int
    draft_length: int | str = "max"
    confidence_threshold: float = 0.3
    stop_at_eos: bool = True
    eos: set[int] = field(default_factory=set)
    done: bool = False
    stopped: str = "length"
    prompt_tokens: int = 0
    prefill_seconds: float = 0.0
    reused: int = 0
    log: list[StepLog] = field(default_factory=list)


def _top(p: torch.Tensor, k: int = 5) -> list[tuple[int, float]]:
    v, i = p.float().topk(min(k, p.shape[-1]))
    return [(int(a), float(b)) for a, b in zip(i.tolist(), v.tolist())]


def start(model: Backbone, drafter: Drafter | None, ids, max_new_tokens: int, *, sampler: Sampler | None = None,
          prefill_mode: str = "bounded", draft_length: int | str | None = None, confidence_threshold: float = 0.3,
          stop_at_eos: bool = True, prefix_cache=None, chunk_size: int = 256,
          progress: Callable[[float, str], None] | None = None) -> SpecState:
    """Prefill the prompt (cache with rollback slack = block size, drafter taps), emit the first token."""
    drafter = drafter if drafter is not None else model.mtp
    if not isinstance(drafter, Drafter):
        raise InputError("this model has no DSpark drafter (no mtp.* weights were loaded)")
    ids = model.check_ids(ids)
    if ids.shape[0] != 1:
        raise InputError("speculative decoding runs one sequence at a time (batch size 1)")
    dl = "max" if draft_length is None else draft_length
    if not (dl in ("max", "auto") or (isinstance(dl, int) and not isinstance(dl, bool) and dl >= 0)):
        raise InputError(f"draft_length must be an integer >= 0, 'max' or 'auto', got {draft_length!r}")
    sampler = sampler or Sampler()
    pf = prefill(model, ids, prefill_mode, chunk_size=chunk_size, rollback=drafter.block_size,
                 prefix_cache=prefix_cache, tap_layers=drafter.target_layers, progress=progress)
    with torch.no_grad():
        dctx = context_from_prefill(drafter, pf.taps, pf.cache.length)
    st = SpecState(model=model, drafter=drafter, sampler=sampler, cache=pf.cache, dctx=dctx, anchor=-1, tokens=[],
                   max_new_tokens=max_new_tokens, draft_length=dl, confidence_threshold=confidence_threshold,
                   stop_at_eos=stop_at_eos, eos=_eos_ids(model), prompt_tokens=ids.shape[1],
                   prefill_seconds=pf.seconds, reused=pf.reused)
    if max_new_tokens == 0:
        st.done = True
        return st
    first = int(sampler.sample(pf.logits)[0])
    st.tokens.append(first)
    st.anchor = first
    if stop_at_eos and first in st.eos:
        st.done, st.stopped = True, "eos"
    elif len(st.tokens) >= max_new_tokens:
        st.done = True
    return st


def verify_step(st: SpecState) -> StepLog | None:
    """One draft-then-verify step: draft after the anchor, run the target over [anchor, drafts] in
    one forward through its cache, apply the rules, roll back the rejected rows, extend the
    drafter's context. Returns the step's log (None when the session is already done)."""
    if st.done:
        return None
    model, drafter, cache, sampler = st.model, st.drafter, st.cache, st.sampler
    remaining = st.max_new_tokens - len(st.tokens)
    d = draft_block(drafter, model, st.dctx, st.anchor, sampler, st.draft_length, st.confidence_threshold,
                    limit=remaining - 1)  # a step emits up to g + 1 tokens: never past max_new_tokens
    g = len(d.tokens)
    t0 = time.perf_counter()
    anchor_pos = cache.length
    feed = torch.tensor([[st.anchor] + d.tokens], device=model.device)
    with torch.no_grad():
        out = model(feed, cache, tap_layers=drafter.target_layers)
    p = sampler.probs(out.logits[0])                                            # [g + 1, V]
    v = verify(out.logits[0] if sampler.greedy else p, d.q, d.tokens, sampler.greedy, sampler.generator)
    # what a page shows: the real distributions (greedy decoding draws from one-hot ones)
    p_show = torch.softmax(out.logits[0].float(), -1) if sampler.greedy else p
    q_show = d.dist if d.dist is not None and sampler.greedy else d.q
    emitted = list(v.tokens)
    keep = v.accepted + 1                                                       # anchor + accepted drafts
    if st.stop_at_eos:
        for i, tok in enumerate(emitted):
            if tok in st.eos:
                emitted = emitted[:i + 1]
                keep = min(keep, i + 1)  # as plain decoding: the eos itself never enters the cache
                st.done, st.stopped = True, "eos"
                break
    back = (g + 1) - keep
    cache.rollback(back)
    with torch.no_grad():
        st.dctx.extend(drafter, out.taps, keep)
    st.tokens.extend(emitted)
    st.anchor = emitted[-1]
    if len(st.tokens) >= st.max_new_tokens:
        st.done = True
    pd = [float(p_show[j, x]) for j, x in enumerate(d.tokens)]
    qd = [float(q_show[j, x]) for j, x in enumerate(d.tokens)]
    log = StepLog(step=len(st.log), anchor=int(feed[0, 0]), anchor_pos=anchor_pos, drafted=d.tokens, q_draft=qd,
                  p_draft=pd, target_top=out.logits[0].argmax(-1).tolist(), confidence=d.confidence,
                  survival=d.survival, accepted=v.accepted, rules=v.rules, ratios=v.ratios, uniforms=v.uniforms,
                  resampled=v.resampled, bonus=v.bonus, emitted=emitted, rows_appended=g + 1,
                  rows_rolled_back=back, cache_length=cache.length,
                  p_top=[_top(p_show[j]) for j in range(g + 1)], q_top=[_top(q_show[j]) for j in range(g)],
                  draft_seconds=d.seconds, verify_seconds=time.perf_counter() - t0)
    st.log.append(log)
    return log


def speculative_generate(model: Backbone, drafter: Drafter | None, ids, max_new_tokens: int, *,
                         sampler: Sampler | None = None, prefill_mode: str = "bounded",
                         draft_length: int | str | None = None, confidence_threshold: float = 0.3,
                         stop_at_eos: bool = True, stream: Callable[[int], None] | None = None, prefix_cache=None,
                         chunk_size: int = 256, keep_cache: bool = False) -> GenerateResult:
    """Draft-and-verify decoding; the output has the target's distribution (greedy: the same tokens)."""
    t_all = time.perf_counter()
    st = start(model, drafter, ids, max_new_tokens, sampler=sampler, prefill_mode=prefill_mode,
               draft_length=draft_length, confidence_threshold=confidence_threshold, stop_at_eos=stop_at_eos,
               prefix_cache=prefix_cache, chunk_size=chunk_size)
    t0 = time.perf_counter()
    if stream is not None:
        for tok in st.tokens:
            stream(tok)
    while not st.done:
        log = verify_step(st)
        if stream is not None:
            for tok in log.emitted:
                stream(tok)
    decode_seconds = time.perf_counter() - t0
    stats = SpecStats(block_size=st.drafter.block_size, draft_length=st.draft_length,
                      confidence_threshold=confidence_threshold, greedy=st.sampler.greedy, log=st.log,
                      prefill_seconds=st.prefill_seconds)
    summarize(stats)
    stats.wall_seconds = time.perf_counter() - t_all
    return GenerateResult(tokens=st.tokens, prompt_tokens=st.prompt_tokens, prefill_seconds=st.prefill_seconds,
                          decode_seconds=decode_seconds, target_passes=1 + len(st.log) if st.tokens else 1,
                          cache=st.cache if keep_cache else None, stopped=st.stopped,
                          reused_prompt_tokens=st.reused, stats=stats)


# ================================================================================================
# Training against a frozen target (§8.4)
# ================================================================================================

@dataclass
class DraftTrainConfig:
    steps: int = 600
    batch: int = 8                  # sequences per step
    anchors: int = 48               # random anchors (blocks) per sequence
    lr: float = 3e-3
    min_lr_frac: float = 0.1
    warmup: int = 20
    clip: float = 1.0
    w_ce: float = 0.1
    w_tv: float = 0.9
    w_conf: float = 1.0
    gamma: float = 0.0              # position-weight decay; 0 = block_size - 1
    bias_gamma: float = 1e-3        # aux-loss-free balancing of the drafter's experts
    pool_greedy: int = 48           # target-generated sequences: greedy continuations ...
    pool_sampled: int = 48          # ... and sampled ones (temperature below)
    pool_corpus: int = 32           # plus plain corpus windows
    prompt_len: int = 32
    gen_len: int = 224
    temperature: float = 0.8
    seed: int = 0


def block_loss(drafter: Drafter, target: Backbone, seqs: torch.Tensor, taps: torch.Tensor, hidden: torch.Tensor,
               anchors: torch.Tensor, tc: DraftTrainConfig, routings: list | None = None) -> dict[str, torch.Tensor]:
    """The DSpark loss on blocks anchored at `anchors` [B, A] of sequences `seqs` [B, L].

    taps [B, L, k*D] and hidden [B, L, D] are the frozen target's (concatenated taps, final normed
    hidden). Block row j (1..block-1) at position a + j is scored against the target's distribution
    for that position (from row a + j - 1); the Markov head sees the sequence's token x_{a+j-1}."""
    cfg = drafter.cfg
    b, length = seqs.shape
    a_n = anchors.shape[1]
    s, w = drafter.block_size, cfg.sliding_window
    dev = seqs.device
    gamma = tc.gamma or (s - 1)
    h_ctx_all = drafter.project_context(taps)                                  # [B, L, D]
    bi = torch.arange(b, device=dev).view(-1, 1).expand(-1, a_n).reshape(-1)   # [N]
    anc = anchors.reshape(-1)
    ctx_pos = anc.view(-1, 1) - w + torch.arange(w, device=dev)                # [N, W]: a-W .. a-1
    ctx_mask = ctx_pos >= 0
    ctx_pos = ctx_pos.clamp_min(0)
    ctx_h = h_ctx_all[bi.view(-1, 1), ctx_pos]                                 # [N, W, D]
    h = drafter.hidden(target, seqs[bi, anc], anc, ctx_h, ctx_pos, ctx_mask, routings)  # [N, S, D]
    j = torch.arange(1, s, device=dev)
    tgt_rows = anc.view(-1, 1) + j - 1                                         # target row for position a+j
    prev = seqs[bi.view(-1, 1), tgt_rows]                                      # x_{a+j-1}
    with torch.no_grad():
        pt = torch.softmax(target.head(hidden[bi.view(-1, 1), tgt_rows]).float(), -1)   # [N, S-1, V]
    last = drafter.last
    bias, e = last.markov_head(prev)
    logp = torch.log_softmax(drafter.logits(target, h[:, 1:]) + bias, -1)
    pd = logp.exp()
    tv = 0.5 * (pd - pt).abs().sum(-1)                                         # [N, S-1]
    ce = -logp.gather(-1, pt.argmax(-1, keepdim=True)).squeeze(-1)
    conf_logit = last.confidence_head(h[:, 1:], e)
    label = (1 - tv).detach().clamp(0, 1)
    bce = F.binary_cross_entropy_with_logits(conf_logit, label, reduction="none")
    wts = torch.exp(-(j.float() - 1) / gamma)
    wts = wts / wts.sum()
    per = tc.w_ce * ce + tc.w_tv * tv + tc.w_conf * bce
    with torch.no_grad():
        greedy_acc = (logp.argmax(-1) == pt.argmax(-1)).float().mean(0)        # per position
        beta = (1 - tv).mean(0)
    return {"loss": (per * wts).sum(-1).mean(), "ce": ce.mean(), "tv": tv.mean(), "bce": bce.mean(),
            "greedy_match": greedy_acc.detach(), "beta": beta.detach(),
            "conf": torch.sigmoid(conf_logit).mean(0).detach()}


def generate_batch(target: Backbone, prompts: torch.Tensor, n_new: int, sampler: Sampler) -> torch.Tensor:
    """Batched plain decoding (exact prefill) -> [B, P + n_new] token ids."""
    from .engine import decode_step

    pf = prefill(target, prompts, "exact", rollback=0)
    cache, logits = pf.cache, pf.logits
    out = [prompts]
    for i in range(n_new):
        nxt = sampler.sample(logits).view(-1, 1)
        out.append(nxt)
        if i + 1 < n_new:
            logits = decode_step(target, cache, nxt)[:, -1]
    return torch.cat(out, 1)


@dataclass
class Pool:
    """Training sequences with the frozen target's features, computed once."""

    seqs: torch.Tensor     # [M, L]
    taps: torch.Tensor     # [M, L, k*D]
    hidden: torch.Tensor   # [M, L, D]
    kinds: list[str]
    seconds: float


def build_pool(target: Backbone, stream, tc: DraftTrainConfig, log=sys.stderr) -> Pool:
    """Self-distillation data: corpus prompts continued BY THE TARGET (greedy and sampled), plus
    some plain corpus windows, then one frozen target forward for taps and final hidden states.

    Why generated text: acceptance at step j is only asked when drafts 1..j-1 matched what the
    target would emit, so the prefixes that matter are the target's own continuations; corpus
    text alone would train on prefixes the target never produces (§8.4 trains on target outputs)."""
    t0 = time.perf_counter()
    g = torch.Generator().manual_seed(tc.seed + 7)
    length = tc.prompt_len + tc.gen_len
    seqs, kinds = [], []
    dev = target.device
    chunk = 32  # decode is overhead-bound below ~32 rows: wider batches are nearly free
    for kind, n in (("greedy", tc.pool_greedy), ("sampled", tc.pool_sampled)):
        for i in range(0, n, chunk):
            m = min(chunk, n - i)
            x, _ = stream.sample_batch(m, tc.prompt_len, g)
            smp = Sampler(0.0 if kind == "greedy" else tc.temperature, 1.0, seed=tc.seed * 1000 + i + len(seqs))
            seqs.append(generate_batch(target, x.to(dev), tc.gen_len, smp))
            kinds += [kind] * m
            print(f"\r  drafter data: {len(kinds)} / {tc.pool_greedy + tc.pool_sampled} target continuations "
                  f"({time.perf_counter() - t0:.0f} s)", end="", file=log, flush=True)
    if tc.pool_corpus:
        x, _ = stream.sample_batch(tc.pool_corpus, length, g)
        seqs.append(x.to(dev))
        kinds += ["corpus"] * tc.pool_corpus
    seqs_t = torch.cat(seqs, 0)
    taps, hid = [], []
    layers = list(target.cfg.dspark_target_layer_ids)
    with torch.no_grad():
        for i in range(0, seqs_t.shape[0], chunk):
            out = target(seqs_t[i:i + chunk], tap_layers=layers)
            taps.append(torch.cat([out.taps[k] for k in layers], -1))
            hid.append(out.hidden.float())
    print(f"\r  drafter data: {len(kinds)} sequences x {length} tokens ({time.perf_counter() - t0:.0f} s)"
          + " " * 20, file=log, flush=True)
    return Pool(seqs_t, torch.cat(taps, 0), torch.cat(hid, 0), kinds, time.perf_counter() - t0)


def train_drafter(m: Backbone, stream, steps: int = 600, seed: int = 0, log=sys.stderr,
                  tc: DraftTrainConfig | None = None, pool: Pool | None = None) -> dict:
    """Train `m.mtp` (created if absent) against the frozen target `m`; returns the training record."""
    tc = tc or DraftTrainConfig()
    tc.steps, tc.seed = steps, seed
    t_start = time.perf_counter()
    torch.manual_seed(seed)
    frozen = {n: p.requires_grad for n, p in m.named_parameters() if not n.startswith("mtp.")}
    was_training = m.training
    m.eval()
    for n, p in m.named_parameters():
        if not n.startswith("mtp."):
            p.requires_grad_(False)
    drafter = m.mtp if isinstance(m.mtp, Drafter) else attach_drafter(m, seed)
    try:
        if pool is None:
            pool = build_pool(m, stream, tc, log)
        params = [p for p in drafter.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=tc.lr, betas=(0.9, 0.95), weight_decay=0.0)
        g = torch.Generator().manual_seed(seed + 11)
        n_seq, length = pool.seqs.shape
        s = drafter.block_size
        history = []
        t0 = time.perf_counter()
        for step in range(steps):
            lr = tc.lr * (step + 1) / tc.warmup if step < tc.warmup else tc.lr * (
                tc.min_lr_frac + (1 - tc.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * (step - tc.warmup)
                                                                            / max(1, steps - tc.warmup))))
            for grp in opt.param_groups:
                grp["lr"] = lr
            rows = torch.randint(0, n_seq, (tc.batch,), generator=g)
            anchors = torch.randint(1, length - s + 1, (tc.batch, tc.anchors), generator=g)
            dev = pool.seqs.device
            routings: list = []
            drafter.train()
            r = block_loss(drafter, m, pool.seqs[rows], pool.taps[rows], pool.hidden[rows], anchors.to(dev), tc,
                           routings)
            opt.zero_grad(set_to_none=True)
            r["loss"].backward()
            torch.nn.utils.clip_grad_norm_(params, tc.clip)
            opt.step()
            with torch.no_grad():
                for blk, idx in zip(drafter.blocks, routings):
                    blk.ffn.update_bias(idx, tc.bias_gamma)
            rec = {"step": step + 1, "loss": float(r["loss"].detach()), "ce": float(r["ce"].detach()),
                   "tv": float(r["tv"].detach()),
                   "bce": float(r["bce"].detach()), "greedy_match": [round(float(x), 4) for x in r["greedy_match"]],
                   "beta": [round(float(x), 4) for x in r["beta"]], "lr": lr}
            history.append(rec)
            el = time.perf_counter() - t0
            print(f"\r  drafter {step + 1}/{steps} loss {rec['loss']:.3f} tv {rec['tv']:.3f} "
                  f"match {'/'.join(f'{x:.2f}' for x in rec['greedy_match'])} "
                  f"eta {(steps - step - 1) * el / (step + 1) / 60:.1f} min", end="", file=log, flush=True)
        print(file=log)
    finally:
        drafter.eval()
        for n, p in m.named_parameters():
            if n in frozen:
                p.requires_grad_(frozen[n])
        m.train(was_training)
    tail = history[-min(50, len(history)):] if history else []

    def avg(key):
        if not tail:
            return None
        v = [r[key] for r in tail]
        return [round(sum(x[i] for x in v) / len(v), 4) for i in range(len(v[0]))] if isinstance(v[0], list) \
            else round(sum(v) / len(v), 5)

    return {
        "steps": steps, "seed": seed, "config": asdict(tc),
        "data": {"sequences": int(pool.seqs.shape[0]), "length": int(pool.seqs.shape[1]),
                 "kinds": {k: pool.kinds.count(k) for k in sorted(set(pool.kinds))},
                 "source": "corpus prompts continued by the frozen target (greedy and sampled) + corpus windows",
                 "seconds": round(pool.seconds, 1)},
        "parameters": sum(p.numel() for p in drafter.parameters()),
        "final_avg_last_50": {k: avg(k) for k in ("loss", "ce", "tv", "bce", "greedy_match", "beta")},
        "wall_seconds": round(time.perf_counter() - t_start, 1),
        "log_every_10": [{k: (round(v, 5) if isinstance(v, float) else v) for k, v in r.items()}
                         for r in history[::10]],
    }


def evaluate_drafter(m: Backbone, prompts: list, max_new_tokens: int = 48, draft_length: int | str = "max",
                     temperature: float = 0.0, seed: int = 0) -> dict:
    """Speculative decoding over prompts (texts or id lists); pooled acceptance statistics."""
    steps = emitted = 0
    reached = accepted = None
    for i, pr in enumerate(prompts):
        ids = m.encode(pr) if isinstance(pr, str) else list(pr)
        r = speculative_generate(m, m.mtp, torch.tensor([ids]), max_new_tokens,
                                 sampler=Sampler(temperature, 1.0, seed + i), draft_length=draft_length,
                                 stop_at_eos=False)
        s = r.stats
        steps += s.steps
        emitted += s.emitted
        reached = s.reached if reached is None else [a + b for a, b in zip(reached, s.reached)]
        accepted = s.accepted_at if accepted is None else [a + b for a, b in zip(accepted, s.accepted_at)]
    alpha = sum(accepted) / max(1, sum(reached))
    return {"prompts": len(prompts), "max_new_tokens": max_new_tokens, "draft_length": draft_length,
            "temperature": temperature, "tokens_per_pass": round(emitted / max(1, steps), 4),
            "alpha": round(alpha, 4),
            "acceptance_by_position": [round(a / r, 4) if r else None for a, r in zip(accepted, reached)]}


# ================================================================================================
# Writing the drafter into a shipped checkpoint
# ================================================================================================

def write_drafter(model: Backbone, path: str | Path) -> Path:
    """Rewrite `path/model.safetensors` with the drafter's mtp.* tensors (replacing any old ones),
    keeping every other tensor and the metadata; written to a temp file, then renamed."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    f = Path(path) / "model.safetensors"
    with safe_open(str(f), "pt") as sf:
        meta = sf.metadata() or {}
        tensors = {k: sf.get_tensor(k) for k in sf.keys() if not k.startswith("mtp.")}
    tensors.update({f"mtp.{k}": v.detach().contiguous().cpu() for k, v in model.mtp.state_dict().items()})
    tmp = f.with_suffix(".safetensors.tmp")
    save_file(tensors, str(tmp), metadata={"format": "pt", **meta})
    os.replace(tmp, f)
    return f


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m model.dspark", description="Train the DSpark drafter of a checkpoint.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    tr = sub.add_parser("train", help="train mtp.* against the frozen target and write them into the checkpoint")
    tr.add_argument("--weights", default="data/weights/tiny")
    tr.add_argument("--steps", type=int, default=DraftTrainConfig.steps)
    tr.add_argument("--seed", type=int, default=0)
    tr.add_argument("--threads", type=int, default=0)
    tr.add_argument("--stream", default=".cache/corpus/tokens_train.npy")
    for f, v in asdict(DraftTrainConfig()).items():
        if f not in ("steps", "seed"):
            tr.add_argument("--" + f.replace("_", "-"), type=type(v), default=v)
    tr.add_argument("--dry-run", action="store_true", help="train but do not write the checkpoint")
    tr.add_argument("--prompts", default="data/prompts.json", help="prompts for the acceptance evaluation")
    tr.add_argument("--eval-tokens", type=int, default=48)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from ..checkpoint.native import load
    from ..corpus.dataset import TokenStream

    path = Path(args.weights)
    m = load(path, device="cpu")
    m.set_part("mtp", None)  # always train from a fresh init
    stream = TokenStream.load(args.stream)
    tc = DraftTrainConfig(**{f: getattr(args, f) for f in asdict(DraftTrainConfig())})
    print(f"training the drafter of {path} ({args.steps} steps, {torch.get_num_threads()} threads)", file=sys.stderr)
    info = train_drafter(m, stream, steps=args.steps, seed=args.seed, tc=tc)
    prompts = [p["text"] for p in json.loads(Path(args.prompts).read_text())] if Path(args.prompts).exists() else []
    if prompts:
        t0 = time.perf_counter()
        info["eval"] = {"greedy": evaluate_drafter(m, prompts, args.eval_tokens),
                        "sampled_t0.8": evaluate_drafter(m, prompts, args.eval_tokens, temperature=0.8)}
        info["eval"]["seconds"] = round(time.perf_counter() - t0, 1)
        print(f"  eval on {len(prompts)} prompts: {json.dumps(info['eval'])}", file=sys.stderr)
    info["command"] = "python -m model.dspark " + " ".join(sys.argv[1:] if argv is None else argv)
    if args.dry_run:
        print(json.dumps(info["final_avg_last_50"]), file=sys.stderr)
        return 0
    write_drafter(m, path)
    tj = path / "training.json"
    rec = json.loads(tj.read_text()) if tj.exists() else {}
    rec["drafter"] = info
    tmp = tj.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(rec, indent=1) + "\n")
    os.replace(tmp, tj)
    print(f"wrote mtp.* into {path / 'model.safetensors'} and 'drafter' into {tj}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
