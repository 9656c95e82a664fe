"""The core mechanism of compressed sparse attention as one stepped picture, read off a real trace.

For one query (by default the last prompt token) it follows docs/design/equations.md §3-§6 in the order a
compressed layer works: tokens are packed into compressed entries (an entry e at ratio r packs tokens
[e*r, (e+1)*r); only complete entries exist), the Full layer's indexer scores every entry the query can see,
the candidate source keeps the best blocks of entries as a pool, a selecting layer keeps its top-k, and the
layers after it read: the Full layer its own picks, a Reuse layer the very picks of the layer it copies, a
Reindex layer picks of its own, chosen inside the pool. Every number comes from the trace's records (entry
counts, index scores, pool, top-k, attention shares); nothing is recomputed. The picture is drawn by
ui/mechanism.py; this module knows nothing of Plotly or Streamlit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class Group:
    """The entries one Full layer makes: its ratio and how many are complete at the query."""

    layer: int
    ratio: int
    entries: int                 # complete entries visible to the query: (query + 1) // ratio


@dataclass
class Read:
    """What one compressed layer reads at the query."""

    layer: int
    role: str                    # "Full" | "Reuse" | "Reindex"
    source: int                  # the layer whose top-k it reads (itself when it selects)
    entries: list[int]           # entry ids read, in the order the trace lists them
    shares: list[float]          # attention share (mean over heads) on each of them
    in_pool: bool                # its picks were chosen inside the candidate pool
    same_as: int | None = None   # for a Reuse layer: the source whose picks it read, when they are identical

    @property
    def total(self) -> float:
        """The share of the layer's attention that went to compressed entries at all."""
        return sum(self.shares)


@dataclass
class Step:
    title: str
    sentence: str


@dataclass
class MechanismPicture:
    """Everything the stepped picture needs, for one query of one trace."""

    n_tokens: int
    query: int                   # the query's position
    groups: list[Group]          # one per Full layer, coarsest ratio first
    scorer: int                  # the Full layer whose index scores, pool and top-k are drawn
    ratio: int                   # its compress ratio
    scores: list[float | None]   # per entry of its group: index score at the query (None: not visible)
    pool: list[int] | None       # entries in the candidate pool (None: this group has no pool)
    pool_blocks: int             # blocks kept
    block_size: int
    k: int                       # entries a selecting layer keeps
    topk: list[int]              # the scorer's picks
    reads: list[Read]            # the scorer (Full), then one Reuse and one Reindex layer of its group
    steps: list[Step] = field(default_factory=list)

    def read(self, role: str) -> Read | None:
        return next((r for r in self.reads if r.role == role), None)


def _entries_at(rec, row: int) -> tuple[list[int], list[float]]:
    sh = rec.shares
    ids = [int(e) for e in sh.entry_ids[0, row].tolist()]
    mean = sh.entries[0, row].float().mean(0).tolist()          # [k] mean over heads
    keep = [(e, float(s)) for e, s in zip(ids, mean) if e >= 0]
    return [e for e, _ in keep], [s for _, s in keep]


def _picks(rec, row: int) -> list[int]:
    return [int(e) for e in rec.topk[0, row].tolist() if e >= 0]


