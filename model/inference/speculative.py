"""DSpark speculative decoding: draft a block, verify it in one target forward, roll back the rest.

Follows docs/design/equations.md §11 (verification rules) and §12 (DSpark); the drafter itself is
model/arch/drafter.py. One step (`verify_step`): the drafter proposes x_1..x_g after the anchor
(`draft_block`: one parallel pass, then the Markov head left to right), the target verifies
[anchor, x_1..x_g] in one forward through its cache (greedy = accept while x_j is the target's
argmax; stochastic = accept with min(1, p/q), else resample from norm(max(0, p - q)); a bonus token
when all are accepted), then `cache.rollback` drops the rejected rows and the drafter's context
grows by the kept ones. `speculative_start` prefills and emits the first token; `summarize` turns the per-step
logs into acceptance and calibration statistics. The whole-run loop is `speculative_generate`
(model/inference/generation.py).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Callable

import torch

from ..arch.backbone import Backbone
from ..arch.drafter import Drafter
from ..errors import InputError
from .cache import Cache
from .engine import DEFAULT_CHUNK, prefill
from .prefix_cache import PrefixCache
from .sampling import Sampler, eos_ids


@dataclass
class DraftContext:
    """The drafter's view of the sequence: projected context rows (at most `sliding_window`) that
    end at `end`, the position of the next anchor (= the target cache's length)."""

    h: torch.Tensor   # [1, R, D]
    end: int

    @property
    def rows(self) -> int:
        return self.h.shape[1]

    def extend(self, drafter: Drafter, taps: dict[int, torch.Tensor], n: int) -> None:
        """Append the first n rows of a verify forward's taps (the anchor and accepted drafts)."""
        if n <= 0:
            return
        new = drafter.project_context({k: v[:, :n] for k, v in taps.items()})
        self.h = torch.cat([self.h, new], 1)[:, -drafter.cfg.sliding_window:]
        self.end += n


def context_from_prefill(drafter: Drafter, taps: dict[int, torch.Tensor], end: int) -> DraftContext:
    rows = min(t.shape[1] for t in taps.values()) if taps else 0
    d = drafter.cfg.hidden_size
    if rows == 0:
        return DraftContext(torch.zeros(1, 0, d, device=drafter.first.main_proj.weight.device), end)
    h = drafter.project_context({k: v[:, -rows:] for k, v in taps.items()})
    return DraftContext(h[:, -drafter.cfg.sliding_window:], end)


@dataclass
class Draft:
    tokens: list[int]            # x_1..x_g
    q: torch.Tensor              # [g, V] the distributions they were drawn from (one-hot when greedy)
    confidence: list[float]      # c_j for every block position that was scored (>= g)
    survival: list[float]        # running products of the confidences
    seconds: float = 0.0
    dist: torch.Tensor | None = None  # [g, V] softmax of the drafter's logits (what a page shows)


def draft_block(drafter: Drafter, target: Backbone, dctx: DraftContext, anchor: int, sampler: Sampler,
                draft_length: int | str = "max", threshold: float = 0.3, limit: int | None = None) -> Draft:
    """Draft up to `limit` tokens after `anchor`: one parallel pass, then the Markov head left to right.

    draft_length: an int (fixed), "max" (the whole block) or "auto" (stop before the first position
    whose running product of confidences falls under `threshold`)."""
    t0 = time.perf_counter()
    dev = drafter.first.main_proj.weight.device
    gmax = drafter.max_draft
    if isinstance(draft_length, int) and not isinstance(draft_length, bool):
        gmax = min(gmax, draft_length)
    if limit is not None:
        gmax = min(gmax, limit)
    auto = draft_length == "auto"
    v = drafter.cfg.vocab_size
    if gmax <= 0:  # nothing to draft (the last token of a request): the step is a plain decode step
        return Draft([], torch.zeros(0, v, device=dev), [], [], time.perf_counter() - t0)
    with torch.no_grad():
        r = dctx.rows
        ctx_pos = torch.arange(dctx.end - r, dctx.end, device=dev).view(1, -1)
        h = drafter.hidden(target, torch.tensor([anchor], device=dev), torch.tensor([dctx.end], device=dev),
                           dctx.h, ctx_pos, torch.ones(1, r, dtype=torch.bool, device=dev))
        u = drafter.logits(target, h[:, 1:1 + max(gmax, 0)])[0]               # [gmax, V]
        last = drafter.last
        tokens, qs, dists, conf, surv = [], [], [], [], []
        prev, run = anchor, 1.0
        for j in range(gmax):
            bias, e = last.markov_head(torch.tensor([prev], device=dev))
            c = float(torch.sigmoid(last.confidence_head(h[:, j + 1], e))[0])
            run *= c
            conf.append(c)
            surv.append(run)
            if auto and run < threshold:
                break
            z = u[j] + bias[0]
            q = sampler.probs(z)
            dists.append(torch.softmax(z, -1))
            x = int(q.argmax()) if sampler.greedy else int(torch.multinomial(q.cpu(), 1, generator=sampler.generator))
            tokens.append(x)
            qs.append(q)
            prev = x
    empty = torch.zeros(0, v, device=dev)
    return Draft(tokens=tokens, q=torch.stack(qs) if qs else empty, confidence=conf, survival=surv,
                 seconds=time.perf_counter() - t0, dist=torch.stack(dists) if dists else empty)


# ================================================================================================
# Verification (§8.3)
# ================================================================================================

@dataclass
class Verdict:
    accepted: int                     # drafts accepted (k)
    tokens: list[int]                 # emitted: the k accepted drafts + the correction or bonus token
    rules: list[str]                  # per examined position: "accept" | "reject"
    ratios: list[float] = field(default_factory=list)    # stochastic: min(1, p/q) per examined position
    uniforms: list[float] = field(default_factory=list)  # stochastic: the uniform draws
    resampled: int | None = None      # the token drawn after a rejection
    bonus: int | None = None          # the token drawn after full acceptance


def verify(p: torch.Tensor, q: torch.Tensor | None, drafts: list[int], greedy: bool,
           generator: torch.Generator | None = None) -> Verdict:
    """The verification rules of §8.3 on one block.

    p: [g+1, V] target distributions (greedy: logits or probs, only the argmax matters) for the
    positions of x_1..x_g and the bonus; q: [g, V] draft distributions (unused when greedy)."""
    g = len(drafts)
    rules: list[str] = []
    out: list[int] = []
    if greedy:
        top = p.argmax(-1).tolist()
        for j, x in enumerate(drafts):
            if x == top[j]:
                rules.append("accept")
                out.append(x)
            else:
                rules.append("reject")
                return Verdict(j, out + [top[j]], rules, resampled=top[j])
        return Verdict(g, out + [top[g]], rules, bonus=top[g])
    pc, qc = p.float().cpu(), (q.float().cpu() if q is not None else None)
    ratios, uniforms = [], []
    for j, x in enumerate(drafts):
        ratio = 1.0 if qc[j, x] <= 0 else min(1.0, float(pc[j, x] / qc[j, x]))
        u = float(torch.rand((), generator=generator))
        ratios.append(ratio)
        uniforms.append(u)
        if u < ratio:
            rules.append("accept")
            out.append(x)
            continue
        rules.append("reject")
        res = (pc[j] - qc[j]).clamp_min(0)
        res = res / res.sum() if float(res.sum()) > 0 else pc[j]  # p == q never rejects; guard anyway
        y = int(torch.multinomial(res, 1, generator=generator))
        return Verdict(j, out + [y], rules, ratios, uniforms, resampled=y)
    y = int(torch.multinomial(pc[g], 1, generator=generator))
    return Verdict(g, out + [y], rules, ratios, uniforms, bonus=y)


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)): where a rejected position's token is drawn from."""
    r = (p.float() - q.float()).clamp_min(0)
    s = r.sum(-1, keepdim=True)
    return torch.where(s > 0, r / s.clamp_min(1e-30), p.float())


