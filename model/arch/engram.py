"""Engram: hashed n-gram memory gated into the residual streams before attention.

Follows docs/design/equations.md §10 (V4.1 production form). Bit-exact hashing:
1. A compressed token map from the tokenizer: ids whose text normalises alike (NFKC, NFD, strip
   accents, lowercase, collapse whitespace, strip; a lone space kept) share one compressed id. The map
   is built next to the tokenizer (model/tokenizer.py) and handed to `NgramHasher`.
2. Per position, the compressed ids of the token and the N-1 tokens before it (pad id where the
   look-back runs past the start or into an image span) are multiplied by odd per-layer int64
   multipliers (numpy default_rng(10007 * layer_id)) and XOR-chained; after adding the n-th token
   the running value is the n-gram hash, taken modulo a prime per (n, head) plus an offset.
3. Primes are drawn in increasing order above `engram_vocab_size`, never reused across heads,
   orders or layers; each layer's table stacks its buckets at running offsets.
The module fetches (N-1) x heads rows, projects them with `wkv` to one key per stream plus a
shared value, and adds gate * value to each stream, gate = sigmoid(signed sqrt of a normalised
stream-key dot product with weights q_weight * k_weight).
"""

from __future__ import annotations

import numpy as np
import torch

from ..config import V41Config, engram_primes

DEAD = -1  # a history slot that blocks the look-back (image-span token, or nothing written yet)


# ------------------------------------------------------------------------------------------------
# Primes and multipliers
# ------------------------------------------------------------------------------------------------

def engram_offsets(cfg: V41Config) -> list[list[int]]:
    out = []
    for layer in engram_primes(cfg):
        row, total = [], 0
        for p in (p for per in layer for p in per):
            row.append(total)
            total += p
        out.append(row)
    return out


