"""The roofline: which workloads are limited by arithmetic and which by memory, on named GPUs and on this machine.

A step needs at least max(compute time, bytes / memory bandwidth) seconds: the bound assumes compute and memory
traffic overlap perfectly. The bytes are the floor of `lessons.cost` (weights and cache rows, no activations), so the
time is a lower bound. The compute time prices each FLOP at the peak of its precision (`precision_of`): FP8 for the
linears, FP4 for the routed experts where the chip has FP4 tensor cores (Hopper falls back to FP8), BF16 for the
attention math and the BF16 weights; `per_precision=False` prices every FLOP at the FP8 peak instead. The ratio
FLOPs / bytes (the arithmetic intensity) against the ridge (effective peak / bandwidth) says which term wins. The
GPU figures are spec-sheet dense peaks (`GPUS`, each with its source and how sure it is); this machine's are measured
live by a matmul and a memory copy (`measure_machine`). Several GPUs and their interconnect: lessons.deploy. What
this module does not know: real kernels reach only part of either peak, and scheduling is left out.
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


@dataclass(frozen=True)
class Chip:
    key: str
    name: str
    peak: float            # FLOP/s, dense, FP8 (the precision assumed for the release's linears)
    bandwidth: float       # bytes/s
    memory: float          # bytes of accelerator memory
    source: str
    sure: str              # how sure the figures are, and why
    bf16: float = 0.0      # FLOP/s dense at BF16 (0: not given, priced at `peak`)
    fp4: float = 0.0       # FLOP/s dense at FP4 (0: no FP4 tensor cores, falls back to `peak`)
    link: float = 0.0      # bytes/s of NVLink per GPU (both directions together, as the sheets print it)
    measured: bool = False

    def rate(self, precision: str) -> float:
        """FLOP/s dense at 'fp8', 'fp4' or 'bf16', falling back to the FP8 peak where the chip gives none."""
        got = {"fp4": self.fp4, "bf16": self.bf16}.get(precision, 0.0)
        return got or self.peak

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
                 "high: FP8 3,958 and BF16 1,979 TFLOPS with sparsity, so half dense; HBM3 3.35 TB/s, 80 GB; "
                 "NVLink 900 GB/s; no FP4", bf16=989e12, link=900e9),
    "h200": Chip("h200", "NVIDIA H200", 1979e12, 4.8e12, 141e9,
                 "NVIDIA H200 Tensor Core GPU datasheet (SXM column)",
                 "high: the H100's compute with HBM3e at 4.8 TB/s and 141 GB; NVLink 900 GB/s; no FP4",
                 bf16=989e12, link=900e9),
    "b200": Chip("b200", "NVIDIA B200", 4.5e15, 8e12, 180e9,
                 "NVIDIA DGX B200 / HGX B200 datasheet (per GPU)",
                 "medium: NVIDIA's B200 figures moved between announcements (192 GB at launch, 180 GB in the "
                 "HGX/DGX sheets) and depend on the power configuration; FP4 9 PFLOPS dense (18 with sparsity); "
                 "NVLink 5 at 1.8 TB/s", bf16=2.25e15, fp4=9e15, link=1.8e12),
}


def chip_rows(chips: list[Chip]) -> list[dict]:
    """The figures behind the roofs, each peak dense, with where each comes from and how sure it is."""
    def tf(x: float) -> float | None:
        return round(x / 1e12, 3) if x else None

    return [{"chip": c.name, "FP8 dense (TFLOP/s)" if not c.measured else "fp32 measured (TFLOP/s)": tf(c.peak),
             "FP4 dense (TFLOP/s)": tf(c.fp4), "BF16 dense (TFLOP/s)": tf(c.bf16),
             "HBM (TB/s)": round(c.bandwidth / 1e12, 4), "NVLink (GB/s)": round(c.link / 1e9) or None,
             "memory (GB)": round(c.memory / 1e9) or None, "FP8 ridge (FLOP/byte)": round(c.ridge, 1),
             "source": c.source, "how sure": c.sure} for c in chips]


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

def precision_of(kind: str, op: str) -> str:
    """The precision an op's matmuls run at (an assumption: FP8 linears as the checkpoint stores them, MXFP4 experts
    at FP4 where the chip can, attention math and the BF16-stored weights at BF16)."""
    if kind == "routed experts":
        return "fp4" if op.startswith("experts") else "bf16"
    if kind in ("window attention", "selected attention", "mHC", "embed and head"):
        return "bf16"
    if kind == "compressor" and not op.startswith("index keys"):
        return "bf16"
    if op == "head weights":
        return "bf16"
    return "fp8"


def compute_seconds(c: Cost, chip: Chip, per_precision: bool = True) -> float:
    """The time the step's FLOPs take at the chip's dense peaks, each at its precision's (or all at FP8's)."""
    if not per_precision:
        return c.flops / chip.peak
    return sum(r.flops / chip.rate(precision_of(r.kind, r.op)) for r in c.rows if r.flops)


@dataclass
class Placement:
    chip: Chip
    label: str
    flops: float
    bytes: float                   # the floor: weights and cache rows
    compute_s: float = 0.0         # 0: at the FP8 peak

    def __post_init__(self) -> None:
        if not self.compute_s:
            self.compute_s = self.flops / self.chip.peak

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes if self.bytes else math.inf

    @property
    def memory_s(self) -> float:
        return self.bytes / self.chip.bandwidth

    @property
    def peak(self) -> float:
        """The FLOP/s this step's mix of precisions reaches at the peaks."""
        return self.flops / self.compute_s if self.compute_s else self.chip.peak

    @property
    def ridge(self) -> float:
        return self.peak / self.chip.bandwidth

    @property
    def memory_bound(self) -> bool:
        return self.memory_s > self.compute_s

    @property
    def bound(self) -> str:
        return "memory-bound" if self.memory_bound else "compute-bound"

    @property
    def seconds(self) -> float:
        """Lower bound on the time: the larger of the compute time and the memory time at peak (perfect overlap)."""
        return max(self.compute_s, self.memory_s)

    @property
    def attainable(self) -> float:
        """FLOP/s the roof allows at this intensity."""
        return min(self.peak, self.intensity * self.chip.bandwidth)


