"""V41Config: the DeepSeek-V4.1-Flash text config under the released checkpoint's field names.

Follows docs/design/architecture.md §1 (the fields) and docs/design/equations.md §3-§12 (what
they size). A real `config.json` (flat, or
composite with `text_config` / `vision_config` / `quantization_config`) loads as is; unknown
keys are kept in `extra` so a round trip loses nothing. `validate()` rejects inconsistent
configs with a message that names the offending field.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ConfigError


@dataclass
class VisionConfig:
    """The DeepSeek-ViT tower's `vision_config` (docs/design/architecture.md §3.6)."""

    hidden_size: int = 1024
    intermediate_size: int = 2816
    num_hidden_layers: int = 32
    num_attention_heads: int = 16
    patch_size: int = 14
    downsample_ratio: int = 3
    rope_theta: float = 10000.0
    max_image_tokens: int = 1024
    min_pixels: int = 295936
    max_wh_ratio: int | None = None
    image_size: int = 0  # 0 = dynamic resolution; >0 fixes the square input side (tiny presets)
    extra: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> None:
        for name in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                     "patch_size", "downsample_ratio", "max_image_tokens"):
            v = getattr(self, name)
            if not isinstance(v, int) or v <= 0:
                raise ConfigError(f"vision_config.{name} must be a positive integer, got {v!r}")
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError("vision_config.hidden_size must be divisible by vision_config.num_attention_heads")


