"""The held-out sets and the quality measure the app, the benchmarks and the lab share.

The sets are files under data/heldout/ (written by the lab, read here): natural text (a Shakespeare play and
a Bible book never trained on), recall stories bucketed by the distance between a fact and its question, and
far stories told with names, objects and sentences never trained on. The measure: loss per token on the
natural text, recall by bucket, exact or through a bounded prefill, and fact binding (the asked object's
colour, or another fact's). The Ablation lab (lessons/ablation.py) runs `evaluate`; the Far fact page reads
the stories; the lab's training evaluation and probes build on the same batches.

It does not know how the sets are made (lab/corpus/stories.py generates the stories) nor how a model is
trained; it only reads files and runs a model forward.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np
import torch

from .arch.context import Ablation
from .inference.engine import prefill
from .model import V41Model
from .tokenizer import EOS_ID, PAD_ID

REPO_ROOT = Path(__file__).resolve().parents[1]
HELDOUT_DIR = REPO_ROOT / "data" / "heldout"
HELDOUT_STORIES_PATH = HELDOUT_DIR / "stories.jsonl"
HELDOUT_NATURAL_PATH = HELDOUT_DIR / "natural.txt"
# far stories from names, objects and sentences never trained on (`python -m lab stories --heldout-templates`)
HELDOUT_TEMPLATES_PATH = HELDOUT_DIR / "stories_heldout_templates.jsonl"

# Documents inside a cleaned text file are separated by three blank lines; cleaning collapses every longer run
# of newlines to one blank line, so this never occurs inside a document.
DOC_SEP = "\n\n\n\n"

# Distance buckets (answer token index - fact colour token index, inclusive) around a 32-key window.
BUCKETS: dict[str, tuple[int, int]] = {"inside": (1, 32), "just_past": (33, 128), "far": (129, 480)}
COLOURS = ("red", "blue", "green", "yellow", "white", "black", "pink", "purple", "orange", "brown", "grey")


# ---- the held-out files ----------------------------------------------------------------------------------------
def load_heldout_stories(path: str | Path | None = None) -> list[dict[str, Any]]:
    """Read ``data/heldout/stories.jsonl`` (one JSON object per line)."""
    path = Path(path) if path else HELDOUT_STORIES_PATH
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def token_index_at_char(offsets: Sequence[tuple[int, int]], char: int) -> int:
    """Index of the token whose character span contains ``char`` (ByteLevel spans may
    include the preceding space)."""
    for i, (s, e) in enumerate(offsets):
        if s <= char < e:
            return i
    raise ValueError(f"no token covers character {char}")


def word_token_ids(tokenizer: Any, words: Iterable[str]) -> dict[str, int]:
    """Word -> token id of ' word', for the words that are one token (as they stand mid-sentence)."""
    out = {}
    for w in words:
        ids = tokenizer.encode(" " + w, add_special_tokens=False).ids
        if len(ids) == 1:
            out[w] = ids[0]
    return out


def colour_token_ids(tokenizer: Any) -> dict[str, int]:
    """Colour word -> token id of ' colour', for the colours that are one token."""
    return word_token_ids(tokenizer, COLOURS)


def encode_many(tok: Any, texts: Sequence[str]) -> list[list[int]]:
    """The ids of each text, encoded in one batch (no special tokens)."""
    fast = getattr(tok, "encode_batch_fast", None)  # no offsets: faster (tokenizers >= 0.21)
    encs = (fast(list(texts), add_special_tokens=False) if fast
            else tok.encode_batch(list(texts), add_special_tokens=False))
    return [e.ids for e in encs]


def heldout_natural_tokens(tok: Any, path: str | Path = HELDOUT_NATURAL_PATH) -> np.ndarray:
    """``data/heldout/natural.txt`` as int64 ids: each document followed by ``<|eos|>``."""
    text = Path(path).read_text(encoding="utf-8")
    docs = [d for d in text.split(DOC_SEP) if d.strip()]
    return np.array([t for ids in encode_many(tok, docs) for t in ids + [EOS_ID]], dtype=np.int64)


def heldout_natural_batches(tokens: np.ndarray, batch: int,
                            seq_len: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Consecutive non-overlapping windows over the held-out tokens (deterministic)."""
    t = torch.from_numpy(np.asarray(tokens, dtype=np.int64))
    n = (len(t) - 1) // seq_len
    x = t[: n * seq_len].view(n, seq_len)
    y = t[1: n * seq_len + 1].view(n, seq_len)
    for i in range(0, n, batch):
        yield x[i: i + batch], y[i: i + batch]

