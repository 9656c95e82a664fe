"""Persistent prefix cache: reuse the cache state of a prompt prefix across requests.

Follows docs/design/architecture.md §3.4 and the second teaching text's point (docs/design/sources.md §4) that a
persistent cache (host memory or SSD) is a different thing from memory on the accelerator: its bytes are reported
separately.

- A state is saved at a group boundary (a multiple of `align`, by default the least common
  multiple of the compress ratios times 16) while a prompt is prefilled, keyed by the token ids,
  the prefill mode, the rollback slack and a fingerprint of the model.
- Lookup finds the longest saved prefix of a new prompt; prefill then reads only the rest.
- Two tiers with byte budgets and least-recently-used eviction: host memory, and a directory of
  safetensors files plus `index.json`. Writes go to a temporary file and are renamed into place;
  every file's sha256 is in the index and is checked on read. A corrupt, truncated or foreign file
  is dropped (with a warning) and the prefix is recomputed. If the directory cannot be written,
  the disk tier turns itself off with a warning.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import reduce
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from ..tokenizer import sha256_file
from .cache import Cache


def model_fingerprint(model) -> str:
    """Identifies the weights a state was computed with (config + a digest of a few tensors)."""
    h = hashlib.sha256(json.dumps(model.cfg.to_dict(), sort_keys=True).encode())
    for name in ("embed.weight", "head.weight", "norm.weight"):
        t = model.state_dict()[name].detach().float().cpu().contiguous()
        h.update(t.flatten()[:: max(1, t.numel() // 4096)].numpy().tobytes())
    return h.hexdigest()[:32]


def _key(ids: torch.Tensor, mode: str, rollback: int, fp: str) -> str:
    h = hashlib.sha256(f"{fp}|{mode}|{rollback}|".encode())
    h.update(ids.detach().cpu().to(torch.int64).contiguous().numpy().tobytes())
    return h.hexdigest()[:40]


@dataclass
class PrefixStats:
    host_bytes: int
    disk_bytes: int
    host_entries: int
    disk_entries: int
    hits: int
    misses: int
    saved: int
    dropped: int
    warnings: list[str] = field(default_factory=list)


class PrefixCache:
    def __init__(self, model, directory: str | Path | None = None, host_budget: int = 512 << 20,
                 disk_budget: int = 4 << 30, align: int | None = None, min_tokens: int | None = None):
        self.model = model
        self.cfg = model.cfg
        ratios = [r for r in self.cfg.backbone_ratios if r > 0] or [1]
        self.align = align or reduce(lambda a, b: a * b // math.gcd(a, b), ratios) * 16
        self.min_tokens = min_tokens if min_tokens is not None else self.align
        self.host_budget, self.disk_budget = host_budget, disk_budget
        self.fp = model_fingerprint(model)
        self.host: OrderedDict[str, dict[str, torch.Tensor]] = OrderedDict()
        self.hits = self.misses = self.saved = self.dropped = 0
        self.warnings: list[str] = []
        self.dir: Path | None = None
        self.index: dict[str, dict] = {}
        if directory is not None:
            self._open_dir(Path(directory))

    # ---- disk tier -------------------------------------------------------------------------------
    def _warn(self, msg: str) -> None:
        self.warnings.append(msg)

    def _open_dir(self, d: Path) -> None:
        try:
            d.mkdir(parents=True, exist_ok=True)
            probe = d / ".write-test"
            probe.write_bytes(b"ok")
            probe.unlink()
        except OSError as e:
            self._warn(f"persistent prefix cache disabled: cannot write to {d} ({e.strerror or e})")
            return
        self.dir = d
        idx = d / "index.json"
        if idx.exists():
            try:
                data = json.loads(idx.read_text())
                self.index = {k: v for k, v in data.get("entries", {}).items() if isinstance(v, dict)}
            except (OSError, json.JSONDecodeError) as e:
                self._warn(f"prefix cache index {idx} is unreadable ({e}); starting an empty index")
                self.index = {}

    def _write_index(self) -> None:
        if self.dir is None:
            return
        try:
            fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=".index-", suffix=".json")
            with os.fdopen(fd, "w") as f:
                json.dump({"version": 1, "entries": self.index}, f)
            os.replace(tmp, self.dir / "index.json")
        except OSError as e:
            self._warn(f"persistent prefix cache disabled: cannot write its index ({e})")
            self.dir = None

    def _disk_put(self, key: str, state: dict[str, torch.Tensor], meta: dict) -> None:
        if self.dir is None:
            return
        path = self.dir / f"{key}.safetensors"
        try:
            fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=".tmp-", suffix=".safetensors")
            os.close(fd)
            save_file(state, tmp, metadata={k: str(v) for k, v in meta.items()})
            digest = sha256_file(Path(tmp))
            os.replace(tmp, path)
        except OSError as e:
            self._warn(f"persistent prefix cache disabled: writing {path.name} failed ({e.strerror or e})")
            self.dir = None
            return
        self.index[key] = dict(meta, file=path.name, sha256=digest, bytes=path.stat().st_size)
        self._evict_disk()
        self._write_index()

    def _disk_get(self, key: str) -> dict[str, torch.Tensor] | None:
        if self.dir is None or key not in self.index:
            return None
        ent = self.index[key]
        path = self.dir / ent.get("file", "")
        problem = None
        if not path.is_file():
            problem = "is missing"
        elif sha256_file(path) != ent.get("sha256"):
            problem = "failed its checksum (corrupt or truncated)"
        else:
            try:
                with safe_open(str(path), "pt") as f:
                    meta = f.metadata() or {}
                state = load_file(str(path))
                if meta.get("fingerprint") != self.fp or "meta" not in state:
                    problem = "belongs to other weights"
            except Exception as e:  # unreadable safetensors header
                problem = f"is not a readable safetensors file ({e})"
        if problem:
            self._warn(f"prefix cache file {path.name} {problem}; dropped it and recomputed the prefix")
            self._drop(key)
            return None
        ent["uses"] = ent.get("uses", 0) + 1
        return state

    def _drop(self, key: str) -> None:
        self.dropped += 1
        ent = self.index.pop(key, None)
        if ent and self.dir is not None:
            try:
                (self.dir / ent["file"]).unlink(missing_ok=True)
            except OSError:
                pass
            self._write_index()

    def _evict_disk(self) -> None:
        total = sum(e.get("bytes", 0) for e in self.index.values())
        order = sorted(self.index, key=lambda k: self.index[k].get("clock", 0))
        while total > self.disk_budget and order:
            k = order.pop(0)
            total -= self.index[k].get("bytes", 0)
            ent = self.index.pop(k)
            try:
                (self.dir / ent["file"]).unlink(missing_ok=True)
            except OSError:
                pass

    # ---- public ----------------------------------------------------------------------------------
    def save_point(self, total: int) -> int | None:
        p = (total // self.align) * self.align
        return p if p >= self.min_tokens else None

    def save(self, ids: torch.Tensor, cache: Cache) -> None:
        n = ids.shape[1]
        key = _key(ids[0, :n], cache.mode, cache.rollback_slack, self.fp)
        if key in self.host or key in self.index:
            return
        state = cache.state()
        nbytes = sum(t.nbytes for t in state.values())
        if nbytes <= self.host_budget:
            self.host[key] = state
            self._evict_host()
        clock = self.saved + self.hits + self.misses
        self._disk_put(key, state, {"fingerprint": self.fp, "mode": cache.mode, "rollback": cache.rollback_slack,
                                    "tokens": n, "clock": clock})
        self.saved += 1

    def _evict_host(self) -> None:
        while self.host and sum(sum(t.nbytes for t in s.values()) for s in self.host.values()) > self.host_budget:
            self.host.popitem(last=False)

    def lookup(self, ids: torch.Tensor, mode: str, rollback: int) -> tuple[Cache, int] | None:
        """The longest saved prefix of `ids` (at aligned lengths) as a fresh Cache, and its length."""
        n = ids.shape[1]
        if ids.shape[0] != 1:
            return None
        for length in range((n // self.align) * self.align, self.min_tokens - 1, -self.align):
            if length <= 0:
                break
            key = _key(ids[0, :length], mode, rollback, self.fp)
            state = self.host.get(key)
            if state is not None:
                self.host.move_to_end(key)
            else:
                state = self._disk_get(key)
                if state is not None and sum(t.nbytes for t in state.values()) <= self.host_budget:
                    self.host[key] = state
                    self._evict_host()
            if state is None:
                continue
            cache = Cache.from_state(self.cfg, state, device=self.model.device, mode=mode)
            if cache.length != length or not torch.equal(cache.tokens[0].cpu(), ids[0, :length].cpu()):
                self._warn("a prefix cache entry did not match its key; dropped it")
                self.host.pop(key, None)
                self._drop(key)
                continue
            self.hits += 1
            if key in self.index:
                self.index[key]["clock"] = self.saved + self.hits + self.misses
            return cache, length
        self.misses += 1
        return None

    def stats(self) -> PrefixStats:
        host = sum(sum(t.nbytes for t in s.values()) for s in self.host.values())
        disk = sum(e.get("bytes", 0) for e in self.index.values())
        return PrefixStats(host_bytes=host, disk_bytes=disk, host_entries=len(self.host), disk_entries=len(self.index),
                           hits=self.hits, misses=self.misses, saved=self.saved, dropped=self.dropped,
                           warnings=list(self.warnings))

    def clear_host(self) -> None:
        self.host.clear()