@dataclass
class V41Config:
    """Text backbone config. Field names are the released checkpoint's `text_config` names."""

    # --- sizes ------------------------------------------------------------------------------
    vocab_size: int = 129280
    hidden_size: int = 5120
    num_hidden_layers: int = 40
    num_attention_heads: int = 64
    num_key_value_heads: int = 1
    head_dim: int = 512
    q_lora_rank: int = 1280
    qk_rope_head_dim: int = 64
    # --- rope -------------------------------------------------------------------------------
    rope_theta: float = 10000.0
    compress_rope_theta: float = 160000.0
    rope_scaling: dict | None = field(default_factory=lambda: {
        "rope_type": "yarn", "factor": 16, "beta_fast": 32, "beta_slow": 1,
        "original_max_position_embeddings": 65536})
    max_position_embeddings: int = 1048576
    # --- sliding window + CSA2 ----------------------------------------------------------------
    sliding_window: int = 128
    compress_ratios: list[int] = field(default_factory=lambda: [0, 0] + [2] * 18 + [1] * 20)
    kv_source_layer_ids: list[int] = field(default_factory=lambda: [2, 8, 14, 20])
    index_source_layer_ids: list[int] = field(default_factory=lambda: [2, 8, 14, 20, 24, 28, 32, 36])
    candidate_source_layer_id: int = 20
    candidate_topk_blocks: int = 2048
    candidate_block_size: int = 8
    index_n_heads: int = 32
    index_head_dim: int = 128
    index_topk: int = 512
    # --- grouped low-rank output projection -----------------------------------------------------
    o_groups: int = 8
    o_lora_rank: int = 1024
    # --- MoE ------------------------------------------------------------------------------------
    moe_intermediate_size: int = 2304
    n_routed_experts: int = 384
    n_shared_experts: int = 1
    num_experts_per_tok: int = 6
    scoring_func: str = "sqrtsoftplus"
    gate_temp: float = 1.0
    norm_topk_prob: bool = True
    routed_scaling_factor: float = 1.5
    topk_method: str = "noaux_tc"
    swiglu_limit: float = 10.0
    hidden_act: str = "silu"
    # --- mHC ------------------------------------------------------------------------------------
    hc_mult: int = 4
    hc_sinkhorn_iters: int = 20
    hc_eps: float = 1e-6
    # --- Engram -----------------------------------------------------------------------------------
    engram_layer_ids: list[int] = field(default_factory=lambda: [1, 14])
    engram_vocab_size: int = 16000000
    engram_num_embeddings: list[int] = field(default_factory=lambda: [384006168, 384016682])
    engram_max_ngram_size: int = 4
    engram_n_heads: int = 8
    engram_head_dim: int = 256
    engram_pad_id: int = 2
    engram_compressed_vocab_size: int = 99092
    # --- DSpark ------------------------------------------------------------------------------------
    num_nextn_predict_layers: int = 3
    dspark_block_size: int = 5
    dspark_noise_token_id: int = 128799
    dspark_target_layer_ids: list[int] = field(default_factory=lambda: [37, 38, 39])
    dspark_markov_rank: int = 256
    dspark_n_routed_experts: int = 128
    dspark_num_experts_per_tok: int = 3
    # --- misc ---------------------------------------------------------------------------------------
    rms_norm_eps: float = 1e-20
    initializer_range: float = 0.02
    tie_word_embeddings: bool = False
    bos_token_id: int | None = 0
    eos_token_id: int | list[int] | None = 1
    pad_token_id: int | None = None
    image_token_id: int = 129264
    torch_dtype: str = "bfloat16"
    # --- not part of the text config proper -----------------------------------------------------------
    name: str = "custom"
    vision_config: VisionConfig | None = None
    quantization_config: dict | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    # ------------------------------------------------------------------------------------------------
    @property
    def backbone_ratios(self) -> list[int]:
        return list(self.compress_ratios[: self.num_hidden_layers])

    @property
    def n_hash_cols(self) -> int:
        return (self.engram_max_ngram_size - 1) * self.engram_n_heads

    @property
    def decoder_start(self) -> int:
        """First layer of the CED decoder: the trailing run of ratio-1 layers (num_hidden_layers if none)."""
        ratios = self.backbone_ratios
        i = len(ratios)
        while i > 0 and ratios[i - 1] == 1:
            i -= 1
        return i

    # ------------------------------------------------------------------------------------------------
    def validate(self) -> "V41Config":
        """Raise ConfigError naming the first inconsistent field; return self when valid."""
        self._check_sizes()
        self._check_ratios()
        self._check_sources()
        self._check_engram()
        self._check_dspark()
        if self.vision_config is not None:
            self.vision_config.validate()
            if not (0 <= self.image_token_id < self.vocab_size):
                raise ConfigError("image_token_id must be a token id in [0, vocab_size)")
        return self

    def _check_sizes(self) -> None:
        """Positive sizes, the attention/MoE shapes and the scalar knobs."""
        positive = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "head_dim",
                    "q_lora_rank", "qk_rope_head_dim", "sliding_window", "index_n_heads", "index_head_dim",
                    "index_topk", "o_groups", "o_lora_rank", "moe_intermediate_size", "n_routed_experts",
                    "num_experts_per_tok", "hc_mult", "hc_sinkhorn_iters", "candidate_block_size",
                    "candidate_topk_blocks", "max_position_embeddings")
        for name in positive:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ConfigError(f"{name} must be a positive integer, got {v!r}")
        if self.num_key_value_heads != 1:
            raise ConfigError("num_key_value_heads must be 1: V4.1 attention shares one K=V latent head")
        if self.qk_rope_head_dim % 2 or self.qk_rope_head_dim > self.head_dim:
            raise ConfigError("qk_rope_head_dim must be even and at most head_dim")
        if (self.num_attention_heads * self.head_dim) % self.o_groups or self.num_attention_heads % self.o_groups:
            raise ConfigError("o_groups must divide num_attention_heads")
        if self.num_experts_per_tok > self.n_routed_experts:
            raise ConfigError("num_experts_per_tok must not exceed n_routed_experts")
        if self.n_shared_experts not in (0, 1):
            raise ConfigError("n_shared_experts must be 0 or 1")
        if self.scoring_func not in ("sqrtsoftplus", "sigmoid", "softmax"):
            raise ConfigError(f"scoring_func must be sqrtsoftplus, sigmoid or softmax, got {self.scoring_func!r}")
        if not (self.rms_norm_eps >= 0 and self.hc_eps >= 0 and self.gate_temp > 0):
            raise ConfigError("rms_norm_eps and hc_eps must be >= 0 and gate_temp > 0")

    def _check_ratios(self) -> None:
        """compress_ratios: backbone entries, optionally followed by zeros for the drafter layers."""
        n = self.num_hidden_layers
        ratios = list(self.compress_ratios)
        if len(ratios) < n:
            raise ConfigError(f"compress_ratios needs {n} entries (num_hidden_layers), got {len(ratios)}")
        if len(ratios) > n + self.num_nextn_predict_layers:
            raise ConfigError(f"compress_ratios has {len(ratios)} entries, more than num_hidden_layers + "
                              f"num_nextn_predict_layers = {n + self.num_nextn_predict_layers}")
        if any(r != 0 for r in ratios[n:]):
            raise ConfigError("compress_ratios entries of the drafter layers (after num_hidden_layers) must be 0")
        if any((not isinstance(r, int)) or r < 0 for r in ratios):
            raise ConfigError("compress_ratios entries must be integers >= 0")

    def _check_sources(self) -> None:
        """KV and index source layers: every compressed layer has a KV source of its ratio and an index
        source in its group; the candidate source is an index source with room for index_topk entries."""
        n = self.num_hidden_layers
        back = list(self.compress_ratios)[:n]
        kv, ix = list(self.kv_source_layer_ids), list(self.index_source_layer_ids)
        for name, ids in (("kv_source_layer_ids", kv), ("index_source_layer_ids", ix)):
            if sorted(set(ids)) != ids:
                raise ConfigError(f"{name} must be strictly increasing, got {ids}")
            if any(i < 0 or i >= n for i in ids):
                raise ConfigError(f"{name} entries must lie in [0, {n}), got {ids}")
            if any(back[i] == 0 for i in ids):
                raise ConfigError(f"{name} {ids} must name layers whose compress_ratios entry is > 0")
        for i in range(n):
            if back[i] == 0:
                continue
            src = [s for s in kv if s <= i]
            if not src:
                raise ConfigError(f"kv_source_layer_ids: layer {i} has compress ratio {back[i]} but no KV source "
                                  f"at or before it")
            if back[src[-1]] != back[i]:
                raise ConfigError(f"compress_ratios: layer {i} (ratio {back[i]}) would read the entries of KV source "
                                  f"{src[-1]} (ratio {back[src[-1]]}); a group must share one ratio")
            if i not in ix and not any(s <= i and s >= src[-1] for s in ix):
                raise ConfigError(f"index_source_layer_ids: layer {i} has no index source in its KV group "
                                  f"(starting at layer {src[-1]}) to reuse a selection from")
        for s in kv:
            if s not in ix:
                raise ConfigError(f"kv_source_layer_ids: KV source {s} must also be an index source "
                                  f"(it makes new entries, so it must choose among them)")
        c = self.candidate_source_layer_id
        if c is not None and c >= 0:
            if c not in ix:
                raise ConfigError(f"candidate_source_layer_id ({c}) must be one of index_source_layer_ids {ix}")
            if (self.candidate_topk_blocks * self.candidate_block_size - (self.candidate_block_size - 1)
                    < self.index_topk):
                raise ConfigError("candidate_topk_blocks x candidate_block_size is too small to hold index_topk "
                                  "entries (needs topk_blocks*block - (block-1) >= index_topk)")

    def _check_engram(self) -> None:
        """Engram layers in range, one table per layer, sized by the prime bucket layout."""
        n = self.num_hidden_layers
        if len(self.engram_num_embeddings) != len(self.engram_layer_ids):
            raise ConfigError("engram_num_embeddings must have one entry per engram_layer_ids entry")
        if any(i < 0 or i >= n for i in self.engram_layer_ids):
            raise ConfigError(f"engram_layer_ids entries must lie in [0, {n})")
        if not self.engram_layer_ids:
            return
        if self.engram_max_ngram_size < 2 or self.engram_n_heads <= 0 or self.engram_head_dim <= 0:
            raise ConfigError("engram_max_ngram_size must be >= 2 and engram_n_heads, engram_head_dim > 0")
        if not (0 <= self.engram_pad_id < self.vocab_size):
            raise ConfigError("engram_pad_id must be a token id in [0, vocab_size)")
        for li, (lid, rows) in enumerate(zip(self.engram_layer_ids, self.engram_num_embeddings)):
            want = sum(sum(p) for p in engram_primes(self)[li])
            if rows != want:
                raise ConfigError(f"engram_num_embeddings[{li}] (layer {lid}) is {rows}, but the prime bucket "
                                  f"layout from engram_vocab_size={self.engram_vocab_size} needs {want} rows")

    def _check_dspark(self) -> None:
        """The DSpark drafter: block size, target layers, noise token, its experts."""
        n = self.num_hidden_layers
        if self.num_nextn_predict_layers < 0:
            raise ConfigError("num_nextn_predict_layers must be >= 0")
        if not self.num_nextn_predict_layers:
            return
        if self.dspark_block_size < 2:
            raise ConfigError("dspark_block_size must be >= 2 (anchor + at least one drafted token)")
        if any(i < 0 or i >= n for i in self.dspark_target_layer_ids) or not self.dspark_target_layer_ids:
            raise ConfigError(f"dspark_target_layer_ids must be non-empty and lie in [0, {n})")
        if not (0 <= self.dspark_noise_token_id < self.vocab_size):
            raise ConfigError("dspark_noise_token_id must be a token id in [0, vocab_size)")
        if self.dspark_num_experts_per_tok > self.dspark_n_routed_experts:
            raise ConfigError("dspark_num_experts_per_tok must not exceed dspark_n_routed_experts")

    # ------------------------------------------------------------------------------------------------
    _TOP_LEVEL = ("text_config", "vision_config", "quantization_config", "architectures", "model_type",
                  "transformers_version")

    @classmethod
    def from_dict(cls, d: dict[str, Any], validate: bool = True) -> "V41Config":
        """Build from a flat text config or a composite `{text_config, vision_config, ...}` dict."""
        if not isinstance(d, dict):
            raise ConfigError("config must be a JSON object")
        top = dict(d)
        text = dict(top.pop("text_config")) if isinstance(top.get("text_config"), dict) else top
        if text is not top:
            for k in ("image_token_id", "tie_word_embeddings"):
                if k in top and k not in text:
                    text[k] = top[k]
        vision = top.get("vision_config") if isinstance(top.get("vision_config"), dict) else None
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for k, v in text.items():
            if k in ("vision_config", "extra"):
                continue
            if k in names:
                kwargs[k] = v
            elif k not in cls._TOP_LEVEL:
                extra[k] = v
        if text is not top:
            extra["_composite"] = {k: v for k, v in top.items() if k not in ("text_config", "vision_config",
                                                                              "quantization_config")}
        n = int(kwargs.get("num_hidden_layers", cls.num_hidden_layers))
        # Fields that default to the released 40-layer schedule must be given for other depths.
        if n != 40:
            for k in ("compress_ratios", "kv_source_layer_ids", "index_source_layer_ids"):
                if k not in kwargs:
                    raise ConfigError(f"{k} is required when num_hidden_layers != 40")
            kwargs.setdefault("candidate_source_layer_id", kwargs["kv_source_layer_ids"][-1]
                              if kwargs["kv_source_layer_ids"] else -1)
            kwargs.setdefault("engram_layer_ids", [])
            kwargs.setdefault("engram_num_embeddings", [])
            kwargs.setdefault("dspark_target_layer_ids", list(range(max(0, n - 3), n)))
        if kwargs.get("candidate_source_layer_id") is None and "candidate_source_layer_id" in kwargs:
            kwargs["candidate_source_layer_id"] = -1
        for k in ("engram_layer_ids", "engram_num_embeddings"):
            if kwargs.get(k) is None and k in kwargs:
                kwargs[k] = []
        cfg = cls(**kwargs)
        cfg.extra = extra
        if vision is not None:
            vnames = {f.name for f in dataclasses.fields(VisionConfig)}
            cfg.vision_config = VisionConfig(**{k: v for k, v in vision.items() if k in vnames},
                                             extra={k: v for k, v in vision.items() if k not in vnames})
        if isinstance(top.get("quantization_config"), dict):
            cfg.quantization_config = dict(top["quantization_config"])
        if validate:
            cfg.validate()
        return cfg

    def to_dict(self, composite: bool = False) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
             if f.name not in ("vision_config", "quantization_config", "extra", "name")}
        d = json.loads(json.dumps(d))
        d.update({k: v for k, v in self.extra.items() if not k.startswith("_")})
        d["model_type"] = "deepseek_v41_text"
        d["architectures"] = ["DeepseekV41ForCausalLM"]
        if not composite and self.vision_config is None and self.quantization_config is None:
            return d
        out: dict[str, Any] = {"architectures": ["DeepseekV41ForCausalLM"], "model_type": "deepseek_v41",
                               "text_config": d, "image_token_id": self.image_token_id}
        if self.vision_config is not None:
            vd = {f.name: getattr(self.vision_config, f.name) for f in dataclasses.fields(VisionConfig)
                  if f.name != "extra"}
            vd.update(self.vision_config.extra)
            out["vision_config"] = vd
        if self.quantization_config is not None:
            out["quantization_config"] = self.quantization_config
        return out

    @classmethod
    def from_json(cls, path: str | Path, validate: bool = True) -> "V41Config":
        p = Path(path)
        if p.is_dir():
            p = p / "config.json"
        try:
            d = json.loads(p.read_text())
        except FileNotFoundError:
            raise ConfigError(f"{p}: no config.json found") from None
        except json.JSONDecodeError as e:
            raise ConfigError(f"{p}: not valid JSON ({e})") from None
        mt = d.get("model_type", (d.get("text_config") or {}).get("model_type", "deepseek_v41"))
        if mt not in ("deepseek_v41", "deepseek_v41_text"):
            raise ConfigError(f"{p}: model_type is {mt!r}, not a DeepSeek-V4.1 config (deepseek_v41)")
        cfg = cls.from_dict(d, validate=validate)
        cfg.name = p.parent.name
        return cfg

    def save_json(self, path: str | Path, composite: bool = False) -> None:
        p = Path(path)
        if p.suffix != ".json":
            p = p / "config.json"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(self.to_dict(composite=composite), indent=2) + "\n")

    def replace(self, **changes: Any) -> "V41Config":
        """A modified copy (not validated: call validate() if the change may break consistency)."""
        return dataclasses.replace(self, **changes)

    # ------------------------------------------------------------------------------------------------
    @classmethod
    def preset(cls, name: str) -> "V41Config":
        if name not in PRESETS:
            raise ConfigError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
        cfg = PRESETS[name]()
        cfg.name = name
        return cfg.validate()


