"""The roofline: which workloads are limited by arithmetic and which by memory, on named GPUs and on this machine.

A step needs at least max(FLOPs / peak compute, bytes / memory bandwidth) seconds; the ratio FLOPs / bytes (the
arithmetic intensity) against the chip's ridge (peak / bandwidth) says which term wins. The GPU figures are
spec-sheet peaks (`GPUS`, each with its source and how sure it is); this machine's are measured live by a matmul and
a memory copy (`measure_machine`). Costs come from `lessons.cost`; what must sit in accelerator memory (the weights
at stored precision, `weight_bytes`, and the cache, model.accounting) from the config. What this module does not
know: real kernels reach only part of either peak, and overlap, communication between GPUs and scheduling are left
out, so every time here is a lower bound.
"""

from __future__ import annotations

import functools
import math
import time
from bisect import bisect_left
from dataclasses import dataclass

import torch

from model import layer_map
from model.accounting import cache_bytes
from model.config import V41Config

from .cost import RELEASE, Cost, Precision, Workload, cost
from .units import human_bytes


@dataclass(frozen=True)
class Chip:
    key: str
    name: str
    peak: float            # FLOP/s, dense, at the precision the release computes its matmuls in (FP8)
    bandwidth: float       # bytes/s
    memory: float          # bytes of accelerator memory
    source: str
    sure: str              # how sure the figures are, and why
    bf16: float = 0.0      # FLOP/s dense at BF16, for the table
    measured: bool = False

    @property
    def called(self) -> str:
        """The chip in a sentence: 'the NVIDIA H100 SXM', 'this machine (CPU, measured)'."""
        return self.name if self.measured else f"the {self.name}"

    @property
    def ridge(self) -> float:
        """Arithmetic intensity (FLOP/byte) at which the chip turns from memory-bound to compute-bound."""
        return self.peak / self.bandwidth


# Public spec sheets; the sheets print tensor-core figures "with sparsity": dense is half of those.
GPUS: dict[str, Chip] = {
    "h100": Chip("h100", "NVIDIA H100 SXM", 1979e12, 3.35e12, 80e9,
                 "NVIDIA H100 Tensor Core GPU datasheet (SXM5 column)",
                 "high: FP8 3,958 and BF16 1,979 TFLOPS with sparsity, so half dense; HBM3 3.35 TB/s, 80 GB",
                 bf16=989e12),
    "h200": Chip("h200", "NVIDIA H200", 1979e12, 4.8e12, 141e9,
                 "NVIDIA H200 Tensor Core GPU datasheet (SXM column)",
                 "high: the H100's compute with HBM3e at 4.8 TB/s and 141 GB", bf16=989e12),
    "b200": Chip("b200", "NVIDIA B200", 4.5e15, 8e12, 180e9,
                 "NVIDIA DGX B200 / HGX B200 datasheet (per GPU)",
                 "medium: NVIDIA's B200 figures moved between announcements (192 GB at launch, 180 GB in the "
                 "HGX/DGX sheets) and depend on the power configuration", bf16=2.25e15),
}


def chip_rows(chips: list[Chip]) -> list[dict]:
    """The figures behind the roofs, with where each comes from and how sure it is."""
    return [{"chip": c.name, "peak, dense (TFLOP/s)": round(c.peak / 1e12, 3),
             "BF16 dense (TFLOP/s)": round(c.bf16 / 1e12, 3) if c.bf16 else None,
             "bandwidth (TB/s)": round(c.bandwidth / 1e12, 4), "memory (GB)": round(c.memory / 1e9) or None,
             "ridge (FLOP/byte)": round(c.ridge, 1), "source": c.source, "how sure": c.sure} for c in chips]


# ------------------------------------------------------------------------------------------------
# This machine, measured
# ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Machine:
    gflops: float          # fp32 matmul, GFLOP/s
    gbs: float             # memory copy, GB/s (bytes read + written)
    device: str
    seconds: float
    threads: int = 1

    def chip(self) -> Chip:
        threads = f", {self.threads} thread{'s' if self.threads > 1 else ''}" if self.device == "cpu" else ""
        return Chip("here", f"this machine ({self.device.upper()}{threads}, measured)", self.gflops * 1e9,
                    self.gbs * 1e9, 0.0, "measured here: an fp32 matmul and a memory copy",
                    "measured now; a shared machine varies", measured=True)


def _best(fn, repeats: int, device: torch.device) -> float:
    best = math.inf
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best


