"""`python -m bench.cuda`: the model on a CUDA GPU against the golden fixture and against its own CPU path.

The tests run on the CPU (tests/conftest.py sets V41_DEVICE=cpu), so the GPU path needs a check of its own,
run once on a machine that has one. It measures, in one run (fp32, TF32 off):
- parity on the GPU: the golden fixture's logits, prefill-then-decode logits and every layer's intermediates
  (the checks of tests/model/test_parity.py, run with the model on CUDA);
- the shipped tiny model (and the shipped recall checkpoint when present; model/shipped.py lists both) on CPU
  and GPU: the largest logit difference on a long prompt, whether a traced greedy decode gives the same tokens
  in bounded and exact mode, and the time of one forward on each;
- a few training steps on the GPU with the lookup, entry and selection losses on, then the evaluation a
  run ends with (`quick_eval`, one batch each), and the training throughput.
Without a GPU it says so and exits 0 (nothing to measure). Last line: `cuda: key=value ...`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

from bench._common import ROOT, best_of, line
from model.shipped import KINDS, shipped_weights

FIXTURE = ROOT / "tests" / "fixtures" / "v41-parity-a"


def parity(dev: torch.device) -> float:
    """The fixture's checks with the model on `dev`; returns the largest logit difference."""
    from safetensors.torch import load_file

    from model import decode_step, load, prefill
    from model.inference import FULL

    m = load(FIXTURE, device=dev)
    ids = load_file(str(FIXTURE / "inputs.safetensors"))["input_ids"].to(dev)
    exp = load_file(str(FIXTURE / "expected.safetensors"))
    with torch.no_grad():
        out = m(ids)
    worst = (out.logits.cpu() - exp["logits"]).abs().max().item()
    pf = prefill(m, ids[:, :35], "exact", chunk_size=13)
    rows = [pf.logits] + [decode_step(m, pf.cache, ids[:, t:t + 1])[:, -1] for t in range(35, 39)]
    worst = max(worst, (torch.stack(rows, 1).cpu() - exp["logits_prefill_decode"][:, 34:39]).abs().max().item())
    tr = m.trace(ids, detail=FULL)               # a trace keeps its records on the CPU
    for i, rec in enumerate(tr.layers):
        for key, got in (("attn_out", rec.attn_out), ("ffn_out", rec.ffn_out), ("hidden_streams", rec.streams)):
            worst = max(worst, (got - exp[f"layers.{i}.{key}"]).abs().max().item())
    return worst


def cpu_against_gpu(weights: Path, dev: torch.device, tokens: int = 1500) -> dict[str, float]:
    from lessons.inspector import run_prompt
    from model import load

    mc, mg = load(weights, device="cpu"), load(weights, device=dev)
    ids = mc.tokenizer.encode("Once upon a time the little fox found a blue key under the old oak tree, and she").ids
    ids = (ids * (tokens // len(ids) + 1))[:tokens]
    with torch.no_grad():
        diff = (mc(torch.tensor([ids])).logits - mg(torch.tensor([ids], device=dev)).logits.cpu()).abs().max().item()
    same = all(run_prompt(mc, ids[:300], mode=mode, new_tokens=12).ids
               == run_prompt(mg, ids[:300], mode=mode, new_tokens=12).ids for mode in ("bounded", "exact"))

    def timed(m, x) -> float:
        with torch.no_grad():
            m(x)                                  # warm-up: the first call allocates
            return best_of(lambda: m(x), 1, x.device)

    return {"max_diff": diff, "decode_same": int(same), "cpu_s": timed(mc, torch.tensor([ids])),
            "gpu_s": timed(mg, torch.tensor([ids], device=dev))}


def train_on_gpu(dev: torch.device, steps: int = 6, batch: int = 16) -> dict[str, float]:
    """A few steps of the recall recipe's losses on random tiny weights, then the run's closing evaluation."""
    from lab.corpus import DEFAULT_STREAM
    from lab.training import TrainConfig, quick_eval, start_run, train_steps

    if not DEFAULT_STREAM.exists():
        return {"train_skipped": 1}
    fields = ("seq_len=512 batch={b} train_window=2 drill_cast=wide drill_frac=0.333 kv_frac=0.167 repeat_frac=0.333 "
              "repeat_pieces=4 answer_weight=20 pool_kl=1 gate=0 select_weight=1 entry_weight=0.1 lookup_weight=1 "
              "readout_forcing=1 readout_forcing_rows=0.5 lookup_every_head=1").format(b=batch)
    tc = TrainConfig(preset="tiny", steps=steps, config_window=2, dense_warmup_frac=1.0, eval_every=0,
                     ckpt_every=10_000, drafter_steps=0, fast=False, curriculum=fields + f" gate_min_steps={steps}")
    with tempfile.TemporaryDirectory() as tmp:
        run = start_run(tc, dev, Path(tmp), False)
        seconds = train_steps(run)
        ev = quick_eval(run.model, run.tok, 512, max_batches=1)
    return {"train_tok_s": steps * batch * 512 / seconds, "eval_loss": ev["heldout_loss"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.cuda", description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=1500, help="prompt length of the CPU-against-GPU forward")
    ap.add_argument("--no-train", action="store_true")
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device here: nothing to measure")
        print(line("cuda", available=0))
        return 0
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    out: dict[str, float] = {"available": 1}
    failed = 0
    checks = [("parity", lambda: {"parity_max": parity(dev)})]
    for kind in KINDS:          # every shipped set, CPU against GPU
        w = shipped_weights(kind)
        name = w.name       # the set's folder names its keys
        if (w / "model.safetensors").exists():
            checks.append((name, lambda w=w, name=name: {f"{name}_{k}": v
                                                        for k, v in cpu_against_gpu(w, dev, a.tokens).items()}))
    if not a.no_train:
        checks.append(("train", lambda: train_on_gpu(dev)))
    for name, fn in checks:
        t0 = time.perf_counter()
        try:
            got = fn()
            out.update(got)
            print(f"ok   {name} ({time.perf_counter() - t0:.1f} s): "
                  + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in got.items()))
        except Exception:       # report every check, not just the first that breaks
            failed += 1
            print(f"FAIL {name} ({time.perf_counter() - t0:.1f} s)")
            traceback.print_exc()
    out["failed"] = failed
    print(line("cuda", **out))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
