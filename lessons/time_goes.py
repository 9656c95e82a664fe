"""The "Where the time goes" lesson: the agent round of the seeds as time bounds on a chip, how the batch and a DSpark
verify raise arithmetic intensity, the per-op table, and the page's texts.

Costs come from `lessons.cost` (the kernel count, at the release's stored precision), placements from
`lessons.roofline`. Every time here is a lower bound at the chip's peak; nothing here knows how close real kernels
come to it.
"""

from __future__ import annotations

from dataclasses import dataclass

from model.config import V41Config

from .cost import Cost, Workload, cost
from .roofline import Chip, Placement, ms, place
from .units import human_bytes, human_flops

AGENT_READ, AGENT_WRITTEN = 10_000, 100     # the seeds' agent round: 10,000 tokens read, 100 written
BATCHES = (1, 8, 64, 512, 4096)
DRAFTS = (1, 2, 4, 8)


@dataclass
class RoundBounds:
    chip: Chip
    prefill: Placement
    decode_s: float                # the written tokens, one step each, at batch 1
    step: Placement                # the first decode step
    verify: Placement | None       # one verify pass of `drafts` drafts at the first step's context
    drafts: int

    @property
    def total_s(self) -> float:
        return self.prefill.seconds + self.decode_s

    @property
    def break_even(self) -> float | None:
        """Tokens a verify pass must yield on average to beat plain decode, bound for bound."""
        return None if self.verify is None else self.verify.seconds / self.step.seconds

    def rows(self) -> list[dict]:
        out = [{"phase": f"read {AGENT_READ:,} tokens (bounded prefill, one pass)", "FLOPs":
                human_flops(self.prefill.flops), "bytes": human_bytes(self.prefill.bytes),
                "FLOP/byte": round(self.prefill.intensity, 1), "limit": self.prefill.bound,
                "at least": ms(self.prefill.seconds)},
               {"phase": f"write {AGENT_WRITTEN} tokens (decode, batch 1)", "FLOPs": human_flops(AGENT_WRITTEN *
                                                                                                  self.step.flops),
                "bytes": human_bytes(AGENT_WRITTEN * self.step.bytes), "FLOP/byte": round(self.step.intensity, 1),
                "limit": self.step.bound, "at least": ms(self.decode_s)}]
        if self.verify is not None:
            out.append({"phase": f"one verify pass of {self.drafts} drafts", "FLOPs": human_flops(self.verify.flops),
                        "bytes": human_bytes(self.verify.bytes), "FLOP/byte": round(self.verify.intensity, 1),
                        "limit": self.verify.bound, "at least": ms(self.verify.seconds)})
        return out

    def sentence(self) -> str:
        share = self.decode_s / self.total_s
        s = (f"On {self.chip.called}, the round takes at least **{ms(self.total_s)}**: reading {AGENT_READ:,} tokens "
             f"needs {ms(self.prefill.seconds)} ({self.prefill.bound}), writing {AGENT_WRITTEN} needs "
             f"{ms(self.decode_s)} ({self.step.bound}). The {AGENT_WRITTEN} written tokens take **{share:.0%}** of "
             f"the bound, though they are 1% of the tokens.")
        if self.verify is not None:
            s += (f" A verify pass of {self.drafts} drafts needs at least {ms(self.verify.seconds)}, "
                  f"{self.break_even:,.2f} decode steps' worth: it pays when a pass yields more than "
                  f"{self.break_even:,.2f} tokens on average.")
        return s


def agent_round(cfg: V41Config, chip: Chip, drafts: int = 4, batch: int = 1) -> RoundBounds:
    """The agent round's lower bounds on `chip`, every decode step costed at its own context."""
    pre = place(cost(cfg, Workload("prefill", AGENT_READ, "bounded", batch=batch, chunk=AGENT_READ)), chip)
    steps = [place(cost(cfg, Workload("decode", AGENT_READ + i, batch=batch)), chip) for i in range(AGENT_WRITTEN)]
    ver = place(cost(cfg, Workload("verify", AGENT_READ, batch=batch, drafts=drafts)), chip) if drafts else None
    return RoundBounds(chip=chip, prefill=pre, decode_s=sum(p.seconds for p in steps), step=steps[0], verify=ver,
                       drafts=drafts)


