"""How much does each layer's attention write into the mHC streams? `python -m lab.probes.mhc_post [weights]`

For each layer, on held-out prose (4 x 256 tokens): the attention site's mean `post` coefficient,
its static part 2*sigmoid(base) (what `post` is with the input-dependent projection removed), the
RMS of the attention output y, of post*y (what actually enters a stream) and of the streams it is
added to, and the RMS of the wo_b weight (the last projection of the attention output). A small
`post` with a large y is a rescaling (the same write, in other units); a small post*y relative to
the streams is a layer whose attention is effectively switched off. Ends with one line
`mhc_post: layers=... min_post=... mean_post=... min_post_y_layer=... min_post_y_rms=...`.
"""

from __future__ import annotations

import sys

import torch


def post_report(m, x: torch.Tensor) -> list[dict]:
    rows: list[dict] = []
    hooks = []
    for i, layer in enumerate(m.layers):
        def hook(mod, args, out, _i=i):
            rows.append({"layer": _i, "y_rms": float(out.float().pow(2).mean().sqrt())})
        hooks.append(layer.attn.register_forward_hook(hook))
    # the spy replaces the hc_mixes the block module calls, so it reaches into that module
    import model.arch.block as blk

    mixes: dict[int, dict] = {}
    orig = blk.hc_mixes

    def spy(streams, fn, base, scale, *a, **k):
        mix = orig(streams, fn, base, scale, *a, **k)
        n = streams.shape[-2]
        for i, layer in enumerate(m.layers):
            if fn is layer.hc_attn_fn:
                mixes[i] = {"post": float(mix.post.mean()),
                            "post_static": float((2 * torch.sigmoid(base[n:2 * n])).mean()),
                            "stream_rms": float(streams.float().pow(2).mean().sqrt())}
        return mix
    blk.hc_mixes = spy
    try:
        with torch.no_grad():
            m(x)
    finally:
        blk.hc_mixes = orig
        for h in hooks:
            h.remove()
    for r in rows:
        r.update(mixes.get(r["layer"], {}))
        r["post_y_rms"] = r.get("post", 0.0) * r["y_rms"]
        r["wo_b_rms"] = float(m.layers[r["layer"]].attn.wo_b.weight.detach().float().pow(2).mean().sqrt())
        r["ratio"] = m.layers[r["layer"]].attn.ratio
    return rows


def format_rows(rows: list[dict]) -> str:
    out = ["layer ratio  post  post_static  y_rms  post*y_rms  stream_rms  wo_b_rms"]
    for r in rows:
        out.append(f"{r['layer']:>5} {r['ratio']:>5} {r['post']:.3f} {r['post_static']:>11.3f} {r['y_rms']:.4f} "
                   f"{r['post_y_rms']:>10.4f} {r['stream_rms']:>11.4f} {r['wo_b_rms']:.4f}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    from model import load
    from model.heldout import heldout_natural_batches, heldout_natural_tokens

    argv = sys.argv[1:] if argv is None else argv
    torch.set_num_threads(1)
    path = argv[0] if argv else "data/weights/tiny"
    m = load(path, device="cpu")
    x, _ = next(iter(heldout_natural_batches(heldout_natural_tokens(m.tokenizer), 4, 256)))
    rows = post_report(m, x)
    print(format_rows(rows))
    low = min(rows, key=lambda r: r["post_y_rms"])  # the layer whose attention writes least into the streams
    print(f"mhc_post: layers={len(rows)} min_post={min(r['post'] for r in rows):.3f} "
          f"mean_post={sum(r['post'] for r in rows) / len(rows):.3f} min_post_y_layer={low['layer']} "
          f"min_post_y_rms={low['post_y_rms']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