# --------------------------------------------------------------------------------------------------------
# Presets
# --------------------------------------------------------------------------------------------------------

def _flash() -> V41Config:
    cfg = V41Config()
    cfg.vision_config = VisionConfig()
    return cfg


def _micro() -> V41Config:
    """Smallest config with every layer kind; for unit tests (milliseconds per forward).

    8 layers: 0-1 window only (1 with Engram), 2 Full ratio 2, 3 Reuse, 4 Full ratio 1 (candidate
    source, decoder start), 5 Reuse, 6 Reindex, 7 Reuse. Window 8 so a 40-token input goes well past
    it; top-k 4 < visible entries; a pool of 3 blocks x 2 < visible entries; 8 experts, 2 per token.
    """
    return V41Config(
        vocab_size=256, hidden_size=64, num_hidden_layers=8, num_attention_heads=4, head_dim=64,
        q_lora_rank=32, qk_rope_head_dim=16, sliding_window=8,
        compress_ratios=[0, 0, 2, 2, 1, 1, 1, 1], kv_source_layer_ids=[2, 4], index_source_layer_ids=[2, 4, 6],
        candidate_source_layer_id=4, candidate_topk_blocks=3, candidate_block_size=2,
        index_n_heads=4, index_head_dim=32, index_topk=4, o_groups=2, o_lora_rank=16,
        moe_intermediate_size=32, n_routed_experts=8, num_experts_per_tok=2,
        engram_layer_ids=[1], engram_vocab_size=50, engram_num_embeddings=[384], engram_max_ngram_size=4,
        engram_n_heads=2, engram_head_dim=32, engram_pad_id=2, engram_compressed_vocab_size=256,
        num_nextn_predict_layers=1, dspark_block_size=4, dspark_noise_token_id=255,
        dspark_target_layer_ids=[5, 6, 7], dspark_markov_rank=16, dspark_n_routed_experts=4,
        dspark_num_experts_per_tok=2, max_position_embeddings=65536, bos_token_id=0, eos_token_id=1,
        image_token_id=250, torch_dtype="float32",
        vision_config=VisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                                   patch_size=4, downsample_ratio=2, max_image_tokens=64, min_pixels=0,
                                   image_size=32),
    )


