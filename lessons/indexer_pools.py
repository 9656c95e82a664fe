"""The indexer-pools lesson: a useful entry left outside the candidate pool cannot be chosen.

Follows docs/design/equations.md §6 (hierarchical top-k) and §5 (Reindex layers), using the model's own
selection functions (`model.arch.indexer.candidate_pool`, `select_topk`) on recorded scores.

Two levels, as in the model:
1. The candidate source (the first decoder layer) scores every visible entry, max-pools the scores over
   blocks of `candidate_block_size` entries, pins the block holding the newest visible entry, and keeps the
   top `candidate_topk_blocks` blocks: the pool.
2. Each later Reindex layer scores the entries with its own indexer query and keeps its top `index_topk`,
   but only inside the pool.

What we compare, per Reindex layer and query row (all definitions below are exact, not estimates):
- exhaustive selection E: the layer's top-k over every visible entry (its own, unrestricted scores);
- restricted selection R: the layer's top-k inside the pool (what the model does);
- recall = |R ∩ E| / |E|: the fraction of the exhaustive picks the restricted search still finds;
- dropped entries = E \\ R: exhaustive picks outside the pool (an entry of E inside the pool is always in R);
- indexer mass of the dropped entries: their share of softmax(index scores) over the visible entries, the
  distribution the indexer is trained to match to the attention (docs/design/equations.md §13). Pure, from the scores;
- attention mass of the dropped entries: the share of the layer's attention (mean over heads) that they
  would have received had this one layer read E instead of R. It needs the layer's attention logits for
  entries it never read, which come from one re-computation of the layer's query on the recorded hidden
  states (`reindex_inputs`, "the re-run"). The layers after it are not re-run.

The layer's unrestricted scores are not recorded by the model (its recorded scores are already masked
to the pool), so the re-run recomputes them too; a test checks that masking them to the recorded pool
gives the recorded scores and selection back.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from model.arch import NEG_INF, apply_rope, candidate_pool, collapse, mask_visible, topk_mask
from model.inference import FULL, Trace
from model.quant import fake_latent

from .units import counted

INTRO = (
    "A long prompt leaves many compressed entries to choose from. V4.1 narrows the search in two steps: the "
    "first decoder layer scores every visible entry, for every query, and keeps the best blocks as a candidate "
    "pool; the later Reindex layers choose their entries only inside that pool. A kernel that scored only the "
    "pool could save scoring work there, but this engine, like the Hugging Face port, still scores every visible "
    "entry and then masks to the pool, so no saving is measured here. The cost is the same either way: a useful "
    "entry left outside the pool cannot be chosen by the restricted search. This page measures how often that "
    "happens and how much attention those entries would have received."
)

DEFINITIONS = [
    ("Exhaustive selection", "the layer's own top-k over every visible entry."),
    ("Restricted selection", "its top-k inside the pool: what the model actually reads."),
    ("Recall", "|restricted ∩ exhaustive| / |exhaustive|: 1 means the pool lost nothing for this query."),
    ("Dropped entries", "exhaustive picks outside the pool (any pick inside the pool is also a restricted pick)."),
    ("Indexer mass", "the dropped entries' share of softmax(index scores) over the visible entries: the "
                     "indexer's own estimate of their attention, if the indexer is trained to match attention "
                     "(as V3.2's was, and as our training does). Live from the cached scores."),
    ("Attention mass", "the share of this layer's attention (mean over heads) the dropped entries would get if "
                       "this one layer read the exhaustive selection instead. Needs the layer's attention logits "
                       "for entries it never read: recomputed once per prompt from the recorded hidden states "
                       "(the re-run), then live. Later layers are not re-run."),
]


@dataclass
class LayerInputs:
    """Everything one Reindex layer needs for live re-selection (from one re-run)."""

    layer: int
    scores: torch.Tensor            # [S, T] unrestricted index scores, visibility applied (-inf = not visible)
    would_share: torch.Tensor       # [S, H, T] exp(z) / Z: share each entry would get against the actual
                                    #   denominator Z (equals the recorded share for the entries read)
    recorded_topk: torch.Tensor     # [S, k0] the model's own selection (-1 = none)
    memo: dict = field(default_factory=dict, repr=False)   # k -> exhaustive mask; "probs"; "actual"

    def index_probs(self) -> torch.Tensor:
        """softmax of the index scores over the visible entries (zeros where nothing is visible)."""
        if "probs" not in self.memo:
            self.memo["probs"] = index_softmax(self.scores)
        return self.memo["probs"]

    def exhaustive(self, k: int) -> torch.Tensor:
        if ("exhaustive", k) not in self.memo:   # independent of the pool: computed once per k
            self.memo[("exhaustive", k)] = stable_topk_mask(self.scores, k)
        return self.memo[("exhaustive", k)]

    def actual(self) -> torch.Tensor:
        if "actual" not in self.memo:
            self.memo["actual"] = topk_mask(self.recorded_topk, self.scores.shape[-1])
        return self.memo["actual"]


@dataclass
class PoolInputs:
    positions: torch.Tensor         # [S] query rows the decoder processed
    ratio: int
    candidate_layer: int
    candidate_scores: torch.Tensor  # [S, T] the candidate source's scores (visibility applied)
    block_scores: torch.Tensor      # [S, n_blocks] as recorded at the candidate source
    recorded_pool: torch.Tensor     # [S, T] bool
    layers: dict[int, LayerInputs]
    topk_blocks: int                # the config's values
    block_size: int
    index_topk: int
    memo: dict = field(default_factory=dict, repr=False)   # (blocks, k) -> reselect() result

    @property
    def width(self) -> int:
        return self.candidate_scores.shape[-1]

    def visible(self) -> torch.Tensor:
        return (self.positions + 1) // self.ratio


@torch.no_grad()
def reindex_inputs(model, trace: Trace) -> PoolInputs:
    """The re-run: from a FULL-detail trace, recompute each Reindex layer's unrestricted index scores and
    its attention logits for every visible entry, using the hidden states the trace recorded."""
    cfg = model.cfg
    recs = trace.layers
    cand = next((r for r in recs if r.spec.candidate_source), None)
    if cand is None or cand.index_scores is None:
        raise ValueError("this model has no candidate source layer (or the trace kept no index scores)")
    pos = cand.positions
    dev = model.device
    out: dict[int, LayerInputs] = {}
    for rec in recs:
        spec = rec.spec
        if not spec.uses_candidates:
            continue
        prev = recs[spec.index - 1]
        if prev.streams is None or recs[spec.kv_source].latent is None:
            raise ValueError("the pool lesson needs a trace with detail='full' (recorded streams and latents)")
        if not torch.equal(prev.positions, rec.positions) or not torch.equal(rec.positions, pos):
            raise ValueError(f"layer {spec.index} and its neighbours processed different rows")
        block = model.layer(spec.index)
        att = block.attn
        streams = (rec.engram_out if rec.engram_out is not None else prev.streams).to(dev)
        x = block.attn_norm(collapse(streams, prev.pre_mix.to(dev)))
        p = rec.positions.to(dev)
        cos, sin = model.rotary.cos_sin(p, "compress")
        q_res = att.q_norm(att.wq_a(x))
        # the group's entries and index keys, re-derived from the KV source's latents as the model makes them
        src = model.layer(spec.kv_source).attn
        lat = recs[spec.kv_source].latent.to(dev)
        epos = src.ratio * torch.arange(lat.shape[1], device=dev)
        ecos, esin = model.rotary.cos_sin(epos, "compress")
        keys = src.indexer.keys(lat, ecos, esin)
        entries = fake_latent(apply_rope(lat, ecos, esin))
        scores = mask_visible(att.indexer.scores(x, q_res, cos, sin, keys), p, att.ratio)[0]
        b, s, _ = x.shape
        q = apply_rope(att.wq_b(q_res).view(b, s, att.n_heads, att.head_dim), cos, sin)
        z = torch.einsum("bshd,btd->bsht", q, entries.to(q.dtype)).float()[0] * att.head_dim ** -0.5
        # the actual softmax denominator per head, from the sink: share_sink = exp(sink) / Z
        log_z = att.attn_sink.float().view(1, -1) - torch.log(rec.shares.sink[0].to(dev).float().clamp_min(1e-38))
        vis = torch.isfinite(scores).unsqueeze(1)
        would = torch.where(vis, torch.exp(z - log_z.unsqueeze(-1)), torch.zeros_like(z))
        out[spec.index] = LayerInputs(layer=spec.index, scores=scores.cpu(), would_share=would.cpu(),
                                      recorded_topk=rec.topk[0].clone())
    width = max([cand.index_scores.shape[-1]] + [li.scores.shape[-1] for li in out.values()])
    return PoolInputs(positions=pos.clone(), ratio=cand.spec.compress_ratio, candidate_layer=cand.spec.index,
                      candidate_scores=_pad(cand.index_scores[0], width, NEG_INF), block_scores=cand.block_scores[0],
                      recorded_pool=_pad(cand.candidates[0], width, False), layers=out,
                      topk_blocks=cfg.candidate_topk_blocks, block_size=cfg.candidate_block_size,
                      index_topk=cfg.index_topk)


def _pad(t: torch.Tensor, width: int, value) -> torch.Tensor:
    return torch.nn.functional.pad(t, (0, width - t.shape[-1]), value=value) if t.shape[-1] < width else t


def trace_for_pools(model, ids, mode: str = "exact", progress=None) -> Trace:
    """A FULL-detail trace (streams and latents kept) of a prompt, as `reindex_inputs` needs."""
    ids = torch.as_tensor([list(ids)]) if not isinstance(ids, torch.Tensor) else ids
    chunk = None if mode == "exact" else 512
    return model.trace(ids, detail=FULL, mode=mode, lens=False, chunk_size=chunk, progress=progress)


# --------------------------------------------------------------------------------------------------
# Live re-selection (pure)
# --------------------------------------------------------------------------------------------------

def pool_mask(candidate_scores: torch.Tensor, positions: torch.Tensor, ratio: int, topk_blocks: int,
              block_size: int) -> torch.Tensor:
    """[S, T] scores -> [S, T] pool (the model's own level-1 function)."""
    keep, _ = candidate_pool(candidate_scores.unsqueeze(0), positions, ratio, topk_blocks, block_size)
    return keep[0]


def stable_topk_mask(scores: torch.Tensor, k: int) -> torch.Tensor:
    """[..., T] -> bool mask of the same entries `model.arch.indexer.select_topk` picks (top k, equal scores to the
    lower index, -inf never), without its full stable sort: everything above the k-th largest value, then the
    lowest-index entries equal to it until k are taken. A test checks it against select_topk."""
    k = min(int(k), scores.shape[-1])
    if k <= 0:
        return torch.zeros_like(scores, dtype=torch.bool)
    kth = scores.topk(k, dim=-1).values[..., -1:]
    above = scores > kth
    tied = scores == kth
    need = k - above.sum(-1, keepdim=True)
    out = above | tied
    over = (tied.sum(-1, keepdim=True) > need).squeeze(-1)      # rows with more ties than places left
    if bool(over.any()):
        t = tied[over]
        out[over] = above[over] | (t & (t.cumsum(-1) <= need[over]))
    return out & (scores > NEG_INF)


def selections(scores: torch.Tensor, pool: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(restricted [S, T] bool, exhaustive [S, T] bool) top-k masks."""
    return stable_topk_mask(scores.masked_fill(~pool, NEG_INF), k), stable_topk_mask(scores, k)


def recall(restricted: torch.Tensor, exhaustive: torch.Tensor) -> torch.Tensor:
    """[S] |R ∩ E| / |E| (NaN where E is empty: nothing visible yet)."""
    n = exhaustive.sum(-1).float()
    hit = (restricted & exhaustive).sum(-1).float()
    return torch.where(n > 0, hit / n.clamp_min(1), torch.full_like(n, float("nan")))


def index_softmax(scores: torch.Tensor) -> torch.Tensor:
    """softmax over the visible entries (-inf = not visible); rows that see nothing are all zeros."""
    vis = torch.isfinite(scores)
    p = torch.softmax(scores.masked_fill(~vis, NEG_INF).float(), -1)
    return torch.where(vis.any(-1, keepdim=True), p, torch.zeros_like(p))


def indexer_mass(scores: torch.Tensor, chosen: torch.Tensor, probs: torch.Tensor | None = None) -> torch.Tensor:
    """[S] share of softmax(scores over the visible entries) that falls on `chosen` (0 where nothing visible)."""
    p = index_softmax(scores) if probs is None else probs
    return torch.bmm(p.unsqueeze(1), chosen.to(p.dtype).unsqueeze(-1)).view(-1)


def attention_mass(would_share: torch.Tensor, actual: torch.Tensor, counterfactual: torch.Tensor,
                   dropped: torch.Tensor) -> torch.Tensor:
    """[S] mean over heads of the share `dropped` entries get when the layer reads `counterfactual` instead of
    the `actual` selection: sum_dropped a / (1 - sum_actual a + sum_counterfactual a), a = exp(z) / Z."""
    masks = torch.stack([actual, counterfactual, dropped], -1).to(would_share.dtype)   # [S, T, 3]
    s_act, s_cf, s_drop = torch.bmm(would_share, masks).float().unbind(-1)              # [S, H] each
    return (s_drop / (1.0 - s_act + s_cf).clamp_min(1e-12)).mean(-1)


@dataclass
class LayerResult:
    layer: int
    pool: torch.Tensor              # [S, T]
    restricted: torch.Tensor        # [S, T]
    exhaustive: torch.Tensor        # [S, T]
    dropped: torch.Tensor           # [S, T]
    recall: torch.Tensor            # [S]
    indexer_mass: torch.Tensor      # [S]
    attention_mass: torch.Tensor    # [S]
    matches_model: bool             # at the config's pool and k, the recomputed selection equals the recorded one


def reselect(inp: PoolInputs, topk_blocks: int | None = None, k: int | None = None) -> dict[int, LayerResult]:
    """Re-run the two-level selection on the cached scores for a pool of `topk_blocks` blocks and top-`k`."""
    nb = inp.topk_blocks if topk_blocks is None else int(topk_blocks)
    k = inp.index_topk if k is None else int(k)
    if nb < 1 or k < 1:
        raise ValueError("pool size and k must be at least 1")
    if (nb, k) in inp.memo:      # a slider position seen before (inputs are read-only, results too)
        return inp.memo[(nb, k)]
    pool = pool_mask(inp.candidate_scores, inp.positions, inp.ratio, nb, inp.block_size)
    out = {}
    for lid, li in inp.layers.items():
        w = li.scores.shape[-1]
        pl = pool[:, :w]
        r = stable_topk_mask(li.scores.masked_fill(~pl, NEG_INF), k)
        e = li.exhaustive(k)
        dropped = e & ~r
        actual = li.actual()
        matches = True
        if nb == inp.topk_blocks and k == inp.index_topk:
            matches = bool(torch.equal(r, actual))
        out[lid] = LayerResult(layer=lid, pool=pl, restricted=r, exhaustive=e, dropped=dropped, recall=recall(r, e),
                               indexer_mass=indexer_mass(li.scores, dropped, li.index_probs()),
                               attention_mass=attention_mass(li.would_share, actual, e, dropped), matches_model=matches)
    if len(inp.memo) > 32:
        inp.memo.clear()
    inp.memo[(nb, k)] = out
    return out


def summary_rows(inp: PoolInputs, results: dict[int, LayerResult], one_based: bool = False) -> list[dict]:
    """One table row per Reindex layer: averages over the query rows whose visible entries exceed the pool."""
    vis = inp.visible()
    rows = []
    for lid, res in results.items():
        pool_n = res.pool.sum(-1)
        tight = vis > pool_n           # rows where the pool actually excludes something
        sel = tight if bool(tight.any()) else torch.ones_like(tight)
        rec = res.recall[sel]
        rows.append({
            "layer": lid + 1 if one_based else lid,
            "query rows": int(len(vis)),
            "rows where the pool excludes entries": int(tight.sum()),
            "mean recall": float(torch.nanmean(rec)) if rec.numel() else float("nan"),
            "rows with recall < 1": int((res.recall[sel] < 1).sum()),
            "mean dropped entries": float(res.dropped[sel].sum(-1).float().mean()),
            "mean indexer mass dropped": float(res.indexer_mass[sel].mean()),
            "mean attention mass dropped": float(res.attention_mass[sel].mean()),
            "max attention mass dropped": float(res.attention_mass[sel].max()),
        })
    return rows


@dataclass
class RowDetail:
    position: int
    visible: int
    blocks: list[float]             # block scores (-inf as NaN) of the visible blocks
    kept_blocks: list[int]
    pinned_block: int
    pool: list[int]
    restricted: list[int]
    exhaustive: list[int]
    dropped: list[int]
    recall: float
    indexer_mass: float
    attention_mass: float


def row_detail(inp: PoolInputs, res: LayerResult, row: int) -> RowDetail:
    vis = int(inp.visible()[row])
    bs = inp.block_scores[row]
    n_vis_blocks = (vis + inp.block_size - 1) // inp.block_size
    pool = res.pool[row, :vis]
    kept = sorted({int(e) // inp.block_size for e in pool.nonzero().flatten().tolist()})
    as_list = lambda m: m[row, :vis].nonzero().flatten().tolist()  # noqa: E731
    return RowDetail(position=int(inp.positions[row]), visible=vis,
                     blocks=[float(v) if np.isfinite(float(v)) else float("nan") for v in bs[:n_vis_blocks].tolist()],
                     kept_blocks=kept, pinned_block=(vis - 1) // inp.block_size if vis else -1,
                     pool=pool.nonzero().flatten().tolist(), restricted=as_list(res.restricted),
                     exhaustive=as_list(res.exhaustive), dropped=as_list(res.dropped), recall=float(res.recall[row]),
                     indexer_mass=float(res.indexer_mass[row]), attention_mass=float(res.attention_mass[row]))


def scale_note(cfg, release, blocks: int | None = None, topk: int | None = None, chosen: bool = True) -> str:
    """Whose pool the statistics describe: the running model's at the sizes in use (`blocks`, `topk`; None: as
    configured; `chosen`: the reader moved the sliders, else the sizes are the most a short prompt allows), not the
    release's (both from their configs)."""
    pool = cfg.candidate_topk_blocks * cfg.candidate_block_size
    rel = release.candidate_topk_blocks * release.candidate_block_size
    blocks = cfg.candidate_topk_blocks if blocks is None else blocks
    topk = cfg.index_topk if topk is None else topk
    if (blocks, topk) == (cfg.candidate_topk_blocks, cfg.index_topk):
        whose = f"the running model's pool ({pool:,} entries, top-{cfg.index_topk} inside it)"
    else:
        where = "the sizes chosen above" if chosen else "the most this prompt's entries allow"
        whose = (f"the running model's scores re-selected at {where} ({counted(blocks, 'block')} x "
                 f"{cfg.candidate_block_size} = {blocks * cfg.candidate_block_size:,} entries, top-{topk} inside "
                 f"it; as configured: {pool:,} entries, top-{cfg.index_topk})")
    return (f"These statistics come from {whose}, not from the release's pool ({rel:,} entries, "
            f"top-{release.index_topk}). How often the release's pool drops a useful entry depends on its own sizes, "
            "prompts and weights, and is not measured here.")


# ---- the page's other texts ------------------------------------------------------------------------------------------
NO_POOL = "This model has no candidate pool (no candidate source followed by Reindex layers)."
LIMIT_WHY = "this page, which keeps attention logits for every Reindex layer,"    # what the prompt limit is for
HOW_COMPUTED = ("Live (pure, from the cached index scores): pool, selections, recall, indexer mass. From the re-run "
                "(each Reindex layer's attention logits recomputed once per prompt on the recorded hidden states): "
                "attention mass. Hidden states of later layers are those of the real run at the configured sizes.")
DROPPED_INTRO = "Entries the exhaustive search picked that the pool left out:"
NOTHING_DROPPED = "Nothing dropped for this query: every exhaustive pick lies inside the pool."


def mode_help(window: int) -> str:
    return f"Exact: every prompt token is a query of the decoder. Bounded: only the last {window} prompt tokens are."


def run_caption(n_tokens: int, inp: PoolInputs, mode: str, cfg) -> str:
    """The prompt, the decoder's group and the model's pool, in one line."""
    pool = cfg.candidate_topk_blocks * cfg.candidate_block_size
    return (f"{n_tokens:,} prompt tokens; {inp.width:,} ratio-{inp.ratio} entries in the decoder's group; "
            f"{len(inp.positions)} query rows ({mode} prefill). The model's pool: {cfg.candidate_topk_blocks} blocks "
            f"x {cfg.candidate_block_size} = {pool} entries; top-{cfg.index_topk} inside it.")


def short_prompt(width: int) -> str:
    """A prompt whose entries all fit in the model's pool."""
    return (f"This prompt has only {width} entries, so the model's pool holds all of them and nothing can be "
            "dropped at the configured size. Pick a long prompt, or shrink the pool below.")


def matches_model(same: bool) -> str:
    """At the configured sizes: whether the recomputed selection is the model's own."""
    return ("At the configured sizes the recomputed restricted selection " +
            ("equals the model's own selection in every row." if same else
             "differs from the model's own in some rows (ties in the scores)."))


def strip_caption(layer: int) -> str:
    return f"Layer {layer}: pool, choices and dropped entries, one row per stage."