# ================================================================================================
# Step-by-step decoding and statistics
# ================================================================================================

@dataclass
class StepLog:
    """One draft-and-verify step, everything the app shows."""

    step: int
    anchor: int
    anchor_pos: int
    drafted: list[int]
    q_draft: list[float]              # q_j(x_j) (greedy: the drafter's softmax, not the one-hot it drew from)
    p_draft: list[float]              # p_j(x_j) (greedy: the target's softmax)
    target_top: list[int]             # the target's argmax at each drafted position (+ bonus position)
    confidence: list[float]
    survival: list[float]
    accepted: int
    rules: list[str]
    ratios: list[float]
    uniforms: list[float]
    resampled: int | None
    bonus: int | None
    emitted: list[int]                # tokens this step added to the output (after eos / length cuts)
    rows_appended: int                # target cache rows written by the verify forward (g + 1)
    rows_rolled_back: int             # rows dropped again (rejected drafts, plus rows after an eos)
    cache_length: int                 # target cache length after the step
    p_top: list[list[tuple[int, float]]] = field(default_factory=list)   # top-5 of p per position
    q_top: list[list[tuple[int, float]]] = field(default_factory=list)   # top-5 of q per position
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0


@dataclass
class CalibrationRow:
    position: int                 # draft position j (1-based)
    n: int                        # steps that examined position j
    predicted: float              # mean confidence c_j there
    observed: float               # acceptance rate there
    predicted_survival: float     # mean running product over steps that drafted >= j tokens
    observed_survival: float      # fraction of those steps whose first j drafts were all accepted


