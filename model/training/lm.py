"""Training the tiny weights: `python -m model.train` (CPU by default, CUDA when available).

Follows reference-brief.md §3.3 (indexer training) and §8.1 (load balancing):
- language-model loss (next-token cross entropy);
- the indexer's own signal: KL from the main attention's distribution over compressed entries to
  the index scores, with the indexer's inputs detached. A dense warm-up (every visible entry
  attended, KL over all of them) comes first, then sparse training (top-k attended, KL over the
  selected set);
- aux-loss-free balancing: after each step, each MoE's selection bias moves by gamma towards
  equal load (outside gradient descent).
Then the DSpark drafter is trained against the frozen target (model/training/dspark.py), when available.

Look-back practice (issue 15; the diagnosis is in model/lookback.py): batches mix natural text with
recall drills, repeated text spans and shuffled-token copies; the targets only a look-back can
predict (drill answers, second copies) carry `answer_weight` times the loss, without which their
signal drowns in the rest; the training window and the copies' largest gap move in stages
(`window_stages`, `copy_gap_stages`), with near copies kept in every batch (`copy_near_frac`).
`fast` runs the same maths with compiled kernels (model/fusion.py; bench.train measures it).

Deterministic for a seed: batch n comes from a generator seeded with (seed, n), so a resumed run
sees the same batches as an uninterrupted one; checkpoints (model + optimizer state, safetensors)
are written every `--ckpt-every` steps.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from ..arch.context import Ablation
from ..checkpoint.native import save_checkpoint
from ..config import V41Config
from ..fusion import configure as configure_fusion, fusable, fused
from ..model import V41Model

MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "4294967296", "MALLOC_TRIM_THRESHOLD_": "17179869184",
              "MALLOC_TOP_PAD_": "1073741824"}


@dataclass
class TrainConfig:
    preset: str = "tiny"
    steps: int = 480
    batch: int = 16
    seq_len: int = 512
    lr: float = 3e-3
    min_lr_frac: float = 0.1
    warmup_steps: int = 30
    dense_warmup_frac: float = 0.08     # share of steps with dense compressed attention (indexer warm-up)
    indexer_weight: float = 1.0
    bias_gamma: float = 1e-3
    weight_decay: float = 0.1
    clip: float = 1.0
    seed: int = 0
    threads: int = 0                    # 0 = all cores
    ckpt_every: int = 40
    eval_every: int = 120
    drafter_steps: int = 300
    stream: str = ".cache/corpus/tokens_train.npy"
    tokenizer: str = "data/weights/tiny/tokenizer.json"
    drill_frac: float = 0.0             # share of each batch made of dense recall drills (model/stories.py)
    repeat_frac: float = 0.0            # share made of repeated text spans (pure copy-from-far-back practice)
    repeat_pieces: int = 0              # >0: repeated spans stitched from pieces of 1..N tokens (not memorisable)
    copy_frac: float = 0.0              # share made of shuffled frequent-token spans said twice (induction practice)
    copy_span: int = 5                  # those spans are 3..copy_span tokens long
    copy_gap: int = 0                   # with 0..copy_gap other shuffled tokens between the two copies
    copy_vocab: int = 300               # drawn from this many most frequent tokens of the stream
    train_window: int = 0               # sliding window while training (0 = the config's); a curriculum knob
    window_stages: str = ""             # "step:window,..." e.g. "0:8,300:16,600:0" (overrides train_window)
    copy_gap_stages: str = ""           # "step:gap,...": the far copies' largest gap grows in stages
                                        # (overrides copy_gap)
    copy_near_frac: float = 0.0         # share of copy spans said again at once (gap 0-2) whatever the far gap
    answer_weight: float = 1.0          # loss weight of look-back targets (drill answers, second copies)
    init_from: str = ""                 # start from these weights (a checkpoint dir of a previous phase)
    stop_at: int = 0                    # stop after this step (0 = steps) keeping the schedule of `steps`
    fast: bool = False                  # compiled kernels, same maths (model/fusion.py); the CLI turns it on


def staged(spec: str, step: int, default: int) -> int:
    """The value of a "step:value,step:value" schedule at `step` (the last stage started); `default`
    before the first stage or when `spec` is empty."""
    value = default
    for part in filter(None, (p.strip() for p in spec.split(","))):
        at, _, v = part.partition(":")
        if not (at.strip().isdigit() and v.strip().lstrip("-").isdigit()):
            raise ValueError(f"bad stage {part!r} in {spec!r}: write step:value, e.g. 0:8,300:16")
        if step >= int(at):
            value = int(v)
    return value


def window_at(tc: TrainConfig, step: int) -> int:
    return staged(tc.window_stages, step, tc.train_window)


def copy_gap_at(tc: TrainConfig, step: int) -> int:
    return staged(tc.copy_gap_stages, step, tc.copy_gap)


def lr_at(tc: TrainConfig, step: int) -> float:
    if step < tc.warmup_steps:
        return tc.lr * (step + 1) / tc.warmup_steps
    t = (step - tc.warmup_steps) / max(1, tc.steps - tc.warmup_steps)
    return tc.lr * (tc.min_lr_frac + (1 - tc.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))


def batch_generator(tc: TrainConfig, step: int) -> torch.Generator:
    return torch.Generator().manual_seed(tc.seed * 1_000_003 + step)


def _rows(rows: list[list[int]], marks: list[list[bool]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Token rows of seq_len + 1 and per-token answer marks -> (x, y, answers aligned with y)."""
    t = torch.tensor(rows, dtype=torch.long)
    a = torch.tensor(marks, dtype=torch.bool)
    return t[:, :-1], t[:, 1:], a[:, 1:]


