"""`python -m lab dspark train`: train a checkpoint's DSpark drafter, evaluate it, write it back.

The command line only: the training, evaluation and writing are lab/training/drafter.py (docs/design/equations.md §12).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from model.checkpoint.loader import load

from ..corpus.dataset import TokenStream
from ..training.drafter import DraftTrainConfig, evaluate_drafter, train_drafter, write_drafter
from ..training.state import write_json_entry
from .options import add_config_options, config_from


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m lab dspark", description="Train the DSpark drafter of a checkpoint.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    tr = sub.add_parser("train", help="train mtp.* against the frozen target and write them into the checkpoint")
    tr.add_argument("--weights", default="data/weights/tiny")
    tr.add_argument("--steps", type=int, default=DraftTrainConfig.steps)
    tr.add_argument("--seed", type=int, default=0)
    tr.add_argument("--threads", type=int, default=0)
    tr.add_argument("--stream", default=".cache/corpus/tokens_train.npy")
    add_config_options(tr, DraftTrainConfig, skip=("steps", "seed"))  # those two are named above
    tr.add_argument("--dry-run", action="store_true", help="train but do not write the checkpoint")
    tr.add_argument("--prompts", default="data/prompts.json", help="prompts for the acceptance evaluation")
    tr.add_argument("--eval-tokens", type=int, default=48)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    path = Path(args.weights)
    m = load(path, device="cpu")
    m.set_part("mtp", None)  # always train from a fresh init
    stream = TokenStream.load(args.stream)
    tc = config_from(args, DraftTrainConfig)
    print(f"training the drafter of {path} ({args.steps} steps, {torch.get_num_threads()} threads)", file=sys.stderr)
    info = train_drafter(m, stream, steps=args.steps, seed=args.seed, tc=tc)
    prompts = [p["text"] for p in json.loads(Path(args.prompts).read_text())] if Path(args.prompts).exists() else []
    if prompts:
        t0 = time.perf_counter()
        info["eval"] = {"greedy": evaluate_drafter(m, prompts, args.eval_tokens),
                        "sampled_t0.8": evaluate_drafter(m, prompts, args.eval_tokens, temperature=0.8)}
        info["eval"]["seconds"] = round(time.perf_counter() - t0, 1)
        print(f"  eval on {len(prompts)} prompts: {json.dumps(info['eval'])}", file=sys.stderr)
    info["command"] = "python -m lab dspark " + " ".join(sys.argv[1:] if argv is None else argv)
    if args.dry_run:
        print(json.dumps(info["final_avg_last_50"]), file=sys.stderr)
        return 0
    write_drafter(m, path)
    tj = path / "training.json"
    write_json_entry(tj, "drafter", info)
    print(f"wrote mtp.* into {path / 'model.safetensors'} and 'drafter' into {tj}", file=sys.stderr)
    return 0