def measure_machine(device: str = "cpu", n: int = 1024, copy_mib: int = 64, repeats: int = 5) -> Machine:
    """Peak compute (an n x n x n fp32 matmul) and memory bandwidth (a copy of copy_mib MiB) here, best of
    `repeats` (the least disturbed run of a shared machine). About a second on a CPU."""
    dev = torch.device(device)
    t0 = time.perf_counter()
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(n, n, generator=g).to(dev), torch.randn(n, n, generator=g).to(dev)
    out = torch.empty(n, n, device=dev)
    torch.matmul(a, b, out=out)                                  # warm-up
    mm = _best(lambda: torch.matmul(a, b, out=out), repeats, dev)
    src = torch.ones(copy_mib * 2 ** 18, device=dev)             # float32: 4 bytes each
    dst = torch.empty_like(src)
    dst.copy_(src)
    cp = _best(lambda: dst.copy_(src), repeats, dev)
    return Machine(gflops=2 * n ** 3 / mm / 1e9, gbs=2 * src.nbytes / cp / 1e9, device=dev.type,
                   seconds=time.perf_counter() - t0, threads=torch.get_num_threads())


@functools.lru_cache(maxsize=4)
def machine(device: str = "cpu") -> Machine:
    """`measure_machine`, once per process."""
    return measure_machine(device)


# ------------------------------------------------------------------------------------------------
# Placing workloads
# ------------------------------------------------------------------------------------------------

@dataclass
class Placement:
    chip: Chip
    label: str
    flops: float
    bytes: float

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes if self.bytes else math.inf

    @property
    def memory_bound(self) -> bool:
        return self.intensity < self.chip.ridge

    @property
    def bound(self) -> str:
        return "memory-bound" if self.memory_bound else "compute-bound"

    @property
    def seconds(self) -> float:
        """Lower bound on the time: the larger of the compute time and the memory time at peak."""
        return max(self.flops / self.chip.peak, self.bytes / self.chip.bandwidth)

    @property
    def attainable(self) -> float:
        """FLOP/s the roof allows at this intensity."""
        return min(self.chip.peak, self.intensity * self.chip.bandwidth)


def place(c: Cost, chip: Chip, label: str | None = None) -> Placement:
    return Placement(chip, label or c.workload.describe(), c.flops, c.bytes)


def release_workloads(cfg: V41Config, context: int, batch: int, drafts: int, prompt: int,
                      pr: Precision = RELEASE) -> dict[str, Cost]:
    """The workloads the page places: the prompt read in one pass (bounded), a decode step at batch 1 and at `batch`,
    and a verify of `drafts` drafts at batch 1."""
    out = {"prefill": cost(cfg, Workload("prefill", prompt, "bounded", chunk=prompt), pr),
           "decode": cost(cfg, Workload("decode", context), pr)}
    if batch > 1:
        out["decode_batch"] = cost(cfg, Workload("decode", context, batch=batch), pr)
    if drafts:
        out["verify"] = cost(cfg, Workload("verify", context, drafts=drafts), pr)
    return out


def compute_bound_batch(cfg: V41Config, chip: Chip, context: int, pr: Precision = RELEASE,
                        limit: int = 1 << 16) -> int | None:
    """The smallest batch at which one decode step at `context` is compute-bound on `chip` (None: not up to
    `limit`). Intensity grows with the batch (weights are read once for all sequences), so a bisection finds it."""
    def bound(b: int) -> bool:
        return not place(cost(cfg, Workload("decode", context, batch=b), pr), chip).memory_bound

    if not bound(limit):
        return None
    return 1 + bisect_left(range(1, limit + 1), True, key=bound)


WEIGHT_CLASSES = ("linear", "expert", "wide", "mixing", "engram_table", "fp32")


def weight_numbers(cfg: V41Config) -> dict[str, int]:
    """Parameters of the backbone and Engram by storage class, in closed form from the shapes of model/arch/* (tests
    check the total against the module tree). "fp32": norms, the attention sink, router biases, Engram's q/k
    weights."""
    d, hd, h, ql, ol, g = (cfg.hidden_size, cfg.head_dim, cfg.num_attention_heads, cfg.q_lora_rank, cfg.o_lora_rank,
                           cfg.o_groups)
    hi_, di, inter, e, n_hc = (cfg.index_n_heads, cfg.index_head_dim, cfg.moe_intermediate_size, cfg.n_routed_experts,
                               cfg.hc_mult)
    mix = (2 + n_hc) * n_hc
    out = dict.fromkeys(WEIGHT_CLASSES, 0)
    for spec in layer_map(cfg):
        lin = d * ql + ql * h * hd + d * hd + h * hd * ol + g * ol * d + 3 * d * inter * cfg.n_shared_experts
        wide = e * d
        small = ql + hd + h + 2 * d + 2 * e             # q_norm, kv_norm, attn_sink, block norms, router biases
        if spec.makes_entries:
            wide += d * hd * (2 if spec.compress_ratio > 1 else 1)
            lin += hd * di
            small += hd + di
        if spec.selects:
            lin += ql * hi_ * di
            wide += d * hi_
        if spec.engram:
            slot = cfg.engram_layer_ids.index(spec.index)
            lin += cfg.n_hash_cols * cfg.engram_head_dim * d * (n_hc + 1)
            small += 2 * n_hc * d
            out["engram_table"] += cfg.engram_num_embeddings[slot] * cfg.engram_head_dim
        out["linear"] += lin
        out["wide"] += wide
        out["fp32"] += small
        out["expert"] += e * 3 * d * inter
        out["mixing"] += 2 * (mix * n_hc * d + mix + 3)
    out["wide"] += 2 * cfg.vocab_size * d
    out["fp32"] += d                                    # the final norm
    return out