def _tiny() -> V41Config:
    """The preset we train on CPU and ship (data/weights/tiny). Sized so every mechanism bites at the
    training length of 512 tokens:

    - window 32 < 512 tokens, so most of the context is reachable only through compressed entries;
    - 12 layers with the full role pattern: 0-1 window only, 2-5 encoder (2 Full ratio 2, 3-5 Reuse),
      6-11 decoder (6 Full ratio 1 and candidate source, 7 Reuse, 8 Reindex, 9 Reuse, 10 Reindex, 11 Reuse);
    - index_topk 16 < the 256 ratio-2 / 512 ratio-1 visible entries at the end of a sequence;
    - candidate pool of 8 blocks x 8 = 64 positions < 512 visible ratio-1 entries, and 64 >= 16 picks;
    - 16 routed experts, 2 per token, plus the shared expert;
    - Engram on layer 1 (n-grams up to 3, 2 heads), 4 mHC streams;
    - the vocabulary (4096) is the byte-level BPE trained on our corpus (data/weights/tiny/tokenizer.json).
    Widths (hidden 128, 4 heads of 64) keep one training step of 16 x 512 tokens near a second on 2 cores.
    """
    return V41Config(
        vocab_size=4096, hidden_size=128, num_hidden_layers=12, num_attention_heads=4, head_dim=64,
        q_lora_rank=64, qk_rope_head_dim=16, sliding_window=32,
        compress_ratios=[0, 0, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1], kv_source_layer_ids=[2, 6],
        index_source_layer_ids=[2, 6, 8, 10], candidate_source_layer_id=6,
        candidate_topk_blocks=8, candidate_block_size=8, index_n_heads=4, index_head_dim=32, index_topk=16,
        o_groups=2, o_lora_rank=64, moe_intermediate_size=96, n_routed_experts=16, num_experts_per_tok=2,
        engram_layer_ids=[1], engram_vocab_size=2000, engram_num_embeddings=[0], engram_max_ngram_size=3,
        engram_n_heads=2, engram_head_dim=32, engram_pad_id=0, engram_compressed_vocab_size=4096,
        num_nextn_predict_layers=1, dspark_block_size=5, dspark_noise_token_id=3,
        dspark_target_layer_ids=[9, 10, 11], dspark_markov_rank=32, dspark_n_routed_experts=8,
        dspark_num_experts_per_tok=2, max_position_embeddings=65536, bos_token_id=1, eos_token_id=2,
        image_token_id=4, torch_dtype="float32",
        vision_config=VisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                                   patch_size=8, downsample_ratio=2, max_image_tokens=64, min_pixels=0,
                                   image_size=64),
    )