_ANSWER_COLOUR = None


def _answer_colour_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of the colour in each answer sentence of a drill (the sentence after a question)."""
    global _ANSWER_COLOUR
    if _ANSWER_COLOUR is None:
        import re

        from ..corpus.stories import COLOURS
        _ANSWER_COLOUR = re.compile(r'\?"? The [\w ]+? is in the (' + "|".join(COLOURS) + r") ")
    return [m.span(1) for m in _ANSWER_COLOUR.finditer(text)]


def drill_rows(tok, n: int, seq_len: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """n rows of packed recall drills (each drill after an <|eos|>), deterministic for a seed; the
    answer marks sit on the colour tokens of the answers."""
    import random

    from ..corpus.stories import recall_drill
    from ..corpus.tokenizer import EOS_ID

    rng = random.Random(seed)
    rows, marks = [], []
    for _ in range(n):
        ids: list[int] = []
        mark: list[bool] = []
        while len(ids) < seq_len + 1:
            text = recall_drill(rng)
            enc = tok.encode(text, add_special_tokens=False)
            spans = _answer_colour_spans(text)
            ids += [EOS_ID] + enc.ids
            mark += [False] + [any(a <= s < b or s <= a < e for a, b in spans) for s, e in enc.offsets]
        start = rng.randrange(0, len(ids) - seq_len) if len(ids) > seq_len + 1 else 0
        rows.append(ids[start:start + seq_len + 1])
        marks.append(mark[start:start + seq_len + 1])
    return _rows(rows, marks)


def patchwork_span(stream, length: int, piece_max: int, generator: torch.Generator) -> list[int]:
    """`length` tokens stitched from pieces of 1..piece_max tokens taken from random places in the
    stream: text-like up close (real bigrams inside each piece), but not a passage the model can have
    memorised, so its second occurrence is predictable only by finding the first."""
    out: list[int] = []
    while len(out) < length:
        k = int(torch.randint(1, piece_max + 1, (1,), generator=generator))
        px, _ = stream.sample_batch(1, k, generator)
        out += px[0].tolist()
    return out[:length]


def repeat_rows(stream, n: int, seq_len: int, generator: torch.Generator,
                vocab: int, piece_max: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """n rows where spans of corpus text (8-24 tokens) come back after a gap of other corpus text,
    half the time inside the window (0-16 tokens), half far back (32-400 tokens): the second copy
    can only be predicted by finding the first. Real-text spans (frequent tokens with trained
    embeddings) make this the quickest way for a small model to learn to copy from far back; random
    token ids are much slower to learn from. `vocab` is kept for the signature. The answer marks sit
    on the second copy's tokens after its first.

    A contiguous span of the training stream can be predicted the second time from memory of the
    corpus (it is seen for several epochs), so it teaches recall of the corpus, not copying:
    `piece_max` > 0 stitches each span from pieces of 1..piece_max tokens (`patchwork_span`)."""
    rows, marks = [], []
    for _ in range(n):
        ids: list[int] = []
        mark: list[bool] = []
        while len(ids) < seq_len + 1:
            span_len = int(torch.randint(8, 25, (1,), generator=generator))
            near = bool(torch.rand((), generator=generator) < 0.5)
            gap = int(torch.randint(0, 17, (1,), generator=generator)) if near else \
                int(torch.randint(32, 401, (1,), generator=generator))
            if piece_max:
                span = patchwork_span(stream, span_len, piece_max, generator)
            else:
                sx, _ = stream.sample_batch(1, span_len, generator)
                span = sx[0].tolist()
            fx, _ = stream.sample_batch(1, max(gap, 2), generator)
            ids += span + fx[0, :gap].tolist() + span
            mark += [False] * (span_len + gap + 1) + [True] * (span_len - 1)
        rows.append(ids[:seq_len + 1])
        marks.append(mark[:seq_len + 1])
    return _rows(rows, marks)


def copy_rows(ids: torch.Tensor, n: int, seq_len: int, generator: torch.Generator, span_max: int,
              gap_max: int, near_frac: float = 0.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """n rows of spans of shuffled familiar tokens, each said twice with 0..gap_max other shuffled
    tokens between. Text order gives no hint here, so the only way to predict the second copy is to
    find the first: the sharpest training signal for the copy (induction) circuit, which a small
    model trained on natural text alone does not form within our CPU budget. Familiar tokens keep
    the trained embeddings in use. A share `near_frac` of the spans comes back at once (gap 0-2), so
    the near skill keeps being practised while `gap_max` moves out. The answer marks sit on the
    second copy's tokens after its first (the only predictable tokens here)."""
    rows, marks = [], []
    for _ in range(n):
        out: list[int] = []
        mark: list[bool] = []
        while len(out) < seq_len + 1:
            span_len = int(torch.randint(3, max(3, span_max) + 1, (1,), generator=generator))
            near = near_frac > 0 and bool(torch.rand((), generator=generator) < near_frac)
            gap = int(torch.randint(0, (2 if near else gap_max) + 1, (1,), generator=generator))
            pick = ids[torch.randint(0, len(ids), (span_len + gap,), generator=generator)].tolist()
            out += pick[:span_len] + pick[span_len:] + pick[:span_len]
            mark += [False] * (span_len + gap + 1) + [True] * (span_len - 1)
        rows.append(out[:seq_len + 1])
        marks.append(mark[:seq_len + 1])
    return _rows(rows, marks)


