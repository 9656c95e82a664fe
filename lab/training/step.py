"""One optimisation step of the language model: the losses, their gradients, the update and the
balancing rule (docs/design/equations.md §13 training the indexer,
§9 MoE routing and its balancing).

- language-model loss: next-token cross entropy, the look-back answers weighted `answer_weight`;
- the lookup loss (`lookup_weight` > 0): at each answer row whose source lies beyond the training window, the
  decoder's ratio-1 attention is asked to fall on that source's entry (some head of some layer reading it), and
  more on it than on the row's other facts: a signal for the match itself where the answer's loss alone left it
  at random (lab/README.md §3);
- the entry probe (`entry_weight` > 0): a linear read-out, trained with the model, of the object said just
  before each fact's colour, from that colour's decoder entry (the ratio-1 KV source's latent): the lookup loss
  asks the answer row to find the entry of the asked object, and this asks the entry to name it
  (lab/README.md §3);
- the selection loss (`select_weight` > 0): at the same answer rows, the index scores of the layers that select
  ratio-1 entries are asked to put the source's entry first among every visible entry, so that in sparse
  attention the top-k holds the fact asked for and not its rivals; it trains the indexers only (their inputs
  are detached) (lab/README.md §3);
- the indexer's own signal: KL from the main attention's distribution over compressed entries to the
  index scores, with the indexer's inputs detached; dense (every visible entry attended, KL over all
  of them) for the first `dense_warmup_frac` of the steps, then sparse (top-k attended, KL over the
  selected set);
- aux-loss-free balancing: after each step, each MoE's selection bias moves by gamma towards equal
  load (outside gradient descent).
`fast` runs the same maths with compiled kernels (model/fusion.py; bench.train measures it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from model.arch.context import Ablation, Recorder
from model.config import V41Config
from model.fusion import fusable, fused
from model.layer_map import layer_map
from model.model import ModelOutput, V41Model
from model.tokenizer import compressed_token_map

from .lookup import LookupRecorder, PoolKLRecorder, Recorders, lookup_target
from .schedule import TrainConfig, lr_at


def set_window(m: V41Model, window: int) -> None:
    """Narrow the sliding window of every layer to its last `window` rows (training curriculum);
    0 restores the config's. Only a mask changes, never a shape, so compiled kernels are reused."""
    if window > m.cfg.sliding_window:
        raise ValueError(f"a training window of {window} is wider than the config's {m.cfg.sliding_window}")
    for layer in m.layers:
        layer.attn.limit = window or m.cfg.sliding_window


def window_of(m: V41Model) -> int:
    """The window the layers read now (the config's, or what `set_window` narrowed it to)."""
    return min(layer.attn.limit for layer in m.layers)


def freeze_except(m: V41Model, pattern: str) -> int:
    """Train only the parameters whose name matches the regex `pattern` (e.g. the indexers' warm-up with
    everything else frozen: `indexer\\.`); the rest get no gradient and no update. Returns how many
    tensors stay trainable; none matching is an error, not a silent no-op."""
    rx = re.compile(pattern)
    n = 0
    for name, p in m.named_parameters():
        p.requires_grad_(p.requires_grad and bool(rx.search(name)))   # never unfreeze a fixed one
        n += p.requires_grad
    if not n:
        raise ValueError(f"no parameter name matches {pattern!r}")
    return n


def build_model(tc: TrainConfig, tokenizer, cfg: V41Config | None = None) -> V41Model:
    """A freshly initialised model of the run's preset (or `cfg`), its Engram sized to the tokenizer."""
    cfg = cfg or V41Config.preset(tc.preset)
    if tc.config_window:
        cfg = cfg.replace(sliding_window=tc.config_window).validate()
    if cfg.engram_layer_ids:
        _, n = compressed_token_map(tokenizer)
        cfg = cfg.replace(engram_compressed_vocab_size=n).validate()
    torch.manual_seed(tc.seed)
    m = V41Model(cfg).init_weights(tc.seed)
    m.bind_tokenizer(tokenizer)
    return m


