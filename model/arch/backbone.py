"""The text backbone of DeepSeek-V4.1-Flash: embed, hash, run the layers, collapse, project.

Follows docs/design/architecture.md §2 and §4 and docs/design/equations.md §3-10. The forward embeds the ids into
`hc_mult` identical streams, hashes the n-grams for the Engram layers once, runs the layers with a one-hot initial
`pre`, collapses with the last FFN site's `pre`, normalises and projects to logits.

The same code serves three callers: a one-shot forward (training, parity), a forward through a
cache (chunked prefill and decode, model/inference/engine.py) and a traced forward
(model/inference/trace.py); the cache and the recorder come in as arguments.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..config import V41Config
from ..errors import InputError
from ..layer_map import layer_map
from .block import Block
from .context import Ablation, Context, LayerCache, LayerSource, Recorder
from .engram import NgramHasher
from .mhc import collapse, one_hot_pre
from .norm import RMSNorm
from .rope import RopeTables, Rotary


@dataclass
class ModelOutput:
    logits: torch.Tensor                       # [B, S or 1, V]
    hidden: torch.Tensor | None = None         # final normed hidden [B, S, D]
    indexer_loss: torch.Tensor | None = None   # mean KL of the index sources (training)
    indexer_terms: dict[int, torch.Tensor] = field(default_factory=dict)   # selecting layer -> its KL term
    taps: dict[int, torch.Tensor] = field(default_factory=dict)
    routings: list = field(default_factory=list)  # (layer, chosen experts) when collect_routing


@dataclass
class Segment:
    """Rows after a segment of layers: what the next segment starts from."""

    streams: torch.Tensor                      # [B, S, n, D] residual streams
    pre_mix: torch.Tensor                      # [B, S, n] the last FFN site's pre
    taps: dict[int, torch.Tensor] = field(default_factory=dict)


class Backbone(torch.nn.Module):
    """The text backbone: embeddings, the layers, final norm and head, and the forward maths.

    Optional parts hang off it as submodules so their tensors keep their native names: `mtp` (the
    DSpark drafter) and `vision` (the tower and aligner). `streamer` is a layer source for
    layer-streamed checkpoints (model/checkpoint/): when set, `layer(i)` asks it for layer i.
    """


    def __init__(self, cfg: V41Config):
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        self.embed = torch.nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = torch.nn.ModuleList(Block(cfg, spec) for spec in layer_map(cfg))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.head = torch.nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.rotary = Rotary(cfg)
        self.hasher: NgramHasher | None = None
        if cfg.engram_layer_ids and cfg.engram_compressed_vocab_size == cfg.vocab_size:
            self.hasher = NgramHasher(cfg)  # identity token map until a tokenizer is bound
        # optional parts, set only through set_part / set_layer_source (their owners call these)
        self.mtp: torch.nn.Module | None = None     # DSpark drafter, native names mtp.{i}.*
        self.vision: torch.nn.Module | None = None  # vision tower, native names vision.*
        self.aligner: torch.nn.Module | None = None  # the tower's features -> the hidden size, native names aligner.*
        self.streamer: LayerSource | None = None  # layer-streamed checkpoints: `.layer(i)` returns layer i

    # ---------------------------------------------------------------------------------------------
    def set_part(self, name: str, module: torch.nn.Module | None) -> None:
        """Attach (or with None, drop) an optional part: "mtp" (drafter), "vision" (tower) or "aligner"."""
        if name not in ("mtp", "vision", "aligner"):
            raise ValueError(f"unknown optional part {name!r}: 'mtp', 'vision' or 'aligner'")
        setattr(self, name, module)

    def set_vectors(self, vectors: dict[str, torch.nn.Parameter | None]) -> None:
        """Register (or with None, drop) top-level parameter vectors under their native names: the image
        span's markers (`image_start`, `image_end`, `image_newline`), which the vision part owns."""
        for name, value in vectors.items():
            if "." in name or name in self._modules:
                raise ValueError(f"{name!r} is not a top-level vector name")
            self.register_parameter(name, value)

    def set_layer_source(self, source: LayerSource | None) -> None:
        """Run layers from `source.layer(i)` instead of self.layers (None: back to the resident layers)."""
        self.streamer = source

    @property
    def device(self) -> torch.device:
        return self.embed.weight.device

    def init_weights(self, seed: int = 0) -> "Backbone":
        """Fresh weights for training: N(0, initializer_range) matrices, unit norms, zero biases."""
        g = torch.Generator().manual_seed(seed)
        std = self.cfg.initializer_range
        with torch.no_grad():
            for name, p in self.named_parameters():
                if p.device.type == "meta":
                    continue
                if name.endswith("norm.weight") or name.endswith("_weight") or name.endswith("scale"):
                    p.fill_(1.0)
                elif name.endswith((".bias", ".bias_vl", "attn_sink")) or name.endswith("_base"):
                    p.zero_()
                elif name.endswith("embed.weight") and "engram" in name:
                    p.copy_(torch.randn(p.shape, generator=g) * std)
                else:
                    fan_in = p.shape[-1] if p.ndim > 1 else 1
                    p.copy_(torch.randn(p.shape, generator=g) * min(std, fan_in ** -0.5))
        return self

    # ---------------------------------------------------------------------------------------------
    def check_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        if not isinstance(input_ids, torch.Tensor):
            input_ids = torch.as_tensor(input_ids, dtype=torch.long)
        if input_ids.ndim == 1:
            input_ids = input_ids.unsqueeze(0)
        if input_ids.ndim != 2 or input_ids.numel() == 0:
            raise InputError("input_ids must be a non-empty [batch, seq] tensor of token ids")
        if input_ids.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
            raise InputError(f"input_ids must be integers, got {input_ids.dtype}")
        lo, hi = int(input_ids.min()), int(input_ids.max())
        if lo < 0 or hi >= self.cfg.vocab_size:
            bad = lo if lo < 0 else hi
            raise InputError(f"token id {bad} is out of range [0, {self.cfg.vocab_size})")
        return input_ids.long().to(self.device)

    def prepare(self, input_ids: torch.Tensor, cache: LayerCache | None = None, *, trace: Recorder | None = None,
                ablation: Ablation | None = None, image_embeds: torch.Tensor | None = None,
                image_mask: torch.Tensor | None = None, tap_layers=(), indexer_loss: bool = False,
                collect_routing: bool = False) -> tuple[torch.Tensor, torch.Tensor, Context, RopeTables,
                                                        torch.Tensor | None]:
        """Embed, hash and set up the context for one forward call over new rows."""
        ids = self.check_ids(input_ids)
        b, s = ids.shape
        start = 0 if cache is None else cache.length
        if start + s > self.cfg.max_position_embeddings:
            raise InputError(f"{start + s} positions exceed max_position_embeddings={self.cfg.max_position_embeddings}")
        positions = torch.arange(start, start + s, device=self.device)
        h = self.embed(ids)
        if image_embeds is not None and image_mask is not None:
            h = h.masked_scatter(image_mask.unsqueeze(-1).to(h.device), image_embeds.to(h.dtype))
        streams = h.unsqueeze(2).expand(-1, -1, self.cfg.hc_mult, -1).contiguous()
        ctx = Context(positions=positions, cache=cache, trace=trace, ablation=ablation or Ablation(),
                      image_mask=image_mask, tap_layers=frozenset(tap_layers), indexer_loss=indexer_loss,
                      collect_routing=collect_routing)
        rope = RopeTables.at(self.rotary, positions)
        hash_ids, comp = None, None
        if self.cfg.engram_layer_ids:
            if self.hasher is None:
                raise InputError("this model has Engram layers: bind a tokenizer first (model.bind_tokenizer), "
                                 "the compressed token map comes from it")
            live = None if image_mask is None else ~image_mask.to(self.device)
            comp = self.hasher.compress(ids, live)
            history = None if cache is None else cache.engram_history(self.cfg.engram_max_ngram_size - 1)
            hash_ids = self.hasher(comp, history)
        if cache is not None:
            cache.stage(ids, comp)
        if trace is not None:
            trace.begin(self.cfg, ids, positions, hash_ids)
        return streams, one_hot_pre(streams), ctx, rope, hash_ids

    def run_layers(self, streams: torch.Tensor, pre_mix: torch.Tensor, lo: int, hi: int, ctx: Context,
                   rope: RopeTables, hash_ids: torch.Tensor | None, progress=None) -> tuple[torch.Tensor, torch.Tensor]:
        for i in range(lo, hi):
            streams, pre_mix = self.layer(i)(streams, pre_mix, ctx, rope, hash_ids)
            if ctx.trace is not None and not ctx.publish_only:
                ctx.trace.after_layer(i, streams, pre_mix, self)
            if progress is not None:
                progress(i)
        return streams, pre_mix

    def layer(self, i: int) -> Block:
        """Layer i, ready to run. A layer-streamed model (model/checkpoint/streaming.py) loads it on demand here."""
        if self.streamer is not None:
            return self.streamer.layer(i)
        return self.layers[i]

    def finish(self, streams: torch.Tensor, pre_mix: torch.Tensor, last_only: bool = False) -> tuple[torch.Tensor,
                                                                                                   torch.Tensor]:
        if last_only:
            streams, pre_mix = streams[:, -1:], pre_mix[:, -1:]
        hidden = self.norm(collapse(streams, pre_mix))
        return hidden, self.head(hidden).float()

    # the logit lens (model/inference/trace.py) splits `finish` in two: the collapse when a layer ends, the
    # norm and head only for the rows a reader asks for
    def collapse(self, streams: torch.Tensor, pre_mix: torch.Tensor) -> torch.Tensor:
        """The streams collapsed with the last FFN site's `pre`, before the final norm: [B, S, D]."""
        return collapse(streams, pre_mix)

    def project(self, collapsed: torch.Tensor) -> torch.Tensor:
        """Final norm and head on collapsed rows -> fp32 logits (`finish` = project(collapse(...)))."""
        return self.head(self.norm(collapsed)).float()

    # ---- narrow entry points: the engine, the tracer, the batch runner and the inspector call these ---------------
    def segment(self, input_ids: torch.Tensor, cache: LayerCache, lo: int, hi: int, *, publish: int | None = None,
                trace: Recorder | None = None, ablation: Ablation | None = None, tap_layers=()) -> Segment:
        """New rows against a cache through layers [lo, hi) (lo = 0: embedded and hashed here); with `publish`,
        that layer then only publishes its compressed entries and index keys for the rows (bounded prefill's
        first decoder layer). The cache is not advanced: the caller does, once the rows are done."""
        streams, pre_mix, ctx, rope, hash_ids = self.prepare(input_ids, cache, trace=trace, ablation=ablation,
                                                             tap_layers=tap_layers)
        streams, pre_mix = self.run_layers(streams, pre_mix, lo, hi, ctx, rope, hash_ids)
        taps = dict(ctx.taps)
        if publish is not None:
            ctx.publish_only = True
            self.layer(publish)(streams, pre_mix, ctx, rope, hash_ids)
        return Segment(streams=streams, pre_mix=pre_mix, taps=taps)

    def resume(self, streams: torch.Tensor, pre_mix: torch.Tensor, cache: LayerCache, lo: int, hi: int, *,
               start: int, hash_ids: torch.Tensor | None = None, trace: Recorder | None = None,
               ablation: Ablation | None = None, skip_compress: frozenset[int] = frozenset(), tap_layers=(),
               last_only: bool = False) -> ModelOutput:
        """Rows that already went through layers [0, lo) (their streams and pre mix, at positions start..) continue
        through layers [lo, hi) against a cache and finish: bounded prefill's replay segment. `skip_compress`:
        KV sources whose entries for these rows the cache already holds."""
        positions = torch.arange(start, start + streams.shape[1], device=self.device)
        ctx = Context(positions=positions, cache=cache, ablation=ablation or Ablation(), skip_compress=skip_compress,
                      trace=trace, tap_layers=frozenset(tap_layers))
        rope = RopeTables.at(self.rotary, positions)
        streams, pre_mix = self.run_layers(streams, pre_mix, lo, hi, ctx, rope, hash_ids)
        hidden, logits = self.finish(streams, pre_mix, last_only)
        if trace is not None:
            trace.end(hidden, logits)
        return ModelOutput(logits=logits, hidden=hidden, taps=ctx.taps)

    def full(self, input_ids: torch.Tensor, *, lengths: list[int] | None = None, last_only: bool = False,
             trace: Recorder | None = None, ablation: Ablation | None = None) -> ModelOutput:
        """One forward over whole prompts, no cache. `lengths`: rows right-padded to the longest (each row's
        results are its own: model/inference/batch.py); with `last_only`, each row's logits at its own last
        token [B, 1, V]."""
        streams, pre_mix, ctx, rope, hash_ids = self.prepare(input_ids, None, trace=trace, ablation=ablation)
        streams, pre_mix = self.run_layers(streams, pre_mix, 0, self.cfg.num_hidden_layers, ctx, rope, hash_ids)
        if last_only and lengths is not None:
            rows = torch.arange(streams.shape[0], device=streams.device)
            last = torch.as_tensor(lengths, device=streams.device) - 1
            streams, pre_mix = streams[rows, last].unsqueeze(1), pre_mix[rows, last].unsqueeze(1)
        hidden, logits = self.finish(streams, pre_mix, last_only)
        if trace is not None:
            trace.end(hidden, logits)
        return ModelOutput(logits=logits, hidden=hidden, taps=ctx.taps, routings=ctx.routings)

    def forward(self, input_ids: torch.Tensor, cache: LayerCache | None = None, *, trace: Recorder | None = None,
                ablation: Ablation | None = None, image_embeds: torch.Tensor | None = None,
                image_mask: torch.Tensor | None = None, last_only: bool = False, tap_layers=(),
                indexer_loss: bool = False, collect_routing: bool = False) -> ModelOutput:
        """`indexer_loss` (training): the index sources' KL against their layers' attention, as `indexer_loss` (the
        mean) and `indexer_terms` (per selecting layer). A training loss of its own attaches through `trace`, a
        `Recorder` whose hooks see the attention and may replace its output (lab/training/lookup.py)."""
        streams, pre_mix, ctx, rope, hash_ids = self.prepare(
            input_ids, cache, trace=trace, ablation=ablation, image_embeds=image_embeds, image_mask=image_mask,
            tap_layers=tap_layers, indexer_loss=indexer_loss, collect_routing=collect_routing)
        streams, pre_mix = self.run_layers(streams, pre_mix, 0, self.cfg.num_hidden_layers, ctx, rope, hash_ids)
        hidden, logits = self.finish(streams, pre_mix, last_only)
        if cache is not None:
            cache.advance(streams.shape[1])
        if trace is not None:
            trace.end(hidden, logits)
        il = torch.stack(list(ctx.indexer_losses.values())).mean() if ctx.indexer_losses else None
        return ModelOutput(logits=logits, hidden=hidden, indexer_loss=il, indexer_terms=dict(ctx.indexer_losses),
                           taps=ctx.taps, routings=ctx.routings)