def set_window(m: V41Model, window: int) -> None:
    """Narrow the sliding window of every layer to its last `window` rows (training curriculum);
    0 restores the config's. Only a mask changes, never a shape, so compiled kernels are reused."""
    if window > m.cfg.sliding_window:
        raise ValueError(f"a training window of {window} is wider than the config's {m.cfg.sliding_window}")
    for layer in m.layers:
        layer.attn.limit = window or m.cfg.sliding_window


def make_batch(tc: TrainConfig, stream, tok, step: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Batch `step`: natural-text rows, then drills, repeated text spans and copy rows by their
    shares -> (x, y, answers): answers marks the targets a look-back can predict (weighted by
    `answer_weight` in the loss)."""
    n_drill = int(round(tc.batch * tc.drill_frac))
    n_rep = int(round(tc.batch * tc.repeat_frac))
    n_copy = int(round(tc.batch * tc.copy_frac))
    g = batch_generator(tc, step)
    x, y = stream.sample_batch(tc.batch - n_drill - n_rep - n_copy, tc.seq_len, g)
    parts = [(x, y, torch.zeros_like(y, dtype=torch.bool))]
    if n_drill:
        parts.append(drill_rows(tok, n_drill, tc.seq_len, tc.seed * 1_000_003 + step))
    if n_rep:
        parts.append(repeat_rows(stream, n_rep, tc.seq_len, g, tok.get_vocab_size(), tc.repeat_pieces))
    if n_copy:
        parts.append(copy_rows(stream.frequent_ids(tc.copy_vocab), n_copy, tc.seq_len, g, tc.copy_span,
                               copy_gap_at(tc, step), tc.copy_near_frac))
    return tuple(torch.cat(t) for t in zip(*parts))  # type: ignore[return-value]


def build_model(tc: TrainConfig, tokenizer, cfg: V41Config | None = None) -> V41Model:
    from ..arch.engram import compressed_token_map

    cfg = cfg or V41Config.preset(tc.preset)
    if cfg.engram_layer_ids:
        _, n = compressed_token_map(tokenizer)
        cfg = cfg.replace(engram_compressed_vocab_size=n).validate()
    torch.manual_seed(tc.seed)
    m = V41Model(cfg).init_weights(tc.seed)
    m.bind_tokenizer(tokenizer)
    return m


def make_optimizer(m: V41Model, tc: TrainConfig) -> torch.optim.Optimizer:
    decay, no_decay = [], []
    for name, p in m.named_parameters():
        if not p.requires_grad:
            continue
        matrix = p.ndim >= 2 and "hc_" not in name and not name.endswith("embed.weight")
        (decay if matrix else no_decay).append(p)
    # foreach: one multi-tensor kernel per AdamW operation instead of a Python loop over ~300 tensors
    return torch.optim.AdamW([{"params": decay, "weight_decay": tc.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=tc.lr, betas=(0.9, 0.95), eps=1e-8,
                             foreach=tc.fast)


@fusable
def lm_loss(logits: torch.Tensor, targets: torch.Tensor,
            weights: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Next-token cross entropy -> (the weighted mean that is trained, the plain mean that is reported).
    Fused: no [N, V] gradient buffer filled twice."""
    ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                           reduction="none")
    plain = ce.mean()
    if weights is None:
        return plain, plain
    w = weights.reshape(-1)
    return (ce * w).sum() / w.sum().clamp_min(1e-20), plain


