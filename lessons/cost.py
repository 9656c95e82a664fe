"""Where the time goes: the FLOPs and the bytes moved by every op of one DeepSeek-V4.1 workload, from the config alone.

A workload is a bounded or exact prefill of N prompt tokens (in the engine's chunks), a chunked extend (one chunk of
new rows on top of a context already cached), one decode step at context C for a batch of B sequences, a DSpark verify
pass over an anchor and k drafts (model/inference/engine.py and speculative.py run the same forward calls), or a mixed
step (one sequence's prefill chunk beside B decodes, sharing the step's weight reads). Each op gets a row: its FLOPs
(2 per multiply-add), the weights it reads at their stored precision (only the routed experts a step's tokens reach),
the cache rows it reads and writes at their stored formats (model/quant.py), and its activation traffic.

Three byte counts, each saying what it is:
- `Cost.bytes` (the floor): weights and cache rows only, what no kernel can avoid; the time bounds use it.
- `Cost.fused_bytes`: the floor plus the residual streams read and written between sublayers (mHC's four streams),
  which even a kernel that fuses everything inside a sublayer still moves.
- `Cost.unfused_bytes`: every op's inputs and outputs once, as if nothing were fused; an upper estimate.
Rows carry the module they run in, so that `lessons.cost_check` can hold them against what
`torch.utils.flop_counter` counts in the running model. The weights a model holds at rest are lessons.roofline's.

Two ways to count the attention-side work:
- `as_run=True`: what this engine computes. Its window attention multiplies blocks of W queries by 2W-1 keys
  (model/arch/attention.py), and every index source scores every entry of its table before masking; this is what
  the counter sees.
- `as_run=False` (the default): the work a kernel needs, the one a real GPU would do: each query reads its W window
  rows, its selected entries, and scores only the entries it can see (inside the candidate pool at a Reindex layer).
Elementwise work (norms, softmax, Sinkhorn, top-k, rounding to FP4/FP8) is not counted: beside the matmuls it is small,
and the counter does not count it either. The DSpark drafter's own pass is not part of a verify.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

from model.config import V41Config
from model.layer_map import layer_map
from model.quant import INDEX_FMT, LATENT_FMT, WINDOW_FMT

WORKLOAD_KINDS = ("prefill", "extend", "decode", "verify", "mixed")
MODES = ("bounded", "exact")
KINDS = ("projections", "window attention", "selected attention", "compressor", "indexer broad scan",
         "indexer pool scan", "shared expert", "routed experts", "Engram", "mHC", "embed and head")
ENGINE_CHUNK = 256           # model.inference.engine.DEFAULT_CHUNK: prefill reads the prompt in chunks of this size


class CostError(ValueError):
    """A workload the cost model cannot describe; the message names the input."""


@dataclass(frozen=True)
class Precision:
    """Bytes per stored number, by weight class, and of activations."""

    name: str
    linear: float      # projections (wq, wkv, wo, indexer wq/wk, shared expert, Engram wkv)
    expert: float      # routed experts
    wide: float        # embeddings, head, router, compressor, indexer weights_proj
    mixing: float      # mHC projections
    engram_row: float  # one number of an Engram table row
    activation: float


# docs/design/checkpoints.md §3 and docs/design/equations.md §7: FP8 linears with one UE8M0 byte per 128 x 128
# block, MXFP4 routed experts (E2M1 + one E8M0 byte per 32), "any float" parts in bf16, mHC in fp32, FP8 Engram rows
# with an fp32 scale per 32; activations in bf16.
RELEASE = Precision("release (FP8 linears, FP4 experts)", 1 + 1 / 128 ** 2, 0.5 + 1 / 32, 2.0, 4.0, 1 + 4 / 32, 2.0)
FP32 = Precision("fp32 (the running model here)", 4.0, 4.0, 4.0, 4.0, 4.0, 4.0)


@dataclass(frozen=True)
class Workload:
    kind: str              # "prefill" | "extend" | "decode" | "verify" | "mixed"
    tokens: int            # prefill: prompt tokens; the others: tokens already in the cache
    mode: str = "bounded"  # prefill mode (the other kinds read the same cache either way)
    batch: int = 1         # sequences (mixed: the decoding sequences beside the one prefill chunk)
    drafts: int = 0        # verify: drafted tokens checked after the anchor
    chunk: int = ENGINE_CHUNK   # prefill: the engine's chunk; extend and mixed: the new rows of the chunk

    def describe(self) -> str:
        b = f", batch {self.batch:,}" if self.batch > 1 else ""
        if self.kind == "prefill":
            return f"{self.mode} prefill of {self.tokens:,} tokens{b}"
        if self.kind == "decode":
            return f"one decode step at context {self.tokens:,}{b}"
        if self.kind == "extend":
            return f"extend by a chunk of {self.chunk:,} at context {self.tokens:,}{b}"
        if self.kind == "mixed":
            return f"mixed step: a {self.chunk:,}-token chunk and {self.batch:,} decodes at context {self.tokens:,}"
        return f"verify of {self.drafts} drafts at context {self.tokens:,}{b}"


def check_workload(cfg: V41Config, wl: Workload) -> Workload:
    if wl.kind not in WORKLOAD_KINDS:
        raise CostError(f"workload kind must be one of {', '.join(WORKLOAD_KINDS)}, got {wl.kind!r}")
    if wl.mode not in MODES:
        raise CostError(f"prefill mode must be bounded or exact, got {wl.mode!r}")
    for name in ("tokens", "batch", "drafts", "chunk"):
        v = getattr(wl, name)
        if isinstance(v, bool) or not isinstance(v, int):
            raise CostError(f"{name} must be a whole number, got {v!r}")
    if wl.batch < 1 or wl.chunk < 1 or wl.drafts < 0:
        raise CostError("batch and chunk must be >= 1 and drafts >= 0")
    rows = {"verify": 1 + wl.drafts, "decode": 1, "extend": wl.chunk, "mixed": wl.chunk}.get(wl.kind, 0)
    least = 1 if wl.kind == "prefill" else 0
    if not least <= wl.tokens or wl.tokens + rows > cfg.max_position_embeddings:
        raise CostError(f"tokens must be >= {least} with the step inside {cfg.max_position_embeddings:,} positions")
    return wl


@dataclass
class OpRow:
    layer: int             # -1: embedding and head
    kind: str
    op: str
    module: str            # where the op runs in the model's module tree (as the flop counter names it)
    flops: float = 0.0
    weight_bytes: float = 0.0
    cache_read: float = 0.0
    cache_write: float = 0.0
    act_bytes: float = 0.0     # the op's inputs and outputs, once each: what it moves if nothing is fused
    stream_bytes: float = 0.0  # the residual streams it reads and writes between sublayers (part of act_bytes)
    expert_rows: float = 0.0   # routed experts: the rows that chose among them (a mixed step's parts add up)

    @property
    def bytes(self) -> float:
        """The floor: weights and cache rows, what no kernel can avoid moving."""
        return self.weight_bytes + self.cache_read + self.cache_write

    @property
    def unfused_bytes(self) -> float:
        return self.bytes + self.act_bytes


@dataclass
class Cost:
    workload: Workload
    precision: Precision
    as_run: bool
    rows: list[OpRow] = field(default_factory=list)

    @property
    def flops(self) -> float:
        return sum(r.flops for r in self.rows)

    @property
    def bytes(self) -> float:
        """The floor: weights at stored precision and the cache rows read and written (no activations)."""
        return sum(r.bytes for r in self.rows)

    @property
    def fused_bytes(self) -> float:
        """The floor plus the residual streams between sublayers: what a kernel fusing each sublayer still moves."""
        return self.bytes + self.total("stream_bytes")

    @property
    def unfused_bytes(self) -> float:
        """Every op's inputs and outputs counted once, as if nothing were fused: an upper estimate."""
        return self.bytes + self.total("act_bytes")

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, FLOP per byte of the floor."""
        return self.flops / self.bytes if self.bytes else math.inf

    def total(self, what: str) -> float:
        return sum(getattr(r, what) for r in self.rows)

    def by_kind(self) -> dict[str, tuple[float, float]]:
        """kind -> (FLOPs, bytes)."""
        out = {k: (0.0, 0.0) for k in KINDS}
        for r in self.rows:
            f, b = out[r.kind]
            out[r.kind] = (f + r.flops, b + r.bytes)
        return out

    def by_module(self) -> dict[str, float]:
        """FLOPs by module path (layers.3.attn, layers.3.ffn, layers.3.engram, layers.3 for mHC, head)."""
        out: dict[str, float] = {}
        for r in self.rows:
            if r.flops:
                out[r.module] = out.get(r.module, 0.0) + r.flops
        return out

    def records(self) -> list[dict]:
        return [{"layer": r.layer, "kind": r.kind, "op": r.op, "FLOPs": r.flops, "weights B": r.weight_bytes,
                 "cache read B": r.cache_read, "cache written B": r.cache_write,
                 "activations if nothing were fused B": r.act_bytes, "residual streams B": r.stream_bytes}
                for r in self.rows]


# ------------------------------------------------------------------------------------------------
# Position sums: how many window rows / entries the queries at positions [p, p + s) reach
# ------------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=4096)
def sum_min(p: int, s: int, ratio: int, cap: int | None, offset: int = 0) -> int:
    """sum over t in [p, p + s) of min(cap, (t + 1 - offset) // ratio), closed form (no loop over t)."""
    def upto(n: int) -> int:  # sum over u in [1, n] of u // ratio
        if n <= 0:
            return 0
        q, rem = divmod(n, ratio)
        return ratio * q * (q - 1) // 2 + q * (rem + 1)

    lo, hi = p + 1 - offset, p + s - offset            # u = t + 1 - offset runs over [lo, hi]
    if cap is None:
        return upto(hi) - upto(lo - 1)
    knee = cap * ratio - 1                              # u // ratio >= cap from u = cap * ratio on
    mid = min(hi, knee)
    part = upto(mid) - upto(lo - 1) if mid >= lo else 0
    return part + cap * max(0, hi - max(lo, knee + 1) + 1)


def routed_touched(n_tokens: int, experts: int, per_token: int) -> float:
    """Expected distinct routed experts that n tokens reach, each choosing `per_token` of `experts` (uniform routing,
    an assumption: a trained router is not uniform)."""
    if n_tokens <= 0:
        return 0.0
    return experts * (1 - (1 - per_token / experts) ** n_tokens)


# ------------------------------------------------------------------------------------------------
# One forward call
# ------------------------------------------------------------------------------------------------

@dataclass
class _Call:
    """One forward call over `rows` new rows at positions [start, start + rows) for `batch` sequences."""

    rows: int
    start: int
    lo: int
    hi: int
    publish: int | None = None          # bounded prefill: this layer only publishes entries and keys
    skip_compress: tuple[int, ...] = ()
    head_rows: int = 0                  # rows (per sequence) that reach the output head
    embed: bool = True
    window_floor: int | None = None     # decoder windows start here (bounded replay); None: position 0
    held_window: int | None = None      # rows held in the decoder windows before the call (replay: 0)


class _Rows:
    def __init__(self) -> None:
        self.rows: dict[tuple[int, str, str, str], OpRow] = {}

    def add(self, layer: int, kind: str, op: str, module: str, **v: float) -> None:
        key = (layer, kind, op, module)
        r = self.rows.get(key)
        if r is None:
            r = self.rows[key] = OpRow(layer, kind, op, module)
        for k, x in v.items():
            setattr(r, k, getattr(r, k) + x)


def _linear(acc: _Rows, layer: int, kind: str, op: str, module: str, n: int, fan_in: int, fan_out: int,
            wprec: float, aprec: float) -> None:
    acc.add(layer, kind, op, module, flops=2.0 * n * fan_in * fan_out, weight_bytes=fan_in * fan_out * wprec,
            act_bytes=n * (fan_in + fan_out) * aprec)


def _call(cfg: V41Config, c: _Call, batch: int, pr: Precision, as_run: bool, acc: _Rows) -> None:
    d, hd, h, w = cfg.hidden_size, cfg.head_dim, cfg.num_attention_heads, cfg.sliding_window
    ql, ol, g = cfg.q_lora_rank, cfg.o_lora_rank, cfg.o_groups
    hi_, di = cfg.index_n_heads, cfg.index_head_dim
    n_hc, a = cfg.hc_mult, pr.activation
    s, p = c.rows, c.start
    n = batch * s
    end = p + s
    dec = cfg.decoder_start
    pool = cfg.candidate_topk_blocks * cfg.candidate_block_size
    if c.embed:
        acc.add(-1, "embed and head", "embedding rows", "embed", weight_bytes=n * d * pr.wide,
                act_bytes=n * d * a)
    specs = layer_map(cfg)
    for spec in specs[c.lo:c.hi] + ([specs[c.publish]] if c.publish is not None else []):
        i, r = spec.index, spec.compress_ratio
        at, ff, lay = f"layers.{i}.attn", f"layers.{i}.ffn", f"layers.{i}"
        if spec.engram:
            cols = cfg.n_hash_cols * cfg.engram_head_dim
            acc.add(i, "Engram", "table rows", f"layers.{i}.engram", weight_bytes=n * cols * pr.engram_row)
            _linear(acc, i, "Engram", "wkv (rows -> key per stream + value)", f"layers.{i}.engram", n, cols,
                    d * (n_hc + 1), pr.linear, a)
        publish_only = c.publish == i
        # ---- the compressor and the index keys (a KV source publishing the entries of its complete groups) ----
        if spec.makes_entries and i not in c.skip_compress:
            wp = pr.wide
            _linear(acc, i, "compressor", "wkv (rows -> latent)", at, n, d, hd, wp, a)
            if r > 1:
                _linear(acc, i, "compressor", "wgate (pooling weights)", at, n, d, hd, wp, a)
                acc.add(i, "compressor", "pending rows (fp32 kv + gate)", at, cache_write=n * 2 * hd * 4)
            new = end // r - p // r
            if new:
                _linear(acc, i, "compressor", "index keys wk", at, batch * new, hd, di, pr.linear, a)
                acc.add(i, "compressor", "entries and keys written", at,
                        cache_write=batch * new * (LATENT_FMT.row_bytes(hd) + INDEX_FMT.row_bytes(di)))
        if publish_only:
            continue
        # ---- mHC: two sites, one projection each, then the stream mix ----
        mix = (2 + n_hc) * n_hc
        for site in ("attention", "FFN"):
            _linear(acc, i, "mHC", f"{site} site: mixes", lay, n, n_hc * d, mix, pr.mixing, 4.0)
            acc.add(i, "mHC", f"{site} site: stream mix", lay, flops=2.0 * n * n_hc * n_hc * d,
                    act_bytes=2 * n * n_hc * d * a, stream_bytes=2 * n * n_hc * d * a)
        # ---- projections ----
        _linear(acc, i, "projections", "wq_a", at, n, d, ql, pr.linear, a)
        _linear(acc, i, "projections", "wq_b", at, n, ql, h * hd, pr.linear, a)
        _linear(acc, i, "projections", "wkv (window row)", at, n, d, hd, pr.linear, a)
        # o_groups blocks of [H*hd/G -> o_lora]: H*hd*o_lora weights in all
        acc.add(i, "projections", "wo_a (grouped)", at, flops=2.0 * n * h * hd * ol,
                weight_bytes=h * hd * ol * pr.linear, act_bytes=n * (h * hd + g * ol) * a)
        _linear(acc, i, "projections", "wo_b", at, n, g * ol, d, pr.linear, a)
        # ---- window attention ----
        floor = c.window_floor if (c.window_floor is not None and i >= dec) else 0
        held = c.held_window if (c.held_window is not None and i >= dec) else p - floor
        prev = min(w - 1, max(0, held))
        if as_run:   # blocks of W queries x (2W - 1) keys, logits and values
            blocks = -(-s // w)
            wf = 4.0 * batch * blocks * h * w * (2 * w - 1) * hd
        else:
            wf = 4.0 * batch * h * hd * sum_min(p, s, 1, w, floor)
        acc.add(i, "window attention", "logits + weighted sum", at, flops=wf,
                cache_read=batch * prev * WINDOW_FMT.row_bytes(hd),
                cache_write=n * WINDOW_FMT.row_bytes(hd), act_bytes=2 * n * h * hd * a)
        if r == 0:
            _moe(cfg, acc, i, ff, n, pr)
            continue
        # ---- the compressed branch: selection and the selected entries ----
        t = end // r                      # entries in the group's table during this call
        if t:
            if spec.selects:
                kind = "indexer pool scan" if spec.searches_pool else "indexer broad scan"
                _linear(acc, i, kind, "index queries wq_b", at, n, ql, hi_ * di, pr.linear, a)
                _linear(acc, i, kind, "head weights", at, n, d, hi_, pr.wide, a)
                if as_run:
                    scored, keys = s * t, t
                elif spec.searches_pool:
                    scored, keys = sum_min(p, s, r, pool), min(t, pool + s - 1)
                else:
                    scored, keys = sum_min(p, s, r, None), t
                acc.add(i, kind, "scores (q . k, every head)", at, flops=2.0 * batch * scored * hi_ * di,
                        cache_read=batch * keys * INDEX_FMT.row_bytes(di))
            k = min(cfg.index_topk, t)
            picks = s * k if as_run else sum_min(p, s, r, cfg.index_topk)
            # as run, every row gathers k entries; a kernel reads only the entries each query can see (causal)
            acc.add(i, "selected attention", "logits + weighted sum", at, flops=4.0 * batch * h * hd * picks,
                    cache_read=batch * picks * LATENT_FMT.row_bytes(hd))
        _moe(cfg, acc, i, ff, n, pr)
    if c.head_rows:
        hr = batch * c.head_rows
        _linear(acc, -1, "embed and head", "output head", "head", hr, d, cfg.vocab_size, pr.wide, a)


def _moe(cfg: V41Config, acc: _Rows, i: int, ff: str, n: int, pr: Precision) -> None:
    d, inter, e, k = cfg.hidden_size, cfg.moe_intermediate_size, cfg.n_routed_experts, cfg.num_experts_per_tok
    a = pr.activation
    _linear(acc, i, "routed experts", "router", ff, n, d, e, pr.wide, a)
    touched = routed_touched(n, e, k)
    acc.add(i, "routed experts", f"experts (top {k} of {e})", ff, flops=2.0 * n * k * 3 * d * inter,
            weight_bytes=touched * 3 * d * inter * pr.expert, act_bytes=n * k * (2 * d + 3 * inter) * a,
            expert_rows=n)
    if cfg.n_shared_experts:
        acc.add(i, "shared expert", "shared expert", ff, flops=2.0 * n * 3 * d * inter,
                weight_bytes=3 * d * inter * pr.linear, act_bytes=n * (2 * d + 3 * inter) * a)


# ------------------------------------------------------------------------------------------------
# Workloads: the forward calls the engine makes
# ------------------------------------------------------------------------------------------------

def chunks(n: int, size: int) -> list[tuple[int, int]]:
    """The engine's prefill chunks over [0, n) (model.inference.engine._chunks with no prefix cache)."""
    cuts = sorted(set(range(0, n, size)) | {n})
    return list(zip(cuts[:-1], cuts[1:]))


PER_ROW_WEIGHTS = ("embedding rows", "table rows")   # weights read row by row: a step's parts add them up


def calls(cfg: V41Config, wl: Workload, as_run: bool = False) -> list[list[tuple[_Call, int]]]:
    """The forward steps of a workload, in order; each step is its parts (a call and its batch), which share the
    step's weight reads (only a mixed step has two)."""
    L, dec, w = cfg.num_hidden_layers, cfg.decoder_start, cfg.sliding_window
    b = wl.batch
    if wl.kind == "decode":
        return [[(_Call(1, wl.tokens, 0, L, head_rows=1), b)]]
    if wl.kind == "verify":
        return [[(_Call(1 + wl.drafts, wl.tokens, 0, L, head_rows=1 + wl.drafts), b)]]
    if wl.kind in ("extend", "mixed"):
        # the engine runs a chunk on a cache through its decode call, with logits on every row; a kernel needs
        # only the last row's
        chunk = _Call(wl.chunk, wl.tokens, 0, L, head_rows=wl.chunk if as_run else 1)
        if wl.kind == "extend":
            return [[(chunk, b)]]
        return [[(chunk, 1), (_Call(1, wl.tokens, 0, L, head_rows=1), b)]]
    n = wl.tokens
    if wl.mode == "exact" or dec >= L:
        return [[(_Call(e - a, a, 0, L, head_rows=1), b)] for a, e in chunks(n, wl.chunk)]
    out = [[(_Call(e - a, a, 0, dec, publish=dec), b)] for a, e in chunks(n, wl.chunk)]
    rep = min(w, n)
    out.append([(_Call(rep, n - rep, dec, L, skip_compress=(dec,), head_rows=1, embed=False,
                      window_floor=n - rep, held_window=0), b)])
    return out


def replay_weight_bytes(cfg: V41Config, context: int, pr: Precision = RELEASE) -> float:
    """Weights one bounded replay reads on its own (the decoder layers' dense weights, the routed experts its rows
    reach under uniform routing, and the head), at stored precision: the replay of a bounded prefill at `context`."""
    dec, L = cfg.decoder_start, cfg.num_hidden_layers
    rep = min(cfg.sliding_window, context)
    acc = _Rows()
    _call(cfg, _Call(rep, context - rep, dec, L, skip_compress=(dec,), head_rows=1, embed=False,
                     window_floor=context - rep, held_window=0), 1, pr, False, acc)
    return sum(r.weight_bytes for r in acc.rows.values())


def _merge(acc: _Rows, parts: list[_Rows], cfg: V41Config) -> None:
    """Add a step's parts to `acc`: work and cache traffic add up; a weight matrix is read once for the step, and the
    routed experts once each for the distinct experts all the step's rows reach."""
    e, k = cfg.n_routed_experts, cfg.num_experts_per_tok
    keys = {key for part in parts for key in part.rows}
    for key in keys:
        got = [part.rows[key] for part in parts if key in part.rows]
        sums = {f: sum(getattr(r, f) for r in got) for f in ("flops", "cache_read", "cache_write", "act_bytes",
                                                            "stream_bytes", "expert_rows")}
        if key[2] in PER_ROW_WEIGHTS:
            wb = sum(r.weight_bytes for r in got)
        elif sums["expert_rows"]:
            one = max(got, key=lambda r: r.expert_rows)
            wb = one.weight_bytes / routed_touched(int(one.expert_rows), e, k) * \
                routed_touched(int(sums["expert_rows"]), e, k)
        else:
            wb = max(r.weight_bytes for r in got)
        acc.add(*key, weight_bytes=wb, **sums)


def cost(cfg: V41Config, wl: Workload, precision: Precision = RELEASE, as_run: bool = False) -> Cost:
    """Every op's FLOPs and bytes for a workload, summed over its forward steps."""
    check_workload(cfg, wl)
    acc = _Rows()
    for step in calls(cfg, wl, as_run):
        if len(step) == 1:
            _call(cfg, step[0][0], step[0][1], precision, as_run, acc)
            continue
        parts = []
        for c, b in step:
            parts.append(_Rows())
            _call(cfg, c, b, precision, as_run, parts[-1])
        _merge(acc, parts, cfg)
    order = {k: j for j, k in enumerate(KINDS)}

    def place(r: OpRow) -> tuple[int, int, int]:   # the embedding first, then the layers, the head last
        return (0 if r.op == "embedding rows" else 2 if r.layer < 0 else 1, r.layer, order[r.kind])

    rows = sorted(acc.rows.values(), key=place)
    return Cost(workload=wl, precision=precision, as_run=as_run, rows=rows)