def place(c: Cost, chip: Chip, label: str | None = None, per_precision: bool = True) -> Placement:
    return Placement(chip, label or c.workload.describe(), c.flops, c.bytes, compute_seconds(c, chip, per_precision))


def compute_bound_batch(cfg: V41Config, chip: Chip, context: int, pr: Precision = RELEASE,
                        limit: int = 1 << 16, per_precision: bool = True) -> int | None:
    """The smallest batch at which one decode step at `context` is compute-bound on `chip`, from the floor's bytes
    (None: not up to `limit`). Intensity grows with the batch (the dense weights are read once for all sequences,
    and the experts once for all who reach them), so a bisection finds it."""
    def bound(b: int) -> bool:
        c = cost(cfg, Workload("decode", context, batch=b), pr)
        return not place(c, chip, per_precision=per_precision).memory_bound

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


def per_sequence(c: Cost) -> tuple[str, float, float, float]:
    """What each added sequence brings to a decode step: (the op kind whose cache bytes dominate, those bytes, all
    its cache bytes, the FLOPs per byte of that cache traffic), from a step at batch 1."""
    kinds: dict[str, float] = {}
    for r in c.rows:
        kinds[r.kind] = kinds.get(r.kind, 0.0) + r.cache_read + r.cache_write
    top = max(kinds, key=kinds.get)
    cache = sum(kinds.values())
    return top, kinds[top], cache, c.flops / cache if cache else math.inf


def verdict(p: Placement, crossover: int | None, batch: int, per_seq: tuple[str, float, float, float] | None = None,
            limit: int = 1 << 16) -> str:
    """What bounds a decode step on the chosen chip at the chosen batch, and from which batch that changes."""
    per = "for the whole batch" if batch > 1 else ""
    s = (f"On {p.chip.called}, one decode step at batch {batch:,} is **{p.bound}**: it does "
         f"{p.intensity:,.1f} FLOP per byte it must move (weights and cache), {'under' if p.memory_bound else 'over'} "
         f"the ridge of {p.ridge:,.0f} FLOP/byte at this step's mix of precisions, so one chip holding every weight "
         f"would take at least **{ms(p.seconds)}** {per}".rstrip() + ".")
    if crossover is None:
        s += f" Up to a batch of {limit:,} it never turns compute-bound here"
        if per_seq is not None:
            kind, top, cache, ai = per_seq
            s += (f": each added sequence brings {cache / 1e6:,.1f} MB of cache traffic per step, most of it the "
                  f"{kind} ({top / 1e6:,.1f} MB), at {ai:,.0f} FLOP per byte, under the ridge")
        s += "."
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
    return (f"The weights held on the GPUs take {w / 1e9:,.1f} GB at their stored precision. For "
            f"{batch:,} sequence{'s' if batch > 1 else ''}, {say(one, 'one ' + chip.name)}, and {eight_text}.")
