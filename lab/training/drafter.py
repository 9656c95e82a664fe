"""Training the DSpark drafter against a frozen target, evaluating it, writing it into a checkpoint.

Follows docs/design/equations.md §12 (DSpark training): the target is frozen; the loss is 0.1 CE +
0.9 TV + 1.0 confidence BCE with position weights exp(-(j-1)/gamma), on continuations the target
itself generated (`build_pool`). The drafter is model/arch/drafter.py; `evaluate_drafter` measures
acceptance with model/inference/generation.py's `speculative_generate`. `python -m lab dspark train`
(lab/cli/train_drafter.py) runs train, evaluate and write in one command.
"""

from __future__ import annotations

import math
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

import torch
import torch.nn.functional as F

from model.arch.backbone import Backbone
from model.arch.drafter import Drafter, attach_drafter
from model.checkpoint.native import rewrite_tensors
from model.inference.engine import decode_step, prefill
from model.inference.generation import speculative_generate
from model.inference.sampling import Sampler
from model.model import V41Model

from .state import rounded


@dataclass
class DraftTrainConfig:
    steps: int = 600
    batch: int = 8                  # sequences per step
    anchors: int = 48               # random anchors (blocks) per sequence
    lr: float = 3e-3
    min_lr_frac: float = 0.1
    warmup: int = 20
    clip: float = 1.0
    w_ce: float = 0.1
    w_tv: float = 0.9
    w_conf: float = 1.0
    gamma: float = 0.0              # position-weight decay; 0 = block_size - 1
    bias_gamma: float = 1e-3        # aux-loss-free balancing of the drafter's experts
    pool_greedy: int = 48           # target-generated sequences: greedy continuations ...
    pool_sampled: int = 48          # ... and sampled ones (temperature below)
    pool_corpus: int = 32           # plus plain corpus windows
    prompt_len: int = 32
    gen_len: int = 224
    temperature: float = 0.8
    seed: int = 0


def block_loss(drafter: Drafter, target: Backbone, seqs: torch.Tensor, taps: torch.Tensor, hidden: torch.Tensor,
               anchors: torch.Tensor, tc: DraftTrainConfig, routings: list | None = None) -> dict[str, torch.Tensor]:
    """The DSpark loss on blocks anchored at `anchors` [B, A] of sequences `seqs` [B, L].

    taps [B, L, k*D] and hidden [B, L, D] are the frozen target's (concatenated taps, final normed
    hidden). Block row j (1..block-1) at position a + j is scored against the target's distribution
    for that position (from row a + j - 1); the Markov head sees the sequence's token x_{a+j-1}."""
    cfg = drafter.cfg
    b, length = seqs.shape
    a_n = anchors.shape[1]
    s, w = drafter.block_size, cfg.sliding_window
    dev = seqs.device
    gamma = tc.gamma or (s - 1)
    h_ctx_all = drafter.project_context(taps)                                  # [B, L, D]
    bi = torch.arange(b, device=dev).view(-1, 1).expand(-1, a_n).reshape(-1)   # [N]
    anc = anchors.reshape(-1)
    ctx_pos = anc.view(-1, 1) - w + torch.arange(w, device=dev)                # [N, W]: a-W .. a-1
    ctx_mask = ctx_pos >= 0
    ctx_pos = ctx_pos.clamp_min(0)
    ctx_h = h_ctx_all[bi.view(-1, 1), ctx_pos]                                 # [N, W, D]
    h = drafter.hidden(target, seqs[bi, anc], anc, ctx_h, ctx_pos, ctx_mask, routings)  # [N, S, D]
    j = torch.arange(1, s, device=dev)
    tgt_rows = anc.view(-1, 1) + j - 1                                         # target row for position a+j
    prev = seqs[bi.view(-1, 1), tgt_rows]                                      # x_{a+j-1}
    with torch.no_grad():
        pt = torch.softmax(target.head(hidden[bi.view(-1, 1), tgt_rows]).float(), -1)   # [N, S-1, V]
    last = drafter.last
    bias, e = last.markov_head(prev)
    logp = torch.log_softmax(drafter.logits(target, h[:, 1:]) + bias, -1)
    pd = logp.exp()
    tv = 0.5 * (pd - pt).abs().sum(-1)                                         # [N, S-1]
    ce = -logp.gather(-1, pt.argmax(-1, keepdim=True)).squeeze(-1)
    conf_logit = last.confidence_head(h[:, 1:], e)
    label = (1 - tv).detach().clamp(0, 1)
    bce = F.binary_cross_entropy_with_logits(conf_logit, label, reduction="none")
    wts = torch.exp(-(j.float() - 1) / gamma)
    wts = wts / wts.sum()
    per = tc.w_ce * ce + tc.w_tv * tv + tc.w_conf * bce
    with torch.no_grad():
        greedy_acc = (logp.argmax(-1) == pt.argmax(-1)).float().mean(0)        # per position
        beta = (1 - tv).mean(0)
    return {"loss": (per * wts).sum(-1).mean(), "ce": ce.mean(), "tv": tv.mean(), "bce": bce.mean(),
            "greedy_match": greedy_acc.detach(), "beta": beta.detach(),
            "conf": torch.sigmoid(conf_logit).mean(0).detach()}


