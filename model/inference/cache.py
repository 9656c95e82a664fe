"""The per-request cache, holding what the real system stores, as packed bytes.

Follows docs/design/architecture.md §3.2-3.3 and docs/design/equations.md §7:
- every layer: its window of K=V rows in FP8 E4M3 + one UE8M0 scale per 32 values
  (`sliding_window - 1 + rollback` rows: W-1 earlier rows are what the next token reads, plus
  `rollback` rows of slack so the last positions can be dropped again);
- every KV source: its compressed latents in FP4 E2M1 (two per byte) + one E4M3 scale per 16,
  and its index keys in FP4 + one UE8M0 scale per 32;
- every KV source with ratio > 1: the projected rows (kv and gate, fp32) of the incomplete group,
  plus, with rollback slack, the rows needed to rebuild it after a rollback.
The candidate pool has no state of its own: it is recomputed from the index scores per query.
Reading dequantizes to exactly the values of the model's fake quantisation, so a forward through
the cache computes what a one-shot forward computes.

`nbytes()` reports the bytes actually held, per layer and per kind; model/accounting.py predicts
the same numbers from the config alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..config import V41Config
from ..errors import CacheError
from ..quant import INDEX_FMT, LATENT_FMT, WINDOW_FMT, Format, pack, unpack

KINDS = ("window", "latents", "index_keys", "pending")


class PackedRows:
    """Rows [B, n, dim] stored as (values, scales) bytes in one format; exact-size tensors."""

    def __init__(self, fmt: Format, dim: int):
        self.fmt, self.dim = fmt, dim
        self.values: torch.Tensor | None = None
        self.scales: torch.Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.values is None else self.values.shape[1]

    def append(self, rows: torch.Tensor) -> None:
        v, s = pack(rows, self.fmt)
        if self.values is None:
            self.values, self.scales = v, s
        else:
            self.values = torch.cat([self.values, v], dim=1)
            self.scales = torch.cat([self.scales, s], dim=1)

    def keep_last(self, n: int) -> None:
        if self.values is not None and len(self) > n:
            cut = len(self) - n
            self.values = self.values[:, cut:].clone()
            self.scales = self.scales[:, cut:].clone()

    def truncate(self, n: int) -> None:
        if self.values is not None and len(self) > n:
            self.values = self.values[:, :n].clone()
            self.scales = self.scales[:, :n].clone()

    def read(self, start: int = 0, stop: int | None = None) -> torch.Tensor:
        if self.values is None:
            raise CacheError("empty store")
        return unpack(self.values[:, start:stop], self.scales[:, start:stop], self.fmt, self.dim)

    def gather(self, idx: torch.Tensor) -> torch.Tensor:
        """idx [B, S, k] (-1 = none, read as row 0) -> rows [B, S, k, dim]."""
        b, s, k = idx.shape
        flat = idx.clamp_min(0).reshape(b, s * k)
        v = self.values.gather(1, flat.unsqueeze(-1).expand(-1, -1, self.values.shape[-1]))
        sc = self.scales.gather(1, flat.unsqueeze(-1).expand(-1, -1, self.scales.shape[-1]))
        return unpack(v, sc, self.fmt, self.dim).reshape(b, s, k, self.dim)

    def nbytes(self) -> int:
        return 0 if self.values is None else self.values.nbytes + self.scales.nbytes

    def state(self, prefix: str) -> dict[str, torch.Tensor]:
        return {} if self.values is None else {f"{prefix}.values": self.values, f"{prefix}.scales": self.scales}

    def load_state(self, prefix: str, t: dict[str, torch.Tensor]) -> None:
        if f"{prefix}.values" in t:
            self.values, self.scales = t[f"{prefix}.values"], t[f"{prefix}.scales"]


class WindowStore:
    """One layer's recent K=V rows (FP8)."""

    def __init__(self, dim: int, capacity: int):
        self.rows = PackedRows(WINDOW_FMT, dim)
        self.capacity = capacity

    def __len__(self) -> int:
        return len(self.rows)

    def last(self, n: int) -> torch.Tensor | None:
        k = min(n, len(self.rows))
        return None if k == 0 else self.rows.read(len(self.rows) - k)

    def append(self, rows: torch.Tensor) -> None:
        self.rows.append(rows)
        self.rows.keep_last(self.capacity)

    def rollback(self, n: int, needed_after: int) -> None:
        if len(self.rows) - n < needed_after:
            raise CacheError(f"cannot roll back {n} positions: the window keeps only {len(self.rows)} rows "
                             f"(rollback slack {self.capacity} - window)")
        self.rows.truncate(len(self.rows) - n)

    def nbytes(self) -> int:
        return self.rows.nbytes()


