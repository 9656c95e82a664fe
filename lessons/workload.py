"""Prefill vs decode: the second seed's agent loop, work per round from the config, and measured time on the
running model. Also the prompt used by the Memory pages' engine checks.

Work estimates use the active parameters per token from `model.accounting.count_params` (bounded prefill:
the encoder plus the latent and index-key projection of the decoder's first layer; decode: every layer and the head),
at 2 FLOPs per active parameter per token (one multiply-add). Attention over the context, the indexer's scan
and everything that is not a weight multiply are left out, and FLOPs are not time: prefill processes many
tokens in parallel, decode one after another (docs/design/architecture.md §3.1 and §6).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from model import decode_step, prefill

from .cache_calculator import CalcError, Knobs, calculate
from .designs import v41_design
from .units import counted, human_bytes, human_flops

AGENT_READ = 10_000
AGENT_WRITTEN = 100
# the two sides of the workload lesson: name -> (label, tokens read, tokens written per round)
WORKLOADS = {
    "agent": ("Agent loop: a long tool result, a short instruction", AGENT_READ, AGENT_WRITTEN),
    "answer": ("A short question, a long answer", 100, 2_000),
}
HELDOUT = Path(__file__).resolve().parents[1] / "data" / "heldout" / "natural.txt"


@dataclass
class RoundWork:
    read: int
    written: int
    rounds: int
    active_prefill: int
    active_decode: int
    stored: int
    prefill_flops: float
    decode_flops: float
    rows: list[tuple[str, str, float, str]] = field(default_factory=list)   # (item, formula, value, shown)

    @property
    def token_ratio(self) -> float:
        return self.read / self.written

    @property
    def work_ratio(self) -> float:
        return self.prefill_flops / self.decode_flops

    def split_sentence(self) -> str:
        """Which side of the round a cheaper token touches more, and its share of the weight-multiply work."""
        if self.token_ratio >= 1:
            return (f"Making each prompt token cheaper touches **{self.token_ratio:,.0f}x** as many tokens as making "
                    f"each generated token cheaper; with these counts, prefill is **{self.work_ratio:,.1f}x** the "
                    "weight-multiply work of decode in this round.")
        return (f"Here the round writes **{1 / self.token_ratio:,.0f}x** as many tokens as it reads: making each "
                "generated token cheaper touches more tokens, and decode is "
                f"**{1 / self.work_ratio:,.1f}x** the weight-multiply work of prefill in this round.")


def agent_round(read: int, written: int, active_prefill: int, active_decode: int, stored: int,
                rounds: int = 1) -> RoundWork:
    """Weight-multiply work of one agent round (read `read` tokens, write `written`), times `rounds`."""
    for name, v in (("tokens read per round", read), ("tokens written per round", written), ("rounds", rounds)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise CalcError(f"{name} must be a whole number >= 1, got {v!r}")
    if read > 10_000_000 or written > 10_000_000 or rounds > 100_000:
        raise CalcError("keep tokens per round at most 10,000,000 and rounds at most 100,000")
    pf = 2.0 * active_prefill * read * rounds
    df = 2.0 * active_decode * written * rounds

    per = f" x {rounds:,} rounds" if rounds > 1 else ""
    rows = [
        ("tokens read : written", f"{read:,} : {written:,}", read / written, f"{read / written:,.4g}"),
        ("active parameters per prompt token", "encoder + the projection of the decoder's first layer that "
                                               "publishes latents and index keys",
         float(active_prefill), f"{active_prefill:,}"),
        ("active parameters per generated token", "every layer + output head", float(active_decode),
         f"{active_decode:,}"),
        ("stored backbone parameters", "layers + embeddings + head (Engram, drafter, vision excluded)", float(stored),
         f"{stored:,}"),
        ("prefill work", f"2 x {active_prefill:,} x {counted(read, 'token')}{per}", pf, human_flops(pf)),
        ("decode work", f"2 x {active_decode:,} x {counted(written, 'token')}{per}", df, human_flops(df)),
        ("prefill : decode work", "prefill work / decode work", pf / df, f"{pf / df:,.4g}"),
    ]
    return RoundWork(read=read, written=written, rounds=rounds, active_prefill=active_prefill,
                     active_decode=active_decode, stored=stored, prefill_flops=pf, decode_flops=df, rows=rows)


# ------------------------------------------------------------------------------------------------
# On the running model
# ------------------------------------------------------------------------------------------------

def prompt_ids(model, n: int) -> torch.Tensor:
    """[1, n] token ids: held-out text, repeated to length n (seeded random ids when no tokenizer is bound)."""
    if n < 1:
        raise CalcError(f"the prompt needs at least 1 token, got {n}")
    ids: list[int] = []
    if getattr(model, "tokenizer", None) is not None and HELDOUT.exists():
        ids = model.encode(HELDOUT.read_text()[:200_000])
    if not ids:
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(8, model.cfg.vocab_size, (max(n, 64),), generator=g).tolist()
    reps = -(-n // len(ids))
    return torch.tensor([(ids * reps)[:n]], dtype=torch.long)


@dataclass
class Measured:
    read: int
    written: int
    mode: str
    prefill_s: float
    decode_s: float
    device: str

    @property
    def prefill_ms_per_token(self) -> float:
        return 1000 * self.prefill_s / self.read

    @property
    def decode_ms_per_token(self) -> float:
        return 1000 * self.decode_s / self.written

    @property
    def time_ratio(self) -> float:
        return self.prefill_s / self.decode_s if self.decode_s else float("inf")

    def sentence(self, active_prefill: int, active_decode: int) -> str:
        """The measured cost of a generated token against a prompt token, beside their active parameters (the
        running model's own counts)."""
        per = self.decode_ms_per_token / self.prefill_ms_per_token if self.prefill_ms_per_token else float("inf")
        return (f"On {self.device.upper()}, reading {counted(self.read, 'token')} took **{self.prefill_s:.2f} s** and "
                f"writing {self.written:,} took **{self.decode_s:.2f} s**: a generated token cost **{per:,.1f}x** the "
                f"time of a prompt token, although it passes only "
                f"{active_decode / max(1, active_prefill):.1f}x the active parameters. On this small "
                "model the gap is mostly per-call overhead and the "
                "one-token-at-a-time loop, the sequential side of the difference; on the full model, the memory "
                "traffic of each decoded token dominates instead. Either way, a token-count ratio is a place to "
                "start measuring, not a prediction of total time.")


def measure_round(model, read: int, written: int, mode: str = "bounded",
                  progress: Callable[[float, str], None] | None = None) -> Measured:
    """Time one round on the running model: prefill `read` prompt tokens, then decode `written` tokens greedily."""
    limit = model.cfg.max_position_embeddings
    if read < 1 or written < 1 or read + written > limit:
        raise CalcError(f"read and written must be >= 1 with read + written <= {limit:,}")
    ids = prompt_ids(model, read).to(model.device)

    def on_prefill(frac: float, msg: str) -> None:
        if progress is not None:
            progress(0.8 * frac, f"prefill: {msg}")

    pre = prefill(model, ids, mode=mode, progress=on_prefill)
    tok = pre.logits.argmax(-1, keepdim=True)
    t0 = time.perf_counter()
    for i in range(written):
        logits = decode_step(model, pre.cache, tok)
        tok = logits[:, -1].argmax(-1, keepdim=True)
        if progress is not None:
            progress(0.8 + 0.2 * (i + 1) / written, f"decode: token {i + 1} of {written}")
    if model.device.type == "cuda":
        torch.cuda.synchronize()
    return Measured(read=read, written=written, mode=mode, prefill_s=pre.seconds, decode_s=time.perf_counter() - t0,
                    device=str(model.device))


# ------------------------------------------------------------------------------------------------
# The cache calculator's check: formula bytes vs the bytes the engine holds
# ------------------------------------------------------------------------------------------------

@dataclass
class EngineCheck:
    tokens: int
    mode: str
    rollback: int
    formula: dict[str, int]                   # engine kinds
    measured: dict[str, int]
    formula_by_layer: dict[int, dict[str, int]]
    measured_by_layer: dict[int, dict[str, int]]
    seconds: float

    @property
    def equal(self) -> bool:
        return self.formula_by_layer == self.measured_by_layer

    @property
    def difference(self) -> int:
        return sum(self.measured.values()) - sum(self.formula.values())

    def sentence(self) -> str:
        """The check's verdict, then its totals: what the cache calculator page says under the table."""
        said = (f"{counted(self.tokens, 'token')}, {self.mode} prefill, rollback {self.rollback}: formula "
                f"{sum(self.formula.values()):,} B, measured {sum(self.measured.values()):,} B, "
                f"difference {self.difference:,} B (prefill took {self.seconds:.2f} s).")
        return ("Equal, layer by layer. " if self.equal else "Not equal. ") + said


def active_counts(counts: dict) -> str:
    """What the full config's active counts are, from model.count_params (as plain numbers)."""
    return (f"Counted from the full config's module tree: **{counts['active_prefill']:,}** parameters take part per "
            f"prompt token and **{counts['active_decode']:,}** per generated token, out of **{counts['backbone']:,}** "
            f"stored in the backbone (plus {counts['engram']:,} in Engram: its tables and the projections that feed "
            "them into the streams). Active counts are computation, not the memory needed to hold the weights.")


def cache_growth(growth_per_token: float, tokens: int) -> str:
    """What a round adds to the request's cache (`growth_per_token` from the cache calculator)."""
    return (f"Each round also adds about {human_bytes(growth_per_token * tokens)} to the request's "
            f"DeepSeek-V4.1 cache ({growth_per_token:,.0f} bytes per token, from the cache calculator).")


def check_intro(label: str, layers: int, window: int, mode: str, rollback: int) -> str:
    """What the check against the running model does (`label`: the loaded weights, `layers` and `window` theirs)."""
    return (f"Runs a prompt through the running model ({label}: {layers} layers, window {window}) with prefill mode "
            f"**{mode}** and rollback slack **{rollback}**, then compares the bytes its cache holds "
            "(`cache.nbytes()`) with the same formula applied to its config.")


def check_against_engine(model, tokens: int, mode: str = "bounded", rollback: int = 1,
                         progress: Callable[[float, str], None] | None = None) -> EngineCheck:
    """Prefill `tokens` prompt tokens on the running model and compare `cache.nbytes()` with the calculator."""
    limit = model.cfg.max_position_embeddings
    if not 1 <= tokens <= limit:
        raise CalcError(f"the check prompt must have 1 to {limit:,} tokens, got {tokens:,}")
    knobs = Knobs(context=tokens, rollback=rollback, mode=mode, window=model.cfg.sliding_window, bits=4,
                  layers=max(16, model.cfg.num_hidden_layers))
    calc = calculate(v41_design(model.cfg, knobs, key="running", label="running model", drafter=False,
                                use_knobs=False), knobs)
    pre = prefill(model, prompt_ids(model, tokens).to(model.device), mode=mode, rollback=rollback, progress=progress)
    nb = pre.cache.nbytes()
    measured_by_layer = {i: {k: v for k, v in d.items()} for i, d in nb.by_layer.items()}
    return EngineCheck(tokens=tokens, mode=mode, rollback=rollback, formula=calc.hbm.engine_by_kind(),
                       measured=dict(nb.by_kind), formula_by_layer=calc.hbm.engine_by_layer,
                       measured_by_layer=measured_by_layer, seconds=pre.seconds)


# ------------------------------------------------------------------------------------------------
# Lesson texts (the prefill vs decode page)
# ------------------------------------------------------------------------------------------------

WORKLOAD_INTRO = (
    "A model does two different jobs. **Prefill** reads the tokens already in the input and fills the cache; all "
    "of them are known, so they can be processed side by side. **Decode** writes new tokens, one after another, "
    "each needing the one before it. In an agent loop every tool result is new input: a round that reads a long "
    "result and writes a short instruction is mostly prefill."
)

WORK_NOT_TIME = (
    "Work is not time. Prefill pushes many tokens through each weight matrix at once and keeps the arithmetic "
    "units busy (for a dense model; with 384 experts each expert sees only a share of them, see Where the time "
    "goes); decode reads every active weight from memory to produce a single token, so it usually waits on "
    "memory rather than arithmetic. The estimate above shows where the work is and where measuring should start; "
    "it does not predict how long a round takes. It also counts only weight multiplies: attention over a long "
    "context and the indexer's scan come on top."
)

SPLIT_PRICE = (
    "The price of the split: the decoder sees an old prompt token only through entries projected from the "
    "encoder's rows, and the causal encoder built those rows before any later text, the question included, "
    "existed, so it has to keep whatever a later reader might need."
)

V41_SPLIT = (
    "DeepSeek-V4.1-Flash makes the two jobs uneven on purpose. With bounded prefill, a prompt token passes the "
    "20-layer encoder; of the decoder's first layer, only the projection that publishes the shared latents every "
    "decoder layer reads, and the index keys its selecting layers score, runs on every prompt row. The decoder "
    "itself, that first layer's attention and MoE included, runs only over the last rows. A generated token passes "
    "all 40 layers. " + SPLIT_PRICE
)

RELEASE_ACTIVE = (
    "The release itself states about 8 billion active parameters per token during prefill and 16 billion during "
    "decode, not the 552 billion stored in the backbone; the counts above agree with it. What the count includes: "
    "per prompt token, one embedding row, the encoder's layers (in each, attention, indexer, stream mixing, the "
    "Engram projection where there is one, the shared expert and the chosen routed experts) and the projection of "
    "the decoder's first layer that publishes the shared entries; per generated token, "
    "one embedding row, all the layers and the output head (which only decode needs). The Engram tables add only "
    "the few rows a token looks up."
)

CLAIM_NOTE = (
    "The same model can be in either situation: when long tool results pile up, reading input and reusing the "
    "cache can dominate; when a short question gets a long answer, writing can dominate instead. So a performance "
    "claim means little without three things stated beside it: the workload (tokens read and written), the cache-"
    "reuse assumptions (how often a saved context comes back), and the number precision (of the weights and of "
    "the cache)."
)

MEASURE_TEXT = (
    "The same round, scaled down, on the running model (small widths, CPU or GPU, whatever this server has). Keep "
    "the 100 : 1 ratio of read to written tokens and compare time per token in each phase. Small models on a CPU "
    "are dominated by per-call overhead, so treat the numbers as a demonstration of the two phases, not a forecast "
    "for the full model."
)