# ---- recall batches ---------------------------------------------------------------------------------------------
def _field(s: Any, name: str) -> Any:
    return s[name] if isinstance(s, dict) else getattr(s, name)


def story_eval_batches(tok: Any, stories: Iterable[Any], batch_size: int = 16,
                       prefix_eos: bool = True) -> Iterator[dict[str, Any]]:
    """Padded recall batches. Each story is cut right after its answer token. Keys:
    ``input_ids`` (B, L) int64 right-padded with ``<|pad|>``; ``attention_mask`` (B, L) bool;
    ``answer_pos`` (B,) the position whose logits must predict ``answer_id`` (B,);
    ``fact_pos`` (B,) the fact colour token; ``distance`` (B,) answer - fact token index;
    ``bucket`` and ``answer`` lists. With ``prefix_eos`` every story starts after an
    ``<|eos|>``, as documents do in the training stream."""
    pre = [EOS_ID] if prefix_eos else []
    rows: list[tuple[list[int], int, int, str, str]] = []

    def flush() -> dict[str, Any]:
        L = max(len(r[0]) for r in rows)
        ids = torch.full((len(rows), L), PAD_ID, dtype=torch.long)
        mask = torch.zeros((len(rows), L), dtype=torch.bool)
        for i, r in enumerate(rows):
            ids[i, : len(r[0])] = torch.tensor(r[0])
            mask[i, : len(r[0])] = True
        a = torch.tensor([r[1] for r in rows])
        f = torch.tensor([r[2] for r in rows])
        return {"input_ids": ids, "attention_mask": mask, "answer_pos": a - 1,
                "answer_id": ids[torch.arange(len(rows)), a], "fact_pos": f, "distance": a - f,
                "bucket": [r[3] for r in rows], "answer": [r[4] for r in rows]}

    for s in stories:
        enc = tok.encode(_field(s, "text"), add_special_tokens=False)
        a = token_index_at_char(enc.offsets, _field(s, "answer_start"))
        f = token_index_at_char(enc.offsets, _field(s, "fact_answer_start"))
        rows.append((pre + enc.ids[: a + 1], a + len(pre), f + len(pre), _field(s, "bucket"), _field(s, "answer")))
        if len(rows) == batch_size:
            yield flush()
            rows = []
    if rows:
        yield flush()



# ---- the quality measure -----------------------------------------------------------------------------------------
def answer_argmax(logits: torch.Tensor, answer_pos: torch.Tensor) -> torch.Tensor:
    """The top token at each row's answer position ([B, T, V] logits, [B] positions), on the CPU."""
    rows = torch.arange(len(answer_pos), device=logits.device)
    return logits[rows, answer_pos.to(logits.device)].argmax(-1).cpu()


def story_answers(m: V41Model, tok, rows: list[dict], ablation: Ablation | None):
    """(predicted id, answer id, bucket) for each held-out story row, in order: one exact forward per batch."""
    for b in story_eval_batches(tok, rows, batch_size=25):
        pred = answer_argmax(forward_with(m, b["input_ids"], ablation).logits, b["answer_pos"])
        yield from zip(pred.tolist(), b["answer_id"].tolist(), b["bucket"])


def recall_by_bucket(m: V41Model, tok, rows: list[dict], ablation: Ablation | None) -> dict[str, float]:
    return bucket_rates(story_answers(m, tok, rows, ablation))


def bucket_rates(answers) -> dict[str, float]:
    """Accuracy per bucket from (predicted id, answer id, bucket) triples."""
    correct: dict[str, list[int]] = {}
    for p, a, bucket in answers:
        c = correct.setdefault(bucket, [0, 0])
        c[0] += p == a
        c[1] += 1
    return {k: v[0] / v[1] for k, v in correct.items()}


def forward_with(m: V41Model, x: torch.Tensor, ablation: Ablation | None):
    x = x.to(m.device)
    return m(x) if ablation is None else m(x, ablation=ablation)


@dataclass
class Quality:
    loss: float                         # nats per token on held-out natural text
    tokens: int
    recall: dict[str, float]            # bucket -> accuracy
    recall_n: dict[str, int]
    seconds: float
    extra: dict[str, float] = field(default_factory=dict)

    def row(self) -> dict[str, float]:
        out = {"loss": self.loss}
        out.update({f"recall_{b}": self.recall.get(b, float("nan")) for b in BUCKETS})
        out["seconds"] = self.seconds
        return out


