"""Counting: parameters from the module tree (meta device) and cache bytes in closed form.

`count_params(cfg)` instantiates the model on the meta device (no memory) and sums parameter
shapes by component; active parameters per token follow from which modules a token passes through:
- prefill (bounded): the encoder layers, plus the decoder's first layer's compressor and index-key
  projection, which run over every prompt row;
- decode: every layer, plus the output head.
In both, a token uses one embedding row, the shared expert and `num_experts_per_tok` routed experts
of each MoE, and (N-1) x heads rows of each Engram table it passes.

`cache_bytes(cfg, ...)` predicts, from the config alone, the bytes `model.inference.cache.Cache` holds: the
second seed's entries x numbers per entry x stored layer copies x bits per number, plus block
scales and pending rows (docs/design/architecture.md §3.2 and §6).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import torch

from .arch.drafter import Drafter
from .arch.engram import EngramEmbedding
from .arch.vision import attach_vision
from .config import V41Config
from .layer_map import layer_map
from .model import V41Model
from .quant import INDEX_FMT, LATENT_FMT, WINDOW_FMT

# Resident memory of a config, counted on the meta device before anything is allocated.
# the config fields that size each top-level part, named in a refusal
PART_FIELDS: dict[str, tuple[str, ...]] = {
    "embed": ("vocab_size", "hidden_size"),
    "head": ("vocab_size", "hidden_size"),
    "layers": ("num_hidden_layers", "n_routed_experts", "moe_intermediate_size", "hidden_size"),
    "mtp": ("num_nextn_predict_layers", "hidden_size"),
    "vision": ("vision_config",),
    "aligner": ("vision_config",),
}
PART_NAMES = {"embed": "embedding", "head": "output head", "layers": "layers", "mtp": "drafter",
              "vision": "vision tower", "aligner": "vision aligner"}


@dataclass(frozen=True)
class Footprint:
    total: int                      # bytes resident once loaded
    parts: dict[str, int]           # top-level module -> bytes counted in `total`
    streamed: bool

    def largest(self) -> str:
        return max(self.parts, key=self.parts.get)

    def describe(self, cfg: V41Config, part: str | None = None) -> str:
        """'output head 12.3 GB (vocab_size = 6,000,000, hidden_size = 256)'."""
        part = part or self.largest()
        fields = ", ".join(f"{f} = {_field(cfg, f)}" for f in PART_FIELDS.get(part, ()))
        what = PART_NAMES.get(part, part) + (" (one streamed layer)" if part == "layers" and self.streamed else "")
        return f"{what} {human(self.parts[part])}" + (f" ({fields})" if fields else "")


def human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n:,.1f} TB"


def _field(cfg: V41Config, name: str) -> str:
    v = getattr(cfg, name, None)
    return f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else ("set" if v else "none")


def _bytes(module: torch.nn.Module, skip_mapped: bool) -> int:
    total = 0
    for m in module.modules():
        if skip_mapped and isinstance(m, EngramEmbedding):
            continue
        for t in list(m.parameters(recurse=False)) + list(m.buffers(recurse=False)):
            total += t.numel() * t.element_size()
    return total


def resident_footprint(cfg: V41Config, streamed: bool = False, dtype: torch.dtype = torch.float32) -> Footprint:
    """Bytes `cfg` keeps in memory in `dtype`; `streamed`: one layer at a time (release checkpoints)."""
    with torch.device("meta"):
        model = V41Model(cfg)
    parts: dict[str, int] = {}
    scale = torch.empty(0, dtype=dtype).element_size() / 4   # the tree is built in float32
    for name, child in model.named_children():
        if name == "layers" and streamed:
            b = max((_bytes(layer, skip_mapped=True) for layer in child), default=0)
        else:
            b = _bytes(child, skip_mapped=False)
        if b:
            parts[name] = int(b * scale)
    return Footprint(total=sum(parts.values()), parts=parts, streamed=streamed)


@dataclass
class ParamCount:
    total: int
    backbone: int                    # embeddings + head + final norm + the layers (Engram excluded)
    engram: int
    embeddings: int                  # embed + head
    drafter: int
    vision: int
    by_component: dict[str, int]
    active_prefill: int              # per prompt token, bounded prefill
    active_decode: int               # per generated token
    per_layer: list[dict[str, int]] = field(default_factory=list)
    drafter_from: str = "modules"    # counted from the module tree (the config shapes agree: _drafter_shapes)
    vision_from: str = "modules"
    active_per_layer: list[int] = field(default_factory=list)  # per token passing the layer

    @property
    def engram_proj_per_layer(self) -> int:
        """Projection parameters of one Engram layer (the largest): each is one multiply-add per token."""
        return max((pl.get("engram_proj", 0) for pl in self.per_layer), default=0)


_COMPONENTS = [
    ("engram_table", r"\.engram\.embed\."),
    ("engram_proj", r"\.engram\."),
    ("compressor", r"\.attn\.compressor\."),
    ("indexer", r"\.attn\.indexer\."),
    ("attention", r"\.attn\."),
    ("router", r"\.ffn\.gate\."),
    ("shared_expert", r"\.ffn\.shared_experts\."),
    ("routed_experts", r"\.ffn\.experts\."),
    ("mhc", r"\.hc_"),
    ("norms", r"_norm\."),
]


def _component(name: str) -> str:
    for comp, pat in _COMPONENTS:
        if re.search(pat, name):
            return comp
    return "other"


def _drafter_shapes(cfg: V41Config) -> int:
    """Parameters of the DSpark drafter in closed form from the config (§5.8/§8.4): checks the module tree."""
    d, n = cfg.hidden_size, cfg.hc_mult
    attn = (d * cfg.q_lora_rank + cfg.q_lora_rank + cfg.q_lora_rank * cfg.num_attention_heads * cfg.head_dim
            + d * cfg.head_dim + cfg.head_dim + cfg.num_attention_heads * cfg.head_dim * cfg.o_lora_rank
            + cfg.o_groups * cfg.o_lora_rank * d + cfg.num_attention_heads)
    expert = 3 * d * cfg.moe_intermediate_size
    moe = (cfg.dspark_n_routed_experts + cfg.n_shared_experts) * expert + cfg.dspark_n_routed_experts * (d + 2)
    mhc = 2 * ((2 + n) * n * n * d + (2 + n) * n + 3)
    block = attn + moe + mhc + 2 * d
    head_extra = (len(cfg.dspark_target_layer_ids) * d * d + d + 2 * cfg.vocab_size * cfg.dspark_markov_rank
                  + d + cfg.dspark_markov_rank + 1 + d)
    return cfg.num_nextn_predict_layers * block + head_extra


def _vision_shapes(cfg: V41Config) -> int:
    v = cfg.vision_config
    if v is None:
        return 0
    h, i = v.hidden_size, v.intermediate_size
    block = 4 * h * h + 4 * h + 3 * h * i + 2 * h
    patch = 3 * v.patch_size ** 2 * h + h
    aligner = (h * v.downsample_ratio ** 2 + 1) * cfg.hidden_size + (cfg.hidden_size + 1) * cfg.hidden_size
    return v.num_hidden_layers * block + patch + h + aligner + 3 * cfg.hidden_size  # as model/arch/vision.py


def _meta_model(cfg: V41Config) -> V41Model:
    """The model with the drafter and vision tower the config describes, on the meta device (shapes only)."""
    with torch.device("meta"):
        m = V41Model(cfg)
        if cfg.num_nextn_predict_layers:
            m.set_part("mtp", Drafter(cfg))
        if cfg.vision_config is not None:
            attach_vision(m)  # vision.*, aligner.*, image_start/end/newline
    return m


@dataclass
class _Tally:
    by_comp: dict[str, int]
    per_layer: list[dict[str, int]]
    drafter: int = 0
    vision: int = 0
    embed: int = 0
    head: int = 0
    other: int = 0                   # outside the layers: the final norm


def _tally(m: V41Model) -> _Tally:
    """Parameters by part, and per layer by component."""
    t = _Tally({}, [dict() for _ in range(m.cfg.num_hidden_layers)])
    for name, p in m.named_parameters():
        n = p.numel()
        if name.endswith("engram.embed.scale"):
            continue  # per-row quantisation scales of the FP8 table, not parameters
        if name.startswith("mtp."):
            t.drafter += n
        elif name.startswith(("vision.", "aligner.", "image_")):
            t.vision += n
        elif name == "embed.weight":
            t.embed += n
        elif name == "head.weight":
            t.head += n
        elif (mt := re.match(r"layers\.(\d+)\.", name)) is None:
            t.other += n
            t.by_comp["final_norm"] = t.by_comp.get("final_norm", 0) + n
        else:
            comp = _component(name)
            t.by_comp[comp] = t.by_comp.get(comp, 0) + n
            pl = t.per_layer[int(mt.group(1))]
            pl[comp] = pl.get(comp, 0) + n
    return t


def _active(cfg: V41Config, m: V41Model, t: _Tally) -> tuple[int, int, list[int]]:
    """Active parameters per token: (bounded prefill, decode, per layer)."""
    expert = 3 * cfg.hidden_size * cfg.moe_intermediate_size
    rows = cfg.n_hash_cols * cfg.engram_head_dim

    def layer_active(pl: dict[str, int]) -> int:
        a = sum(v for k, v in pl.items() if k not in ("routed_experts", "engram_table"))
        a += cfg.num_experts_per_tok * expert
        if "engram_table" in pl:
            a += rows
        return a

    dec = cfg.decoder_start
    enc = sum(layer_active(t.per_layer[i]) for i in range(dec))
    pub = 0
    if dec < cfg.num_hidden_layers:  # the decoder's first layer publishes latents + keys for every row
        lid = layer_map(cfg)[dec].index
        src = m.layers[lid].attn
        pub = sum(p.numel() for p in src.compressor.parameters())
        pub += src.indexer.wk.weight.numel() + src.indexer.k_norm.weight.numel()
        pub += t.per_layer[lid].get("norms", 0) // 2 + t.per_layer[lid].get("mhc", 0) // 2  # attn_norm + one hc site
    active_layers = [layer_active(pl) for pl in t.per_layer]
    return cfg.hidden_size + enc + pub, cfg.hidden_size + sum(active_layers) + t.head + t.other, active_layers


def count_params(cfg: V41Config) -> ParamCount:
    m = _meta_model(cfg)
    t = _tally(m)
    by_comp = dict(t.by_comp, embed=t.embed, head=t.head, drafter=t.drafter, vision=t.vision)
    engram = by_comp.get("engram_table", 0) + by_comp.get("engram_proj", 0)
    layers_total = sum(sum(pl.values()) for pl in t.per_layer)
    backbone = t.embed + t.head + t.other + layers_total - engram
    active_prefill, active_decode, active_layers = _active(cfg, m, t)
    return ParamCount(total=backbone + engram + t.drafter + t.vision, backbone=backbone, engram=engram,
                      embeddings=t.embed + t.head, drafter=t.drafter, vision=t.vision, by_component=by_comp,
                      active_prefill=active_prefill, active_decode=active_decode, per_layer=t.per_layer,
                      active_per_layer=active_layers)


# ------------------------------------------------------------------------------------------------
# Cache bytes in closed form
# ------------------------------------------------------------------------------------------------

@dataclass
class Row:
    """One line of a derivation: what is counted, the formula with its numbers, the result."""

    item: str
    formula: str
    bytes: int
    kind: str
    layer: int | None = None


@dataclass
class CacheBytes:
    by_kind: dict[str, int]
    by_layer: dict[int, dict[str, int]]
    rows: list[Row]

    @property
    def total(self) -> int:
        return sum(self.by_kind.values())


def keep_rows(ratio: int, length: int, rollback: int) -> int:
    if ratio == 1:
        return 0
    return length % ratio if rollback == 0 else min(length, rollback + ratio - 1)


def cache_bytes(cfg: V41Config, prompt_tokens: int, decoded: int = 0, mode: str = "exact", rollback: int = 1,
                batch: int = 1) -> CacheBytes:
    """Bytes a Cache holds after prefilling `prompt_tokens` (mode exact|bounded) and decoding `decoded` more."""
    if prompt_tokens < 0 or decoded < 0 or batch < 1 or rollback < 0:
        raise ValueError("token counts and rollback must be >= 0 and batch >= 1")
    w, d, di = cfg.sliding_window, cfg.head_dim, cfg.index_head_dim
    total = prompt_tokens + decoded
    dec = cfg.decoder_start
    bounded = mode == "bounded" and dec < cfg.num_hidden_layers
    cap = w - 1 + rollback
    kinds = ("window", "latents", "index_keys", "pending")
    by_layer: dict[int, dict[str, int]] = {}
    rows: list[Row] = []
    wrb = WINDOW_FMT.row_bytes(d)
    for spec in layer_map(cfg):
        i = spec.index
        seen = (min(prompt_tokens, w) + decoded) if (bounded and i >= dec) else total
        n = min(seen, cap)
        b = batch * n * wrb
        if n:
            by_layer.setdefault(i, dict.fromkeys(kinds, 0))["window"] = b
            rows.append(Row(f"layer {i} window", f"{batch} x {n} rows x ({d} x 8 bits + {d // 32} scales x 8 bits)",
                            b, "window", i))
        if spec.role != "Full":
            continue
        r = spec.compress_ratio
        g = total // r
        lb = batch * g * LATENT_FMT.row_bytes(d)
        kb = batch * g * INDEX_FMT.row_bytes(di)
        m = keep_rows(r, total, rollback)
        pb = batch * m * d * 4 * 2
        dd = by_layer.setdefault(i, dict.fromkeys(kinds, 0))
        dd.update(latents=lb, index_keys=kb, pending=pb)
        rows.append(Row(f"layer {i} latents", f"{batch} x {total}//{r} = {g} entries x ({d} x 4 bits + {d // 16} "
                        f"scales x 8 bits)", lb, "latents", i))
        rows.append(Row(f"layer {i} index keys",
                        f"{batch} x {g} entries x ({di} x 4 bits + {di // 32} scales x 8 bits)", kb, "index_keys", i))
        if pb:
            rows.append(Row(f"layer {i} pending rows", f"{batch} x {m} rows x 2 (kv, gate) x {d} x 32 bits", pb,
                            "pending", i))
    by_kind = {k: sum(v[k] for v in by_layer.values()) for k in kinds}
    return CacheBytes(by_kind=by_kind, by_layer=dict(sorted(by_layer.items())), rows=rows)
