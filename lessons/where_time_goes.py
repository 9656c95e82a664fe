"""The "Where the time goes" lesson: the workloads a serving engineer sees (prefill, chunked extend, decode, a DSpark
verify, a mixed step) as time bounds on a deployment, the agent round of the seeds, how the batch and a verify
change arithmetic intensity, the per-op table, and the page's texts.

Costs come from `lessons.cost` (the kernel count at the release's stored precision; the floor's bytes), placements
from `lessons.roofline` and `lessons.deploy`. Every time here is a lower bound: spec-sheet peaks and perfect overlap
of compute, memory and interconnect; nothing here knows how close real kernels come to it.
"""

from __future__ import annotations

from dataclasses import dataclass

from model.config import V41Config

from .cost import Cost, Workload, cost
from .deploy import Deployment, StepBound, step_bound
from .roofline import Chip, Machine, ms, place
from .units import human_flops

AGENT_READ, AGENT_WRITTEN = 10_000, 100     # the seeds' agent round: 10,000 tokens read, 100 written
BATCHES = (1, 8, 64, 512, 4096)
EXTEND_CHUNK = 2048                         # a serving engine's prefill chunk beside decodes


def draft_choices(cfg: V41Config) -> tuple[int, ...]:
    """Drafts per verify: up to DSpark's block less the anchor (the release's block holds 5)."""
    return tuple(range(1, max(2, cfg.dspark_block_size)))


def workloads(context: int, batch: int, drafts: int) -> dict[str, Workload]:
    """The five workloads, each at `context` tokens of cache (the prefill reads that many)."""
    return {f"prefill {context:,} tokens": Workload("prefill", context, "bounded", chunk=context),
            f"extend by {EXTEND_CHUNK:,}": Workload("extend", context, chunk=EXTEND_CHUNK),
            f"decode, batch {batch:,}": Workload("decode", context, batch=batch),
            f"verify {drafts} draft{'s' if drafts > 1 else ''}, batch {batch:,}":
                Workload("verify", context, batch=batch, drafts=drafts),
            f"mixed: a {EXTEND_CHUNK:,} chunk + {batch:,} decode{'s' if batch > 1 else ''}":
                Workload("mixed", context, batch=batch, chunk=EXTEND_CHUNK)}


def workload_bounds(cfg: V41Config, dep: Deployment, context: int, batch: int, drafts: int) -> list[StepBound]:
    return [step_bound(cfg, cost(cfg, wl), dep, label) for label, wl in workloads(context, batch, drafts).items()]


@dataclass
class RoundBounds:
    chip: Chip
    prefill: StepBound
    decode_s: float                # the written tokens, one step each, at batch 1
    step: StepBound                # the first decode step
    verify: StepBound | None       # one verify pass of `drafts` drafts at the first step's context
    drafts: int

    @property
    def total_s(self) -> float:
        return self.prefill.seconds + self.decode_s

    @property
    def break_even(self) -> float | None:
        """Tokens a verify pass must yield on average to beat plain decode, bound for bound."""
        return None if self.verify is None else self.verify.seconds / self.step.seconds

    def rows(self) -> list[dict]:
        def row(phase: str, b: StepBound, times: int = 1, s: float | None = None) -> dict:
            return {"phase": phase, "FLOPs per GPU": human_flops(times * b.flops),
                    "HBM bytes per GPU (GB)": round(times * b.bytes / 1e9, 2), "FLOP/byte": round(b.intensity, 1),
                    "binds": b.binding, "at least": ms(b.seconds if s is None else s)}

        out = [row(f"read {AGENT_READ:,} tokens (bounded prefill, one pass)", self.prefill),
               row(f"write {AGENT_WRITTEN} tokens (decode, batch 1)", self.step, AGENT_WRITTEN, self.decode_s)]
        if self.verify is not None:
            out.append(row(f"one verify pass of {self.drafts} drafts", self.verify))
        return out

    def sentence(self) -> str:
        share = self.decode_s / self.total_s
        s = (f"On {self.prefill.deploy.name}, the round takes at least **{ms(self.total_s)}**: reading "
             f"{AGENT_READ:,} tokens needs {ms(self.prefill.seconds)} (bound by {self.prefill.binding}), writing "
             f"{AGENT_WRITTEN} needs {ms(self.decode_s)} (bound by {self.step.binding}). The {AGENT_WRITTEN} written "
             f"tokens take **{share:.0%}** of the bound, though they are 1% of the tokens.")
        if self.verify is not None:
            s += (f" A verify pass of {self.drafts} drafts needs at least {ms(self.verify.seconds)}, "
                  f"{self.break_even:,.2f} decode steps' worth: it pays when a pass yields more than "
                  f"{self.break_even:,.2f} tokens on average.")
        return s


