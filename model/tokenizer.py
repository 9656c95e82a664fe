"""Byte-level BPE tokenizer (Hugging Face ``tokenizers``) for the tiny V4.1 models.

* ByteLevel pre-tokenizer (GPT-2 regex, ``add_prefix_space=False``) and ByteLevel decoder;
  the BPE trainer starts from the full 256-symbol byte alphabet, so every byte sequence is
  representable and ``decode(encode(s)) == s`` for any Unicode string.
* Special tokens at fixed ids (:data:`SPECIAL_TOKENS`): 0 ``<|pad|>``, 1 ``<|bos|>``,
  2 ``<|eos|>``, 3 ``<|noise|>`` (DSpark noise token), 4 ``<|image|>``, 5 ``<|image_start|>``,
  6 ``<|image_end|>``, 7 ``<|image_newline|>``. The vocabulary has exactly
  :data:`VOCAB_SIZE` = 4096 entries including them.

This is the runtime half: load, encode, decode, the special ids, the Engram map, and the SHA-256 a
checkpoint's files are keyed by. A leaf of model/: it imports nothing else of the package. The BPE trainer
is lab/corpus/tokenizer.py (``python -m lab tokenizer train --corpus DIR --out data/weights/tiny/tokenizer.json``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Iterable

from tokenizers import Regex, Tokenizer, normalizers

from .shipped import shipped_weights

SPECIAL_TOKENS: tuple[str, ...] = ("<|pad|>", "<|bos|>", "<|eos|>", "<|noise|>", "<|image|>",
                                   "<|image_start|>", "<|image_end|>", "<|image_newline|>")
PAD_ID, BOS_ID, EOS_ID, NOISE_ID, IMAGE_ID, IMAGE_START_ID, IMAGE_END_ID, IMAGE_NEWLINE_ID = range(8)
VOCAB_SIZE = 4096
DEFAULT_PATH = shipped_weights("text") / "tokenizer.json"


class TokenizerFileError(ValueError):
    """The tokenizer file is missing, unreadable or does not match the expected layout."""


def check_layout(tok: Tokenizer, vocab_size: int | None, where: str) -> None:
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
                                f"`python -m lab tokenizer train --corpus DIR --out {path}`)")
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as e:  # tokenizers raises a bare Exception on bad JSON
        raise TokenizerFileError(f"cannot load tokenizer file {path}: {e}") from e
    check_layout(tok, None, str(path))
    return tok


def encode(tok: Tokenizer, text: str, add_bos: bool = False, add_eos: bool = False) -> list[int]:
    """Token ids of ``text`` (no specials added unless asked)."""
    ids = tok.encode(text, add_special_tokens=False).ids
    return ([BOS_ID] if add_bos else []) + ids + ([EOS_ID] if add_eos else [])


def decode(tok: Tokenizer, ids: Iterable[int]) -> str:
    """Text of ``ids``; special tokens are kept as their literal strings (exact round trip)."""
    return tok.decode(list(ids), skip_special_tokens=False)


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


def sha256_file(path: str | Path) -> str:
    """The file's SHA-256, read in 1 MiB blocks so that a large file is never held whole (the prefix cache keys
    a checkpoint by its files' hashes; the lab's records name the tokenizer and data files they used)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