def mechanism_picture(trace, block_size: int, query: int | None = None, num=lambda i: i) -> MechanismPicture | None:
    """The picture for `query` (default: the last traced position) in a trace of a model whose pool is made of
    blocks of `block_size` entries (its config's candidate_block_size); None when the model has no
    compressed layer that selects. The scoring steps are drawn for the group that has a candidate pool when
    there is one (its Full layer is the candidate source), else the finest-ratio group. `num` maps a 0-based
    layer to the reader's numbering (for the sentences only)."""
    layers = trace.layers
    n = int(trace.positions.max()) + 1 if len(trace.positions) else 0
    q = n - 1 if query is None else int(query)
    fulls = [rec for rec in layers if rec.spec.role == "Full" and rec.index_scores is not None
             and rec.row(q) is not None]
    if not fulls:
        return None
    groups = [Group(rec.spec.index, rec.spec.compress_ratio, (q + 1) // rec.spec.compress_ratio)
              for rec in sorted(fulls, key=lambda r: (-r.spec.compress_ratio, r.spec.index))]
    scorer = next((r for r in fulls if r.spec.candidate_source and r.candidates is not None),
                  min(fulls, key=lambda r: (r.spec.compress_ratio, r.spec.index)))
    s = scorer.spec
    row = scorer.row(q)
    width = (q + 1) // s.compress_ratio
    sc = scorer.index_scores[0, row, :width].float()
    scores = [float(x) if torch.isfinite(x) else None for x in sc]
    pool = None
    if scorer.candidates is not None:
        mask = scorer.candidates[0, row, :width]
        pool = [int(e) for e in mask.nonzero().flatten().tolist()]
    block = max(1, int(block_size))
    topk = _picks(scorer, row)
    pool_set = set(pool or [])

    def read_of(rec) -> Read:
        r = rec.row(q)
        ids, shares = _entries_at(rec, r)
        src = rec.spec.index_source
        same = None
        if rec.spec.role == "Reuse" and src is not None and layers[src].topk is not None:
            sr = layers[src].row(q)
            if sr is not None and sorted(_picks(layers[src], sr)) == sorted(ids):
                same = src
        return Read(layer=rec.spec.index, role=rec.spec.role, source=src if src is not None else rec.spec.index,
                    entries=ids, shares=shares, in_pool=bool(pool_set) and rec.spec.uses_candidates, same_as=same)

    group = [rec for rec in layers if rec.spec.kv_source == s.index and rec.shares is not None
             and rec.row(q) is not None]
    reads = [read_of(scorer)]
    reuse = next((rec for rec in group if rec.spec.role == "Reuse" and rec.spec.index_source == s.index), None)
    reindex = next((rec for rec in group if rec.spec.role == "Reindex" and rec.topk is not None), None)
    reads += [read_of(rec) for rec in (reuse, reindex) if rec is not None]
    pic = MechanismPicture(n_tokens=n, query=q, groups=groups, scorer=s.index, ratio=s.compress_ratio,
                           scores=scores, pool=pool, pool_blocks=len({e // block for e in pool or []}),
                           block_size=block, k=len(topk), topk=topk, reads=reads)
    pic.steps = steps(pic, num)
    return pic


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%" if x >= 0.01 or x == 0 else "under 1%"


def steps(pic: MechanismPicture, num=lambda i: i) -> list[Step]:
    """One sentence per step of the picture, each carrying that step's numbers."""
    L = lambda i: f"layer {num(i)}"   # noqa: E731
    packs = "; ".join(f"{L(g.layer)} (ratio {g.ratio}) packs {'every token into its own entry' if g.ratio == 1 else f'each {g.ratio} tokens into one entry'}: {g.entries:,} entries"  # noqa: E501
                      for g in pic.groups)
    visible = sum(x is not None for x in pic.scores)
    out = [
        Step("Tokens", f"The prompt has {pic.n_tokens:,} tokens; the query is the token at position {pic.query}, "
                       "the one predicting the next word."),
        Step("Entries", f"Full layers pack tokens into compressed entries: {packs}. An entry exists once its "
                        "last token has arrived."),
        Step("Index scores", f"{L(pic.scorer).capitalize()}'s indexer scores all {visible:,} entries the query "
                             "can see: one number per entry, from a small index key, not full attention."),
    ]
    if pic.pool is not None:
        out.append(Step("Pool", f"From the same scores it keeps {pic.pool_blocks} blocks of up to {pic.block_size} "
                                "entries (the best-scoring blocks, the newest always among them) as a candidate "
                                f"pool: {len(pic.pool)} of {visible:,} entries. Reindex layers after it choose only "
                                "from these."))
    full = pic.read("Full")
    share = "" if full is None else f"; they get {_pct(full.total)} of its attention"
    if pic.k >= visible:
        out.append(Step("Top-k", f"Only {visible} entries are visible, no more than a top-k holds, so "
                                 f"{L(pic.scorer)} keeps them all{share}: a longer prompt makes it choose."))
    else:
        out.append(Step("Top-k", f"{L(pic.scorer).capitalize()} keeps its {pic.k} highest-scoring entries of all "
                                 f"{visible:,}, pool or not: the top-k it reads{share}."))
    parts = []
    for r in pic.reads:
        if r.role == "Full":
            parts.append(f"Full {L(r.layer)} reads its own {len(r.entries)} picks ({_pct(r.total)} of its attention)")
        elif r.role == "Reuse":
            how = (f"the same {len(r.entries)} entries {L(r.source)} picked" if r.same_as is not None else
                   f"{L(r.source)}'s picks")
            parts.append(f"Reuse {L(r.layer)} reads {how}, scoring nothing ({_pct(r.total)})")
        else:
            full_set = set(pic.topk)
            new = sum(e not in full_set for e in r.entries)
            where = "inside the pool" if r.in_pool else "again"
            parts.append(f"Reindex {L(r.layer)} scores again {where} and picks {len(r.entries)}, {new} of them "
                         f"not in {L(pic.scorer)}'s ({_pct(r.total)})")
    out.append(Step("Reads", "; ".join(parts) + "."))
    return out


def entry_of(position: int, ratio: int) -> int:
    """The entry (at `ratio`) that packs a token position."""
    return position // ratio