def intensity_rows(cfg: V41Config, chip: Chip, context: int) -> list[dict]:
    """Decode at several batches and verify passes of several drafts: FLOP/byte, the bound, time per token."""
    out = []
    for b in BATCHES:
        p = place(cost(cfg, Workload("decode", context, batch=b)), chip)
        out.append({"step": f"decode, batch {b:,}", "FLOP/byte": round(p.intensity, 1), "limit": p.bound,
                    "at least, per step": ms(p.seconds), "per token": ms(p.seconds / b)})
    for k in DRAFTS:
        p = place(cost(cfg, Workload("verify", context, drafts=k)), chip)
        out.append({"step": f"verify {k} draft{'s' if k > 1 else ''}, batch 1", "FLOP/byte": round(p.intensity, 1),
                    "limit": p.bound, "at least, per step": ms(p.seconds),
                    "per token": f"{ms(p.seconds / (k + 1))} if all {k + 1} are kept"})
    return out


def kind_rows(c: Cost) -> list[dict]:
    """The cost by op kind, with each kind's share of the FLOPs and of the bytes (0-100%)."""
    f_all, b_all = c.flops or 1.0, c.bytes or 1.0
    return [{"op kind": k, "FLOPs": human_flops(f) if f else "0", "FLOP share %": round(100 * f / f_all, 1),
             "bytes": human_bytes(b), "byte share %": round(100 * b / b_all, 1)}
            for k, (f, b) in c.by_kind().items() if f or b]


def op_rows(c: Cost, first: int = 0) -> list[dict]:
    """Every op, per layer (numbered from `first`)."""
    return [{"layer": ("embed" if r.op == "embedding rows" else "head") if r.layer < 0 else str(r.layer + first),
             "kind": r.kind, "op": r.op, "FLOPs": r.flops,
             "weights B": round(r.weight_bytes), "cache read B": round(r.cache_read),
             "cache written B": round(r.cache_write), "activations B": round(r.act_bytes)} for r in c.rows]


# ------------------------------------------------------------------------------------------------
# Texts
# ------------------------------------------------------------------------------------------------

INTRO = (
    "A step of a model cannot finish faster than its slower limit: the arithmetic it does, at the chip's peak "
    "rate, or the bytes it moves through memory, at the memory's bandwidth. The ratio of the two, FLOPs per byte, "
    "is the **arithmetic intensity**; a chip's own ratio of peak to bandwidth, its ridge, says which limit wins. "
    "Here every op of DeepSeek-V4.1-Flash is counted from the config, and the count is checked against what "
    "PyTorch's flop counter sees the running model do."
)

ROOF_TEXT = (
    "Each line is a chip's roof: the compute it can reach at a given intensity, rising with bandwidth until it "
    "meets the peak. A workload sits at its own intensity, under the roof of the chosen chip. Left of the ridge "
    "it waits on memory; right of it, on arithmetic. A decode step at batch 1 reads every active weight to make "
    "one token, so it sits far left. A batch shares each weight read among many sequences and a verify pass "
    "among several tokens, so both move the point right."
)

COUNT_TEXT = (
    "What is counted: every matmul, at 2 FLOPs per multiply-add; the weights each op reads at their stored "
    "precision (FP8 projections, FP4 routed experts, only the experts the step's tokens reach); the cache rows "
    "at their stored formats; and each op's inputs and outputs once, as if nothing were fused. The window and "
    "the selected entries are counted as a kernel needs them: each query reads its own window rows and picks, "
    "and a Reindex layer scores only its candidate pool."
)

CAVEAT = (
    "Every time on this page is a lower bound at the spec sheet's peak: real kernels reach part of either peak, "
    "and communication between GPUs, scheduling and overlap are left out. Routed experts are assumed to be chosen "
    "evenly; Engram's tables are left in host memory; the drafter's own pass is not part of a verify."
)

HERE_TEXT = (
    "The same accounting, on the running model and this machine. A matmul and a memory copy measure this "
    "machine's roof; then the model reads a prompt and writes a few tokens, and each phase is set against the "
    "limit that should bind it: prefill against the matmul peak, decode against the bandwidth bound. Small widths "
    "on a CPU are dominated by per-call overhead, so expect both shares to be small."
)

CHECK_TEXT = (
    "The formula is checked against PyTorch's flop counter during the engine's own forward calls. For this check "
    "it counts what this engine computes rather than what a kernel needs: its window attention multiplies "
    "blocks of queries by twice the window of keys, and its index sources score every entry before masking."
)