def make_optimizer(m: V41Model, tc: TrainConfig, probe: torch.nn.Module | None = None) -> torch.optim.Optimizer:
    """AdamW with weight decay on the matrices only (not the mHC parameters or the embeddings); a training-only
    `probe` (the entry probe's read-out) gets a group of its own, without decay."""
    decay, no_decay = [], []
    for name, p in m.named_parameters():
        if not p.requires_grad:
            continue
        matrix = p.ndim >= 2 and "hc_" not in name and not name.endswith("embed.weight")
        (decay if matrix else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": tc.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if probe is not None:
        groups.append({"params": list(probe.parameters()), "weight_decay": 0.0})
    # foreach: one multi-tensor kernel per AdamW operation instead of a Python loop over ~300 tensors
    return torch.optim.AdamW(groups, lr=tc.lr, betas=(0.9, 0.95), eps=1e-8, foreach=tc.fast)


@fusable
def lm_loss(logits: torch.Tensor, targets: torch.Tensor,
            weights: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Next-token cross entropy -> (the weighted mean that is trained, the plain mean that is reported).
    Fused: no [N, V] gradient buffer filled twice."""
    ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                           reduction="none")
    plain = ce.mean()
    if weights is None:
        return plain, plain
    w = weights.reshape(-1)
    return (ce * w).sum() / w.sum().clamp_min(1e-20), plain


class EntryProbe(torch.nn.Module):
    """Training only, never saved with the model: a linear read-out from a decoder entry (the ratio-1 KV source's
    latent) to the token of the object its fact binds, and the ids that count as objects."""

    def __init__(self, m: V41Model, object_ids: list[int]):
        super().__init__()
        self.layer = self.source_layer(m.cfg)
        self.head = torch.nn.Linear(m.cfg.head_dim, m.cfg.vocab_size)   # -> the object
        self.own = torch.nn.Linear(m.cfg.head_dim, m.cfg.vocab_size)    # -> the entry's own token (its colour)
        self.register_buffer("objects", torch.tensor(sorted(set(object_ids)), dtype=torch.long))

    @staticmethod
    def source_layer(cfg: V41Config) -> int:
        """The decoder's KV source: the layer whose ratio-1 entries the decoder's layers read."""
        return next(s.index for s in layer_map(cfg) if s.makes_entries and s.compress_ratio == 1)

    def targets(self, x: torch.Tensor, sources: torch.Tensor, reach: int = 5
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The entries to read and what they should say: each position some answer reads (a fact's colour, a
        pair's value) whose `reach` tokens before hold an object id, with the nearest such id. Reach 5 spans
        "The key <up to 3 link words> blue" and "put the key deep in the blue"; a colour said before its object
        ("In the blue box there was a key") has none that near and is left out -> (batch, position, object)."""
        b, p = torch.nonzero(torch.zeros_like(x, dtype=torch.bool).scatter_(
            1, sources.clamp_min(0), sources >= 0), as_tuple=True)
        found = torch.full_like(p, -1)
        for back in range(reach, 0, -1):          # the nearest object wins: written last
            at = p - back
            ok = at >= 0
            tok = x[b, at.clamp_min(0)]
            hit = ok & torch.isin(tok, self.objects)
            found = torch.where(hit, tok, found)
        keep = found >= 0
        return b[keep], p[keep], found[keep]


class LatentTap(Recorder):
    """A recorder that keeps one KV source's latents with their gradient (the entry probe's input); it inherits
    the protocol's do-nothing hooks for every other record."""

    def __init__(self, layer: int):
        self.layer, self.got = layer, None

    def latent(self, layer: int, latent: torch.Tensor, g0: int) -> None:
        if layer == self.layer:
            self.got = latent


def entry_loss(probe: EntryProbe, latent: torch.Tensor, x: torch.Tensor, sources: torch.Tensor
               ) -> torch.Tensor | None:
    """Cross entropy of the probe's read-out of each source entry against its object, plus that of a second
    read-out against the entry's own token: an entry is the key and the value at once, and one that names only its
    object stops giving the answer its colour (tried: the lookup then found the colour and the model said the
    object). None when a batch has none."""
    b, p, obj = probe.targets(x, sources)
    if not b.numel():
        return None
    lat = latent[b, p].float()
    ce = torch.nn.functional.cross_entropy
    return ce(probe.head(lat), obj) + ce(probe.own(lat), x[b, p])


@dataclass
class StepLosses:
    """What one forward-backward measured (detached by the caller where logged)."""

    plain: torch.Tensor     # the unweighted LM loss
    indexer_kl: torch.Tensor
    lookup: torch.Tensor    # 0 when off
    entry: torch.Tensor     # 0 when off
    select: torch.Tensor    # 0 when off
    out: ModelOutput        # logits and the routing choices


def forward_backward(m: V41Model, x: torch.Tensor, y: torch.Tensor, tc: TrainConfig, dense: bool,
                     answers: torch.Tensor | None = None, sources: torch.Tensor | None = None,
                     probe: EntryProbe | None = None) -> StepLosses:
    """The loss (LM, its look-back answers weighted by `answer_weight`, + weighted indexer KL, + weighted lookup
    loss, + weighted entry probe, + weighted selection loss) and its gradients, accumulated into the parameters
    (and the probe's)."""
    m.train()
    weights = None
    if answers is not None and tc.answer_weight != 1.0:
        weights = 1.0 + (tc.answer_weight - 1.0) * answers.to(x.device, torch.float32)
    sources = sources.to(x.device) if sources is not None else None
    lookup = None
    if (tc.lookup_weight > 0 or tc.select_weight > 0 or tc.readout_forcing > 0) and sources is not None:
        lookup = lookup_target(sources, window_of(m), select=tc.select_weight > 0, inside=tc.lookup_inside,
                               forcing=tc.readout_forcing, forcing_rows=tc.readout_forcing_rows,
                               every_head=tc.lookup_every_head)
    tap = LatentTap(probe.layer) if tc.entry_weight > 0 and probe is not None and sources is not None else None
    reads = LookupRecorder(lookup) if lookup is not None else None
    pool = PoolKLRecorder() if tc.pool_kl and dense else None
    recorders = [r for r in (tap, reads, pool) if r is not None]
    with fused(tc.fast):
        out = m(x, indexer_loss=True, collect_routing=True, ablation=Ablation(dense_compressed=dense),
                trace=Recorders(*recorders) if recorders else None)
        lm, plain = lm_loss(out.logits, y, weights)
        zero = lm.new_zeros(())
        il = pool.indexer_loss(out) if pool is not None else out.indexer_loss
        il = il if il is not None else zero
        lk = reads.loss() if reads is not None and tc.lookup_weight > 0 else None
        lk = lk if lk is not None else zero
        en = entry_loss(probe, tap.got, x, sources) if tap is not None and tap.got is not None else None
        en = en if en is not None else zero
        sl = reads.select_loss() if reads is not None else None
        sl = sl if sl is not None else zero
        (lm + tc.indexer_weight * il + tc.lookup_weight * lk + tc.entry_weight * en + tc.select_weight * sl).backward()
    return StepLosses(plain, il, lk, en, sl, out)


def train_step(m: V41Model, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor, tc: TrainConfig,
               step: int, answers: torch.Tensor | None = None, sources: torch.Tensor | None = None,
               probe: EntryProbe | None = None) -> dict[str, float]:
    dense = step < int(tc.dense_warmup_frac * tc.steps)
    for g in opt.param_groups:
        g["lr"] = lr_at(tc, step)
    opt.zero_grad(set_to_none=True)
    losses = forward_backward(m, x, y, tc, dense, answers, sources, probe)
    out = losses.out
    gn = torch.nn.utils.clip_grad_norm_([p for p in m.parameters() if p.requires_grad], tc.clip,
                                        foreach=tc.fast)
    if probe is not None:   # clipped on its own: its gradient neither shrinks the model's step nor escapes the clip
        torch.nn.utils.clip_grad_norm_(list(probe.parameters()), tc.clip, foreach=tc.fast)
    opt.step()
    for lid, idx in out.routings:
        # the balancing rule moves a bias outside gradient descent: frozen with the rest under train_only
        if not tc.train_only or re.search(tc.train_only, f"layers.{lid}.ffn.gate.bias"):
            m.layers[lid].ffn.update_bias(idx, tc.bias_gamma)
    rec = {"loss": float(losses.plain.detach()), "indexer_kl": float(losses.indexer_kl.detach()),
           "grad_norm": float(gn), "lr": lr_at(tc, step), "dense": dense}
    if tc.lookup_weight > 0:
        rec["lookup"] = float(losses.lookup.detach())
    if tc.entry_weight > 0:
        rec["entry"] = float(losses.entry.detach())
    if tc.select_weight > 0:
        rec["select"] = float(losses.select.detach())
    return rec
