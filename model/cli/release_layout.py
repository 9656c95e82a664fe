"""`python -m model release export|info`: write a checkpoint in the release layout, or summarise one.

Follows docs/design/checkpoints.md §3 (release-layout checkpoints: sharded FP8 / MXFP4 safetensors); the format and the
writing live in model/checkpoint/ (quantization.py, writer.py), loading in model/checkpoint/loader.py.
"""

from __future__ import annotations

import argparse
import sys

from ..checkpoint.loader import load
from ..checkpoint.writer import describe, write_release
from ..config import ConfigError
from ..errors import CheckpointError


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m model release", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser("export", help="write a checkpoint in the release layout")
    ex.add_argument("--weights", required=True, help="checkpoint directory to read (any layout model.load reads)")
    ex.add_argument("--out", required=True)
    ex.add_argument("--no-fp8", action="store_true", help="keep linear weights dense")
    ex.add_argument("--no-mxfp4", action="store_true", help="routed experts as FP8 (or dense with --no-fp8)")
    ex.add_argument("--scale-fmt", choices=("ue8m0", "fp32"), default="ue8m0")
    ex.add_argument("--max-shard-mb", type=float, default=2048.0)
    inf = sub.add_parser("info", help="summarise a release directory")
    inf.add_argument("path")
    return ap


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    try:
        if a.cmd == "info":
            print(describe(a.path))
            return 0
        m = load(a.weights, device="cpu")
        out = write_release(m, a.out, fp8=not a.no_fp8, mxfp4_experts=not a.no_mxfp4, scale_fmt=a.scale_fmt,
                            max_shard_bytes=int(a.max_shard_mb * 2**20))
        print(describe(out))
        return 0
    except (CheckpointError, ConfigError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