def generate_batch(target: Backbone, prompts: torch.Tensor, n_new: int, sampler: Sampler) -> torch.Tensor:
    """Batched plain decoding (exact prefill) -> [B, P + n_new] token ids."""
    pf = prefill(target, prompts, "exact", rollback=0)
    cache, logits = pf.cache, pf.logits
    out = [prompts]
    for i in range(n_new):
        nxt = sampler.sample(logits).view(-1, 1)
        out.append(nxt)
        if i + 1 < n_new:
            logits = decode_step(target, cache, nxt)[:, -1]
    return torch.cat(out, 1)


@dataclass
class Pool:
    """Training sequences with the frozen target's features, computed once."""

    seqs: torch.Tensor     # [M, L]
    taps: torch.Tensor     # [M, L, k*D]
    hidden: torch.Tensor   # [M, L, D]
    kinds: list[str]
    seconds: float


def build_pool(target: Backbone, stream, tc: DraftTrainConfig, log=sys.stderr) -> Pool:
    """Self-distillation data: corpus prompts continued BY THE TARGET (greedy and sampled), plus
    some plain corpus windows, then one frozen target forward for taps and final hidden states.

    Why generated text: acceptance at step j is only asked when drafts 1..j-1 matched what the
    target would emit, so the prefixes that matter are the target's own continuations; corpus
    text alone would train on prefixes the target never produces (§8.4 trains on target outputs)."""
    t0 = time.perf_counter()
    g = torch.Generator().manual_seed(tc.seed + 7)
    length = tc.prompt_len + tc.gen_len
    seqs, kinds = [], []
    dev = target.device
    chunk = 32  # decode is overhead-bound below ~32 rows: wider batches are nearly free
    for kind, n in (("greedy", tc.pool_greedy), ("sampled", tc.pool_sampled)):
        for i in range(0, n, chunk):
            m = min(chunk, n - i)
            x, _ = stream.sample_batch(m, tc.prompt_len, g)
            smp = Sampler(0.0 if kind == "greedy" else tc.temperature, 1.0, seed=tc.seed * 1000 + i + len(seqs))
            seqs.append(generate_batch(target, x.to(dev), tc.gen_len, smp))
            kinds += [kind] * m
            print(f"\r  drafter data: {len(kinds)} / {tc.pool_greedy + tc.pool_sampled} target continuations "
                  f"({time.perf_counter() - t0:.0f} s)", end="", file=log, flush=True)
    if tc.pool_corpus:
        x, _ = stream.sample_batch(tc.pool_corpus, length, g)
        seqs.append(x.to(dev))
        kinds += ["corpus"] * tc.pool_corpus
    seqs_t = torch.cat(seqs, 0)
    taps, hid = [], []
    layers = list(target.cfg.dspark_target_layer_ids)
    with torch.no_grad():
        for i in range(0, seqs_t.shape[0], chunk):
            out = target(seqs_t[i:i + chunk], tap_layers=layers)
            taps.append(torch.cat([out.taps[k] for k in layers], -1))
            hid.append(out.hidden.float())
    print(f"\r  drafter data: {len(kinds)} sequences x {length} tokens ({time.perf_counter() - t0:.0f} s)"
          + " " * 20, file=log, flush=True)
    return Pool(seqs_t, torch.cat(taps, 0), torch.cat(hid, 0), kinds, time.perf_counter() - t0)