def agent_round(cfg: V41Config, dep: Deployment, drafts: int = 4, batch: int = 1) -> RoundBounds:
    """The agent round's lower bounds on a deployment, every decode step costed at its own context."""
    pre = step_bound(cfg, cost(cfg, Workload("prefill", AGENT_READ, "bounded", batch=batch, chunk=AGENT_READ)), dep)
    steps = [step_bound(cfg, cost(cfg, Workload("decode", AGENT_READ + i, batch=batch)), dep)
             for i in range(AGENT_WRITTEN)]
    ver = step_bound(cfg, cost(cfg, Workload("verify", AGENT_READ, batch=batch, drafts=drafts)), dep) \
        if drafts else None
    return RoundBounds(chip=dep.chip, prefill=pre, decode_s=sum(p.seconds for p in steps), step=steps[0],
                       verify=ver, drafts=drafts)


def intensity_rows(cfg: V41Config, chip: Chip, context: int) -> list[dict]:
    """Decode at several batches and verify passes of several drafts on one chip: FLOP/byte, the bound, time per
    token, and the bytes each step must move."""
    out = []
    for b in BATCHES:
        c = cost(cfg, Workload("decode", context, batch=b))
        p = place(c, chip)
        out.append({"step": f"decode, batch {b:,}", "bytes (GB)": round(c.bytes / 1e9, 2),
                    "FLOP/byte": round(p.intensity, 1), "limit": p.bound, "at least, per step": ms(p.seconds),
                    "per token": ms(p.seconds / b)})
    for k in draft_choices(cfg):
        c = cost(cfg, Workload("verify", context, drafts=k))
        p = place(c, chip)
        out.append({"step": f"verify {k} draft{'s' if k > 1 else ''}, batch 1", "bytes (GB)": round(c.bytes / 1e9, 2),
                    "FLOP/byte": round(p.intensity, 1), "limit": p.bound, "at least, per step": ms(p.seconds),
                    "per token": f"{ms(p.seconds / (k + 1))} if all {k + 1} are kept"})
    return out


def bytes_sentence(c: Cost) -> str:
    """The three byte counts of a workload, each saying what it is."""
    streams, unfused = c.fused_bytes - c.bytes, c.unfused_bytes
    return (f"It must move at least **{c.bytes / 1e9:,.2f} GB** (weights at stored precision and cache rows); a "
            f"kernel that fuses each sublayer still moves {streams / 1e9:,.2f} GB more, the residual streams between "
            f"sublayers; if nothing were fused, {unfused / 1e9:,.2f} GB in all.")


def kind_rows(c: Cost) -> list[dict]:
    """The cost by op kind, with each kind's share of the FLOPs and of the floor's bytes (0-100%), in GB."""
    f_all, b_all = c.flops or 1.0, c.bytes or 1.0
    return [{"op kind": k, "FLOPs": human_flops(f) if f else "0", "FLOP share %": round(100 * f / f_all, 1),
             "bytes": f"{b / 1e9:,.4f} GB", "byte share %": round(100 * b / b_all, 1)}
            for k, (f, b) in c.by_kind().items() if f or b]


def op_rows(c: Cost, first: int = 0) -> list[dict]:
    """Every op, per layer (numbered from `first`): the floor's bytes, and the activations if nothing were fused."""
    return [{"layer": ("embed" if r.op == "embedding rows" else "head") if r.layer < 0 else str(r.layer + first),
             "kind": r.kind, "op": r.op, "FLOPs": r.flops,
             "weights B": round(r.weight_bytes), "cache read B": round(r.cache_read),
             "cache written B": round(r.cache_write), "residual streams B": round(r.stream_bytes),
             "activations if nothing were fused B": round(r.act_bytes)} for r in c.rows]


# ------------------------------------------------------------------------------------------------
# Texts
# ------------------------------------------------------------------------------------------------

