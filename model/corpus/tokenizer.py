"""Byte-level BPE tokenizer (Hugging Face ``tokenizers``) for the tiny V4.1 models.

* ByteLevel pre-tokenizer (GPT-2 regex, ``add_prefix_space=False``) and ByteLevel decoder;
  the BPE trainer starts from the full 256-symbol byte alphabet, so every byte sequence is
  representable and ``decode(encode(s)) == s`` for any Unicode string.
* Special tokens at fixed ids (:data:`SPECIAL_TOKENS`): 0 ``<|pad|>``, 1 ``<|bos|>``,
  2 ``<|eos|>``, 3 ``<|noise|>`` (DSpark noise token), 4 ``<|image|>``, 5 ``<|image_start|>``,
  6 ``<|image_end|>``, 7 ``<|image_newline|>``. The vocabulary has exactly
  :data:`VOCAB_SIZE` = 4096 entries including them.

``python -m model tokenizer train --corpus DIR --out data/weights/tiny/tokenizer.json`` trains
on a balanced, seeded sample (default ~4 MB) of the cleaned corpus (see ``model.corpus``)
plus generated training stories (``model/corpus/stories.py``).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Iterable, Iterator

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from .sources import read_docs
from .stories import training_story_text

SPECIAL_TOKENS: tuple[str, ...] = ("<|pad|>", "<|bos|>", "<|eos|>", "<|noise|>", "<|image|>",
                                   "<|image_start|>", "<|image_end|>", "<|image_newline|>")
PAD_ID, BOS_ID, EOS_ID, NOISE_ID, IMAGE_ID, IMAGE_START_ID, IMAGE_END_ID, IMAGE_NEWLINE_ID = range(8)
VOCAB_SIZE = 4096
DEFAULT_PATH = Path(__file__).resolve().parents[2] / "data" / "weights" / "tiny" / "tokenizer.json"


class TokenizerFileError(ValueError):
    """The tokenizer file is missing, unreadable or does not match the expected layout."""


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
    _check_layout(tok, vocab_size, "<trained tokenizer>")
    return tok


def _check_layout(tok: Tokenizer, vocab_size: int | None, where: str) -> None:
    for i, s in enumerate(SPECIAL_TOKENS):
        if tok.token_to_id(s) != i:
            raise TokenizerFileError(f"{where}: special token {s} has id {tok.token_to_id(s)}, expected {i}")
    n = tok.get_vocab_size(with_added_tokens=True)
    if vocab_size is not None and n != vocab_size:
        raise TokenizerFileError(f"{where}: vocabulary has {n} entries, expected {vocab_size}")


def load_tokenizer(path: str | Path = DEFAULT_PATH) -> Tokenizer:
    """Load a ``tokenizer.json`` offline; a missing or corrupt file raises an error naming it."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"tokenizer file not found: {path} (train it with "
                                f"`python -m model tokenizer train --corpus DIR --out {path}`)")
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as e:  # tokenizers raises a bare Exception on bad JSON
        raise TokenizerFileError(f"cannot load tokenizer file {path}: {e}") from e
    _check_layout(tok, None, str(path))
    return tok


def encode(tok: Tokenizer, text: str, add_bos: bool = False, add_eos: bool = False) -> list[int]:
    """Token ids of ``text`` (no specials added unless asked)."""
    ids = tok.encode(text, add_special_tokens=False).ids
    return ([BOS_ID] if add_bos else []) + ids + ([EOS_ID] if add_eos else [])


def decode(tok: Tokenizer, ids: Iterable[int]) -> str:
    """Text of ``ids``; special tokens are kept as their literal strings (exact round trip)."""
    return tok.decode(list(ids), skip_special_tokens=False)


# ----------------------------------------------------------------------------- training sample


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
        raise FileNotFoundError(f"no cleaned corpus in {corpus_dir}; run `python -m model corpus build`")
    share = total_bytes // (len(files) + 1)
    for i, f in enumerate(files):
        yield from _sample_paragraphs(read_docs(f), share, seed + i)
    used, k = 0, 0
    while used < share:
        s = training_story_text(k)
        used += len(s) + 1
        k += 1
        yield s + "\n"


def compressed_token_map(tokenizer) -> tuple[list[int], int]:
    """Map each token id of a `tokenizers.Tokenizer` to a compressed id; returns (map, size): Engram hashes
    the compressed ids, so tokens that differ only in case, accents or spacing share their n-gram rows
    (docs/design/equations.md, Engram). Built here, next to the tokenizer; model/arch/engram.py takes the map."""
    sentinel = "\ue000"  # keeps a token that is exactly one space from stripping to ""
    norm = normalizers.Sequence([
        normalizers.NFKC(), normalizers.NFD(), normalizers.StripAccents(), normalizers.Lowercase(),
        normalizers.Replace(Regex(r"[ \t\r\n]+"), " "), normalizers.Replace(Regex(r"^ $"), sentinel),
        normalizers.Strip(), normalizers.Replace(sentinel, " "),
    ])
    key_to_id: dict[str, int] = {}
    n = tokenizer.get_vocab_size(with_added_tokens=True)
    lookup = [0] * n
    for tid in range(n):
        text = tokenizer.decode([tid], skip_special_tokens=False)
        if "\ufffd" in text:
            key = tokenizer.id_to_token(tid)  # a partial UTF-8 byte token: key it by its raw form
        else:
            key = norm.normalize_str(text) or text
        lookup[tid] = key_to_id.setdefault(key, len(key_to_id))
    return lookup, len(key_to_id)