def hash_multipliers(cfg: V41Config, compressed_vocab: int) -> torch.Tensor:
    """[n_engram_layers, max_ngram] odd int64 multipliers, bounded so id * m cannot overflow."""
    bound = max(1, (np.iinfo(np.int64).max // compressed_vocab) // 2)
    rows = []
    for lid in cfg.engram_layer_ids:
        g = np.random.default_rng(10007 * lid)
        rows.append(torch.from_numpy(g.integers(0, bound, size=(cfg.engram_max_ngram_size,), dtype=np.int64) * 2 + 1))
    return torch.stack(rows) if rows else torch.zeros(0, cfg.engram_max_ngram_size, dtype=torch.int64)


# ------------------------------------------------------------------------------------------------
# Hashing
# ------------------------------------------------------------------------------------------------

class NgramHasher(torch.nn.Module):
    """Token ids -> [B, S, n_engram_layers, (N-1)*heads] table rows (offsets included).

    `history` ([B, T] compressed ids by absolute position, DEAD where blocked) lets chunked
    prefill and decode hash exactly as one forward over the whole sequence would.
    """

    def __init__(self, cfg: V41Config, token_map: list[int] | None = None, compressed_vocab: int | None = None):
        super().__init__()
        self.cfg = cfg
        self.max_ngram = cfg.engram_max_ngram_size
        if token_map is None:
            token_map, compressed_vocab = list(range(cfg.vocab_size)), cfg.vocab_size
        self.compressed_vocab = int(compressed_vocab)
        self.register_buffer("token_map", torch.tensor(token_map, dtype=torch.int64), persistent=False)
        self.register_buffer("primes", torch.tensor(engram_primes(cfg), dtype=torch.int64).reshape(
            len(cfg.engram_layer_ids), self.max_ngram - 1, cfg.engram_n_heads), persistent=False)
        self.register_buffer("offsets", torch.tensor(engram_offsets(cfg), dtype=torch.int64).reshape(
            len(cfg.engram_layer_ids), -1), persistent=False)
        self.register_buffer("multipliers", hash_multipliers(cfg, self.compressed_vocab), persistent=False)

    @property
    def pad_id(self) -> int:
        return int(self.token_map[self.cfg.engram_pad_id])

    def compress(self, input_ids: torch.Tensor, live: torch.Tensor | None = None) -> torch.Tensor:
        c = self.token_map[input_ids]
        if live is not None:
            c = torch.where(live, c, torch.full_like(c, DEAD))
        return c

    def forward(self, compressed: torch.Tensor, history: torch.Tensor | None = None) -> torch.Tensor:
        """compressed: [B, S] ids of the new positions; history: [B, P] ids of the P positions before."""
        b, s = compressed.shape
        p = 0 if history is None else history.shape[1]
        seq = compressed if history is None else torch.cat([history, compressed], dim=1)
        pos = torch.arange(p, p + s, device=compressed.device)
        tokens, blocked = [], torch.zeros(b, s, dtype=torch.bool, device=compressed.device)
        for shift in range(self.max_ngram):
            src = seq[:, (pos - shift).clamp_min(0)]
            blocked = blocked | (pos < shift).unsqueeze(0) | (src == DEAD)
            tokens.append(torch.where(blocked, torch.full_like(src, self.pad_id), src))
        tokens = torch.stack(tokens, dim=-1)  # [B, S, N]
        products = tokens.unsqueeze(2) * self.multipliers  # [B, S, L, N]
        rolling, hashes = products[..., 0], []
        for i in range(1, self.max_ngram):
            rolling = torch.bitwise_xor(rolling, products[..., i])
            hashes.append(rolling.unsqueeze(-1) % self.primes[:, i - 1])
        return torch.cat(hashes, dim=-1) + self.offsets


# ------------------------------------------------------------------------------------------------
# The Engram module
# ------------------------------------------------------------------------------------------------

class EngramEmbedding(torch.nn.Module):
    """The n-gram table. `scale` (per row per 32 channels) only matters for FP8-stored tables."""

    def __init__(self, rows: int, dim: int, block: int = 32):
        super().__init__()
        self.block = block
        self.weight = torch.nn.Parameter(torch.empty(rows, dim))
        self.scale = torch.nn.Parameter(torch.ones(rows, max(1, dim // block)), requires_grad=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        v = torch.nn.functional.embedding(ids, self.weight)
        if self.weight.dtype == torch.float8_e4m3fn:
            s = torch.nn.functional.embedding(ids, self.scale).float()
            v = (v.float().unflatten(-1, (-1, self.block)) * s.unsqueeze(-1)).flatten(-2)
        return v


class Engram(torch.nn.Module):
    def __init__(self, cfg: V41Config, layer_id: int):
        super().__init__()
        self.slot = cfg.engram_layer_ids.index(layer_id)
        self.dim, self.hc = cfg.hidden_size, cfg.hc_mult
        self.eps = cfg.rms_norm_eps
        self.embed = EngramEmbedding(cfg.engram_num_embeddings[self.slot], cfg.engram_head_dim)
        self.wkv = torch.nn.Linear(cfg.n_hash_cols * cfg.engram_head_dim, cfg.hidden_size * (cfg.hc_mult + 1),
                                   bias=False)
        self.q_weight = torch.nn.Parameter(torch.ones(cfg.hc_mult, cfg.hidden_size))
        self.k_weight = torch.nn.Parameter(torch.ones(cfg.hc_mult, cfg.hidden_size))

    def forward(self, streams: torch.Tensor, hash_ids: torch.Tensor,
                live: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """streams [B, S, n, D], hash_ids [B, S, cols] -> (new streams, gate [B, S, n])."""
        kv = self.wkv(self.embed(hash_ids).flatten(-2).to(self.wkv.weight.dtype))
        key, value = kv.split([self.hc * self.dim, self.dim], dim=-1)
        key = key.float().unflatten(-1, (self.hc, self.dim))
        w = self.q_weight.float() * self.k_weight.float()
        h = streams.float()
        rstd = torch.rsqrt(h.square().mean(-1) + self.eps) * torch.rsqrt(key.square().mean(-1) + self.eps)
        dot = (h * w * key).sum(-1) * rstd * self.dim ** -0.5
        gate = torch.sigmoid(torch.copysign(dot.abs().clamp_min(1e-6).sqrt(), dot))
        if live is not None:
            gate = gate.masked_fill(~live.unsqueeze(-1), 0.0)
        out = h + gate.unsqueeze(-1) * value.float().unsqueeze(-2)
        return out.to(streams.dtype), gate
