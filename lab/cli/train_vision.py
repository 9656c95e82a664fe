"""`python -m lab train-vision`: train the vision tower, aligner and
span markers on generated box scenes with the text model frozen, then write them into the weights
(lab/training/vision_tower.py; docs/design/architecture.md §3.6 and §5)."""

from __future__ import annotations

import argparse
import os
import platform
import sys
from dataclasses import asdict
from pathlib import Path

import torch

from model.arch.vision import MARKERS
from model.checkpoint.loader import load
from model.scenes import HELDOUT_SEED_BASE, TRAIN_SEED_BASE

from ..training.state import rounded, write_json_entry
from ..training.vision_tower import VisionTrainConfig, evaluate_vision, prepare, train_loop, write_tensors
from .options import add_config_options, config_from

COMMAND = "python -m lab train-vision"


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog=COMMAND, description="train the vision tower and aligner on generated scenes")
    add_config_options(ap, VisionTrainConfig)
    ap.add_argument("--weights", default="data/weights/tiny",
                    help="trained text weights; vision tensors are added here")
    ap.add_argument("--dry-run", action="store_true", help="train and evaluate, write nothing")
    return ap.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse(argv)
    tc = config_from(args, VisionTrainConfig)
    if tc.threads:
        torch.set_num_threads(tc.threads)
    wdir = Path(args.weights)
    model = load(wdir)
    params, opt = prepare(model, tc)
    n_params = sum(p.numel() for _, p in params)
    print(f"training the vision tower + aligner + markers ({n_params / 1e3:.1f}K parameters; text model frozen) "
          f"for {tc.steps} steps x {tc.batch} pictures on {model.device} ({torch.get_num_threads()} threads)",
          file=sys.stderr)
    before = evaluate_vision(model, n=min(100, tc.eval_n))
    print(f"before: with image {before['accuracy_with_image']:.3f}, text only {before['accuracy_text_only']:.3f}",
          file=sys.stderr)
    log, seconds = train_loop(model, opt, tc)
    result = evaluate_vision(model, n=tc.eval_n)
    print(f"held-out pictures: {result['n']} questions; colour right with the picture "
          f"{result['accuracy_with_image']:.3f}, text only {result['accuracy_text_only']:.3f} "
          f"(chance: 1/8 palette = {result['chance_palette']:.3f}, 1/boxes in picture = "
          f"{result['chance_boxes_in_picture']:.3f})", file=sys.stderr)
    if args.dry_run:
        return 0
    written = write_tensors(wdir, model, {"vision_trained_by": COMMAND})
    entry = {
        "command": f"{COMMAND} " + " ".join(argv),
        "train_config": asdict(tc), "trained": ["vision.*", "aligner.*"] + list(MARKERS) + ["layers.*.ffn.gate.bias_vl "
                                                                                          "(balancing rule)"],
        "frozen": "every text-model tensor except bias_vl", "parameters": n_params,
        "data": "model/scenes.py make_scene: train seeds from %d, held-out from %d" % (TRAIN_SEED_BASE,
                                                                                             HELDOUT_SEED_BASE),
        "wall_seconds": round(seconds, 1),
        "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(),
                    "torch_threads": torch.get_num_threads(), "device": str(model.device), "torch": torch.__version__},
        "before": before, "heldout": result, "tensors_written": len(written),
        "log_every_step": rounded(log),
    }
    write_json_entry(wdir / "training.json", "vision", entry)
    print(f"wrote {len(written)} tensors into {wdir / 'model.safetensors'} and the 'vision' entry of training.json "
          f"({seconds / 60:.1f} min)", file=sys.stderr)
    return 0