def forward_backward(m: V41Model, x: torch.Tensor, y: torch.Tensor, tc: TrainConfig, dense: bool,
                     answers: torch.Tensor | None = None):
    """The loss (LM, its look-back answers weighted by `answer_weight`, + weighted indexer KL) and
    its gradients, accumulated into the parameters. Returns (plain LM loss, indexer KL, model output
    with the routing choices)."""
    m.train()
    weights = None
    if answers is not None and tc.answer_weight != 1.0:
        weights = 1.0 + (tc.answer_weight - 1.0) * answers.to(x.device, torch.float32)
    with fused(tc.fast):
        out = m(x, indexer_loss=True, collect_routing=True, ablation=Ablation(dense_compressed=dense))
        lm, plain = lm_loss(out.logits, y, weights)
        il = out.indexer_loss if out.indexer_loss is not None else lm.new_zeros(())
        (lm + tc.indexer_weight * il).backward()
    return plain, il, out


def train_step(m: V41Model, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor, tc: TrainConfig,
               step: int, answers: torch.Tensor | None = None) -> dict[str, float]:
    dense = step < int(tc.dense_warmup_frac * tc.steps)
    for g in opt.param_groups:
        g["lr"] = lr_at(tc, step)
    opt.zero_grad(set_to_none=True)
    lm, il, out = forward_backward(m, x, y, tc, dense, answers)
    gn = torch.nn.utils.clip_grad_norm_(m.parameters(), tc.clip, foreach=tc.fast)
    opt.step()
    for lid, idx in out.routings:
        m.layers[lid].ffn.update_bias(idx, tc.bias_gamma)
    return {"loss": float(lm.detach()), "indexer_kl": float(il.detach()), "grad_norm": float(gn),
            "lr": lr_at(tc, step), "dense": dense}


