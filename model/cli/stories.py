"""`python -m model stories`: print generated recall stories, or write the held-out set or the app's sample
prompts (model/corpus/stories.py)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..corpus.stories import (
    BUCKET_NAMES,
    app_prompts,
    generate_story,
    heldout_stories,
    heldout_template_stories,
    write_heldout,
)
from ..corpus.tokenizer import load_tokenizer


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m model stories", description="print or write generated stories")
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