@dataclass
class SpecStats:
    block_size: int
    draft_length: int | str
    confidence_threshold: float
    greedy: bool
    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    emitted: int = 0                       # tokens emitted by verify steps (not the first token)
    reached: list[int] = field(default_factory=list)       # steps that examined position j
    accepted_at: list[int] = field(default_factory=list)   # ... and accepted it
    acceptance_by_position: list[float] = field(default_factory=list)
    mean_accepted_length: float = 0.0      # accepted drafts per step
    mean_draft_length: float = 0.0
    tokens_per_pass: float = 0.0           # tokens emitted per verify forward
    alpha: float = 0.0                     # per-token acceptance rate (accepted / examined)
    formula_tokens_per_pass: float = 0.0   # (1 - a^(g+1)) / (1 - a) with g = mean draft length
    calibration: list[CalibrationRow] = field(default_factory=list)
    prefill_seconds: float = 0.0
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0
    wall_seconds: float = 0.0
    log: list[StepLog] = field(default_factory=list)

    def summary(self) -> dict:
        d = asdict(self)
        d.pop("log")
        return d


def expected_tokens_per_pass(alpha: float, gamma: float) -> float:
    """(1 - a^(g+1)) / (1 - a): tokens per target pass with i.i.d. acceptance a and g drafts."""
    if alpha >= 1.0:
        return gamma + 1.0
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)