# ------------------------------------------------------------------------------------------------
# Checkpoints (safetensors only)
# ------------------------------------------------------------------------------------------------

def save_state(path: Path, m: V41Model, opt: torch.optim.Optimizer, step: int, tc: TrainConfig, log: list) -> None:
    path.mkdir(parents=True, exist_ok=True)
    t = {f"model.{k}": v.detach().contiguous() for k, v in m.state_dict().items()}
    names = {id(p): n for n, p in m.named_parameters()}
    for group in opt.param_groups:
        for p in group["params"]:
            st = opt.state.get(p)
            if not st:
                continue
            n = names[id(p)]
            for k, v in st.items():
                t[f"opt.{n}.{k}"] = (v if torch.is_tensor(v) else torch.tensor(v)).detach().contiguous().clone()
    tmp = path / "ckpt.safetensors.tmp"
    save_file(t, str(tmp))
    os.replace(tmp, path / "ckpt.safetensors")
    (path / "ckpt.json").write_text(json.dumps({"step": step, "train": asdict(tc), "log": log}))


def model_state(t: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The model's tensors of a training checkpoint (save_state stores them under `model.`)."""
    return {k[len("model."):]: v for k, v in t.items() if k.startswith("model.")}


def load_state(path: Path, m: V41Model, opt: torch.optim.Optimizer) -> tuple[int, list]:
    t = load_file(str(path / "ckpt.safetensors"))
    meta = json.loads((path / "ckpt.json").read_text())
    m.load_state_dict(model_state(t), strict=True)
    params = dict(m.named_parameters())
    for key, v in t.items():
        if not key.startswith("opt."):
            continue
        name, field = key[4:].rsplit(".", 1)
        opt.state[params[name]][field] = v
    return meta["step"], meta.get("log", [])


# ------------------------------------------------------------------------------------------------
# Evaluation used during training (bench/quality.py has the full evaluation)
# ------------------------------------------------------------------------------------------------

EVAL_KEYS = ("heldout", "recall", "copy")   # the prefixes of quick_eval's keys


@torch.no_grad()
def quick_eval(m: V41Model, tok, seq_len: int = 512, max_batches: int = 4) -> dict[str, float]:
    from ..corpus.dataset import heldout_natural_batches, heldout_natural_tokens, heldout_story_batches

    set_window(m, 0)
    m.eval()
    natural = heldout_natural_tokens(tok)
    tot, n = 0.0, 0
    for i, (x, y) in enumerate(heldout_natural_batches(natural, 8, seq_len)):
        if i >= max_batches:
            break
        lg = m(x).logits
        tot += float(torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), y.reshape(-1), reduction="sum"))
        n += y.numel()
    correct = {}
    for b in heldout_story_batches(tok, batch_size=25):
        lg = m(b["input_ids"]).logits
        pred = lg[torch.arange(len(b["answer_pos"])), b["answer_pos"]].argmax(-1)
        for ok, bucket in zip((pred == b["answer_id"]).tolist(), b["bucket"]):
            c = correct.setdefault(bucket, [0, 0])
            c[0] += ok
            c[1] += 1
    copy = {f"copy_gap{gap}": copy_accuracy(m, natural, gap) for gap in (4, 40, 200)}
    m.train()
    out = {"heldout_loss": tot / max(1, n)}
    out.update({f"recall_{k}": v[0] / v[1] for k, v in correct.items()})
    out.update(copy)
    return out


