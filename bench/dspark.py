"""`python -m bench.dspark`: DSpark draft-then-verify against plain decoding, in one run.

On the shipped tiny pair (the shipped text model of model/shipped.py with its mtp.* drafter; random
weights with a clear note when absent), for each prompt of data/prompts.json: plain greedy decoding and speculative
greedy decoding (block `dspark_block_size`, draft length = the whole block) of the same number of
tokens, timed alternately so both see the same machine load. Reports
- tokens per target forward of the speculative runs (verify passes only; goal >= 2.5 at block 5)
  next to the formula (1 - a^(g+1)) / (1 - a) at the measured acceptance a,
- acceptance per draft position and the confidence head's calibration,
- the decode wall-time ratio plain / speculative (goal >= 1.6x on CPU),
- whether every speculative output is token-for-token the plain output.
Last line: `dspark: tokens_per_pass=… speedup=… identical=1|0`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from bench._common import add_device_option, pick_device
from model.shipped import shipped_weights

ROOT = Path(__file__).resolve().parents[1]


def _load(weights: Path, device: torch.device):
    from model import load
    from model.arch import Drafter, attach_drafter

    note = ""
    if (weights / "model.safetensors").exists():
        m = load(weights, device=device)
        if not isinstance(m.mtp, Drafter):
            attach_drafter(m, 0)
            note = f"NOTE: {weights} has no mtp.* tensors: using an UNTRAINED drafter (expect ~1 token per pass)"
    else:
        from model import random_tiny

        m = random_tiny(0, device=device)
        attach_drafter(m, 0)
        note = f"NOTE: {weights} not found: RANDOM tiny target and drafter (numbers say nothing about DSpark)"
    return m.eval(), note


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.dspark", description=__doc__.split("\n\n")[0])
    ap.add_argument("--weights", default=str(shipped_weights("text")))
    ap.add_argument("--prompts", default=str(ROOT / "data" / "prompts.json"))
    ap.add_argument("--tokens", type=int, default=64, help="new tokens per prompt")
    ap.add_argument("--max-prompts", type=int, default=8)
    ap.add_argument("--draft-length", default="max", help="an integer, 'max' or 'auto'")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: decode is overhead-bound)")
    add_device_option(ap)
    args = ap.parse_args(argv)
    dev = pick_device(args.device)
    torch.set_num_threads(args.threads)
    from model import Sampler
    from model.inference import expected_tokens_per_pass, generate, speculative_generate

    m, note = _load(Path(args.weights), dev)
    if note:
        print(note)
    dl = int(args.draft_length) if args.draft_length.isdigit() else args.draft_length
    prompts = [p["text"] for p in json.loads(Path(args.prompts).read_text())][:args.max_prompts]
    # warm-up (first calls allocate)
    w = torch.tensor([m.encode(prompts[0])], device=dev)
    generate(m, w, 4, stop_at_eos=False)
    speculative_generate(m, m.mtp, w, 4, sampler=Sampler(), draft_length=dl, stop_at_eos=False)

    plain_s = spec_s = 0.0
    steps = emitted = 0
    identical = True
    reached = acc = conf = surv_n = surv_p = surv_o = None
    print(f"{'prompt':<28} {'tok':>4} {'plain s':>8} {'spec s':>8} {'tok/pass':>8} {'same':>5}")
    for text in prompts:
        ids = torch.tensor([m.encode(text)], device=dev)
        a = generate(m, ids, args.tokens, stop_at_eos=False)
        b = speculative_generate(m, m.mtp, ids, args.tokens, sampler=Sampler(), draft_length=dl, stop_at_eos=False)
        same = a.tokens == b.tokens
        identical &= same
        plain_s += a.decode_seconds
        spec_s += b.decode_seconds
        s = b.stats
        steps += s.steps
        emitted += s.emitted
        g = len(s.reached)
        if reached is None:
            reached, acc, conf, surv_n, surv_p, surv_o = ([0.0] * g for _ in range(6))
        for j, row in enumerate(s.calibration):
            reached[j] += s.reached[j]
            acc[j] += s.accepted_at[j]
            conf[j] += row.predicted * row.n if row.n else 0.0
            k = sum(len(x.drafted) > j for x in s.log)
            surv_n[j] += k
            surv_p[j] += row.predicted_survival * k if k else 0.0
            surv_o[j] += row.observed_survival * k if k else 0.0
        label = text.replace("\n", " ")[:26]
        print(f"{label:<28} {len(a.tokens):>4} {a.decode_seconds:>8.2f} {b.decode_seconds:>8.2f} "
              f"{s.tokens_per_pass:>8.2f} {'yes' if same else 'NO':>5}")
    tpp = emitted / max(1, steps)
    alpha = sum(acc) / max(1, sum(reached))
    gamma = sum(surv_n) / max(1, steps)  # mean drafts per step
    speedup = plain_s / max(1e-9, spec_s)
    print()
    print("position  checked  accepted  rate   confidence | prefix kept: observed  predicted")
    for j in range(len(reached)):
        r = reached[j]
        print(f"{j + 1:>8}  {int(r):>7}  {int(acc[j]):>8}  {acc[j] / r if r else float('nan'):.3f}  "
              f"{conf[j] / r if r else float('nan'):>10.3f} | "
              f"{surv_o[j] / surv_n[j] if surv_n[j] else float('nan'):>20.3f}"
              f"  {surv_p[j] / surv_n[j] if surv_n[j] else float('nan'):>9.3f}")
    print()
    print(f"verify passes {steps}, tokens from them {emitted}: {tpp:.3f} tokens per target forward "
          f"(formula (1 - a^(g+1))/(1 - a) at a = {alpha:.3f}, g = {gamma:.2f}: "
          f"{expected_tokens_per_pass(alpha, gamma):.3f})")
    print(f"decode wall time: plain {plain_s:.2f} s, speculative {spec_s:.2f} s -> {speedup:.2f}x "
          f"({dev.type}, {torch.get_num_threads()} thread(s)); outputs identical: {identical}")
    print(f"dspark: tokens_per_pass={tpp:.2f} speedup={speedup:.2f} identical={int(identical)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