def _tiny8() -> V41Config:
    """The tiny widths on micro's 8-layer map, every role kept: 0-1 window only (Engram on 1), 2 Full
    ratio 2 (encoder KV and index source), 3 Reuse, 4 Full ratio 1 (candidate source, decoder start),
    5 Reuse, 6 Reindex, 7 Reuse. The fallback of the far-recall curriculum (lab/README.md): micro
    forms a look-back through the entries where tiny's 12 layers have not yet."""
    cfg = _tiny()
    cfg.num_hidden_layers = 8
    cfg.compress_ratios = [0, 0, 2, 2, 1, 1, 1, 1]
    cfg.kv_source_layer_ids = [2, 4]
    cfg.index_source_layer_ids = [2, 4, 6]
    cfg.candidate_source_layer_id = 4
    cfg.dspark_target_layer_ids = [5, 6, 7]
    return cfg


def _small() -> V41Config:
    """A benchmark preset at the released 40-layer depth and layer map, with narrow widths, so prefill
    of 2K-32K tokens runs on CPU and bounded vs exact prefill shows the real 20/20 split."""
    return V41Config(
        vocab_size=4096, hidden_size=64, num_hidden_layers=40, num_attention_heads=2, head_dim=64,
        q_lora_rank=32, qk_rope_head_dim=16, sliding_window=128, index_n_heads=2, index_head_dim=32,
        index_topk=64, candidate_topk_blocks=64, candidate_block_size=8, o_groups=2, o_lora_rank=32,
        moe_intermediate_size=32, n_routed_experts=8, num_experts_per_tok=2,
        engram_layer_ids=[1, 14], engram_vocab_size=1000, engram_num_embeddings=[0, 0], engram_max_ngram_size=3,
        engram_n_heads=2, engram_head_dim=32, engram_pad_id=0, engram_compressed_vocab_size=4096,
        num_nextn_predict_layers=1, dspark_block_size=5, dspark_noise_token_id=3, dspark_markov_rank=16,
        dspark_n_routed_experts=4, dspark_num_experts_per_tok=2, bos_token_id=1, eos_token_id=2,
        image_token_id=4, torch_dtype="float32",
    )


