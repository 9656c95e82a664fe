"""CSA2 attention: a 128-row local window plus sparsely selected, shared compressed entries.

Follows docs/design/equations.md §3 (attention core) and §5 (CSA2 modes); the layer's role comes from its
`LayerSpec` (docs/design/architecture.md §2).
- Low-rank query: q = wq_b(q_norm(wq_a(x))) split into H heads of head_dim; RoPE on the trailing
  qk_rope_head_dim channels (`main` kind for window-only layers, `compress` otherwise).
- One K = V latent head: kv = fp8(rope(kv_norm(wkv(x)))); a query at t sees window rows (t-W, t].
- Compressed branch (ratio > 0): a KV source makes entries with its compressor (Full), an index
  source selects among them (Full or Reindex), other layers reuse the last selection (Reuse).
  Entries are fp4(rope(latent)) at the group's first position.
- Softmax over [window logits, selected-entry logits, per-head sink]; the sink only enlarges the
  denominator. The output's rope slice is rotated back by -t, then the grouped low-rank output
  projection: o_groups blocks of wo_a, then wo_b.

Two equivalent ways to read compressed entries: `dense` (all entries with a mask, used in one-shot
forwards and training) and `gathered` (only the selected rows, used with a cache, where the
context can be long). Tests check that both give the same logits.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..config import V41Config
from ..fusion import fusable, fusing
from ..layer_map import LayerSpec
from ..quant import fake_fp8, fake_latent
from .compressor import Compressor
from .context import CompressedRead, Context, EntryTable, KLInputs
from .indexer import NEG_INF, Indexer, candidate_pool, indexer_kl, mask_visible, select_topk, visible_counts
from .norm import RMSNorm
from .rope import RopeTables, apply_rope


@dataclass
class DenseTable:
    """Compressed entries and index keys of one KV source, as fp32 tensors (no cache)."""

    entries: torch.Tensor  # [B, G, d]   rotated, FP4-quantised
    keys: torch.Tensor     # [B, G, d_i] FP4-quantised

    def __len__(self) -> int:
        return self.entries.shape[1]

    def all_entries(self) -> torch.Tensor:
        return self.entries

    def all_keys(self) -> torch.Tensor:
        return self.keys

    def gather(self, idx: torch.Tensor) -> torch.Tensor:
        b, s, k = idx.shape
        flat = idx.clamp_min(0).reshape(b, s * k, 1).expand(-1, -1, self.entries.shape[-1])
        return self.entries.gather(1, flat).reshape(b, s, k, -1)


def _window_blocks(ext: torch.Tensor, s: int, w: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Queries in blocks of W: block n reads ext rows [nW, nW + 2W - 1) -> keys [B, nb, d, 2W-1].

    Query a of a block uses key columns a..a+W-1 (`band`); this reads each key twice instead of W
    times, as a per-query window copy would."""
    b, _, d = ext.shape
    nb = (s + w - 1) // w
    ext = torch.nn.functional.pad(ext, (0, 0, 0, nb * w + w - 1 - ext.shape[1]))
    a = torch.arange(w, device=ext.device)
    return ext.unfold(1, 2 * w - 1, w), (a.view(-1, 1) + a.view(1, -1))


def _window_logits(q: torch.Tensor, keys: torch.Tensor, band: torch.Tensor, s: int) -> torch.Tensor:
    b, _, h, d = q.shape
    nb, w = keys.shape[1], band.shape[0]
    qb = torch.nn.functional.pad(q, (0, 0, 0, 0, 0, nb * w - s)).view(b, nb, w, h, d).transpose(2, 3)
    full = torch.matmul(qb, keys.unsqueeze(2))                       # [B, nb, H, W, 2W-1]
    lg = full.gather(-1, band.view(1, 1, 1, w, w).expand(b, nb, h, w, w))
    return lg.transpose(2, 3).reshape(b, nb * w, h, w)[:, :s]


def _window_values(p: torch.Tensor, keys: torch.Tensor, band: torch.Tensor, s: int) -> torch.Tensor:
    b, _, h, w = p.shape
    nb = keys.shape[1]
    pb = torch.nn.functional.pad(p, (0, 0, 0, 0, 0, nb * w - s)).view(b, nb, w, h, w).transpose(2, 3)
    full = pb.new_zeros(b, nb, h, w, 2 * w - 1).scatter(-1, band.view(1, 1, 1, w, w).expand(b, nb, h, w, w), pb)
    out = torch.matmul(full, keys.transpose(-1, -2).unsqueeze(2))   # [B, nb, H, W, d]
    return out.transpose(2, 3).reshape(b, nb * w, h, -1)[:, :s]