@torch.no_grad()
def copy_accuracy(m: V41Model, tokens, gap: int, n: int = 24, span: int = 16, seed: int = 5,
                  first: bool = False, ablation: Ablation | None = None) -> float:
    """Does the model copy? n held-out text spans of `span` tokens, said again after `gap` other
    tokens; the share of the repeat's tokens 2..span predicted exactly (argmax). A model that
    cannot look back scores what the text alone predicts (about 0.2 here); copying lifts it
    towards 1. gap + span > window means the first copy is reachable only through compressed entries.
    `first=True` scores the first time the span is seen instead: the no-copy baseline; `ablation`
    switches parts off (window only: can the far copy be made without the compressed entries?)."""
    toks = torch.as_tensor(tokens, dtype=torch.long)
    g = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(n):
        s = int(torch.randint(0, len(toks) - 2 * (span + gap) - 16, (1,), generator=g))
        said = toks[s:s + span]
        filler = toks[s + span + 8: s + span + 8 + gap]  # other text, not the span's own continuation
        rows.append(torch.cat([toks[s + span: s + span + 8].flip(0), said, filler, said]))
    x = torch.stack(rows).to(m.device)
    lg = (m(x) if ablation is None else m(x, ablation=ablation)).logits
    start = 8 if first else 8 + span + gap
    return float((lg[:, start:start + span - 1].argmax(-1) == x[:, start + 1:start + span]).float().mean())


# ------------------------------------------------------------------------------------------------

