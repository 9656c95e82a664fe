"""Can the compressed branch learn a look-back at all? A key-value lookup trained from scratch.

`python -m lab.probes.lookup [--steps N] [--dense 1] [--quant 1] [--ratio 1|2|mixed] [--window 4] ...`

Rows of the `micro` preset's vocabulary (256 ids): `npairs` pairs (key, value) at the start (keys and
values from disjoint id ranges, keys at even positions so a ratio-2 group holds exactly one pair),
then `filler` random filler ids, then the same pairs again in a random order. The value of each
repeated pair is predictable only from its first occurrence, which lies more than `window` tokens
back, so the only route to it is the compressed entries (the window-only ablation scores chance,
1/n_values). Loss: next-token cross entropy on every position (as in lab/training/step.py), or on the
answers only (`--answer-loss 1`), or with the answers weighted (`--answer-weight 10`). Reports answer
accuracy, the attention mass the answers put on compressed entries, and per-component gradient norms
into the compressors and the compressed layers' queries.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from lab.training import answer_weighted_ce, lookup_rows, recall_rows
from model import Ablation, V41Config, V41Model
from model.quant import fake_quant_disabled


def micro_variant(ratio: str) -> V41Config:
    cfg = V41Config.preset("micro")
    if ratio == "1":
        cfg = cfg.replace(compress_ratios=[0, 0, 1, 1, 1, 1, 1, 1])
    elif ratio == "2":
        cfg = cfg.replace(compress_ratios=[0, 0, 2, 2, 2, 2, 2, 2])
    return cfg.validate()


def set_window(m: V41Model, window: int, swa_window: int | None = None) -> None:
    for layer in m.layers:
        layer.attn.window = (swa_window or window) if layer.attn.ratio == 0 else window


def grad_norms(m: V41Model) -> dict[str, float]:
    out: dict[str, float] = {}
    for i, layer in enumerate(m.layers):
        a = layer.attn
        if a.compressor is not None:
            for name, mod in (("wkv", a.compressor.wkv), ("wgate", a.compressor.wgate), ("norm", a.compressor.norm)):
                if mod is not None and mod.weight.grad is not None:
                    out[f"L{i}.comp.{name}"] = float(mod.weight.grad.norm())
        if a.ratio:
            out[f"L{i}.wq_b"] = float(a.wq_b.weight.grad.norm()) if a.wq_b.weight.grad is not None else 0.0
            out[f"L{i}.wkv"] = float(a.wkv.weight.grad.norm()) if a.wkv.weight.grad is not None else 0.0
    return out


def comp_mass(m: V41Model, x: torch.Tensor, mask: torch.Tensor, ablation: Ablation) -> dict[int, float]:
    """Mean attention probability the answer-predicting queries put on compressed entries, per layer."""
    from model.inference import FULL  # noqa: F401  (trace is heavier; use hooks on _attend instead)

    got: dict[int, float] = {}
    hooks = []
    for i, layer in enumerate(m.layers):
        if not layer.attn.ratio:
            continue
        orig = layer.attn._attend

        def wrap(q, kv, prev, comp, _orig=orig, _i=i, _w=layer.attn.window):
            out, probs = _orig(q, kv, prev, comp)
            pc = probs[..., _w:-1].sum(-1).mean(-1)  # [B, S]
            got[_i] = float(pc[mask].mean())
            return out, probs
        layer.attn._attend = wrap
        hooks.append(layer.attn)
    try:
        with torch.no_grad():
            m(x, ablation=ablation)
    finally:
        for a in hooks:
            del a._attend
    return got


def run(steps: int = 300, batch: int = 16, npairs: int = 8, filler: int = 16, window: int = 4,
        swa_window: int | None = None, ratio: str = "mixed", dense: bool = True, quant: bool = True,
        lr: float = 3e-3, answer_loss: bool = False, seed: int = 0, eval_every: int = 50,
        indexer_weight: float = 1.0, log=sys.stderr, model_hook=None, task: str = "lookup",
        answer_weight: float = 1.0) -> dict:
    torch.manual_seed(seed)
    cfg = micro_variant(ratio)
    m = V41Model(cfg).init_weights(seed)
    if model_hook is not None:
        model_hook(m)
    set_window(m, window, swa_window)
    opt = torch.optim.AdamW(m.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    g = torch.Generator().manual_seed(seed + 1)
    ge = torch.Generator().manual_seed(12345)
    rows = lookup_rows if task == "lookup" else recall_rows
    xe, ye, me = rows(64, npairs, filler, ge)
    abl = Ablation(dense_compressed=dense)
    hist = []
    t0 = time.time()
    first_above = None
    qctx = fake_quant_disabled() if not quant else _Null()
    with qctx:
        for step in range(steps):
            x, y, mk = rows(batch, npairs, filler, g)
            m.train()
            warm = min(1.0, (step + 1) / 20)
            for pg in opt.param_groups:
                pg["lr"] = lr * warm
            out = m(x, indexer_loss=True, collect_routing=True, ablation=abl)
            lm = answer_weighted_ce(out.logits, y, mk, float("inf") if answer_loss else answer_weight)
            il = out.indexer_loss if out.indexer_loss is not None else lm.new_zeros(())
            opt.zero_grad(set_to_none=True)
            (lm + indexer_weight * il).backward()
            gn = grad_norms(m) if step in (0, steps // 2, steps - 1) else None
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            opt.step()
            for lid, idx in out.routings:
                m.layers[lid].ffn.update_bias(idx, 1e-3)
            if gn is not None:
                hist.append({"step": step, "grads": gn})
            if (step + 1) % eval_every == 0 or step + 1 == steps:
                m.eval()
                with torch.no_grad():
                    lg = m(xe, ablation=abl).logits
                    acc = float((lg.argmax(-1) == ye)[me].float().mean())
                    ans_loss = float(torch.nn.functional.cross_entropy(lg[me], ye[me]))
                    lw = m(xe, ablation=Ablation(window_only=True)).logits
                    acc_w = float((lw.argmax(-1) == ye)[me].float().mean())
                mass = comp_mass(m, xe, me, abl)
                from lab.probes.mhc_post import post_report
                post = [round(r["post"], 3) for r in post_report(m, xe)]
                rec = {"step": step + 1, "train_loss": float(lm.detach()), "kl": float(il.detach()), "acc": acc,
                       "answer_loss": ans_loss, "acc_window_only": acc_w,
                       "comp_mass": {k: round(v, 3) for k, v in mass.items()}, "post": post,
                       "s": round(time.time() - t0, 1)}
                hist.append(rec)
                if first_above is None and acc > 0.2:
                    first_above = step + 1
                print(json.dumps(rec), file=log, flush=True)
    last = [h for h in hist if "acc" in h][-1]
    return {"final": last, "first_step_acc_over_0.2": first_above, "wall_s": round(time.time() - t0, 1),
            "history": hist}


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *e):
        return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lab.probes.lookup", description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--npairs", type=int, default=8)
    ap.add_argument("--filler", type=int, default=16)
    ap.add_argument("--window", type=int, default=4)
    ap.add_argument("--swa-window", type=int, default=0)
    ap.add_argument("--ratio", default="mixed", choices=["mixed", "1", "2"])
    ap.add_argument("--dense", type=int, default=1)
    ap.add_argument("--quant", type=int, default=1)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--answer-loss", type=int, default=0, help="1: loss on the answers only")
    ap.add_argument("--answer-weight", type=float, default=1.0, help="weight of the answers in the mean loss")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default="")
    ap.add_argument("--task", default="lookup", choices=["lookup", "recall"])
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    r = run(a.steps, a.batch, a.npairs, a.filler, a.window, a.swa_window or None, a.ratio, bool(a.dense),
            bool(a.quant), a.lr, bool(a.answer_loss), a.seed, a.eval_every, task=a.task,
            answer_weight=a.answer_weight)
    f = r["final"]
    grads = [h for h in r["history"] if "grads" in h]
    for h in grads:
        print("grads@%d " % h["step"] + " ".join(f"{k}={v:.2e}" for k, v in h["grads"].items()), file=sys.stderr)
    print(f"{a.task}: ratio={a.ratio} dense={a.dense} quant={a.quant} window={a.window} steps={f['step']} "
          f"acc={f['acc']:.3f} acc_window_only={f['acc_window_only']:.3f} answer_loss={f['answer_loss']:.3f} "
          f"first_acc>0.2={r['first_step_acc_over_0.2']} wall_s={r['wall_s']}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(vars(a) | r, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