@fusable
def attend(q: torch.Tensor, kv: torch.Tensor, prev: torch.Tensor | None, values: torch.Tensor | None,
           mask: torch.Tensor | None, sink: torch.Tensor, w: int, limit: torch.Tensor | None
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax over [window slots, compressed entries, sink] and the weighted sum of K=V rows.

    q [B, S, H, d]; kv [B, S, d] this call's window rows; prev [B, P, d] cached rows before them;
    values: every entry [B, T, d] with mask [B, S, T] (dense), or the picks [B, S, k, d] with mask
    [B, S, k] (gathered). `limit` (a 0-d tensor, or None for W) narrows the window to its last
    `limit` slots without changing any shape: a training curriculum then never recompiles."""
    b, s, h, d = q.shape
    p = 0 if prev is None else prev.shape[1]
    parts = [kv.new_zeros(b, w - 1 - p, d)] + ([prev.to(kv.dtype)] if p else []) + [kv]
    ext = torch.cat(parts, dim=1)                       # [B, W-1+S, d]; slot j of row i = ext[i + j]
    keys, band = _window_blocks(ext, s, w)
    scale = d ** -0.5
    logits = [_window_logits(q, keys, band, s).float() * scale]
    rows = torch.arange(s, device=q.device).view(-1, 1)
    slots = torch.arange(w, device=q.device).view(1, -1)
    slot_ok = slots >= (w - 1 - p) - rows                                              # [S, W]
    if limit is not None:
        slot_ok = slot_ok & (slots >= w - limit)
    logits[0] = logits[0].masked_fill(~slot_ok.view(1, s, 1, w), NEG_INF)
    dense = values is not None and values.dim() == 3
    # Compiled, the k picks of each query are read in one fused loop; as a batched matmul they
    # would be B*S products of [H, d] x [d, k], each too small to run fast.
    fuse_picks = not dense and torch.compiler.is_compiling()
    if values is not None:
        if fuse_picks:
            lc = (q.unsqueeze(3) * values.to(q.dtype).unsqueeze(2)).sum(-1).float() * scale
        else:
            lc = torch.einsum("bshd,btd->bsht" if dense else "bshd,bskd->bshk", q, values.to(q.dtype)).float() * scale
        logits.append(lc.masked_fill(~mask.unsqueeze(2), NEG_INF))
    logits.append(sink.float().view(1, 1, h, 1).expand(b, s, h, 1))
    z = torch.cat(logits, dim=-1)
    z = z - z.max(dim=-1, keepdim=True).values
    probs = torch.softmax(z, dim=-1)
    pv = probs.to(q.dtype)
    out = _window_values(pv[..., :w], keys, band, s)
    if values is not None:
        pc = pv[..., w:-1]
        if fuse_picks:
            out = out + (pc.unsqueeze(-1) * values.to(q.dtype).unsqueeze(2)).sum(3)
        else:
            out = out + torch.einsum("bsht,btd->bshd" if dense else "bshk,bskd->bshd", pc, values.to(q.dtype))
    return out, probs


class Attention(torch.nn.Module):
    def __init__(self, cfg: V41Config, spec: LayerSpec):
        super().__init__()
        self.cfg = cfg
        self.spec = spec                 # the layer's role, from the layer map (the one place roles are derived)
        self.layer_id = spec.index
        self.ratio = spec.compress_ratio
        self.n_heads, self.head_dim, self.window = cfg.num_attention_heads, cfg.head_dim, cfg.sliding_window
        self.limit = self.window  # a training curriculum may narrow the window (lab.training.step.set_window)
        self.kind = "compress" if self.ratio else "main"
        self.wq_a = torch.nn.Linear(cfg.hidden_size, cfg.q_lora_rank, bias=False)
        self.q_norm = RMSNorm(cfg.q_lora_rank, cfg.rms_norm_eps)
        self.wq_b = torch.nn.Linear(cfg.q_lora_rank, self.n_heads * self.head_dim, bias=False)
        self.wkv = torch.nn.Linear(cfg.hidden_size, self.head_dim, bias=False)
        self.kv_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)
        self.o_groups = cfg.o_groups
        self.wo_a = torch.nn.Linear(self.n_heads * self.head_dim // cfg.o_groups, cfg.o_groups * cfg.o_lora_rank,
                                    bias=False)
        self.wo_b = torch.nn.Linear(cfg.o_groups * cfg.o_lora_rank, cfg.hidden_size, bias=False)
        self.attn_sink = torch.nn.Parameter(torch.zeros(self.n_heads))
        self.compressor = Compressor(cfg, self.ratio) if spec.makes_entries else None
        self.indexer = Indexer(cfg, spec.index, owns_keys=spec.makes_entries) if spec.selects else None

    # ---------------------------------------------------------------------------------------------
    def forward(self, x: torch.Tensor, ctx: Context, rope: RopeTables) -> torch.Tensor | None:
        if ctx.publish_only:  # bounded prefill: only publish this source's entries and keys
            if self.spec.makes_entries:
                self._make_entries(x, ctx, rope)
            return None
        b, s, _ = x.shape
        cos, sin = rope.of(self.kind)
        q_res = self.q_norm(self.wq_a(x))
        q = apply_rope(self.wq_b(q_res).view(b, s, self.n_heads, self.head_dim), cos, sin)
        kv = fake_fp8(apply_rope(self.kv_norm(self.wkv(x)), cos, sin))

        comp = self._compressed_branch(x, q_res, ctx, rope) if self.ratio else None

        prev = None
        if ctx.cache is not None:
            store = ctx.cache.window(self.layer_id)
            prev = store.last(self.window - 1)
            store.append(kv)
        out, probs = self._attend(q, kv, prev, comp)
        if ctx.indexer_loss and comp is not None and comp.kl is not None:
            self._indexer_loss(probs, comp, ctx)
        if ctx.trace is not None:
            out = ctx.trace.attention_output(self.layer_id, out, comp)
            ctx.trace.attention(self.layer_id, ctx.positions, probs, prev, comp, self.window)
        out = apply_rope(out, cos, sin, inverse=True)
        grouped = out.reshape(b, s, self.o_groups, -1)
        w = self.wo_a.weight.view(self.o_groups, -1, grouped.shape[-1])
        z = torch.einsum("bsgi,goi->bsgo", grouped, w)
        return self.wo_b(z.flatten(2))

    # ---------------------------------------------------------------------------------------------
    def _compressed_branch(self, x: torch.Tensor, q_res: torch.Tensor, ctx: Context,
                           rope: RopeTables) -> CompressedRead | None:
        """Publish (KV source), select (index source) or reuse; None when there is nothing to read."""
        csa = ctx.csa
        if self.spec.makes_entries:
            self._make_entries(x, ctx, rope)
        table = csa.table
        if table is None or len(table) == 0 or ctx.ablation.window_only:
            csa.topk = None
            return None
        # ---- selection: Full and Reindex choose; Reuse keeps the last choice --------------------
        indexer = self.indexer
        if self.spec.selects:
            csa.indexer = indexer
        elif ctx.ablation.reselect_all:
            indexer = csa.indexer
        if indexer is not None:
            self._select(indexer, x, q_res, ctx, rope, table)
        idx = csa.topk
        n = len(table)
        kl = None
        if indexer is not None:  # the selecting layer takes its own KL inputs
            kl, csa.kl = csa.kl, None
        if ctx.ablation.dense_compressed:
            seen = visible_counts(ctx.positions, self.ratio).view(1, -1, 1)
            vis = torch.arange(n, device=x.device).view(1, 1, -1) < seen
            return CompressedRead(n=n, idx=idx, values=table.all_entries(), mask=vis.expand(x.shape[0], -1, -1),
                                  dense=True, table=table, kl=kl)
        return CompressedRead(n=n, idx=idx, values=table.gather(idx), mask=idx >= 0, dense=False, table=table, kl=kl)

    def _select(self, indexer: Indexer, x: torch.Tensor, q_res: torch.Tensor, ctx: Context, rope: RopeTables,
                table: EntryTable) -> None:
        """Score the visible entries (inside the candidate pool where one applies) and publish the top k."""
        csa, lid = ctx.csa, self.layer_id
        xi, qi = x.detach(), q_res.detach()
        cos, sin = rope.compress
        keep = ctx.trace is not None and ctx.trace.wants_score_grad(lid)
        # selection is not differentiable; the KL below trains the indexer, and a recorder that asks (`keep`) takes
        # the scores with their gradient (to the indexer only)
        with torch.set_grad_enabled(keep):
            raw = indexer.scores(xi, qi, cos, sin, table.all_keys())
        if keep:
            ctx.trace.index_scores(lid, mask_visible(raw, ctx.positions, self.ratio))
            raw = raw.detach()
        scores = mask_visible(raw, ctx.positions, self.ratio)
        if self.spec.candidate_source:
            pool, block_scores = candidate_pool(scores, ctx.positions, self.ratio, self.cfg.candidate_topk_blocks,
                                                self.cfg.candidate_block_size)
            csa.candidates = pool
            if ctx.trace is not None:
                ctx.trace.pool(lid, pool, block_scores)
        elif self.spec.searches_pool and csa.candidates is not None and not ctx.ablation.no_candidates:
            scores = scores.masked_fill(~csa.candidates, NEG_INF)
        k = ctx.ablation.index_topk or self.cfg.index_topk
        idx, _ = select_topk(scores, k)
        csa.topk = idx
        if ctx.trace is not None:
            ctx.trace.selection(lid, scores, idx)
        if ctx.indexer_loss:
            csa.kl = KLInputs(indexer, xi, qi, cos, sin)

    def _make_entries(self, x: torch.Tensor, ctx: Context, rope: RopeTables) -> None:
        cache, lid = ctx.cache, self.layer_id
        table: EntryTable
        if cache is not None:
            src = cache.source(lid)
            if lid not in ctx.skip_compress:
                kvp, gate = self.compressor.project(x)
                chunk_kv, chunk_gate, g0 = src.take_groups(kvp, gate)
                if chunk_kv.shape[1]:
                    latent = self.compressor.pool(chunk_kv, chunk_gate, x.dtype)
                    entries, keys = self._entries_and_keys(latent, g0, rope)
                    src.append(entries, keys)
                    if ctx.trace is not None:
                        ctx.trace.latent(lid, latent, g0)
            table = src
        else:
            latent = self.compressor.forward_full(x)
            entries, keys = self._entries_and_keys(latent, 0, rope)
            table = DenseTable(entries, keys)
            if ctx.trace is not None:
                ctx.trace.latent(lid, latent, 0)
        ctx.csa.table = table
        if ctx.trace is not None:
            ctx.trace.source_len(lid, len(table))

    def _entries_and_keys(self, latent: torch.Tensor, g0: int, rope: RopeTables) -> tuple[torch.Tensor, torch.Tensor]:
        pos = g0 + self.ratio * torch.arange(latent.shape[1], device=latent.device)
        cos, sin = rope.rotary.cos_sin(pos, "compress")
        keys = self.indexer.keys(latent.detach(), cos, sin)
        entries = fake_latent(apply_rope(latent, cos, sin))
        return entries, keys

    # ---------------------------------------------------------------------------------------------
    def _attend(self, q: torch.Tensor, kv: torch.Tensor, prev: torch.Tensor | None,
                comp: CompressedRead | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns (output [B, S, H, d], probs [B, S, H, W + n_comp + 1] incl. the sink column)."""
        values = mask = None
        if comp is not None:
            values, mask = comp.values, comp.mask
        # compiled, the limit is always a tensor: one graph serves every training window
        limit = torch.tensor(self.limit, device=q.device) if fusing() or self.limit < self.window else None
        return attend(q, kv, prev, values, mask, self.attn_sink, self.window, limit)

    def _indexer_loss(self, probs: torch.Tensor, comp: CompressedRead, ctx: Context) -> None:
        """KL from the main attention's distribution over compressed entries to the index scores (§3.3):
        over every visible entry in the dense warm-up, over the selected entries in sparse training."""
        w = self.window
        attn = probs[..., w:-1].detach().sum(dim=2)  # [B, S, T or k] summed over heads
        kl = comp.kl
        indexer, xi, qi, cos, sin = kl.indexer, kl.x, kl.q_res, kl.cos, kl.sin
        keys = comp.table.all_keys()
        if comp.dense:
            scores = mask_visible(indexer.scores(xi, qi, cos, sin, keys), ctx.positions, self.ratio)
            support = comp.mask
        else:
            idx = comp.idx
            b, s, k = idx.shape
            ksel = keys.gather(1, idx.clamp_min(0).reshape(b, s * k, 1).expand(-1, -1, keys.shape[-1]))
            q = indexer.queries(qi, cos, sin).float()
            sc = torch.einsum("bshd,bskd->bshk", q, ksel.reshape(b, s, k, -1).float()).relu() * indexer.head_dim ** -0.5
            wts = indexer.weights_proj(xi).float() * indexer.n_heads ** -0.5
            scores = (sc * wts.unsqueeze(-1)).sum(dim=2)
            support = idx >= 0
        ctx.indexer_losses[self.layer_id] = indexer_kl(attn, scores, support)