# ------------------------------------------------------------------------------------------------
# Engram primes: the bucket sizes follow from the config alone, so the config owns them
# ------------------------------------------------------------------------------------------------

def is_prime(n: int) -> bool:
    """Deterministic Miller-Rabin for n < 3.3e24 (far beyond any bucket size)."""
    if n < 2:
        return False
    small = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41)
    for p in small:
        if n % p == 0:
            return n == p
    d, s = n - 1, 0
    while d % 2 == 0:
        d //= 2
        s += 1
    for a in small:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(s - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


@functools.lru_cache(maxsize=64)
def _primes(n_layers: int, orders: int, heads: int, start: int) -> tuple:
    seen: set[int] = set()
    layers = []
    for _ in range(n_layers):
        per_order = []
        for _ in range(orders):
            sizes, cur = [], start - 1
            for _ in range(heads):
                cur += 1
                while not is_prime(cur) or cur in seen:
                    cur += 1
                seen.add(cur)
                sizes.append(cur)
            per_order.append(tuple(sizes))
        layers.append(tuple(per_order))
    return tuple(layers)


def engram_primes(cfg: V41Config) -> tuple:
    """[layer][order-2][head] prime bucket sizes."""
    return _primes(len(cfg.engram_layer_ids), cfg.engram_max_ngram_size - 1, cfg.engram_n_heads,
                   cfg.engram_vocab_size)


def _fill_engram_rows(cfg: V41Config) -> V41Config:
    """Presets state the bucket start; the row counts follow from the prime layout."""
    if cfg.engram_layer_ids and any(r == 0 for r in cfg.engram_num_embeddings):
        cfg.engram_num_embeddings = [sum(sum(p) for p in layer) for layer in engram_primes(cfg)]
    return cfg


PRESETS = {
    "v4.1-flash": _flash,
    "micro": _micro,
    "tiny": lambda: _fill_engram_rows(_tiny()),
    "tiny8": lambda: _fill_engram_rows(_tiny8()),
    "small": lambda: _fill_engram_rows(_small()),
}


def nice_int(x: float) -> str:
    """1234567 -> '1.23M' (used by the CLI and pages)."""
    if x == 0:
        return "0"
    units = [(1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")]
    for f, u in units:
        if abs(x) >= f:
            return f"{x / f:.3g}{u}"
    return f"{x:.3g}" if not float(x).is_integer() else str(int(x))
