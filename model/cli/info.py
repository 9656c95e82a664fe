"""`python -m model info --preset v4.1-flash`: the layer map and parameter counts of a config
(docs/design/architecture.md §2: layer roles; the counts come from model/accounting.py)."""

from __future__ import annotations

import argparse
import sys

from ..accounting import cache_bytes, count_params
from ..config import ConfigError, V41Config, nice_int
from ..layer_map import layer_map


def info(cfg: V41Config) -> str:
    out = [f"config: {cfg.name}  ({cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, "
           f"{cfg.n_routed_experts} routed experts, top-{cfg.num_experts_per_tok} + {cfg.n_shared_experts} shared)", "",
           f"{'layer':>5} {'(1-based)':>9}  {'stack':8} {'role':8} {'ratio':>5} {'kv src':>6} {'idx src':>7}  notes"]
    for s in layer_map(cfg):
        notes = []
        if s.engram:
            notes.append("Engram")
        if s.candidate_source:
            notes.append("candidate source")
        if s.uses_candidates:
            notes.append("inside pool")
        out.append(f"{s.index:>5} {s.number:>9}  {s.stack:8} {s.role:8} {s.compress_ratio:>5} "
                   f"{'' if s.kv_source is None else s.kv_source:>6} "
                   f"{'' if s.index_source is None else s.index_source:>7}  "
                   + ", ".join(notes))
    specs = layer_map(cfg)
    enc = [s for s in specs if s.stack == "encoder"]
    dec = [s for s in specs if s.stack == "decoder"]
    out += ["", f"encoder: {len(enc)} layers ({sum(s.role == 'SWA' for s in enc)} window-only, "
            f"{sum(s.role == 'Full' for s in enc)} Full, {sum(s.role == 'Reuse' for s in enc)} Reuse); "
            f"decoder: {len(dec)} layers ({sum(s.role == 'Full' for s in dec)} Full, "
            f"{sum(s.role == 'Reindex' for s in dec)} Reindex, {sum(s.role == 'Reuse' for s in dec)} Reuse)"]
    pc = count_params(cfg)
    out += ["", "parameters (from the module tree on the meta device):",
            f"  backbone (layers + embeddings + head): {nice_int(pc.backbone)} ({pc.backbone:,})",
            f"  Engram: {nice_int(pc.engram)}   drafter: {nice_int(pc.drafter)} ({pc.drafter_from})   "
            f"vision: {nice_int(pc.vision)} ({pc.vision_from})",
            f"  total: {nice_int(pc.total)} ({pc.total:,})",
            f"  active per prompt token (bounded prefill): {nice_int(pc.active_prefill)}",
            f"  active per generated token (decode): {nice_int(pc.active_decode)}",
            "  by component: " + ", ".join(f"{k} {nice_int(v)}" for k, v in sorted(pc.by_component.items())
                                           if v)]
    t = 1 << 20
    cb = cache_bytes(cfg, t)
    out += ["", f"cache at {t:,} tokens (formula): {cb.total / 2 ** 20:,.1f} MiB = {cb.total / t:,.1f} bytes/token "
            + "(" + ", ".join(f"{k} {v / 2 ** 20:,.1f} MiB" for k, v in cb.by_kind.items()) + ")"]
    return "\n".join(out)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m model info", description="print the layer map and parameter counts")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--preset", default="v4.1-flash")
    g.add_argument("--config", help="a config.json or checkpoint directory")
    a = ap.parse_args(argv)
    try:
        cfg = V41Config.from_json(a.config) if a.config else V41Config.preset(a.preset)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(info(cfg))
    return 0