def weight_bytes(cfg: V41Config, pr: Precision = RELEASE) -> dict[str, float]:
    """`weight_numbers` at stored precision."""
    per = {"linear": pr.linear, "expert": pr.expert, "wide": pr.wide, "mixing": pr.mixing,
           "engram_table": pr.engram_row, "fp32": 4.0}
    return {k: v * per[k] for k, v in weight_numbers(cfg).items()}


def resident_weights(cfg: V41Config, pr: Precision = RELEASE) -> float:
    """Bytes of weights held on the accelerators: the backbone and Engram's projections. Engram's tables are left in
    host memory (a token reads a few of their rows), and the drafter and vision tower are not counted."""
    return sum(v for k, v in weight_bytes(cfg, pr).items() if k != "engram_table")


def largest_context(cfg: V41Config, chip: Chip, gpus: int, batch: int = 1, pr: Precision = RELEASE) -> int:
    """The longest context whose weights and cache (for `batch` sequences) fit in `gpus` x the chip's memory;
    0 when the weights alone do not fit; at most max_position_embeddings."""
    room = gpus * chip.memory - resident_weights(cfg, pr)
    if room <= 0:
        return 0

    def fits(t: int) -> bool:
        return cache_bytes(cfg, t, mode="bounded", batch=batch).total <= room

    top = cfg.max_position_embeddings
    if fits(top):
        return top
    if not fits(1):
        return 0
    # the first length that does not fit, counted from 1, is one past the longest that does
    return bisect_left(range(1, top + 1), True, key=lambda t: not fits(t))


# ------------------------------------------------------------------------------------------------
# Sentences
# ------------------------------------------------------------------------------------------------

def ms(s: float) -> str:
    """A duration in the unit that reads best: 1.25 s, 3.9 ms, 850 µs."""
    if s >= 1:
        return f"{s:,.3g} s" if s < 1000 else f"{s:,.0f} s"
    return f"{s * 1e3:,.3g} ms" if s >= 1e-3 else f"{s * 1e6:,.3g} µs"


def verdict(p: Placement, crossover: int | None, batch: int) -> str:
    """What bounds a decode step on the chosen chip at the chosen batch, and from which batch that changes."""
    per = "for the whole batch" if batch > 1 else ""
    s = (f"On {p.chip.called}, one decode step at batch {batch:,} is **{p.bound}**: it does "
         f"{p.intensity:,.1f} FLOP per byte moved, {'under' if p.memory_bound else 'over'} the chip's ridge of "
         f"{p.chip.ridge:,.0f} FLOP/byte, so it takes at least **{ms(p.seconds)}** {per}".rstrip() + ".")
    if crossover is None:
        s += " Up to a batch of 65,536 it never turns compute-bound here."
    elif p.memory_bound:
        s += f" It turns compute-bound from a batch of **{crossover:,}** sequences."
    else:
        s += f" It is compute-bound from a batch of {crossover:,}."
    return s


def fit_sentence(cfg: V41Config, chip: Chip, batch: int = 1) -> str:
    """How long a context fits beside the weights on one GPU and on eight, for `batch` sequences."""
    w = resident_weights(cfg)
    one, eight = largest_context(cfg, chip, 1, batch), largest_context(cfg, chip, 8, batch)
    each = " each" if batch > 1 else ""

    def say(n: int, gpus: str) -> str:
        if n == 0:
            return f"on {gpus} the weights alone do not fit" if gpus.startswith("one") else \
                f"on {gpus} not even one token{each} fits"
        if n >= cfg.max_position_embeddings:
            return f"on {gpus} the full {cfg.max_position_embeddings:,}-token context{each} fits"
        return f"on {gpus} a context of up to {n:,} tokens{each} fits"

    eight_text = say(eight, "eight") if not (eight == 0 and resident_weights(cfg) > 8 * chip.memory) else \
        "on eight the weights alone do not fit"
    return (f"The weights held on the GPUs take {human_bytes(w)} at their stored precision. For "
            f"{batch:,} sequence{'s' if batch > 1 else ''}, {say(one, 'one ' + chip.name)}, and {eight_text}.")
