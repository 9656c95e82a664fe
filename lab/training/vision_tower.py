"""Train the tiny vision tower + aligner on generated box scenes: `python -m lab train-vision`
(lab/cli/train_vision.py).

Follows docs/design/architecture.md §3.6 and §5 (vision tower and aligner producing
image-token embeddings; image-span tokens route with `bias_vl`), on the seeds' running example:
pictures of coloured boxes holding a key, a coin or a letter (model/scenes.py), followed by
questions and answers, "Where is the key? The key is in the blue box."

What is trained, and why only that:
- the tower (`vision.*`), the aligner (`aligner.*`) and the three span markers (`image_start`,
  `image_end`, `image_newline`) by gradient descent, with the text model **frozen**: the trained
  language model already answers "Where is the key?" from a sentence that states it (the story
  task), so the image tokens only have to say what such a sentence says;
- `bias_vl` of every MoE router, outside gradient descent: it starts as a copy of the text `bias`
  and then moves by the same aux-loss-free rule as the text bias (§8.1), counting only image-span
  tokens, so image tokens get their own load balance, which is what a separate bias is for.

The loss is next-token cross entropy on the answer sentences, with the colour word (the only part
the image decides) weighted fully and the other answer tokens by 0.1. Evaluation asks one question
per held-out picture (seeds disjoint from training) and compares the colour the model ranks first
among the eight palette colours, with the picture and without it (the same text only).

Writes the new tensors into `<weights>/model.safetensors` (an atomic rewrite that keeps every
existing tensor) and a "vision" entry into `<weights>/training.json`.
"""

from __future__ import annotations

import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from model.arch.vision import (
    attach_vision,
    encode_image,
    image_span_embeds,
    vision_named_parameters,
    vision_state_dict,
)
from model.checkpoint.native import rewrite_tensors
from model.inference.images import plan_grid, to_pixels
from model.inference.vision_inputs import doc_prefix, span_ids
from model.scenes import HELDOUT_SEED_BASE, PALETTE, TRAIN_SEED_BASE, Scene, draw_scene, make_scene

from .schedule import lr_at  # warm-up then cosine, read from the same field names

PAD_ID = 0


@dataclass
class VisionTrainConfig:
    steps: int = 700
    batch: int = 24
    lr: float = 3e-3
    min_lr_frac: float = 0.1
    warmup_steps: int = 30
    weight_decay: float = 0.01
    other_weight: float = 0.1      # loss weight of answer tokens other than the colour
    bias_gamma: float = 1e-3
    seed: int = 0
    threads: int = 2
    eval_n: int = 300
    eval_every: int = 0            # 0 = only at the end


# ------------------------------------------------------------------------------------------------
# Data
# ------------------------------------------------------------------------------------------------

def colour_ids(model) -> dict[str, int]:
    """Palette colour -> the token id of " colour" (each is one token in our vocabulary)."""
    out = {}
    for c in PALETTE:
        ids = model.encode(" " + c)
        if len(ids) != 1:
            raise ValueError(f"colour {c!r} is not a single token in this tokenizer: {ids}")
        out[c] = ids[0]
    return out


