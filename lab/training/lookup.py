"""This project's look-back losses, attached to the model through its `Recorder` hooks (model/arch/context.py).

- the lookup loss (`LookupTarget`, read by `LookupRecorder`): each answer row's attention on the entry of the
  fact its answer repeats, against its rivals, from the `attention` hook; with `select`, the selection loss on the
  index scores the selecting layers hand over when asked (`wants_score_grad`, `index_scores`); with `forcing`,
  readout forcing, which replaces the reading layers' output at those rows (`attention_output`);
- the pool KL (`PoolKLRecorder`): the candidate source's indexer learns the attention every later layer pays its
  entries, summed, instead of its own layer's only (lab/README.md §3); its term replaces that layer's own in
  the indexer loss (`indexer_loss`).
`Recorders` runs several recorders in one forward. The architecture knows none of these types: a forward with no
recorder computes exactly the published model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from model.arch.backbone import ModelOutput
from model.arch.context import CompressedRead, EntryTable, Recorder
from model.arch.indexer import indexer_kl, mask_visible
from model.arch.mhc import Mix
from model.arch.moe import Routing
from model.config import V41Config
from model.layer_map import layer_map


@dataclass
class LookupTarget:
    """Training: answer rows, the earlier position each should read (the fact its answer repeats) and its rivals
    (the other facts of its row), and the attention the layers reading entries of compression `ratio` pay their
    entries, per layer [N, H, 1 + R]. `loss` asks that some head of some such layer reads the source, and that the
    attention those layers give the row's facts goes to the right one (lab/README.md §3, the lookup loss).
    A `LookupRecorder` fills it."""

    batch: torch.Tensor      # [N] row of the batch
    row: torch.Tensor        # [N] the answer row (the position that predicts the answer)
    position: torch.Tensor   # [N] the position whose entry holds the answer
    rivals: torch.Tensor     # [N, R] the positions of the other facts it must be told from (-1: padding)
    ratio: int = 1           # the layers supervised: those reading entries of this ratio
    masses: list[torch.Tensor] = field(default_factory=list)
    select: bool = False     # also keep the index scores the selecting layers of `ratio` give the answer rows
    inside: bool = False     # also rows whose source is in the window: every layer's window share on it counts
    forcing: float = 0.0     # readout forcing: the reading layers' output at these rows mixed this much with the
                             # source entry's value (`force_readout`)
    forced: torch.Tensor | None = None  # [N] bool: the rows forced (None: all); the rest are left to the heads
    every_head: bool = False # the read term asks every supervised head for the source (mean of -log share), not
                             # some head: what the readout trained by the forcing (on every head) expects to get
    scores: list[torch.Tensor] = field(default_factory=list)   # per selecting layer [N, T] (-inf: not visible)

    def loss(self) -> torch.Tensor | None:
        """Mean over the answer rows of -log P(some supervised head reads the source), heads and layers taken as
        independent readers (`every_head`: the mean over those heads of -log its share on the source), plus
        -log(the source's share of the attention on the source and its rivals, summed over heads and layers).
        None when no layer read entries of `ratio`."""
        if not self.masses or not self.batch.numel():
            return None
        m = torch.stack(self.masses, dim=1)                               # [N, L, H, 1 + R]
        p = m[..., 0].flatten(1).clamp(0.0, 1.0 - 1e-6)                  # [N, L*H] on the source
        if self.every_head:
            read = -torch.log(p.clamp_min(1e-8)).mean(-1)
        else:
            miss = torch.log1p(-p).sum(-1)                                # log P(no head reads it)
            read = -torch.log((-torch.expm1(miss)).clamp_min(1e-8))
        total = m.sum(dim=(1, 2))                                         # [N, 1 + R]
        share = (total[:, 0] + 1e-6) / (total.sum(-1) + 1e-6)
        return (read - torch.log(share)).mean()

    def select_loss(self) -> torch.Tensor | None:
        """The selection loss: mean over the answer rows and the selecting layers of the cross entropy of the index
        scores over every visible entry against the source's entry, so that the top-k picks the fact asked for and
        leaves its rivals out. Its gradient reaches the indexers only (they score detached inputs). None when no
        layer selected."""
        if not self.scores or not self.batch.numel():
            return None
        entry = self.position // max(1, self.ratio)
        return torch.stack([torch.nn.functional.cross_entropy(s.float(), entry) for s in self.scores]).mean()


@dataclass
class PoolTarget:
    """The aggregated target of the candidate source's indexer (training, dense): the source's index scores over
    its entries, and the attention every layer reading those entries gave them, summed (lab/README.md §3).
    A `PoolKLRecorder` fills it."""

    table: EntryTable         # the candidate source's entries: only layers reading this table add to `attn`
    scores: torch.Tensor      # [B, S, T] the candidate source's index scores (with grad)
    support: torch.Tensor     # [B, S, T] bool visible entries
    attn: torch.Tensor        # [B, S, T] summed attention of the layers read so far (detached)


def lookup_target(sources: torch.Tensor, window: int, select: bool = False,
                  inside: bool = False, forcing: float = 0.0, forcing_rows: float = 1.0,
                  generator: torch.Generator | None = None, every_head: bool = False) -> LookupTarget | None:
    """The lookup loss's rows: every target with a source (-1: none) further back than the window reaches (one
    inside it needs no entry); its rivals are the other sources of its row before it (the facts it must be told
    from: a drill's other colours, a lookup's other values), the ones holding the same token as its source too.
    `select`: also keep the selecting layers' index scores of those rows (the selection loss). `inside`: the rows
    whose source lies inside the window are asked too, there through every layer's window share on the source
    (an induction head of a wide-window model). `forcing`: the readout forcing's share (`LookupTarget.forcing`),
    applied to each row with probability `forcing_rows` (drawn from `generator`), the same rows in every layer.
    `every_head`: the read term asks every supervised head for the source (`LookupTarget.every_head`)."""
    for name, share in (("readout_forcing", forcing), ("readout_forcing_rows", forcing_rows)):
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"{name} {share}: a share between 0 and 1")
    rows = torch.arange(sources.shape[1], device=sources.device).view(1, -1)
    b, r = torch.nonzero((sources >= 0) & (rows - sources >= (1 if inside else window)), as_tuple=True)
    if not b.numel():
        return None
    pos = sources[b, r]
    rivals = []
    for row, at, own in zip(b.tolist(), r.tolist(), pos.tolist()):
        rivals.append(sorted({s for s in sources[row].tolist() if 0 <= s < at and s != own}))
    width = max(1, max(map(len, rivals)))
    riv = torch.full((len(rivals), width), -1, dtype=torch.long)
    for i, found in enumerate(rivals):
        riv[i, :len(found)] = torch.tensor(found, dtype=torch.long)
    forced = None
    if forcing > 0 and forcing_rows < 1.0:
        forced = (torch.rand(len(rivals), generator=generator) < forcing_rows).to(sources.device)
    return LookupTarget(b, r, pos, riv.to(sources.device), select=select, inside=inside, forcing=forcing,
                        forced=forced, every_head=every_head)


def lookup_mass(probs: torch.Tensor, comp: CompressedRead | None, target: LookupTarget, w: int) -> torch.Tensor:
    """The attention each answer row's heads pay the entries that pack its source and its rivals -> [N, H, 1 + R]
    (with gradient; 0 for a padded rival): dense, those entries' columns; gathered, the picks that are those
    entries (0 for one not selected); none without `comp`. With `target.inside`, plus the window slots that hold
    those positions (slot j is position row - (w - 1) + j; 0 for one the window does not reach)."""
    b, r = target.batch, target.row
    where = torch.cat([target.position.view(-1, 1), target.rivals], dim=1)     # [N, 1 + R]
    real = where >= 0
    heads = probs.shape[2]
    got = probs.new_zeros(where.shape[0], heads, where.shape[1])
    if comp is not None:
        entry = where.clamp_min(0) // max(1, target.ratio)
        pc = probs[b, r, :, w:-1]                                               # [N, H, T or k]
        if comp.dense:
            got = pc.gather(-1, entry.unsqueeze(1).expand(-1, heads, -1))      # [N, H, 1 + R]
        else:
            hit = (comp.idx[b, r].unsqueeze(1) == entry.unsqueeze(2)).to(pc.dtype)  # [N, 1 + R, k]
            got = torch.einsum("nhk,nek->nhe", pc, hit)
    if target.inside:
        slot = w - 1 - (r.view(-1, 1) - where)                                  # [N, 1 + R]
        reach = (slot >= 0) & (slot < w)
        pw = probs[b, r, :, :w].gather(-1, slot.clamp(0, w - 1).unsqueeze(1).expand(-1, heads, -1))
        got = got + pw * reach.unsqueeze(1)
    return got * real.unsqueeze(1)


def force_readout(out: torch.Tensor, comp: CompressedRead, target: LookupTarget) -> torch.Tensor:
    """Training only (readout forcing): each lookup row's output [B, S, H, d], every head, mixed `target.forcing`
    of the way to its source entry's value, what a head wholly on that entry would return. The answer's loss
    then trains what the layer writes from an entry (o projections, the latent) even where the attention does
    not find it yet; the attention itself is left to the lookup loss. Only `target.forced` rows when it is set: the
    others' answers still need the heads, so the model cannot lean on the help everywhere."""
    a = target.forcing
    batch, row, position = target.batch, target.row, target.position
    if target.forced is not None:
        if not bool(target.forced.any()):
            return out
        batch, row, position = batch[target.forced], row[target.forced], position[target.forced]
    source = comp.table.all_entries()[batch, position // max(1, target.ratio)].to(out.dtype)   # [n, d]
    rows = (batch, row)
    return out.index_put(rows, (1 - a) * out[rows] + a * source.unsqueeze(1))


class LookupRecorder(Recorder):
    """The lookup loss's recorder: the attention the supervised layers pay each answer row's source and rivals
    (`LookupTarget.masses`), the selecting layers' scores at those rows when the selection loss is on, and the
    readout forcing of the reading layers' output."""

    def __init__(self, target: LookupTarget):
        self.target = target
        self.ratios: dict[int, int] = {}

    def begin(self, cfg: V41Config, ids: torch.Tensor, positions: torch.Tensor,
              hash_ids: torch.Tensor | None) -> None:
        self.ratios = {s.index: s.compress_ratio for s in layer_map(cfg)}

    def _reads(self, layer: int, comp: CompressedRead | None) -> bool:
        return comp is not None and self.ratios.get(layer) == self.target.ratio

    def attention(self, layer: int, positions: torch.Tensor, probs: torch.Tensor, prev: torch.Tensor | None,
                  comp: CompressedRead | None, window: int) -> None:
        reads = self._reads(layer, comp)
        if reads or self.target.inside:
            self.target.masses.append(lookup_mass(probs, comp if reads else None, self.target, window))

    def attention_output(self, layer: int, out: torch.Tensor, comp: CompressedRead | None) -> torch.Tensor:
        if self.target.forcing > 0 and self._reads(layer, comp):
            return force_readout(out, comp, self.target)
        return out

    def wants_score_grad(self, layer: int) -> bool:
        t = self.target
        return t.select and self.ratios.get(layer) == t.ratio and bool(t.batch.numel())

    def index_scores(self, layer: int, scores: torch.Tensor) -> None:
        self.target.scores.append(scores[self.target.batch, self.target.row])

    def loss(self) -> torch.Tensor | None:
        return self.target.loss()

    def select_loss(self) -> torch.Tensor | None:
        return self.target.select_loss()


class PoolKLRecorder(Recorder):
    """The pool KL's recorder (training, dense compressed attention, with the indexer loss on): at the candidate
    source, its index scores over its entries and its layer's attention on them; at every later layer reading the
    same entries, that layer's attention added (`PoolTarget`)."""

    def __init__(self):
        self.source: int | None = None
        self.ratio = 0
        self.target: PoolTarget | None = None

    def begin(self, cfg: V41Config, ids: torch.Tensor, positions: torch.Tensor,
              hash_ids: torch.Tensor | None) -> None:
        spec = next((s for s in layer_map(cfg) if s.candidate_source), None)
        self.source, self.ratio = (spec.index, spec.compress_ratio) if spec is not None else (None, 0)

    def attention(self, layer: int, positions: torch.Tensor, probs: torch.Tensor, prev: torch.Tensor | None,
                  comp: CompressedRead | None, window: int) -> None:
        if comp is None or not comp.dense:
            return
        attn = probs[..., window:-1].detach().sum(dim=2)              # [B, S, T] summed over heads
        if layer == self.source and comp.kl is not None:
            kl = comp.kl   # the same scores the layer's own KL takes: its indexer on its detached inputs
            scores = kl.indexer.scores(kl.x, kl.q_res, kl.cos, kl.sin, comp.table.all_keys())
            self.target = PoolTarget(comp.table, mask_visible(scores, positions, self.ratio), comp.mask, attn)
        elif self.target is not None and comp.table is self.target.table:
            self.target.attn = self.target.attn + attn               # a later layer reading the source's entries

    def indexer_loss(self, out: ModelOutput) -> torch.Tensor | None:
        """The forward's indexer loss with the candidate source's own term replaced by the pool's (the mean over
        the selecting layers, as `ModelOutput.indexer_loss`); the forward's own when no pool target was made."""
        t = self.target
        if t is None:
            return out.indexer_loss
        terms = [v for k, v in out.indexer_terms.items() if k != self.source]
        return torch.stack(terms + [indexer_kl(t.attn, t.scores, t.support)]).mean()


class Recorders(Recorder):
    """Several recorders in one forward: every hook goes to each, in order; a replaced attention output is handed
    to the next; a layer keeps its scores' gradient when any of them asks, and only those that asked get them."""

    def __init__(self, *parts: Recorder | None):
        self.parts = [p for p in parts if p is not None]

    def begin(self, cfg: V41Config, ids: torch.Tensor, positions: torch.Tensor,
              hash_ids: torch.Tensor | None) -> None:
        for p in self.parts:
            p.begin(cfg, ids, positions, hash_ids)

    def engram(self, layer: int, gate: torch.Tensor, hashes: torch.Tensor, out: torch.Tensor) -> None:
        for p in self.parts:
            p.engram(layer, gate, hashes, out)

    def pool(self, layer: int, candidates: torch.Tensor, block_scores: torch.Tensor) -> None:
        for p in self.parts:
            p.pool(layer, candidates, block_scores)

    def selection(self, layer: int, scores: torch.Tensor, topk: torch.Tensor) -> None:
        for p in self.parts:
            p.selection(layer, scores, topk)

    def latent(self, layer: int, latent: torch.Tensor, g0: int) -> None:
        for p in self.parts:
            p.latent(layer, latent, g0)

    def source_len(self, layer: int, n: int) -> None:
        for p in self.parts:
            p.source_len(layer, n)

    def attention(self, layer: int, positions: torch.Tensor, probs: torch.Tensor, prev: torch.Tensor | None,
                  comp: CompressedRead | None, window: int) -> None:
        for p in self.parts:
            p.attention(layer, positions, probs, prev, comp, window)

    def attention_output(self, layer: int, out: torch.Tensor, comp: CompressedRead | None) -> torch.Tensor:
        for p in self.parts:
            out = p.attention_output(layer, out, comp)
        return out

    def wants_score_grad(self, layer: int) -> bool:
        return any(p.wants_score_grad(layer) for p in self.parts)

    def index_scores(self, layer: int, scores: torch.Tensor) -> None:
        for p in self.parts:
            if p.wants_score_grad(layer):
                p.index_scores(layer, scores)

    def block(self, layer: int, a: Mix, f: Mix, y: torch.Tensor, out: torch.Tensor, routing: Routing,
              new: torch.Tensor) -> None:
        for p in self.parts:
            p.block(layer, a, f, y, out, routing, new)

    def after_layer(self, layer: int, streams: torch.Tensor, pre_mix: torch.Tensor, head) -> None:
        for p in self.parts:
            p.after_layer(layer, streams, pre_mix, head)

    def end(self, hidden: torch.Tensor, logits: torch.Tensor) -> None:
        for p in self.parts:
            p.end(hidden, logits)