def summarize(stats: SpecStats) -> SpecStats:
    """Fill the derived fields from the per-step log."""
    g = stats.block_size - 1
    reached, acc = [0] * g, [0] * g
    conf_sum, surv_n, surv_pred, surv_obs = [0.0] * g, [0] * g, [0.0] * g, [0] * g
    for s in stats.log:
        for j, rule in enumerate(s.rules):
            reached[j] += 1
            acc[j] += rule == "accept"
            conf_sum[j] += s.confidence[j] if j < len(s.confidence) else 0.0
        for j in range(len(s.drafted)):
            surv_n[j] += 1
            surv_pred[j] += s.survival[j] if j < len(s.survival) else 0.0
            surv_obs[j] += s.accepted > j
    stats.steps = len(stats.log)
    stats.drafted = sum(len(s.drafted) for s in stats.log)
    stats.accepted = sum(s.accepted for s in stats.log)
    stats.emitted = sum(len(s.emitted) for s in stats.log)
    stats.reached, stats.accepted_at = reached, acc
    stats.acceptance_by_position = [a / r if r else float("nan") for a, r in zip(acc, reached)]
    n = max(1, stats.steps)
    stats.mean_accepted_length = stats.accepted / n
    stats.mean_draft_length = stats.drafted / n
    stats.tokens_per_pass = stats.emitted / n
    stats.alpha = sum(acc) / max(1, sum(reached))
    stats.formula_tokens_per_pass = expected_tokens_per_pass(stats.alpha, stats.mean_draft_length)
    stats.calibration = [CalibrationRow(j + 1, reached[j], conf_sum[j] / reached[j] if reached[j] else float("nan"),
                                        stats.acceptance_by_position[j],
                                        surv_pred[j] / surv_n[j] if surv_n[j] else float("nan"),
                                        surv_obs[j] / surv_n[j] if surv_n[j] else float("nan"))
                         for j in range(g)]
    stats.draft_seconds = sum(s.draft_seconds for s in stats.log)
    stats.verify_seconds = sum(s.verify_seconds for s in stats.log)
    return stats


@dataclass
class SpecState:
    """A speculative decoding session between steps (what `verify_step` advances)."""

    model: Backbone
    drafter: Drafter
    sampler: Sampler
    cache: Cache
    dctx: DraftContext
    anchor: int                      # the last emitted token, not yet in the target's cache
    tokens: list[int]                # emitted so far (the anchor is the last one)
    max_new_tokens: int
    draft_length: int | str = "max"
    confidence_threshold: float = 0.3
    stop_at_eos: bool = True
    eos: set[int] = field(default_factory=set)
    done: bool = False
    stopped: str = "length"
    prompt_tokens: int = 0
    prefill_seconds: float = 0.0
    reused: int = 0
    log: list[StepLog] = field(default_factory=list)


def _top(p: torch.Tensor, k: int = 5) -> list[tuple[int, float]]:
    v, i = p.float().topk(min(k, p.shape[-1]))
    return [(int(a), float(b)) for a, b in zip(i.tolist(), v.tolist())]


def speculative_start(model: Backbone, drafter: Drafter | None, ids, max_new_tokens: int, *,
                      sampler: Sampler | None = None, prefill_mode: str = "bounded",
                      draft_length: int | str | None = None, confidence_threshold: float = 0.3,
                      stop_at_eos: bool = True, prefix_cache: PrefixCache | None = None,
                      chunk_size: int = DEFAULT_CHUNK, progress: Callable[[float, str], None] | None = None
                      ) -> SpecState:
    """Prefill the prompt (cache with rollback slack = block size, drafter taps), emit the first token."""
    drafter = drafter if drafter is not None else model.mtp
    if not isinstance(drafter, Drafter):
        raise InputError("this model has no DSpark drafter (no mtp.* weights were loaded)")
    ids = model.check_ids(ids)
    if ids.shape[0] != 1:
        raise InputError("speculative decoding runs one sequence at a time (batch size 1)")
    dl = "max" if draft_length is None else draft_length
    if not (dl in ("max", "auto") or (isinstance(dl, int) and not isinstance(dl, bool) and dl >= 0)):
        raise InputError(f"draft_length must be an integer >= 0, 'max' or 'auto', got {draft_length!r}")
    sampler = sampler or Sampler()
    pf = prefill(model, ids, prefill_mode, chunk_size=chunk_size, rollback=drafter.block_size,
                 prefix_cache=prefix_cache, tap_layers=drafter.target_layers, progress=progress)
    with torch.no_grad():
        dctx = context_from_prefill(drafter, pf.taps, pf.cache.length)
    st = SpecState(model=model, drafter=drafter, sampler=sampler, cache=pf.cache, dctx=dctx, anchor=-1, tokens=[],
                   max_new_tokens=max_new_tokens, draft_length=dl, confidence_threshold=confidence_threshold,
                   stop_at_eos=stop_at_eos, eos=eos_ids(model), prompt_tokens=ids.shape[1],
                   prefill_seconds=pf.seconds, reused=pf.reused)
    if max_new_tokens == 0:
        st.done = True
        return st
    first = int(sampler.sample(pf.logits)[0])
    st.tokens.append(first)
    st.anchor = first
    if stop_at_eos and first in st.eos:
        st.done, st.stopped = True, "eos"
    elif len(st.tokens) >= max_new_tokens:
        st.done = True
    return st


