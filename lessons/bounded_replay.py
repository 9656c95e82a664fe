"""Bounded replay: a persistent cache stores the decoder's window rows, or leaves them out and recomputes them from
the last rows when the context comes back. The bytes against the work (`replay_tradeoff`), and the texts of the cache
calculator's replay tab.

docs/design/architecture.md §3.1 (bounded prefill) and §3.4 (the persistent prefix cache); the stores are the cache
calculator's (lessons/cache_calculator.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from model import V41Config, layer_map

from .cache_calculator import CalcError, Design, Knobs, validate_knobs, windows_persist
from .units import counted, human_bytes, human_flops


@dataclass
class ReplayTradeoff:
    rows_replayed: int
    stored_bytes: int            # decoder window state kept per saved context
    flops_per_reuse: float       # work to rebuild it by replaying the last rows
    input_bytes: int             # the replay's input rows, as our engine's prefix cache keeps them
    derivation: list[tuple[str, str, float, str]]   # (item, formula, value, shown)
    by_reuse: list[tuple[int, float, int]]      # (reuses, total replay FLOPs, bytes read back if stored)

    @property
    def flops_per_byte(self) -> float:
        return self.flops_per_reuse / self.stored_bytes if self.stored_bytes else math.inf

    @property
    def net_bytes(self) -> int:
        """Bytes replay keeps beyond what storing the windows would: input kept minus windows not kept."""
        return self.input_bytes - self.stored_bytes

    @property
    def window_bytes_per_row(self) -> float:
        """The most a replay input may take per replayed row for replay to save storage."""
        return self.stored_bytes / self.rows_replayed if self.rows_replayed else math.inf

    @property
    def input_bytes_per_row(self) -> float:
        return self.input_bytes / self.rows_replayed if self.rows_replayed else 0.0


@dataclass(frozen=True)
class DecoderScans:
    """The decoder's index scans during a replay: `broad` layers score every visible entry (the candidate source),
    `pooled` layers only the candidate pool of `pool` entries (Reindex, with a pool-restricted kernel)."""

    heads: int
    dim: int
    broad: int
    pooled: int
    pool: int


def decoder_scans(cfg: V41Config) -> DecoderScans:
    """The scans of a V4.1 config's decoder layers, from its layer map."""
    dec = [s for s in layer_map(cfg) if s.index >= cfg.decoder_start and s.selects]
    pooled = sum(1 for s in dec if s.searches_pool)
    return DecoderScans(cfg.index_n_heads, cfg.index_head_dim, len(dec) - pooled, pooled,
                        cfg.candidate_topk_blocks * cfg.candidate_block_size)


def replay_tradeoff(d: Design, knobs: Knobs, active_per_layer: list[int], heads: int, head_dim: int,
                    topk: int, input_numbers: int = 0,
                    reuses: tuple[int, ...] = (1, 10, 100, 1000), scans: DecoderScans | None = None,
                    weights_read: float = 0.0) -> ReplayTradeoff:
    """Bytes of the decoder's window rows (what bounded replay does not keep) vs the work of replaying the last
    `knobs.replay` rows through the decoder layers: 2 x active parameters per row (multiply-adds), plus
    attention: 2 matmuls x 2 FLOPs x heads x head_dim x keys read (window + selected entries), plus, with `scans`,
    the indexer's scans: 2 FLOPs x index heads x index dims x entries scored, per row, a broad scan over every entry
    the row sees and a pool scan over at most the pool (an engine that scores every entry at every selecting layer,
    as ours does, is also shown). `input_numbers` is the width of one decoder input row (mHC streams + pre mix)
    that the replay starts from. `weights_read`: the bytes of weights one replay reads on its own
    (lessons.cost.replay_weight_bytes), shown beside the work: a replay alone waits on them, not on its FLOPs."""
    if not d.has_replay:
        raise CalcError(f"{d.label} has no bounded replay: it keeps every window")
    validate_knobs(knobs)
    r = knobs.replay
    dec = set(d.decoder_layers)
    stored, parts = 0, []
    for s in d.stores:
        n_dec = sum(1 for i in s.layers if i in dec)
        if s.kind == "window" and s.in_engine and n_dec:
            rows = s.cap or r        # a window holds its rows whatever the replay length
            stored += n_dec * rows * s.entry_bytes()
            parts.append(f"{counted(n_dec, 'layer')} x {counted(rows, 'row')} x {s.entry_bytes()} B")
    params = sum(active_per_layer[i] for i in sorted(dec))
    mm = 2.0 * params * r
    keys = min(r, knobs.window) + topk
    att = 4.0 * heads * head_dim * keys * len(dec) * r
    der = [
        ("window rows kept (decoder)", " + ".join(parts) or "none", float(stored), human_bytes(stored)),
        ("matmul work", f"2 x {params:,} active parameters in the decoder x {counted(r, 'row')}", mm, human_flops(mm)),
        ("attention work", f"4 x {heads} heads x {head_dim} dims x ({min(r, knobs.window)} window + {topk} selected) "
                           f"keys x {counted(len(dec), 'layer')} x {counted(r, 'row')}", att, human_flops(att)),
    ]
    work = mm + att
    if scans is not None and scans.heads:
        # the replayed rows are the context's last r: the row at position t sees t + 1 entries (ratio 1)
        first = max(0, knobs.context - r)
        seen = sum(t + 1 for t in range(first, knobs.context))
        pooled = sum(min(t + 1, scans.pool) for t in range(first, knobs.context))
        per = 2.0 * scans.heads * scans.dim
        scan = per * (scans.broad * seen + scans.pooled * pooled)
        engine = per * (scans.broad + scans.pooled) * seen
        der.append(("indexer scan work", f"2 x {scans.heads} heads x {scans.dim} dims x ({scans.broad} broad "
                    f"{'scan' if scans.broad == 1 else 'scans'} over up to {knobs.context:,} entries + "
                    f"{scans.pooled} pool scans over up to {scans.pool:,}) per row, {counted(r, 'row')}; an engine "
                    f"that scores every entry at all {scans.broad + scans.pooled} selecting layers, as ours does, "
                    f"spends {human_flops(engine)}", scan, human_flops(scan)))
        work += scan
    der.append(("work per reuse", "matmul + attention" + (" + indexer scan" if work > mm + att else ""), work,
                human_flops(work)))
    if weights_read:
        der.append(("weights read (one replay alone, release precision)",
                    f"the decoder layers' dense weights, the routed experts {counted(r, 'row')} reach (uniform "
                    "routing) and the head; batching many replays shares these reads", float(weights_read),
                    f"{weights_read / 1e9:,.1f} GB"))
    inp = r * input_numbers * 4
    if input_numbers:
        der.append(("replay input kept by our engine",
                    f"{counted(r, 'row')} x {input_numbers:,} numbers (streams + pre) x 32 bits / 8", float(inp),
                    human_bytes(inp)))
    return ReplayTradeoff(rows_replayed=r, stored_bytes=stored, flops_per_reuse=work, input_bytes=inp, derivation=der,
                          by_reuse=[(k, k * work, k * stored) for k in reuses])


