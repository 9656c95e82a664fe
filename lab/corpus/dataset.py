"""Training token stream and batch sampling, and recall batches of held-out or fresh stories.

The stream mixes three sources, roughly a third each by tokens: Shakespeare, the World English
Bible (both cleaned by lab/corpus/texts.py; the held-out play and book are excluded) and generated
recall stories (lab/corpus/stories.py, training seeds ``TRAIN_SEED_BASE + i``). Natural sources are
repeated (a new seeded document order each epoch) until they reach their share; stories are
generated fresh until theirs is reached. Documents are shuffled together and each is followed
by ``<|eos|>``. The stream is a uint16 ``.npy`` (load with ``mmap_mode="r"``) with a JSON
manifest beside it (tokens per source, epochs, tokenizer sha256, seeds).

``python -m lab dataset build`` writes ``.cache/corpus/tokens_train.npy`` and
``tokens_train.json``. :func:`sample_batch` draws random windows (deterministic given a
``torch.Generator``); :func:`story_eval_batches` / :func:`heldout_story_batches` give padded
recall batches with the answer positions; :func:`heldout_natural_tokens` tokenizes
``data/heldout/natural.txt``.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch

from model.heldout import encode_many, load_heldout_stories, story_eval_batches
from model.tokenizer import DEFAULT_PATH as TOKENIZER_PATH, EOS_ID, load_tokenizer, sha256_file

from .stories import HELDOUT_SEED_BASE, TRAIN_SEED_BASE, generate_story, training_story_text
from .texts import DEFAULT_CACHE, REPO_ROOT, read_docs

DEFAULT_STREAM = DEFAULT_CACHE / "tokens_train.npy"
SHUFFLE_SEED = 1234
NATURAL_SOURCES = ("shakespeare", "bible")


def _rel(path: Path) -> str:
    """Path relative to the repository root when inside it (manifests stay portable)."""
    try:
        return str(Path(path).resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def build_token_stream(corpus_dir: Path = DEFAULT_CACHE, tokenizer_path: Path = TOKENIZER_PATH,
                       out: Path | None = None, target_tokens: int = 15_000_000,
                       seed: int = SHUFFLE_SEED) -> dict[str, Any]:
    """Tokenize the mixture and write ``out`` (.npy, uint16) + ``out.with_suffix('.json')``."""
    t0 = time.time()
    corpus_dir = Path(corpus_dir)
    out = Path(out) if out else corpus_dir / "tokens_train.npy"
    tok = load_tokenizer(tokenizer_path)
    if tok.get_vocab_size() > 65535:
        raise ValueError("vocabulary does not fit in uint16")
    sources = [s for s in NATURAL_SOURCES if (corpus_dir / f"{s}.txt").is_file()]
    if not sources:
        raise FileNotFoundError(f"no cleaned corpus in {corpus_dir}; run `python -m lab corpus build`")
    share = target_tokens // (len(sources) + 1)
    docs: list[tuple[str, list[int]]] = []  # (source, ids incl. trailing eos)
    stats: dict[str, dict[str, Any]] = {}

    for si, src in enumerate(sources):
        texts = read_docs(corpus_dir / f"{src}.txt")
        ids = [x + [EOS_ID] for x in encode_many(tok, texts)]
        unique = sum(len(x) for x in ids)
        used, epochs, n_docs = 0, 0, 0
        while used < share:  # repeat with a fresh order per epoch, stop at a document boundary
            order = list(range(len(ids)))
            random.Random(seed * 1000 + si * 100 + epochs).shuffle(order)
            for i in order:
                if used >= share:
                    break
                docs.append((src, ids[i]))
                used += len(ids[i])
                n_docs += 1
            epochs += 1
        stats[src] = {"tokens": used, "unique_tokens": unique, "epochs": round(used / unique, 3),
                      "docs": n_docs, "unique_docs": len(ids), "bytes": sum(len(t.encode()) for t in texts)}

    used, n_stories, chunk = 0, 0, 2000
    while used < share:
        texts = [training_story_text(n_stories + k) for k in range(chunk)]
        for ids in encode_many(tok, texts):
            if used >= share:
                break
            docs.append(("stories", ids + [EOS_ID]))
            used += len(ids) + 1
            n_stories += 1
    stats["stories"] = {"tokens": used, "docs": n_stories,
                        "seeds": [TRAIN_SEED_BASE, TRAIN_SEED_BASE + n_stories - 1]}

    random.Random(seed).shuffle(docs)
    stream = np.fromiter((t for _, ids in docs for t in ids), dtype=np.uint16,
                         count=sum(len(ids) for _, ids in docs))
    out.parent.mkdir(parents=True, exist_ok=True)
    np.save(out, stream)
    manifest = {
        "path": out.name, "dtype": "uint16", "n_tokens": int(stream.size),
        "sources": stats, "target_tokens": target_tokens, "shuffle_seed": seed,
        "tokenizer": _rel(tokenizer_path), "tokenizer_sha256": sha256_file(tokenizer_path),
        "vocab_size": tok.get_vocab_size(), "eos_id": EOS_ID,
        "corpus_manifest_sha256": (sha256_file(corpus_dir / "manifest.json")
                                   if (corpus_dir / "manifest.json").is_file() else None),
        "seconds": round(time.time() - t0, 1),
    }
    out.with_suffix(".json").write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    return manifest


# ----------------------------------------------------------------------------- sampling


def load_stream(path: str | Path = DEFAULT_STREAM) -> np.ndarray:
    """The uint16 token stream as a read-only memmap."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"token stream not found: {path} (run `python -m lab dataset build`)")
    return np.load(path, mmap_mode="r")