def verify_step(st: SpecState) -> StepLog | None:
    """One draft-then-verify step: draft after the anchor, run the target over [anchor, drafts] in
    one forward through its cache, apply the rules, roll back the rejected rows, extend the
    drafter's context. Returns the step's log (None when the session is already done)."""
    if st.done:
        return None
    model, drafter, cache, sampler = st.model, st.drafter, st.cache, st.sampler
    remaining = st.max_new_tokens - len(st.tokens)
    d = draft_block(drafter, model, st.dctx, st.anchor, sampler, st.draft_length, st.confidence_threshold,
                    limit=remaining - 1)  # a step emits up to g + 1 tokens: never past max_new_tokens
    g = len(d.tokens)
    t0 = time.perf_counter()
    anchor_pos = cache.length
    feed = torch.tensor([[st.anchor] + d.tokens], device=model.device)
    with torch.no_grad():
        out = model(feed, cache, tap_layers=drafter.target_layers)
    p = sampler.probs(out.logits[0])                                            # [g + 1, V]
    v = verify(out.logits[0] if sampler.greedy else p, d.q, d.tokens, sampler.greedy, sampler.generator)
    # what a page shows: the real distributions (greedy decoding draws from one-hot ones)
    p_show = torch.softmax(out.logits[0].float(), -1) if sampler.greedy else p
    q_show = d.dist if d.dist is not None and sampler.greedy else d.q
    emitted = list(v.tokens)
    keep = v.accepted + 1                                                       # anchor + accepted drafts
    if st.stop_at_eos:
        for i, tok in enumerate(emitted):
            if tok in st.eos:
                emitted = emitted[:i + 1]
                keep = min(keep, i + 1)  # as plain decoding: the eos itself never enters the cache
                st.done, st.stopped = True, "eos"
                break
    back = (g + 1) - keep
    cache.rollback(back)
    with torch.no_grad():
        st.dctx.extend(drafter, out.taps, keep)
    st.tokens.extend(emitted)
    st.anchor = emitted[-1]
    if len(st.tokens) >= st.max_new_tokens:
        st.done = True
    pd = [float(p_show[j, x]) for j, x in enumerate(d.tokens)]
    qd = [float(q_show[j, x]) for j, x in enumerate(d.tokens)]
    log = StepLog(step=len(st.log), anchor=int(feed[0, 0]), anchor_pos=anchor_pos, drafted=d.tokens, q_draft=qd,
                  p_draft=pd, target_top=out.logits[0].argmax(-1).tolist(), confidence=d.confidence,
                  survival=d.survival, accepted=v.accepted, rules=v.rules, ratios=v.ratios, uniforms=v.uniforms,
                  resampled=v.resampled, bonus=v.bonus, emitted=emitted, rows_appended=g + 1,
                  rows_rolled_back=back, cache_length=cache.length,
                  p_top=[_top(p_show[j]) for j in range(g + 1)], q_top=[_top(q_show[j]) for j in range(g)],
                  draft_seconds=d.seconds, verify_seconds=time.perf_counter() - t0)
    st.log.append(log)
    return log