class SourceStore:
    """One KV source's compressed entries, index keys and not-yet-pooled rows."""

    def __init__(self, ratio: int, dim: int, index_dim: int, rollback: int):
        self.ratio, self.dim, self.rollback_slack = ratio, dim, rollback
        self.entries = PackedRows(LATENT_FMT, dim)
        self.keys = PackedRows(INDEX_FMT, index_dim)
        self.length = 0                          # positions fed to the compressor
        self.rows_kv: torch.Tensor | None = None  # [B, m, d] fp32 rows of positions [length-m, length)
        self.rows_gate: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.entries)

    def keep_rows(self, length: int) -> int:
        """Projected rows kept at a given length: the incomplete group, plus slack for rollback."""
        if self.ratio == 1:
            return 0
        if self.rollback_slack == 0:
            return length % self.ratio
        return min(length, self.rollback_slack + self.ratio - 1)

    def take_groups(self, kv: torch.Tensor, gate: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None, int]:
        """Add new projected rows; return the rows of the groups completed now and their first position."""
        r, s = self.ratio, kv.shape[1]
        g_before = len(self.entries)
        new_len = self.length + s
        if r == 1:
            self.length = new_len
            return kv, None, g_before
        kv, gate = kv.float(), gate.float()
        all_kv = kv if self.rows_kv is None else torch.cat([self.rows_kv, kv], dim=1)
        all_gate = gate if self.rows_gate is None else torch.cat([self.rows_gate, gate], dim=1)
        first = new_len - all_kv.shape[1]         # position of all_kv[:, 0]
        g_after = new_len // r
        lo, hi = g_before * r - first, g_after * r - first
        chunk_kv, chunk_gate = all_kv[:, lo:hi], all_gate[:, lo:hi]
        m = self.keep_rows(new_len)
        self.rows_kv = all_kv[:, all_kv.shape[1] - m:].clone()
        self.rows_gate = all_gate[:, all_gate.shape[1] - m:].clone()
        self.length = new_len
        return chunk_kv, chunk_gate, g_before * r

    def append(self, entries: torch.Tensor, keys: torch.Tensor) -> None:
        self.entries.append(entries)
        self.keys.append(keys)

    def all_entries(self) -> torch.Tensor:
        return self.entries.read()

    def all_keys(self) -> torch.Tensor:
        return self.keys.read()

    def gather(self, idx: torch.Tensor) -> torch.Tensor:
        return self.entries.gather(idx)

    def rollback(self, n: int) -> None:
        new_len = self.length - n
        g = new_len // self.ratio
        self.entries.truncate(g)
        self.keys.truncate(g)
        if self.ratio > 1:
            m = 0 if self.rows_kv is None else self.rows_kv.shape[1]
            avail = m - n
            need = self.keep_rows(new_len)
            if avail < new_len % self.ratio:
                raise CacheError(f"cannot roll back {n} positions: the compressor kept only {m} recent rows")
            keep = min(need, avail)
            self.rows_kv = self.rows_kv[:, avail - keep:avail].clone()
            self.rows_gate = self.rows_gate[:, avail - keep:avail].clone()
        self.length = new_len

    def pending_bytes(self) -> int:
        if self.rows_kv is None:
            return 0
        return self.rows_kv.nbytes + self.rows_gate.nbytes


@dataclass
class Bytes:
    """Bytes held, by kind and by layer."""

    by_kind: dict[str, int]
    by_layer: dict[int, dict[str, int]]

    @property
    def total(self) -> int:
        return sum(self.by_kind.values())