def sample_batch(tokens: np.ndarray | torch.Tensor, batch: int, seq_len: int,
                 generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Random windows: ``(inputs, targets)``, both int64 ``(batch, seq_len)``, targets shifted
    by one. Start positions come from ``generator`` alone, so a seeded generator gives the
    same batch every time."""
    n = len(tokens)
    if n < seq_len + 2:
        raise ValueError(f"stream of {n} tokens is too short for seq_len {seq_len}")
    starts = torch.randint(0, n - seq_len - 1, (batch,), generator=generator).numpy()
    idx = starts[:, None] + np.arange(seq_len + 1)[None, :]
    if isinstance(tokens, torch.Tensor):
        win = tokens[torch.from_numpy(idx)].long()
    else:
        win = torch.from_numpy(np.asarray(tokens[idx]).astype(np.int64))
    return win[:, :-1].contiguous(), win[:, 1:].contiguous()


@dataclass
class TokenStream:
    """A token stream on disk plus its manifest, with random-window sampling."""

    tokens: np.ndarray
    manifest: dict[str, Any]
    _counts: dict[int, np.ndarray] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def load(cls, path: str | Path = DEFAULT_STREAM) -> "TokenStream":
        path = Path(path)
        tokens = load_stream(path)
        mpath = path.with_suffix(".json")
        manifest = json.loads(mpath.read_text(encoding="utf-8")) if mpath.is_file() else {}
        return cls(tokens, manifest)

    def __len__(self) -> int:
        return len(self.tokens)

    def sample_batch(self, batch: int, seq_len: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        return sample_batch(self.tokens, batch, seq_len, generator)

    def frequent_ids(self, n: int, prefix: int = 2_000_000) -> torch.Tensor:
        """The n most frequent token ids in the first `prefix` tokens (special ids < 5 left out);
        counted once per stream, since training asks for them every step."""
        if prefix not in self._counts:
            counts = np.bincount(np.asarray(self.tokens[:prefix], dtype=np.int64), minlength=5)
            counts[:5] = 0
            self._counts[prefix] = counts
        return torch.from_numpy(np.argsort(-self._counts[prefix], kind="stable")[:n].copy())

    def unigram_weights(self, power: float, prefix: int = 2_000_000) -> torch.Tensor:
        """Sampling weights over the vocabulary: each id's count in the first `prefix` tokens (plus one,
        so every id can come up) raised to `power` (1 = the stream's own frequencies, 0 = uniform; special
        ids < 5 never drawn)."""
        self.frequent_ids(1, prefix)                     # fills the count cache
        w = torch.from_numpy((self._counts[prefix] + 1.0) ** power)
        w[:5] = 0
        return w / w.sum()

    def batches(self, batch: int, seq_len: int, seed: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Endless deterministic batches from ``torch.Generator().manual_seed(seed)``."""
        g = torch.Generator().manual_seed(seed)
        while True:
            yield self.sample_batch(batch, seq_len, g)


# ----------------------------------------------------------------------------- evaluation data


def heldout_story_batches(tok: Any, batch_size: int = 16, path: str | Path | None = None,
                          bucket: str | None = None) -> Iterator[dict[str, Any]]:
    """:func:`story_eval_batches` over ``data/heldout/stories.jsonl`` (optionally one bucket)."""
    rows = [r for r in load_heldout_stories(path) if bucket is None or r["bucket"] == bucket]
    return story_eval_batches(tok, rows, batch_size)


def fresh_story_batches(tok: Any, n: int, batch_size: int = 16, bucket: str | None = None,
                        seed_start: int = HELDOUT_SEED_BASE + 500_000) -> Iterator[dict[str, Any]]:
    """Newly generated (non-training seed) recall stories with exact distances, batched."""
    stories = (generate_story(seed_start + i, bucket=bucket, tokenizer=tok) for i in range(n))
    return story_eval_batches(tok, stories, batch_size)