REPLAY_TEXT = (
    "Each V4.1 layer keeps its own window of recent raw rows. A persistent cache that lets a server pick up a "
    "saved context later can either **store** the decoder's window rows with the shared latents, or leave them "
    "out and **recompute** them when the context comes back, by running the decoder over the last few rows again "
    "(bounded replay). Recomputing spends arithmetic to save storage and transfer, but only if what the replay "
    "starts from is smaller than what it rebuilds.\n\nOur engine starts the replay from the decoder's input rows for "
    "that stretch (every mHC stream plus the pre mix, in fp32), and its prefix cache keeps them: the persistent "
    "figure above counts them whenever the windows are not kept. The replay is also an approximation: it rebuilds "
    "the windows from a short recent stretch, not from the whole history."
)


def replay_verdict(tr: ReplayTradeoff) -> str:
    """What the engine's replay saves or costs in bytes, and what a cheaper replay input would need."""
    if tr.net_bytes > 0:
        net = (f"In our engine replay does not save storage: the input it keeps ({human_bytes(tr.input_bytes)}) is "
               f"{human_bytes(tr.net_bytes)} more than the windows it leaves out ({human_bytes(tr.stored_bytes)}).")
    else:
        net = (f"Here replay saves {human_bytes(-tr.net_bytes)}: its input ({human_bytes(tr.input_bytes)}) is smaller "
               f"than the windows it leaves out ({human_bytes(tr.stored_bytes)}).")
    return (net + f" For replay to pay in bytes, its input must take fewer than {tr.window_bytes_per_row:,.0f} B per "
            f"replayed row (the windows' bytes per row); our engine keeps {tr.input_bytes_per_row:,.0f} B per row, and "
            f"even in 16 bits the same streams would take {tr.input_bytes_per_row / 2:,.0f} B. How the release stores "
            "its replay input is not described in our sources (our inference: it must be far smaller than ours for "
            "the trade to favour recomputation).")


PERSIST_WINDOWS_HELP = ("Off, with bounded prefill: the persistent cache keeps the replay input and bounded replay "
                        "recomputes the decoder's windows. Exact prefill always keeps the windows.")


def no_replay(label: str) -> str:
    """What the replay tab says for a design without bounded replay (`label`: the design's)."""
    return (f"{label} has no bounded replay, so there is nothing to trade here: pick DeepSeek-V4.1-Flash as the design "
            "to see it.")


def persistent_holds(persistent_bytes: int, knobs: Knobs, keep_windows: bool) -> str:
    """Which of the two the persistent figure holds in this mode: the decoder's windows or the replay input."""
    kept = "the decoder's windows" if windows_persist(knobs, keep_windows) else "the replay input"
    return (f"The persistent figure above ({human_bytes(persistent_bytes)}) holds {kept} in this mode "
            f"({knobs.mode} prefill{', windows kept' if keep_windows else ''}).")


def reuse_sentence(tr: ReplayTradeoff, weights_read: float) -> str:
    """The trade at the reader's number of reuses (the last of `tr.by_reuse`), with the weights one replay reads."""
    k, total, read = tr.by_reuse[-1]
    return (f"Reused **{counted(k, 'time')}**, replay spends **{human_flops(total)}** in all; storing the "
            f"windows keeps **{human_bytes(tr.stored_bytes)}** for as long as the context is kept and reads it "
            f"back {counted(k, 'time')} ({human_bytes(read)} moved). A replay run alone also reads "
            f"**{weights_read / 1e9:,.1f} GB** of weights. Which side wins depends on the hardware, "
            "on how long and how often the context is kept, and on the size of the replay input, so the page "
            "gives the numbers rather than a verdict on time.")
