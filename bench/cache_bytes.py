"""`python -m bench.cache_bytes`: bytes the running cache holds vs the closed-form formula, and the
full v4.1-flash cache per token at 1M tokens (formula) against V4-Flash's.

Measured: a tiny-model cache after prefilling several lengths (exact and bounded, some leaving an
incomplete group) and decoding a few tokens; every byte of every store is counted. Formula:
model.accounting.cache_bytes from the config alone. They must be equal.
V4-Flash reference per token (docs/design/equations.md §14): 21 CSA layers x (584 + 132) / 4 bytes +
20 HCA layers x 584 / 128 bytes, with vLLM's formats.
"""

from __future__ import annotations

import sys

from bench._common import line, random_ids, tiny_model


def main(argv: list[str] | None = None) -> int:
    from model import V41Config, decode_step, prefill
    from model.accounting import cache_bytes

    model, what = tiny_model()
    total_m = total_f = 0
    print(f"model: {what}")
    print(f"{'prompt':>7} {'mode':>8} {'decoded':>8} {'measured B':>12} {'formula B':>12}")
    for n, mode, dec in [(37, "exact", 0), (200, "exact", 3), (513, "bounded", 0), (1001, "bounded", 5)]:
        ids = random_ids(n + dec, model.cfg.vocab_size, seed=n)
        pf = prefill(model, ids[:, :n], mode)
        for t in range(dec):
            decode_step(model, pf.cache, ids[:, n + t:n + t + 1])
        got = pf.cache.nbytes().total
        want = cache_bytes(model.cfg, n, dec, mode=mode).total
        total_m += got
        total_f += want
        print(f"{n:>7} {mode:>8} {dec:>8} {got:>12,} {want:>12,}")
    full = V41Config.preset("v4.1-flash")
    t = 1 << 20
    per_token = cache_bytes(full, t).total / t
    v4 = (21 * (584 + 132) / 4 + 20 * 584 / 128)
    print(f"v4.1-flash at {t:,} tokens: {per_token:,.1f} B/token; V4-Flash {v4:,.1f} B/token "
          f"({per_token / v4:.1%})")
    print(line("cache_bytes", measured=total_m, formula=total_f, equal=int(total_m == total_f),
               per_token_1m=per_token, vs_v4_flash=per_token / v4))
    return 0 if total_m == total_f else 1


if __name__ == "__main__":
    sys.exit(main())
