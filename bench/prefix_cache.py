"""`python -m bench.prefix_cache`: time to first token for a repeated 4K-token prompt, persistent
prefix cache hit vs miss, on the tiny model. Goal: >= 10x.

Miss: an empty cache directory, the whole prompt is read (and its prefix saved). Hit: the same
prompt again, served from disk by a fresh PrefixCache object (as a new server process would), so
only the tokens after the last saved group boundary are read. Host-memory and disk bytes of the
persistent cache are reported separately from the accelerator-side cache.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

import torch

from bench._common import line, random_ids, tiny_model


def ttft(model, ids, pc) -> tuple[float, int]:
    from model import Sampler, prefill

    t0 = time.perf_counter()
    pf = prefill(model, ids, "bounded", prefix_cache=pc)
    Sampler().sample(pf.logits)
    return time.perf_counter() - t0, pf.reused


def main(argv: list[str] | None = None) -> int:
    from model.inference import PrefixCache

    ap = argparse.ArgumentParser(prog="python -m bench.prefix_cache")
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args(argv)
    model, what = tiny_model()
    ids = random_ids(a.tokens, model.cfg.vocab_size)
    misses, hits, reused, stats = [], [], 0, None
    with torch.no_grad():
        ttft(model, ids[:, :256], None)  # warm-up
        for _ in range(a.repeats):
            with tempfile.TemporaryDirectory() as d:
                pc = PrefixCache(model, d)
                t_miss, _ = ttft(model, ids, pc)
                pc2 = PrefixCache(model, d)      # a new process: nothing in host memory, files on disk
                t_hit, reused = ttft(model, ids, pc2)
                stats = pc2.stats()
            misses.append(t_miss)
            hits.append(t_hit)
    miss, hit = min(misses), min(hits)
    print(f"model: {what}; prompt {a.tokens} tokens; reused {reused} from disk")
    print(f"time to first token: miss {miss:.3f} s, hit {hit:.3f} s")
    print(f"persistent cache: host {stats.host_bytes:,} B, disk {stats.disk_bytes:,} B (separate from the "
          f"accelerator-side cache)")
    print(line("prefix_cache", ttft_speedup=miss / hit, miss_s=miss, hit_s=hit, reused=reused,
               disk_bytes=stats.disk_bytes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
