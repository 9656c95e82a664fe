"""`python -m model dataset build` (also `python -m model.dataset build`): tokenize the training mixture into
the token stream (model/corpus/dataset.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..corpus.dataset import build_token_stream
from ..corpus.sources import DEFAULT_CACHE
from ..corpus.tokenizer import DEFAULT_PATH as TOKENIZER_PATH


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m model dataset", description="the training token stream")
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="tokenize the training mixture")
    b.add_argument("--corpus", type=Path, default=DEFAULT_CACHE)
    b.add_argument("--tokenizer", type=Path, default=TOKENIZER_PATH)
    b.add_argument("--out", type=Path)
    b.add_argument("--target-tokens", type=int, default=15_000_000)
    args = p.parse_args(argv)
    m = build_token_stream(args.corpus, args.tokenizer, args.out, args.target_tokens)
    for src, s in m["sources"].items():
        print(f"{src:12s} {s['tokens']:>11,d} tokens  {s['docs']:>6d} docs"
              + (f"  ({s['unique_tokens']:,d} unique, {s['epochs']}x)" if "unique_tokens" in s else ""))
    print(f"total {m['n_tokens']:,d} tokens in {m['seconds']}s", file=sys.stderr)
    return 0
