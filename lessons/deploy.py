"""A node, not a chip: one replica of the model spread over 1 to 8 GPUs of a kind, and which of its three roofs
(compute, HBM, the NVLink interconnect) binds each workload.

The split assumed here: expert parallelism for the routed experts (each GPU holds experts / G of them) and tensor
parallelism for the dense parts (attention, shared expert, mHC, embedding and head: each GPU holds 1 / G of each
matrix). Each GPU then does 1 / G of the FLOPs and reads 1 / G of the floor's bytes (lessons.cost): the experts a
step reaches are taken as spread evenly, which the busiest GPU exceeds, so the time stays a lower bound.

The interconnect roof, per layer and per row of the step (a token in it):
- MoE dispatch and combine (all-to-all): a row's hidden state goes to each of its k experts in FP8 (1 byte a number)
  and comes back in BF16 (2 bytes); a GPU sends for its own 1 / G of the rows, and (G - 1) / G of the experts live
  elsewhere: 3·k·d·(G - 1) / G² bytes per GPU per row.
- The dense parts' all-reduce of the attention output (ring, BF16): 2·(G - 1) / G · 2·d bytes per GPU per row.
Sent bytes against the sheet's NVLink figure (both directions added) understate the time, so this too is a lower
bound. The time of a step is the largest of the three, assuming they overlap perfectly.

Memory: the resident weights (lessons.roofline.resident_weights) and the batch's cache (model.accounting) divided
over the GPUs must fit in their memory. What this module does not know: load imbalance between experts, the cost of
starting a collective, pipeline parallelism, and anything beyond one node.
"""

from __future__ import annotations

from dataclasses import dataclass

from model.accounting import cache_bytes
from model.config import V41Config

from .cost import RELEASE, Cost, Precision
from .roofline import GPUS, Chip, compute_seconds, ms, resident_weights
from .units import human_flops

NODE = 8                               # GPUs in one NVLink node (an HGX or DGX board)
GPU_COUNTS = tuple(range(1, NODE + 1))
ROOFS = ("compute", "HBM", "interconnect")
DISPATCH_BYTES, COMBINE_BYTES, REDUCE_BYTES = 1.0, 2.0, 2.0     # FP8 out, BF16 back, BF16 all-reduce


class DeployError(ValueError):
    """A deployment the model cannot describe; the message names the input."""


@dataclass(frozen=True)
class Deployment:
    chip: Chip
    gpus: int

    def __post_init__(self) -> None:
        if isinstance(self.gpus, bool) or not isinstance(self.gpus, int) or not 1 <= self.gpus <= NODE:
            raise DeployError(f"GPUs per replica must be a whole number from 1 to {NODE}, got {self.gpus!r}")

    @property
    def name(self) -> str:
        if self.gpus == 1:
            return f"one {self.chip.name}"
        return f"{self.gpus}x {self.chip.name}" + (" (a full node)" if self.gpus == NODE else "")


def deployment(chip_key: str, gpus: int) -> Deployment:
    if chip_key not in GPUS:
        raise DeployError(f"GPU must be one of {', '.join(GPUS)}, got {chip_key!r}")
    return Deployment(GPUS[chip_key], gpus)


def routed_rows(c: Cost) -> float:
    """Rows of the step summed over layers (each layer's rows pass its router once)."""
    return sum(r.expert_rows for r in c.rows)


def link_bytes(cfg: V41Config, c: Cost, gpus: int) -> float:
    """Bytes each GPU sends over NVLink in the step: MoE dispatch and combine, and the attention all-reduce."""
    if gpus == 1:
        return 0.0
    g, k, d = gpus, cfg.num_experts_per_tok, cfg.hidden_size
    moe = (DISPATCH_BYTES + COMBINE_BYTES) * k * d * (g - 1) / g ** 2
    reduce = 2 * (g - 1) / g * REDUCE_BYTES * d
    return routed_rows(c) * (moe + reduce)