def _reexec_with_malloc_env() -> None:
    """Large tensors are freed and re-allocated every step; keeping them in the heap (not mmap) saves ~20%."""
    if all(os.environ.get(k) == v for k, v in MALLOC_ENV.items()) or os.environ.get("V41_NO_REEXEC"):
        return
    env = dict(os.environ, **MALLOC_ENV)
    os.execve(sys.executable, [sys.executable, "-m", "model.train"] + sys.argv[1:], env)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m model.train", description=__doc__.split("\n\n")[0])
    for f, v in asdict(TrainConfig()).items():
        if isinstance(v, bool):  # --fast / --no-fast; a command-line run is fast unless told otherwise
            ap.add_argument("--" + f.replace("_", "-"), action=argparse.BooleanOptionalAction, default=True)
        else:
            ap.add_argument("--" + f.replace("_", "-"), type=type(v), default=v)
    ap.add_argument("--out", default="data/weights/tiny", help="where the final weights are written")
    ap.add_argument("--ckpt-dir", default="runs/tiny", help="resumable checkpoints")
    ap.add_argument("--resume", action="store_true", help="continue from --ckpt-dir if a checkpoint is there")
    ap.add_argument("--device", default="auto")
    args = ap.parse_args(argv)
    if argv is None:
        _reexec_with_malloc_env()
    tc = TrainConfig(**{f: getattr(args, f) for f in asdict(TrainConfig())})
    if tc.threads:
        torch.set_num_threads(tc.threads)
    if tc.fast:
        configure_fusion()
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if args.device == "auto" else args.device))
    from ..corpus.dataset import TokenStream
    from ..corpus.tokenizer import load_tokenizer

    tok = load_tokenizer(tc.tokenizer)
    stream = TokenStream.load(tc.stream)
    m = build_model(tc, tok).to(device)
    opt = make_optimizer(m, tc)
    ckpt = Path(args.ckpt_dir)
    start, log = 0, []
    previous = None
    if tc.init_from:
        src = Path(tc.init_from)
        if (src / "ckpt.safetensors").exists():
            t = load_file(str(src / "ckpt.safetensors"))
            m.load_state_dict(model_state(t), strict=True)
            meta = json.loads((src / "ckpt.json").read_text())
            previous = {"from": str(src), "step": meta["step"], "train_config": meta["train"],
                        "log_every_step": meta.get("log", [])}
        else:
            from ..checkpoint.native import load_state_dict
            load_state_dict(m, src, strict=False)
            previous = {"from": str(src)}
        print(f"initialised from {src}", file=sys.stderr)
    if args.resume and (ckpt / "ckpt.safetensors").exists():
        start, log = load_state(ckpt, m, opt)
        print(f"resumed from {ckpt} at step {start}", file=sys.stderr)
    t0 = time.time()
    tokens_per_step = tc.batch * tc.seq_len
    n_params = sum(p.numel() for p in m.parameters())
    print(f"training {tc.preset}: {n_params / 1e6:.2f}M parameters, {tc.steps} steps x {tokens_per_step} tokens "
          f"on {device} ({torch.get_num_threads()} threads)", file=sys.stderr)
    end = min(tc.stop_at or tc.steps, tc.steps)
    for step in range(start, end):
        x, y, answers = make_batch(tc, stream, tok, step)
        set_window(m, window_at(tc, step))
        rec = train_step(m, opt, x.to(device), y.to(device), tc, step, answers)
        rec["step"] = step + 1
        done = step + 1 - start
        el = time.time() - t0
        rate = done * tokens_per_step / el
        eta = (tc.steps - step - 1) * el / done
        bar = "#" * int(30 * (step + 1) / tc.steps)
        print(f"\r[{bar:<30}] {step + 1}/{tc.steps} loss {rec['loss']:.3f} kl {rec['indexer_kl']:.3f} "
              f"{rate:,.0f} tok/s eta {eta / 60:.1f} min", end="", file=sys.stderr, flush=True)
        if (step + 1) % tc.eval_every == 0 or step + 1 == end:
            rec.update(quick_eval(m, tok, tc.seq_len))
            print("\n  eval: " + ", ".join(f"{k} {v:.3f}" for k, v in rec.items() if k.startswith(EVAL_KEYS)),
                  file=sys.stderr)
        log.append(rec)
        if (step + 1) % tc.ckpt_every == 0 or step + 1 == end:
            save_state(ckpt, m, opt, step + 1, tc, log)
    train_seconds = time.time() - t0
    print(file=sys.stderr)
    out = Path(args.out)
    drafter_info = None
    set_window(m, 0)
    m.eval()
    if tc.drafter_steps and m.cfg.num_nextn_predict_layers:
        try:
            from .dspark import train_drafter
        except ImportError:
            train_drafter = None
        if train_drafter is not None:
            drafter_info = train_drafter(m, stream, steps=tc.drafter_steps, seed=tc.seed, log=sys.stderr)
    save_checkpoint(m, out, tokenizer=None, metadata={"trained_by": "python -m model.train"})
    if Path(tc.tokenizer).resolve() != (out / "tokenizer.json").resolve():
        shutil.copy(tc.tokenizer, out / "tokenizer.json")
    final = log[-1] if log else {}
    # Phases: a run initialised from shipped weights carries their phase list forward and adds itself,
    # so training.json keeps every phase's command, tokens and wall time.
    command = "python -m model.train " + " ".join(sys.argv[1:] if argv is None else argv)
    prior = Path(tc.init_from) / "training.json" if tc.init_from else None
    phases = json.loads(prior.read_text()).get("phases", []) if prior is not None and prior.exists() else []
    phases = phases + [{"run": args.ckpt_dir, "steps_done": end, "schedule_steps": tc.steps,
                        "tokens": end * tokens_per_step,
                        "command": command,
                        "wall_seconds_last_segment": round(train_seconds, 1), "resumed_at_step": start or None,
                        "last_eval": {k: v for k, v in final.items() if k.startswith(EVAL_KEYS)}}]
    info = {
        "command": command,
        "seed": tc.seed, "preset": tc.preset, "train_config": asdict(tc),
        "data": {"stream": tc.stream, "manifest": stream.manifest, "tokenizer": tc.tokenizer},
        "steps": end, "tokens": end * tokens_per_step, "parameters": n_params,
        "wall_seconds": round(train_seconds, 1), "resumed_at_step": start or None,
        "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                    "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(), "device": str(device),
                    "torch": torch.__version__},
        "final": {k: v for k, v in final.items() if isinstance(v, (int, float))},
        "drafter": drafter_info,
        "previous_phase": previous,
        "phases": phases,
        "log_every_step": [{k: (round(v, 5) if isinstance(v, float) else v) for k, v in r.items()} for r in log],
    }
    (out / "training.json").write_text(json.dumps(info, indent=1) + "\n")
    print(f"wrote {out} (training {train_seconds / 60:.1f} min)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