@torch.no_grad()
def natural_loss(model, max_tokens: int | None = None, seq_len: int = 512, batch: int = 8, ablation=None,
                 progress: Callable[[float, str], None] | None = None) -> tuple[float, int, np.ndarray]:
    toks = heldout_natural_tokens(model.tokenizer)
    if max_tokens:
        toks = toks[: max_tokens + 1]
    total, n = 0.0, 0
    batches = list(heldout_natural_batches(toks, batch, seq_len))
    for i, (x, y) in enumerate(batches):
        lg = model(x.to(model.device), ablation=ablation).logits
        total += float(torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]).float(),
                                                         y.reshape(-1).to(lg.device), reduction="sum"))
        n += y.numel()
        if progress:
            progress((i + 1) / len(batches), f"natural text {n:,} tokens")
    return total / max(1, n), n, toks


@torch.no_grad()
def story_recall(model, max_stories: int | None = None, ablation=None, mode: str = "exact",
                 progress: Callable[[float, str], None] | None = None,
                 path: Path | None = None) -> tuple[dict[str, float], dict[str, int]]:
    rows = load_heldout_stories(path)
    if max_stories:  # keep the buckets balanced when subsampling
        per = max(1, max_stories // len(BUCKETS))
        rows = [r for b in BUCKETS for r in [x for x in rows if x["bucket"] == b][:per]]
    hits: dict[str, list[int]] = {}
    done = 0
    for b in story_eval_batches(model.tokenizer, rows, batch_size=25):
        if mode == "exact":
            pred = answer_argmax(model(b["input_ids"].to(model.device), ablation=ablation).logits, b["answer_pos"])
        else:
            preds = []
            for ids, pos in zip(b["input_ids"], b["answer_pos"]):
                pf = prefill(model, ids[: int(pos) + 1].unsqueeze(0), mode, ablation=ablation)
                preds.append(int(pf.logits[0].argmax()))
            pred = torch.tensor(preds)
        for ok, bucket in zip((pred == b["answer_id"]).tolist(), b["bucket"]):
            hits.setdefault(bucket, []).append(int(ok))
        done += len(b["bucket"])
        if progress:
            progress(done / len(rows), f"stories {done}/{len(rows)}")
    return ({k: sum(v) / len(v) for k, v in hits.items()}, {k: len(v) for k, v in hits.items()})


@dataclass
class Binding:
    """Does the model answer with the asked object's fact, or with any fact? Far held-out stories that hold other
    facts (distractors, each another object in a container of another colour): the share answered right, the share
    answered with a distractor's colour, and what picking one of the story's facts at random would score."""

    right: float
    other_fact: float
    random_fact: float
    stories: int
    alone_right: float   # the far stories with no other fact in them: is a fact found at all?


@torch.no_grad()
def fact_binding(model, path: Path | None = None, bucket: str = "far", tok=None) -> Binding:
    """`Binding` over the held-out `bucket` stories; `tok` defaults to the model's own tokenizer."""
    tok = tok or model.tokenizer
    rows = [r for r in load_heldout_stories(path) if r["bucket"] == bucket]
    return answers_binding(rows, story_answers(model, tok, rows, None), tok)


def answers_binding(rows: list[dict], answers, tok) -> Binding:
    """`Binding` from held-out story rows and their (predicted id, answer id, bucket), in the same order."""
    right = other = alone = n_alone = 0
    guess = 0.0
    for r, (p, a, _) in zip(rows, answers):
        colours = {d[1] for d in r.get("distractors", [])}
        if not colours:
            alone += p == a
            n_alone += 1
            continue
        right += p == a
        other += tok.decode([p]).strip() in colours
        guess += 1 / (1 + len(colours))
    n = len(rows) - n_alone
    return Binding(right=right / max(1, n), other_fact=other / max(1, n), random_fact=guess / max(1, n), stories=n,
                   alone_right=alone / max(1, n_alone))


def evaluate(model, ablation=None, mode: str = "exact", max_stories: int | None = None,
             max_natural_tokens: int | None = None, progress: Callable[[float, str], None] | None = None) -> Quality:
    """Held-out loss and recall by bucket for one configuration (the ablation lab's unit of work)."""
    t0 = time.perf_counter()

    def sub(lo, hi):
        return None if progress is None else (lambda f, msg: progress(lo + (hi - lo) * f, msg))

    loss, n, _ = natural_loss(model, max_natural_tokens, ablation=ablation, progress=sub(0.0, 0.4))
    recall, counts = story_recall(model, max_stories, ablation=ablation, mode=mode, progress=sub(0.4, 1.0))
    return Quality(loss=loss, tokens=n, recall=recall, recall_n=counts, seconds=time.perf_counter() - t0)