def lr_at(tc: DraftTrainConfig, step: int, steps: int) -> float:
    """Linear warm-up over `warmup` steps, then cosine decay to `min_lr_frac` of `lr`."""
    if step < tc.warmup:
        return tc.lr * (step + 1) / tc.warmup
    return tc.lr * (tc.min_lr_frac + (1 - tc.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * (step - tc.warmup)
                                                                              / max(1, steps - tc.warmup))))


@contextmanager
def frozen_target(m: Backbone) -> Iterator[None]:
    """The target (every parameter outside mtp.*) frozen and in eval mode; both restored after."""
    frozen = {n: p.requires_grad for n, p in m.named_parameters() if not n.startswith("mtp.")}
    was_training = m.training
    m.eval()
    for n, p in m.named_parameters():
        if not n.startswith("mtp."):
            p.requires_grad_(False)
    try:
        yield
    finally:
        for n, p in m.named_parameters():
            if n in frozen:
                p.requires_grad_(frozen[n])
        m.train(was_training)


def train_step(drafter: Drafter, m: Backbone, pool: Pool, opt: torch.optim.Optimizer, tc: DraftTrainConfig,
               rows: torch.Tensor, anchors: torch.Tensor) -> dict:
    """One optimiser step on blocks at `anchors` [batch, anchors] of pool sequences `rows`, then the
    aux-loss-free bias update of the drafter's experts; returns the step's numbers."""
    dev = pool.seqs.device
    routings: list = []
    drafter.train()
    r = block_loss(drafter, m, pool.seqs[rows], pool.taps[rows], pool.hidden[rows], anchors.to(dev), tc, routings)
    opt.zero_grad(set_to_none=True)
    r["loss"].backward()
    torch.nn.utils.clip_grad_norm_([p for grp in opt.param_groups for p in grp["params"]], tc.clip)
    opt.step()
    with torch.no_grad():
        for blk, idx in zip(drafter.blocks, routings):
            blk.ffn.update_bias(idx, tc.bias_gamma)
    return {"loss": float(r["loss"].detach()), "ce": float(r["ce"].detach()), "tv": float(r["tv"].detach()),
            "bce": float(r["bce"].detach()), "greedy_match": [round(float(x), 4) for x in r["greedy_match"]],
            "beta": [round(float(x), 4) for x in r["beta"]]}


def _tail_mean(history: list[dict], key: str, n: int = 50):
    """Mean of `key` over the last n records (element-wise for lists)."""
    v = [r[key] for r in history[-n:]]
    if not v:
        return None
    return [round(sum(x[i] for x in v) / len(v), 4) for i in range(len(v[0]))] if isinstance(v[0], list) \
        else round(sum(v) / len(v), 5)


def training_record(tc: DraftTrainConfig, pool: Pool, drafter: Drafter, history: list[dict], wall: float) -> dict:
    return {
        "steps": tc.steps, "seed": tc.seed, "config": asdict(tc),
        "data": {"sequences": int(pool.seqs.shape[0]), "length": int(pool.seqs.shape[1]),
                 "kinds": {k: pool.kinds.count(k) for k in sorted(set(pool.kinds))},
                 "source": "corpus prompts continued by the frozen target (greedy and sampled) + corpus windows",
                 "seconds": round(pool.seconds, 1)},
        "parameters": sum(p.numel() for p in drafter.parameters()),
        "final_avg_last_50": {k: _tail_mean(history, k) for k in ("loss", "ce", "tv", "bce", "greedy_match", "beta")},
        "wall_seconds": round(wall, 1),
        "log_every_10": rounded(history[::10]),
    }


