"""Whole generations: prefill, then plain decoding token by token or DSpark draft-and-verify steps.

Follows docs/design/architecture.md §3.1 (generate) and docs/design/equations.md §11-12 (speculative decoding).
`generate` is the one entry point (V41Model.generate calls it); `SpecOptions` turns it into
speculative decoding, which `speculative_generate` runs as a loop over model/inference/
speculative.py's `speculative_start` + `verify_step`. Both return a `GenerateResult`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from ..arch.backbone import Backbone
from ..arch.context import Ablation
from ..arch.drafter import Drafter
from ..errors import InputError
from .cache import Cache
from .engine import DEFAULT_CHUNK, decode_step, prefill
from .prefix_cache import PrefixCache
from .sampling import Sampler, eos_ids
from .speculative import SpecStats, speculative_start, summarize, verify_step

MAX_NEW_TOKENS = 4096


@dataclass
class GenerateResult:
    tokens: list[int]                       # generated ids (batch row 0)
    prompt_tokens: int
    prefill_seconds: float
    decode_seconds: float
    target_passes: int                      # forward passes of the target model during decode
    cache: Cache | None = None
    stopped: str = "length"                 # "length" | "eos"
    reused_prompt_tokens: int = 0
    stats: SpecStats | None = None          # speculative decoding statistics

    @property
    def tokens_per_pass(self) -> float:
        return len(self.tokens) / max(1, self.target_passes)


@dataclass
class SpecOptions:
    """Speculative decoding knobs for `generate`; without them it decodes token by token."""

    drafter: Drafter | None = None            # None: the model's own (model.mtp)
    draft_length: int | str | None = None     # an int, "max" (None: the whole block) or "auto"
    confidence_threshold: float = 0.3         # "auto": stop drafting where the running confidence falls under it


def generate(model: Backbone, input_ids, max_new_tokens: int = 32, *, sampler: Sampler | None = None,
             prefill_mode: str = "bounded", spec: SpecOptions | None = None, stop_at_eos: bool = True,
             stream: Callable[[int], None] | None = None, prefix_cache: PrefixCache | None = None,
             progress: Callable[[float, str], None] | None = None,
             ablation: Ablation | None = None, chunk_size: int = DEFAULT_CHUNK, keep_cache: bool = False
             ) -> GenerateResult:
    """Prefill then decode token by token (or draft-and-verify with `spec`); greedy without a sampler."""
    if not isinstance(max_new_tokens, int) or isinstance(max_new_tokens, bool) or not (
            0 <= max_new_tokens <= MAX_NEW_TOKENS):
        raise InputError(f"max_new_tokens must be an integer in [0, {MAX_NEW_TOKENS}], got {max_new_tokens!r}")
    ids = model.check_ids(input_ids)
    if ids.shape[1] + max_new_tokens > model.cfg.max_position_embeddings:
        raise InputError("prompt + max_new_tokens exceed max_position_embeddings")
    sampler = sampler or Sampler()
    if spec is not None:
        return speculative_generate(model, spec.drafter, ids, max_new_tokens, sampler=sampler,
                                    prefill_mode=prefill_mode, draft_length=spec.draft_length,
                                    confidence_threshold=spec.confidence_threshold, stop_at_eos=stop_at_eos,
                                    stream=stream, prefix_cache=prefix_cache, chunk_size=chunk_size,
                                    keep_cache=keep_cache)
    pf = prefill(model, ids, prefill_mode, chunk_size=chunk_size, progress=progress, prefix_cache=prefix_cache,
                 ablation=ablation)
    cache, logits = pf.cache, pf.logits
    eos = eos_ids(model)
    out: list[int] = []
    t0 = time.perf_counter()
    passes, stopped = 0, "length"
    for _ in range(max_new_tokens):
        nxt = sampler.sample(logits)
        tok = int(nxt[0])
        out.append(tok)
        if stream is not None:
            stream(tok)
        if stop_at_eos and tok in eos:
            stopped = "eos"
            break
        if len(out) == max_new_tokens:
            break
        logits = decode_step(model, cache, nxt.view(-1, 1), ablation=ablation)[:, -1]
        passes += 1
    return GenerateResult(tokens=out, prompt_tokens=ids.shape[1], prefill_seconds=pf.seconds,
                          decode_seconds=time.perf_counter() - t0, target_passes=max(1, passes + 1),
                          cache=cache if keep_cache else None, stopped=stopped, reused_prompt_tokens=pf.reused)


def speculative_generate(model: Backbone, drafter: Drafter | None, ids, max_new_tokens: int, *,
                         sampler: Sampler | None = None, prefill_mode: str = "bounded",
                         draft_length: int | str | None = None, confidence_threshold: float = 0.3,
                         stop_at_eos: bool = True, stream: Callable[[int], None] | None = None,
                         prefix_cache: PrefixCache | None = None,
                         chunk_size: int = DEFAULT_CHUNK, keep_cache: bool = False) -> GenerateResult:
    """Draft-and-verify decoding; the output has the target's distribution (greedy: the same tokens)."""
    t_all = time.perf_counter()
    st = speculative_start(model, drafter, ids, max_new_tokens, sampler=sampler, prefill_mode=prefill_mode,
               draft_length=draft_length, confidence_threshold=confidence_threshold, stop_at_eos=stop_at_eos,
               prefix_cache=prefix_cache, chunk_size=chunk_size)
    t0 = time.perf_counter()
    if stream is not None:
        for tok in st.tokens:
            stream(tok)
    while not st.done:
        log = verify_step(st)
        if stream is not None:
            for tok in log.emitted:
                stream(tok)
    decode_seconds = time.perf_counter() - t0
    stats = SpecStats(block_size=st.drafter.block_size, draft_length=st.draft_length,
                      confidence_threshold=confidence_threshold, greedy=st.sampler.greedy, log=st.log,
                      prefill_seconds=st.prefill_seconds)
    summarize(stats)
    stats.wall_seconds = time.perf_counter() - t_all
    return GenerateResult(tokens=st.tokens, prompt_tokens=st.prompt_tokens, prefill_seconds=st.prefill_seconds,
                          decode_seconds=decode_seconds, target_passes=1 + len(st.log) if st.tokens else 1,
                          cache=st.cache if keep_cache else None, stopped=st.stopped,
                          reused_prompt_tokens=st.reused, stats=stats)
