"""The byte-level BPE trainer of model/tokenizer.py's tokenizer, and the corpus sample it is trained on.

``python -m lab tokenizer train --corpus DIR --out data/weights/tiny/tokenizer.json`` trains on a balanced,
seeded sample (default ~4 MB) of the cleaned corpus (lab/corpus/texts.py) plus generated training stories
(lab/corpus/stories.py). Loading, encoding and decoding are model/tokenizer.py's: the app needs them, not this.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Iterable, Iterator

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from model.tokenizer import SPECIAL_TOKENS, VOCAB_SIZE, check_layout

from .stories import training_story_text
from .texts import read_docs


def train_tokenizer(texts_iterator: Iterable[str], vocab_size: int = VOCAB_SIZE) -> Tokenizer:
    """Train a byte-level BPE with the fixed special tokens; the result has exactly
    ``vocab_size`` entries (an error is raised if the data is too small to reach it)."""
    tok = Tokenizer(models.BPE())  # no unk token: bytes cover everything
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts_iterator, trainer=trainer)
    check_layout(tok, vocab_size, "<trained tokenizer>")
    return tok


def _sample_paragraphs(docs: list[str], budget: int, seed: int) -> list[str]:
    """Seeded random paragraphs (blank-line separated) from ``docs`` up to ``budget`` bytes."""
    paras = [p for d in docs for p in d.split("\n\n") if p.strip()]
    random.Random(seed).shuffle(paras)
    out, used = [], 0
    for p in paras:
        if used >= budget:
            break
        out.append(p + "\n\n")
        used += len(p.encode("utf-8")) + 2
    return out


def training_sample(corpus_dir: Path, total_bytes: int = 4_000_000, seed: int = 0) -> Iterator[str]:
    """Balanced sample: equal byte shares of each cleaned corpus file present and of stories."""
    files = [corpus_dir / n for n in ("shakespeare.txt", "bible.txt") if (corpus_dir / n).is_file()]
    if not files:
        raise FileNotFoundError(f"no cleaned corpus in {corpus_dir}; run `python -m lab corpus build`")
    share = total_bytes // (len(files) + 1)
    for i, f in enumerate(files):
        yield from _sample_paragraphs(read_docs(f), share, seed + i)
    used, k = 0, 0
    while used < share:
        s = training_story_text(k)
        used += len(s) + 1
        k += 1
        yield s + "\n"
