"""The cost model held against the running model: FLOPs as `torch.utils.flop_counter.FlopCounterMode` counts them
during the engine's own forward calls, and cache bytes as the engine's packed stores read and write them.

The formula side is `lessons.cost.cost(..., as_run=True)` at the running model's precision: the work this engine
does (its blocked window attention, its index sources scoring every entry), which is what the counter sees. The
check is per module (each layer's attention, experts, Engram and mHC, and the head), so an op the counter sees
that the formula has no row for shows up by name. A chunked extend runs as the engine's call on a cache; a mixed
step, which this engine cannot run as one ragged batch, runs as its two parts one after the other (FLOPs add up).
What this check covers: FLOPs in the engine's own mode (`as_run=True`) and cache bytes; not the kernel count the
release-scale figures use (`as_run=False`), and not weight or activation bytes. Time: lessons.roofline.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch.utils.flop_counter import FlopCounterMode

from model import decode_step, prefill
from model.inference import PackedRows
from model.quant import INDEX_FMT, LATENT_FMT, WINDOW_FMT

from .cost import ENGINE_CHUNK, FP32, Cost, Workload, check_workload, cost
from .roofline import Machine

TOLERANCE = 0.02


def workload_ids(model, wl: Workload, seed: int = 0) -> torch.Tensor:
    """[B, N + new rows] random token ids for a workload (the FLOPs do not depend on which tokens)."""
    new = {"prefill": 0, "extend": wl.chunk, "mixed": wl.chunk}.get(wl.kind, 1 + wl.drafts)
    g = torch.Generator().manual_seed(seed)
    return torch.randint(8, model.cfg.vocab_size, (wl.batch, wl.tokens + new), generator=g).to(model.device)


def run_workload(model, wl: Workload, inside, ids: torch.Tensor | None = None):
    """Run a workload on the model; `inside` is a context manager entered around the measured calls only (a decode
    or verify step's prefill runs before it). Returns the prefill's cache."""
    check_workload(model.cfg, wl)
    ids = workload_ids(model, wl) if ids is None else ids
    if wl.kind == "prefill":
        with inside:
            return prefill(model, ids, wl.mode, chunk_size=wl.chunk).cache
    chunk = wl.kind in ("extend", "mixed")
    new = wl.chunk if chunk else 1 + wl.drafts
    pre_chunk = ENGINE_CHUNK if chunk else wl.chunk
    if wl.kind == "mixed":   # the chunk of one sequence, then the decodes of the batch
        one = prefill(model, ids[:1, :wl.tokens], wl.mode, chunk_size=pre_chunk, rollback=new)
        many = prefill(model, ids[:, :wl.tokens], wl.mode, chunk_size=pre_chunk, rollback=1)
        with inside:
            decode_step(model, one.cache, ids[:1, wl.tokens:])
            decode_step(model, many.cache, ids[:, wl.tokens:wl.tokens + 1])
        return many.cache
    pre = prefill(model, ids[:, :wl.tokens], wl.mode, chunk_size=pre_chunk, rollback=max(1, new))
    with inside:
        decode_step(model, pre.cache, ids[:, wl.tokens:])
    return pre.cache


def _module(name: str) -> str:
    """'V41Model.layers.3.attn.wq_a' -> 'layers.3.attn.wq_a' (the counter prefixes the root module's class)."""
    return name.split(".", 1)[1] if "." in name else ""


@dataclass
class ModuleCheck:
    module: str
    counted: float
    formula: float

    @property
    def ratio(self) -> float:
        return self.counted / self.formula if self.formula else (1.0 if not self.counted else float("inf"))


@dataclass
class CounterCheck:
    workload: Workload
    counted: float
    formula: float
    modules: list[ModuleCheck] = field(default_factory=list)
    unmatched: list[str] = field(default_factory=list)   # modules the counter saw work in with no formula row
    ops: dict[str, float] = field(default_factory=dict)  # aten op -> FLOPs counted

    @property
    def ratio(self) -> float:
        return self.counted / self.formula if self.formula else float("inf")

    @property
    def ok(self) -> bool:
        return (abs(self.ratio - 1) <= TOLERANCE and not self.unmatched
                and all(abs(m.ratio - 1) <= TOLERANCE for m in self.modules))


def count_flops(model, wl: Workload, ids: torch.Tensor | None = None) -> tuple[float, dict[str, float],
                                                                                  dict[str, float]]:
    """FLOPs the counter sees: (total, by module path inclusive of its children, by aten op)."""
    fc = FlopCounterMode(display=False, depth=None)
    # bounded prefill calls the layers without the root module's forward; naming the tree from the root first keeps
    # every layer's name (layers.3.attn, not a bare attn) however it is entered
    tracker = getattr(fc, "mod_tracker", None)
    if hasattr(tracker, "_get_mod_name"):
        tracker._get_mod_name(model)
    with torch.no_grad():
        run_workload(model, wl, fc, ids)
    counts = fc.get_flop_counts()
    by_module = {_module(k): float(sum(v.values())) for k, v in counts.items() if k != "Global"}
    ops = {str(op): float(n) for op, n in counts.get("Global", {}).items()}
    return float(fc.get_total_flops()), by_module, ops


def _formula_by_module(c: Cost) -> dict[str, float]:
    return c.by_module()


def check_flops(model, wl: Workload, ids: torch.Tensor | None = None) -> CounterCheck:
    """The formula (as run, fp32) against the counter, in total and per module."""
    total, counted, ops = count_flops(model, wl, ids)
    f = cost(model.cfg, wl, FP32, as_run=True)
    formula = _formula_by_module(f)
    paths = sorted(formula, key=lambda m: -m.count("."))        # deepest first: children before their layer
    modules: list[ModuleCheck] = []
    for m in paths:
        got = counted.get(m, 0.0)
        if m.count(".") == 1:                                   # a layer's own rows (mHC): minus its children
            got -= sum(counted.get(k, 0.0) for k in formula if k.startswith(m + ".") and k.count(".") == 2)
        modules.append(ModuleCheck(m, got, formula[m]))
    unmatched = sorted(k for k, v in counted.items() if v and k and not any(k == m or k.startswith(m + ".")
                                                                           for m in formula))
    modules.sort(key=lambda x: x.module)
    return CounterCheck(workload=wl, counted=total, formula=f.flops, modules=modules, unmatched=unmatched, ops=ops)


CHECKS = (Workload("prefill", 256, "exact"), Workload("prefill", 256, "bounded"), Workload("extend", 300, chunk=64),
          Workload("decode", 300), Workload("verify", 300, drafts=4), Workload("mixed", 300, batch=2, chunk=64))


def check_rows(model, progress=None) -> list[dict]:
    """The formula against the counter for one workload of each kind, as table rows."""
    out = []
    for j, wl in enumerate(CHECKS):
        chk = check_flops(model, wl)
        out.append({"workload": wl.describe(), "counted FLOPs": chk.counted, "formula FLOPs": chk.formula,
                    "counted / formula": round(chk.ratio, 4), "modules compared": len(chk.modules),
                    "ops without a row": ", ".join(chk.unmatched) or "none"})
        if progress is not None:
            progress((j + 1) / len(CHECKS), wl.describe())
    return out


# ------------------------------------------------------------------------------------------------
# Cache bytes read and written by the engine's packed stores
# ------------------------------------------------------------------------------------------------

STORE_OF = {WINDOW_FMT.name: "window", LATENT_FMT.name: "latents", INDEX_FMT.name: "index keys"}


@contextmanager
def _cache_tally(tally: dict[str, float]):
    """Count the bytes PackedRows read (read, gather) and write (append) while inside, by store."""
    rows = PackedRows
    read0, gather0, append0 = rows.read, rows.gather, rows.append

    def read(self, start=0, stop=None):
        out = read0(self, start, stop)
        k = f"{STORE_OF[self.fmt.name]} read"
        tally[k] = tally.get(k, 0) + self.values[:, start:stop].nbytes + self.scales[:, start:stop].nbytes
        return out

    def gather(self, idx):
        k = f"{STORE_OF[self.fmt.name]} read"
        per = self.values.shape[-1] + self.scales.shape[-1]
        tally[k] = tally.get(k, 0) + idx.numel() * per
        return gather0(self, idx)

    def append(self, r):
        before = self.nbytes()
        n_before = len(self)
        append0(self, r)
        k = f"{STORE_OF[self.fmt.name]} written"
        tally[k] = tally.get(k, 0) + (self.nbytes() - before if len(self) > n_before else 0)

    rows.read, rows.gather, rows.append = read, gather, append
    try:
        yield tally
    finally:
        rows.read, rows.gather, rows.append = read0, gather0, append0


def formula_cache_bytes(c: Cost) -> dict[str, float]:
    """The cost model's cache traffic by store: window, latents (selected entries), index keys (the scans), and the
    entries + keys a KV source writes."""
    out = {"window read": 0.0, "window written": 0.0, "latents read": 0.0, "index keys read": 0.0,
           "entries and keys written": 0.0}
    for r in c.rows:
        if r.kind == "window attention":
            out["window read"] += r.cache_read
            out["window written"] += r.cache_write
        elif r.kind == "selected attention":
            out["latents read"] += r.cache_read
        elif r.kind.startswith("indexer"):
            out["index keys read"] += r.cache_read
        elif r.op == "entries and keys written":
            out["entries and keys written"] += r.cache_write
    return out


def engine_cache_bytes(model, wl: Workload, ids: torch.Tensor | None = None) -> dict[str, float]:
    """The same traffic measured on the engine's stores during the workload's measured calls."""
    tally: dict[str, float] = {}
    with torch.no_grad():
        run_workload(model, wl, _cache_tally(tally), ids)
    return {"window read": tally.get("window read", 0.0), "window written": tally.get("window written", 0.0),
            "latents read": tally.get("latents read", 0.0), "index keys read": tally.get("index keys read", 0.0),
            "entries and keys written": tally.get("latents written", 0.0) + tally.get("index keys written", 0.0)}


# ------------------------------------------------------------------------------------------------
# The running model on this machine's roofline
# ------------------------------------------------------------------------------------------------

@dataclass
class Here:
    """The running model timed here and set against the measured peaks."""

    prompt: int
    prefill_s: float
    prefill_flops: float          # as run, the work this engine does
    prefill_bytes: float
    decode_s: float               # per step
    decode_bytes: float           # per step, weights (fp32) + cache + activations
    decode_flops: float
    machine: Machine

    @property
    def prefill_gflops(self) -> float:
        return self.prefill_flops / self.prefill_s / 1e9

    @property
    def prefill_peak_frac(self) -> float:
        """Share of the measured matmul peak that prefill reaches."""
        return self.prefill_gflops / self.machine.gflops

    @property
    def decode_bound_s(self) -> float:
        """The time a decode step needs at least: its bytes at the measured bandwidth."""
        return self.decode_bytes / (self.machine.gbs * 1e9)

    @property
    def prefill_bound_s(self) -> float:
        """The time prefill needs at least on the measured roof: the larger of its matmul time and memory time."""
        return max(self.prefill_flops / (self.machine.gflops * 1e9), self.prefill_bytes / (self.machine.gbs * 1e9))

    @property
    def prefill_over_bound(self) -> float:
        """Measured time over the roof's bound (1 would be a kernel at the roof)."""
        return self.prefill_s / self.prefill_bound_s

    @property
    def decode_over_bound(self) -> float:
        return self.decode_s / max(self.decode_bound_s, self.decode_flops / (self.machine.gflops * 1e9))

    @property
    def decode_bw_frac(self) -> float:
        """Share of the bandwidth bound that decode reaches (bound time / measured time)."""
        return self.decode_bound_s / self.decode_s

    def achieved(self) -> list[tuple[str, float, float]]:
        """(label, FLOP/byte, FLOP/s reached) of the measured prefill and decode step."""
        return [(f"prefill {self.prompt:,} tokens, measured", self.prefill_flops / self.prefill_bytes,
                 self.prefill_flops / self.prefill_s),
                ("decode step, measured", self.decode_flops / self.decode_bytes, self.decode_flops / self.decode_s)]

    def sentence(self) -> str:
        return (f"Here, prefill of {self.prompt:,} tokens reaches **{self.prefill_peak_frac:.0%}** of the measured "
                f"matmul peak ({self.prefill_gflops:,.1f} of {self.machine.gflops:,.1f} GFLOP/s); a decode step "
                f"reaches **{self.decode_bw_frac:.1%}** of the bandwidth bound: it moves "
                f"{self.decode_bytes / 1e6:,.1f} MB, which at {self.machine.gbs:,.1f} GB/s would take "
                f"{self.decode_bound_s * 1e3:,.2f} ms, but takes {self.decode_s * 1e3:,.1f} ms.")


def measure_here(model, machine: Machine, prompt: int = 512, steps: int = 8, repeats: int = 2,
                 progress=None) -> Here:
    """Time an exact prefill of `prompt` tokens (best of `repeats`) and `steps` decode steps after it (best step),
    and cost them (as run, fp32)."""
    cfg = model.cfg
    ids = workload_ids(model, Workload("prefill", prompt + steps))
    dev = model.device
    best_pf, cache = float("inf"), None
    with torch.no_grad():
        for r in range(repeats):
            _sync(dev)
            t0 = time.perf_counter()
            cache = prefill(model, ids[:, :prompt], "exact").cache
            _sync(dev)
            best_pf = min(best_pf, time.perf_counter() - t0)
            if progress is not None:
                progress((r + 1) / (repeats + 1), f"prefill {r + 1} of {repeats}")
        best_dec = float("inf")
        for s in range(steps):
            _sync(dev)
            t0 = time.perf_counter()
            decode_step(model, cache, ids[:, prompt + s:prompt + s + 1])
            _sync(dev)
            best_dec = min(best_dec, time.perf_counter() - t0)
    mid = prompt + steps // 2
    dc = cost(cfg, Workload("decode", mid), FP32, as_run=True)
    pc = cost(cfg, Workload("prefill", prompt, "exact"), FP32, as_run=True)
    if progress is not None:
        progress(1.0, "done")
    return Here(prompt=prompt, prefill_s=best_pf, prefill_flops=pc.flops, prefill_bytes=pc.bytes, decode_s=best_dec,
                decode_bytes=dc.bytes, decode_flops=dc.flops, machine=machine)


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize()
