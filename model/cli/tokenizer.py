"""`python -m model tokenizer train`: train the byte-level BPE tokenizer on a balanced sample of the cleaned
corpus and generated stories (model/corpus/tokenizer.py)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ..corpus.sources import DEFAULT_CACHE, sha256_file
from ..corpus.tokenizer import DEFAULT_PATH, VOCAB_SIZE, train_tokenizer, training_sample


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m model tokenizer", description="the byte-level BPE tokenizer")
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="train the byte-level BPE on the cleaned corpus + stories")
    t.add_argument("--corpus", type=Path, default=DEFAULT_CACHE, help="directory from `python -m model corpus build`")
    t.add_argument("--out", type=Path, default=DEFAULT_PATH)
    t.add_argument("--vocab-size", type=int, default=VOCAB_SIZE)
    t.add_argument("--sample-bytes", type=int, default=4_000_000)
    args = p.parse_args(argv)
    t0 = time.time()
    tok = train_tokenizer(training_sample(args.corpus, args.sample_bytes), args.vocab_size)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(args.out))
    print(f"trained vocab {tok.get_vocab_size()} in {time.time() - t0:.1f}s -> {args.out} "
          f"(sha256 {sha256_file(args.out)[:16]})", file=sys.stderr)
    return 0