class Cache:
    """Everything one request keeps between forward calls."""

    def __init__(self, cfg: V41Config, device: torch.device | str = "cpu", batch: int = 1, rollback: int = 1,
                 mode: str = "exact"):
        if rollback < 0:
            raise CacheError("rollback slack must be >= 0")
        self.cfg, self.device, self.batch = cfg, torch.device(device), batch
        self.rollback_slack, self.mode = rollback, mode
        self.length = 0
        self.tokens = torch.zeros(batch, 0, dtype=torch.long, device=self.device)
        self.compressed = torch.zeros(batch, 0, dtype=torch.long, device=self.device)
        self.windows: dict[int, WindowStore] = {}
        self.sources: dict[int, SourceStore] = {}
        self.pending_ids: torch.Tensor | None = None
        self.pending_compressed: torch.Tensor | None = None
        # bounded prefill: the decoder layers' windows start at this position, and until the replay
        # runs, the decoder-input streams and `pre` of the last W prompt rows are carried here
        self.decoder_floor = 0
        self.carry: tuple[torch.Tensor, torch.Tensor] | None = None

    # ---- stores --------------------------------------------------------------------------------
    def window(self, layer: int) -> WindowStore:
        if layer not in self.windows:
            self.windows[layer] = WindowStore(self.cfg.head_dim, self.cfg.sliding_window - 1 + self.rollback_slack)
        return self.windows[layer]

    def source(self, layer: int) -> SourceStore:
        if layer not in self.sources:
            self.sources[layer] = SourceStore(self.cfg.backbone_ratios[layer], self.cfg.head_dim,
                                              self.cfg.index_head_dim, self.rollback_slack)
        return self.sources[layer]

    # ---- positions -----------------------------------------------------------------------------
    def stage(self, ids: torch.Tensor, compressed: torch.Tensor | None = None) -> None:
        """A forward is reading these rows ([B, S] ids and their Engram-compressed ids): `advance` commits them."""
        self.pending_ids, self.pending_compressed = ids, compressed

    def advance(self, n: int) -> None:
        """Called after a forward over n new rows: commit their ids to the history."""
        if self.pending_ids is not None:
            self.tokens = torch.cat([self.tokens, self.pending_ids.to(self.device)], dim=1)
        if self.pending_compressed is not None:
            self.compressed = torch.cat([self.compressed, self.pending_compressed.to(self.device)], dim=1)
        self.pending_ids = self.pending_compressed = None
        self.length += n

    # ---- bounded prefill -----------------------------------------------------------------------
    def keep_carry(self, streams: torch.Tensor, pre: torch.Tensor) -> None:
        """After the encoder read some prompt rows: keep the decoder-input streams and `pre` of the last W rows read
        so far, which the replay will run through the decoder (a prefix-cache save keeps them too)."""
        w = self.cfg.sliding_window
        if self.carry is not None:
            streams, pre = torch.cat([self.carry[0], streams], 1), torch.cat([self.carry[1], pre], 1)
        self.carry = streams[:, -w:].clone(), pre[:, -w:].clone()

    def begin_replay(self) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Hand the carried rows to the decoder's replay -> (streams, pre, their first position). From now on the
        decoder layers' windows start at that position, and decode needs no carry."""
        if self.carry is None:
            raise CacheError("no carried rows to replay: the encoder has not read any prompt rows in bounded mode")
        streams, pre = self.carry
        self.carry = None
        self.decoder_floor = self.length - streams.shape[1]
        return streams, pre, self.decoder_floor

    def engram_history(self, n: int) -> torch.Tensor | None:
        if self.compressed.shape[1] == 0:
            return None
        return self.compressed[:, -n:] if n else self.compressed[:, :0]

    def rollback(self, n: int) -> None:
        """Drop the last n positions from every structure, as if they had never been seen."""
        if n < 0 or n > self.length:
            raise CacheError(f"rollback({n}) out of range: the cache holds {self.length} positions")
        if n == 0:
            return
        if n > self.rollback_slack:
            raise CacheError(f"rollback({n}) exceeds the cache's rollback slack of {self.rollback_slack} positions")
        new_len = self.length - n
        w = self.cfg.sliding_window - 1
        for layer, store in self.windows.items():
            floor = self.decoder_floor if layer >= self.cfg.decoder_start else 0
            store.rollback(n, min(w, max(0, new_len - floor)))
        for store in self.sources.values():
            store.rollback(n)
        self.tokens = self.tokens[:, :new_len]
        self.compressed = self.compressed[:, :new_len]
        self.length = new_len

    # ---- bytes ---------------------------------------------------------------------------------
    def nbytes(self) -> Bytes:
        by_layer: dict[int, dict[str, int]] = {}
        for layer, st in self.windows.items():
            by_layer.setdefault(layer, dict.fromkeys(KINDS, 0))["window"] = st.nbytes()
        for layer, st in self.sources.items():
            d = by_layer.setdefault(layer, dict.fromkeys(KINDS, 0))
            d["latents"] = st.entries.nbytes()
            d["index_keys"] = st.keys.nbytes()
            d["pending"] = st.pending_bytes()
        by_kind = {k: sum(d[k] for d in by_layer.values()) for k in KINDS}
        return Bytes(by_kind, dict(sorted(by_layer.items())))

    # ---- persistence (prefix cache) -------------------------------------------------------------
    def state(self) -> dict[str, torch.Tensor]:
        t: dict[str, torch.Tensor] = {"tokens": self.tokens, "compressed": self.compressed,
                                      "meta": torch.tensor([self.length, self.rollback_slack, self.decoder_floor])}
        for layer, st in self.windows.items():
            t.update(st.rows.state(f"window.{layer}"))
        for layer, st in self.sources.items():
            t.update(st.entries.state(f"source.{layer}.entries"))
            t.update(st.keys.state(f"source.{layer}.keys"))
            t[f"source.{layer}.length"] = torch.tensor([st.length])
            if st.rows_kv is not None:
                t[f"source.{layer}.rows_kv"] = st.rows_kv
                t[f"source.{layer}.rows_gate"] = st.rows_gate
        if self.carry is not None:
            t["carry.streams"], t["carry.pre"] = self.carry
        return {k: v.detach().cpu().clone().contiguous() for k, v in t.items()}

    def essential_state(self) -> dict[str, torch.Tensor]:
        """What any future step can read: the last W-1 rows of each window, every entry and index key,
        the rows of the incomplete groups, the token history. Two caches with equal essential states
        produce identical logits from here on, even if one keeps more rollback slack than the other
        (a rollback leaves fewer spare rows until new tokens refill them)."""
        w = self.cfg.sliding_window - 1
        t: dict[str, torch.Tensor] = {"tokens": self.tokens, "length": torch.tensor([self.length])}
        for layer, st in sorted(self.windows.items()):
            k = min(w, len(st.rows))
            if k:
                t[f"window.{layer}.values"] = st.rows.values[:, len(st.rows) - k:]
                t[f"window.{layer}.scales"] = st.rows.scales[:, len(st.rows) - k:]
        for layer, st in sorted(self.sources.items()):
            t.update(st.entries.state(f"source.{layer}.entries"))
            t.update(st.keys.state(f"source.{layer}.keys"))
            pend = st.length % st.ratio if st.ratio > 1 else 0
            if pend:
                t[f"source.{layer}.pending_kv"] = st.rows_kv[:, st.rows_kv.shape[1] - pend:]
                t[f"source.{layer}.pending_gate"] = st.rows_gate[:, st.rows_gate.shape[1] - pend:]
        return {k: v.detach().cpu() for k, v in t.items()}

    @classmethod
    def from_state(cls, cfg: V41Config, t: dict[str, torch.Tensor], device: torch.device | str = "cpu",
                   mode: str = "exact") -> "Cache":
        length, slack, floor = (int(x) for x in t["meta"].tolist())
        c = cls(cfg, device=device, batch=t["tokens"].shape[0], rollback=slack, mode=mode)
        c.length, c.decoder_floor = length, floor
        t = {k: v.to(c.device) for k, v in t.items()}
        c.tokens, c.compressed = t["tokens"], t["compressed"]
        if "carry.streams" in t:
            c.carry = (t["carry.streams"], t["carry.pre"])
        for key in t:
            parts = key.split(".")
            if parts[0] == "window" and parts[2] == "values":
                c.window(int(parts[1])).rows.load_state(f"window.{parts[1]}", t)
            elif parts[0] == "source" and parts[2] == "length":
                layer = int(parts[1])
                st = c.source(layer)
                st.length = int(t[key][0])
                st.entries.load_state(f"source.{layer}.entries", t)
                st.keys.load_state(f"source.{layer}.keys", t)
                st.rows_kv = t.get(f"source.{layer}.rows_kv")
                st.rows_gate = t.get(f"source.{layer}.rows_gate")
        return c