INTRO = (
    "A step of a model cannot finish faster than its slowest limit: the arithmetic at the chips' peak rate, the "
    "bytes it must move through memory at the memory's bandwidth, or, across several GPUs, the bytes they exchange "
    "over their links. FLOPs per byte moved is the **arithmetic intensity**; a chip's peak over its bandwidth, its "
    "**ridge**, says which of the first two wins. Here every op of DeepSeek-V4.1-Flash is counted from the config. "
    "The FLOP formula is checked, in this engine's own mode, against PyTorch's flop counter on the running tiny "
    "model; the release-scale figures use the kernel count, which that check does not cover."
)

ROOF_TEXT = (
    "Each line is a chip's roof: the compute it can reach at a given intensity, rising with bandwidth until it "
    "meets the peak. Left of the ridge a step waits on memory; right of it, on arithmetic. A decode step at "
    "batch 1 reads every active weight to make one token, so it sits far left; a batch or a verify pass moves it "
    "right, though less than its rows suggest (see the experts below)."
)

REACH_TEXT = (
    "A batch reads the dense weights once for all its rows, but each routed expert only for the rows that chose "
    "it: with 6 of 384 experts, a small batch or a verify pass mostly reads more experts. A verify of 4 drafts "
    "moves 2.3 times the bytes of one token. With 384 experts, a 10,000-token prefill gives each expert only about "
    "156 tokens, so on one chip it sits near the ridge; the decoder's replay reads most decoder experts for just "
    "128 rows."
)

COUNT_TEXT = (
    "What is counted: every matmul, at 2 FLOPs per multiply-add; the weights each op reads at their stored "
    "precision (FP8 projections, FP4 routed experts, only the experts the step's rows reach); the cache rows at "
    "their stored formats. That floor is what no kernel can avoid, and the bounds use it. Beside it: the residual "
    "streams read and written between sublayers, which a kernel fusing each sublayer still pays; and, in the "
    "layer-by-layer table, every op's inputs and outputs as if nothing were fused. Each query reads only its own "
    "window rows and picks, and a Reindex layer scores only its candidate pool."
)

NODE_TEXT = (
    "One replica spread over the chosen GPUs: the routed experts split between them (expert parallelism), the "
    "dense matrices split across them (tensor parallelism). Each GPU does its share of the FLOPs and reads its "
    "share of the bytes; in exchange each layer sends every row's hidden state to the GPUs holding its experts "
    "(FP8) and back (BF16), and all-reduces the attention output (BF16), over NVLink: the third roof."
)

PRECISION_TEXT = (
    "Each FLOP is priced at its precision's dense peak, an assumption about the kernels: FP8 for the projections "
    "(the checkpoint stores them in FP8), FP4 for the routed experts where the chip has FP4 tensor cores (the B200; "
    "Hopper falls back to FP8), BF16 for the attention math and the BF16 weights (head, router, compressor)."
)

CAVEAT = (
    "Every time on this page is a lower bound: spec-sheet peaks, and compute, memory traffic and the interconnect "
    "assumed to overlap perfectly. Routed experts are assumed to be chosen evenly and spread evenly over the GPUs; "
    "Engram's tables are left in host memory; the drafter's own pass is not part of a verify."
)

HERE_TEXT = (
    "The same accounting, on the running model and this machine. A matmul and a memory copy measure this "
    "machine's roof; then the model reads a prompt and writes a few tokens, and each phase is set against the "
    "limit that should bind it: prefill against the matmul peak, decode against the bandwidth bound. Small widths "
    "on a CPU are dominated by per-call overhead, so expect both shares to be small."
)

CHECK_TEXT = (
    "The check covers the FLOPs of this engine's own forward calls, one workload of each kind (a mixed step as its "
    "two parts), against PyTorch's flop counter; the cache bytes are checked in the tests against the engine's "
    "stores. It counts what this engine computes rather than what a kernel needs: its window attention multiplies "
    "blocks of queries by twice the window of keys, and its index sources score every entry before masking."
)
PEAKS_NOTE = "Every peak is dense (half the sheets' figure with sparsity); this machine's is fp32, measured."
ROUTER_TEXT = ("The router of the running model, on real text: how many distinct experts rows drawn apart (a batch) "
               "and rows in a row (a verify) reach, against uniform routing with the same experts.")


def ops_caption(said: str) -> str:
    """Whose ops the tables count (`said`: the workload, in words)."""
    return f"DeepSeek-V4.1-Flash, {said}, at the release's stored precision."


def roof_caption(m: Machine) -> str:
    """This machine's measured roof."""
    return f"The roof of {m.chip().name}: {m.gflops:,.1f} GFLOP/s (fp32 matmul), {m.gbs:,.1f} GB/s (memory copy)."