@dataclass
class StepBound:
    """One workload's step on a deployment: per-GPU work and the time each roof allows."""

    label: str
    deploy: Deployment
    flops: float            # per GPU
    bytes: float            # per GPU, the floor
    link: float             # per GPU, sent over NVLink
    compute_s: float
    memory_s: float
    link_s: float

    @property
    def seconds(self) -> float:
        return max(self.compute_s, self.memory_s, self.link_s)

    @property
    def binding(self) -> str:
        """The roof that sets the time: 'compute', 'HBM' or 'interconnect'."""
        times = dict(zip(ROOFS, (self.compute_s, self.memory_s, self.link_s)))
        return max(times, key=times.get)

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes if self.bytes else float("inf")

    def sentence(self) -> str:
        """The binding roof in one sentence, with the other two's times beside it."""
        others = ", ".join(f"{name} {ms(t)}" for name, t in zip(ROOFS, (self.compute_s, self.memory_s, self.link_s))
                           if name != self.binding and (t or name != "interconnect"))
        if self.deploy.gpus == 1:
            others += "; one GPU, no interconnect"
        return (f"{self.label.capitalize()}: at least **{ms(self.seconds)}** on {self.deploy.name}, bound by "
                f"**{self.binding}** ({others}).")

    def row(self) -> dict:
        return {"workload": self.label, "FLOPs per GPU": human_flops(self.flops),
                "HBM bytes per GPU (GB)": round(self.bytes / 1e9, 2),
                "NVLink bytes per GPU (GB)": round(self.link / 1e9, 3),
                "compute": ms(self.compute_s), "HBM": ms(self.memory_s),
                "interconnect": ms(self.link_s) if self.link else "-", "binds": self.binding,
                "at least": ms(self.seconds)}


def step_bound(cfg: V41Config, c: Cost, dep: Deployment, label: str | None = None,
               per_precision: bool = True) -> StepBound:
    g = dep.gpus
    link = link_bytes(cfg, c, g)
    return StepBound(label=label or c.workload.describe(), deploy=dep, flops=c.flops / g, bytes=c.bytes / g,
                     link=link, compute_s=compute_seconds(c, dep.chip, per_precision) / g,
                     memory_s=c.bytes / g / dep.chip.bandwidth,
                     link_s=link / dep.chip.link if link and dep.chip.link else 0.0)


@dataclass
class Fit:
    deploy: Deployment
    weights: float          # bytes, the whole replica
    cache: float            # bytes, the whole batch

    @property
    def per_gpu(self) -> float:
        return (self.weights + self.cache) / self.deploy.gpus

    @property
    def fits(self) -> bool:
        return self.per_gpu <= self.deploy.chip.memory

    def sentence(self) -> str:
        mem = self.deploy.chip.memory
        verb = "fit" if self.fits else "do not fit"
        return (f"Weights ({self.weights / 1e9:,.1f} GB) and the batch's cache ({self.cache / 1e9:,.2f} GB) "
                f"{verb} on {self.deploy.name}: {self.per_gpu / 1e9:,.1f} GB per GPU against {mem / 1e9:,.0f} GB.")


def fit(cfg: V41Config, dep: Deployment, context: int, batch: int, pr: Precision = RELEASE) -> Fit:
    """Whether the replica's weights and `batch` caches of `context` tokens fit in the deployment's memory (GB)."""
    return Fit(dep, resident_weights(cfg, pr), float(cache_bytes(cfg, context, mode="bounded", batch=batch).total))


def fewest_gpus(cfg: V41Config, chip: Chip, context: int = 0, batch: int = 1) -> int | None:
    """The fewest GPUs of a kind (up to a node) that hold the weights and the batch's cache; None: not one node."""
    for g in range(1, NODE + 1):
        if fit(cfg, Deployment(chip, g), max(context, 1), batch).fits:
            return g
    return None