def scene_pixels(model, scene: Scene, size: int) -> torch.Tensor:
    """Draw at `size` and preprocess exactly as an upload is (plan_grid + to_pixels)."""
    im = draw_scene(scene, size, supersample=max(1, 256 // size))
    return to_pixels(im, plan_grid(model.cfg.vision_config, *im.size))


def training_batch(model, tc: VisionTrainConfig, step: int) -> dict:
    """Scenes with seeds TRAIN_SEED_BASE + step * batch + i; text = all its questions and answers."""
    rng = random.Random(tc.seed * 1_000_003 + step)
    cids = set(colour_ids(model).values())
    pixels, seqs, weights = [], [], []
    pre = doc_prefix(model)
    for i in range(tc.batch):
        scene = make_scene(TRAIN_SEED_BASE + step * tc.batch + i)
        pixels.append(scene_pixels(model, scene, rng.choice((64, 96, 128, 256))))
        qs = scene.questions()
        rng.shuffle(qs)
        ids, w = [], []
        for j, (q, a, _) in enumerate(qs):
            qi = model.encode((" " if j else "") + q)
            ai = model.encode(" " + a)
            ids += qi + ai
            w += [0.0] * len(qi) + [1.0 if t in cids else tc.other_weight for t in ai]
        seqs.append(ids)
        weights.append(w)
    return {"pixels": torch.stack(pixels), "text": seqs, "weights": weights, "prefix": pre}


def assemble(model, span_len_ids: list[int], prefix: list[int], texts: list[list[int]], weights: list[list[float]]):
    """Right-padded [B, S] ids, image mask, target ids and loss weights (targets shifted by one)."""
    b = len(texts)
    head = prefix + span_len_ids
    s = len(head) + max(len(t) for t in texts)
    ids = torch.full((b, s), PAD_ID, dtype=torch.long)
    w = torch.zeros(b, s)
    for i, (t, wt) in enumerate(zip(texts, weights)):
        ids[i, :len(head) + len(t)] = torch.tensor(head + t)
        w[i, len(head):len(head) + len(t)] = torch.tensor(wt)
    mask = torch.zeros(b, s, dtype=torch.bool)
    mask[:, len(prefix):len(head)] = True
    # position p predicts token p+1: the loss weight of a target sits at the position before it
    return ids, mask, ids[:, 1:], w[:, 1:]


def train_step(model, opt, batch: dict, tc: VisionTrainConfig, step: int) -> dict[str, float]:
    for g in opt.param_groups:
        g["lr"] = lr_at(tc, step)
    dev = model.embed.weight.device
    grid = plan_grid(model.cfg.vision_config, batch["pixels"].shape[-1], batch["pixels"].shape[-2])
    ids, mask, targets, w = assemble(model, span_ids(model, grid), batch["prefix"], batch["text"], batch["weights"])
    ids, mask, targets, w = ids.to(dev), mask.to(dev), targets.to(dev), w.to(dev)
    emb = image_span_embeds(model, encode_image(model, batch["pixels"].to(dev)))
    out = model(ids, image_embeds=emb, image_mask=mask, collect_routing=True)
    logits = out.logits[:, :-1]
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none").view_as(w)
    loss = (ce * w).sum() / w.sum()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    gn = torch.nn.utils.clip_grad_norm_([p for _, p in vision_named_parameters(model)], 1.0)
    opt.step()
    # bias_vl: the aux-loss-free balancing rule, counting image-span tokens only
    flat = mask.reshape(-1)
    loads = []
    with torch.no_grad():
        for lid, idx in out.routings:
            gate = model.layers[lid].ffn.gate
            load = torch.bincount(idx[flat].flatten(), minlength=gate.bias_vl.numel()).float()
            gate.bias_vl += tc.bias_gamma * torch.sign(load.mean() - load)
            loads.append(float(load.max() / load.mean()))
    colour = w == 1.0
    acc = float((logits.argmax(-1)[colour] == targets[colour]).float().mean())
    return {"loss": float(loss.detach()), "colour_acc": acc, "grad_norm": float(gn), "lr": lr_at(tc, step),
            "image_load_max_over_mean": sum(loads) / max(1, len(loads))}


# ------------------------------------------------------------------------------------------------
# Evaluation
# ------------------------------------------------------------------------------------------------

@torch.no_grad()
def evaluate_vision(model, n: int = 300, seed_base: int = HELDOUT_SEED_BASE, batch: int = 50, size: int = 256) -> dict:
    """One question per held-out picture; colour ranked first among the palette, with and without the picture."""
    model.eval()
    cid = colour_ids(model)
    names, col_tok = list(cid), torch.tensor(list(cid.values()))
    pre = doc_prefix(model)
    right_img = right_txt = right_free = 0
    chance_boxes = 0.0
    predicted_txt: dict[str, int] = {}
    dev = model.embed.weight.device
    for lo in range(0, n, batch):
        scenes = [make_scene(seed_base + i) for i in range(lo, min(n, lo + batch))]
        qa = []
        for sc in scenes:
            q, a, c = sc.questions()[sc.seed % len(sc.placed)]
            qa.append((model.encode(q + " " + a.rsplit(" ", 2)[0]), c))   # "... The key is in the"
            chance_boxes += 1 / len(sc.boxes)
        pixels = torch.stack([scene_pixels(model, sc, size) for sc in scenes]).to(dev)
        grid = plan_grid(model.cfg.vision_config, pixels.shape[-1], pixels.shape[-2])
        emb = image_span_embeds(model, encode_image(model, pixels))
        span = span_ids(model, grid)
        for with_image in (True, False):
            head = pre + (span if with_image else [])
            by_len: dict[int, list[int]] = {}
            for i, (t, _) in enumerate(qa):  # equal-length prompts run as one batch
                by_len.setdefault(len(t), []).append(i)
            for group in by_len.values():
                ids = torch.tensor([head + qa[i][0] for i in group], device=dev)
                if with_image:
                    mask = torch.zeros_like(ids, dtype=torch.bool)
                    mask[:, len(pre):len(head)] = True
                    lg = model(ids, image_embeds=emb[group], image_mask=mask, last_only=True).logits[:, -1]
                else:
                    lg = model(ids, last_only=True).logits[:, -1]
                best = lg[:, col_tok.to(dev)].argmax(-1).tolist()
                for i, b, top in zip(group, best, lg.argmax(-1).tolist()):
                    c = qa[i][1]
                    if with_image:
                        right_img += names[b] == c
                        right_free += top == cid[c]
                    else:
                        right_txt += names[b] == c
                        predicted_txt[names[b]] = predicted_txt.get(names[b], 0) + 1
    return {"n": n, "accuracy_with_image": right_img / n, "accuracy_text_only": right_txt / n,
            "accuracy_with_image_unrestricted": right_free / n, "chance_palette": 1 / len(PALETTE),
            "chance_boxes_in_picture": chance_boxes / n, "text_only_predictions": predicted_txt}


# ------------------------------------------------------------------------------------------------
# Writing the weights
# ------------------------------------------------------------------------------------------------

def write_tensors(weights_dir: Path, model, metadata: dict[str, str]) -> list[str]:
    """Rewrite model.safetensors atomically: every existing tensor, plus/overwritten by the vision
    tensors and each router's bias_vl. Returns the names written from the model."""
    new = dict(vision_state_dict(model))
    new.update({k: v for k, v in model.state_dict().items() if k.endswith(".bias_vl")})
    rewrite_tensors(weights_dir, new, metadata=metadata)
    return sorted(new)


# ------------------------------------------------------------------------------------------------

def prepare(model, tc: VisionTrainConfig) -> tuple[list[tuple[str, torch.nn.Parameter]], torch.optim.Optimizer]:
    """Freeze the text model, attach a fresh vision tower + aligner, start every router's bias_vl as a
    copy of its text bias -> (the trainable parameters, their AdamW)."""
    for p in model.parameters():
        p.requires_grad_(False)
    attach_vision(model, seed=tc.seed)
    with torch.no_grad():
        for layer in model.layers:
            layer.ffn.gate.bias_vl.copy_(layer.ffn.gate.bias)
    params = vision_named_parameters(model)
    for _, p in params:
        p.requires_grad_(True)
    decay = [p for n, p in params if p.ndim >= 2]
    no_decay = [p for n, p in params if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": tc.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=tc.lr, betas=(0.9, 0.95))
    return params, opt


def train_loop(model, opt: torch.optim.Optimizer, tc: VisionTrainConfig) -> tuple[list[dict], float]:
    """`tc.steps` steps with a progress line and a 100-picture evaluation every `eval_every` steps
    -> (the log of every step, wall seconds)."""
    model.eval()  # no dropout anywhere; eval keeps the frozen text model exactly as trained
    log, t0 = [], time.time()
    for step in range(tc.steps):
        rec = train_step(model, opt, training_batch(model, tc, step), tc, step)
        rec["step"] = step + 1
        log.append(rec)
        el = time.time() - t0
        recent = log[-20:]
        print(f"\r{step + 1}/{tc.steps} loss {sum(r['loss'] for r in recent) / len(recent):.3f} "
              f"colour acc {sum(r['colour_acc'] for r in recent) / len(recent):.3f} "
              f"eta {(tc.steps - step - 1) * el / (step + 1) / 60:.1f} min", end="", file=sys.stderr, flush=True)
        if tc.eval_every and (step + 1) % tc.eval_every == 0:
            ev = evaluate_vision(model, n=100)
            rec.update({"eval_" + k: v for k, v in ev.items() if isinstance(v, float)})
            print(f"\n  held-out (100): with image {ev['accuracy_with_image']:.3f}", file=sys.stderr)
    seconds = time.time() - t0
    print(file=sys.stderr)
    return log, seconds