def train_drafter(m: Backbone, stream, steps: int = 600, seed: int = 0, log=sys.stderr,
                  tc: DraftTrainConfig | None = None, pool: Pool | None = None) -> dict:
    """Train `m.mtp` (created if absent) against the frozen target `m`; returns the training record."""
    tc = tc or DraftTrainConfig()
    tc.steps, tc.seed = steps, seed
    t_start = time.perf_counter()
    torch.manual_seed(seed)
    history: list[dict] = []
    with frozen_target(m):
        drafter = m.mtp if isinstance(m.mtp, Drafter) else attach_drafter(m, seed)
        try:
            if pool is None:
                pool = build_pool(m, stream, tc, log)
            params = [p for p in drafter.parameters() if p.requires_grad]
            opt = torch.optim.AdamW(params, lr=tc.lr, betas=(0.9, 0.95), weight_decay=0.0)
            g = torch.Generator().manual_seed(seed + 11)
            n_seq, length = pool.seqs.shape
            t0 = time.perf_counter()
            for step in range(steps):
                lr = lr_at(tc, step, steps)
                for grp in opt.param_groups:
                    grp["lr"] = lr
                rows = torch.randint(0, n_seq, (tc.batch,), generator=g)
                anchors = torch.randint(1, length - drafter.block_size + 1, (tc.batch, tc.anchors), generator=g)
                rec = {"step": step + 1, **train_step(drafter, m, pool, opt, tc, rows, anchors), "lr": lr}
                history.append(rec)
                el = time.perf_counter() - t0
                print(f"\r  drafter {step + 1}/{steps} loss {rec['loss']:.3f} tv {rec['tv']:.3f} "
                      f"match {'/'.join(f'{x:.2f}' for x in rec['greedy_match'])} "
                      f"eta {(steps - step - 1) * el / (step + 1) / 60:.1f} min", end="", file=log, flush=True)
            print(file=log)
        finally:
            drafter.eval()
    return training_record(tc, pool, drafter, history, time.perf_counter() - t_start)


def evaluate_drafter(m: V41Model, prompts: list, max_new_tokens: int = 48, draft_length: int | str = "max",
                     temperature: float = 0.0, seed: int = 0) -> dict:
    """Speculative decoding over prompts (texts or id lists); pooled acceptance statistics."""
    steps = emitted = 0
    reached = accepted = None
    for i, pr in enumerate(prompts):
        ids = m.encode(pr) if isinstance(pr, str) else list(pr)
        r = speculative_generate(m, m.mtp, torch.tensor([ids]), max_new_tokens,
                                 sampler=Sampler(temperature, 1.0, seed + i), draft_length=draft_length,
                                 stop_at_eos=False)
        s = r.stats
        steps += s.steps
        emitted += s.emitted
        reached = s.reached if reached is None else [a + b for a, b in zip(reached, s.reached)]
        accepted = s.accepted_at if accepted is None else [a + b for a, b in zip(accepted, s.accepted_at)]
    alpha = sum(accepted) / max(1, sum(reached))
    return {"prompts": len(prompts), "max_new_tokens": max_new_tokens, "draft_length": draft_length,
            "temperature": temperature, "tokens_per_pass": round(emitted / max(1, steps), 4),
            "alpha": round(alpha, 4),
            "acceptance_by_position": [round(a / r, 4) if r else None for a, r in zip(accepted, reached)]}


# ================================================================================================
# Writing the drafter into a shipped checkpoint (its record: state.write_json_entry)
# ================================================================================================

def write_drafter(model: Backbone, path: str | Path) -> Path:
    """Rewrite `path/model.safetensors` with the drafter's mtp.* tensors (replacing any old ones),
    keeping every other tensor and the metadata (checkpoint.native.rewrite_tensors)."""
    return rewrite_tensors(path, {f"mtp.{k}": v for k, v in model.mtp.state_dict().items()}, drop="mtp.")
