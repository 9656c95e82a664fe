"""python -m bench.streaming: peak memory and time per token, fully resident vs layer-streamed
(docs/design/checkpoints.md §5).

Writes a release-layout checkpoint (sharded, FP8 linears + MXFP4 experts, model/checkpoint/writer.py) of the
`small` preset (40 layers at the released layer map) widened so that the weights dominate the
process (default hidden 256, 16 routed experts of width 256: ~0.55 GB at fp32), then runs each mode
in a fresh Python process:

- resident: `load(..., stream=False)`, every layer dequantized in memory;
- streamed: `load(..., stream=True, budget_bytes=1)`, so only embeddings, final norm and
  head stay resident and one layer at a time is read from the shards and dequantized.

Each child reads a prompt (exact prefill, one chunk), then decodes greedily, and reports its peak
resident set size (VmHWM from /proc/self/status, which includes the Python + torch baseline, also
reported), the prefill time and the time per decoded token. The parent checks that both modes give
bitwise-identical prompt logits and the same tokens.

Ends with one line: `streaming: resident_mb=... streamed_mb=... ratio=... identical=1|0`,
ratio = resident_mb / streamed_mb (how many times less memory the streamed process peaks at).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def status_mb(key: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def build(out: Path, hidden: int, experts: int, inter: int, seed: int) -> dict:
    """Random weights for the widened small preset, written in the release layout."""
    import torch

    from model import V41Config, V41Model
    from model.checkpoint import write_release

    cfg = V41Config.preset("small").replace(hidden_size=hidden, n_routed_experts=experts, moe_intermediate_size=inter)
    cfg = cfg.validate()
    torch.manual_seed(seed)
    m = V41Model(cfg).init_weights(seed)
    with torch.no_grad():  # give the hyper-connections and the router something to do, as the tests do
        g = torch.Generator().manual_seed(seed + 1)
        for name, p in m.named_parameters():
            if name.endswith(("hc_attn_fn", "hc_ffn_fn")):
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
            elif p.ndim == 2 and "embed" not in name:
                p.copy_(torch.randn(p.shape, generator=g) * p.shape[1] ** -0.5)
    n_params = sum(p.numel() for p in m.parameters())
    write_release(m, out, max_shard_bytes=64 << 20)
    stored = sum(f.stat().st_size for f in out.glob("*.safetensors"))
    return {"params": n_params, "fp32_mb": n_params * 4 / 2**20, "stored_mb": stored / 2**20,
            "shards": len(list(out.glob("*.safetensors")))}


def child(mode: str, ckpt: str, prompt_len: int, new_tokens: int, out: str, threads: int) -> None:
    import torch

    torch.set_num_threads(threads)
    from safetensors.torch import save_file

    from model import decode_step, load, prefill

    base = status_mb("VmRSS")
    t0 = time.perf_counter()
    if mode == "streamed":
        m = load(ckpt, device="cpu", stream=True, budget_bytes=1)
    else:
        m = load(ckpt, device="cpu", stream=False)
    load_s = time.perf_counter() - t0
    after_load = status_mb("VmRSS")
    ids = torch.randint(5, m.cfg.vocab_size, (1, prompt_len), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        t0 = time.perf_counter()
        pf = prefill(m, ids, "exact", chunk_size=prompt_len)
        prefill_s = time.perf_counter() - t0
        logits, toks = pf.logits, []
        t0 = time.perf_counter()
        for _ in range(new_tokens):
            nxt = logits.argmax(-1)
            toks.append(int(nxt[0]))
            logits = decode_step(m, pf.cache, nxt.view(-1, 1))[:, -1]
        decode_s = time.perf_counter() - t0
    save_file({"logits": pf.logits.contiguous(), "last": logits.contiguous(), "tokens": torch.tensor(toks)}, out)
    loads = m.streamer.loads if m.streamer is not None else 0
    print("RESULT " + json.dumps({
        "mode": mode, "peak_mb": status_mb("VmHWM"), "baseline_mb": base, "after_load_mb": after_load,
        "load_s": load_s, "prefill_s": prefill_s, "s_per_token": decode_s / max(1, new_tokens),
        "layer_loads": loads, "streamed": m.release.streamed}))


def run_child(mode: str, ckpt: Path, args, out: Path) -> dict:
    cmd = [sys.executable, "-m", "bench.streaming", "--child", mode, "--ckpt", str(ckpt), "--out", str(out),
           "--prompt-len", str(args.prompt_len), "--new-tokens", str(args.new_tokens), "--threads", str(args.threads)]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if p.returncode or line is None:
        sys.stderr.write(p.stderr[-3000:])
        raise SystemExit(f"{mode} child failed (exit {p.returncode})")
    return json.loads(line[len("RESULT "):])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--experts", type=int, default=16)
    ap.add_argument("--inter", type=int, default=256, help="moe_intermediate_size")
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ckpt", default=None, help="release directory to use; written there (and kept) if it "
                                                 "has no config.json yet")
    ap.add_argument("--child", choices=("resident", "streamed"), help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.ckpt, args.prompt_len, args.new_tokens, args.out, args.threads)
        return

    import torch
    from safetensors.torch import load_file

    with tempfile.TemporaryDirectory(prefix="bench_streaming_") as tmp:
        tmp = Path(tmp)
        ckpt = Path(args.ckpt) if args.ckpt else tmp / "ckpt"
        if not (ckpt / "config.json").exists():
            t0 = time.perf_counter()
            info = build(ckpt, args.hidden, args.experts, args.inter, seed=0)
            print(f"checkpoint: small preset, hidden {args.hidden}, {args.experts} experts x {args.inter}: "
                  f"{info['params'] / 1e6:.1f}M params = {info['fp32_mb']:.0f} MiB at fp32, stored "
                  f"{info['stored_mb']:.0f} MiB (FP8 + MXFP4) in {info['shards']} shards "
                  f"({time.perf_counter() - t0:.1f}s)")
        res = {mode: run_child(mode, ckpt, args, tmp / f"{mode}.safetensors") for mode in ("resident", "streamed")}
        a, b = load_file(str(tmp / "resident.safetensors")), load_file(str(tmp / "streamed.safetensors"))
        identical = all(torch.equal(a[k], b[k]) for k in a)
    print(f"{'mode':9} {'peak MB':>8} {'baseline MB':>11} {'load s':>7} {'prefill s':>9} {'s/token':>8} "
          f"{'layer loads':>11}")
    for mode, r in res.items():
        print(f"{mode:9} {r['peak_mb']:8.0f} {r['baseline_mb']:11.0f} {r['load_s']:7.2f} {r['prefill_s']:9.2f} "
              f"{r['s_per_token']:8.3f} {r['layer_loads']:11d}")
    print(f"prompt {args.prompt_len} tokens, {args.new_tokens} decoded; "
          f"identical prompt logits and tokens: {identical}")
    r, s = res["resident"], res["streamed"]
    print(f"streaming: resident_mb={r['peak_mb']:.0f} streamed_mb={s['peak_mb']:.0f} "
          f"ratio={r['peak_mb'] / s['peak_mb']:.2f} identical={int(identical)} "
          f"resident_s_per_token={r['s_per_token']:.3f} streamed_s_per_token={s['s_per_token']:.3f}")


if __name__ == "__main__":
    main()
