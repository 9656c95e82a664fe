"""The vision tower (DeepSeek-ViT style), the aligner, and image tokens in the text sequence.

Follows docs/design/checkpoints.md §4 (native names `vision.*`, `aligner.*`, `image_start`, `image_end`,
`image_newline`; vision config: hidden 1024, 32 layers, 16 heads, patch 14, pixel-unshuffle x3,
at most 1024 image tokens), §5.6 (image-span tokens select experts with `bias_vl`) and §7.3 (Engram
look-backs stop at image tokens), and docs/design/architecture.md §3.6.

Pipeline for one picture (sizes for v4.1-flash / tiny):

1. `model/inference/images.py` plans the input size (a multiple of patch x ratio = 42 / 16 pixels)
   and makes a [3, H, W] tensor in [-1, 1]; this module takes the pixels from there.
2. Patch embedding: a stride-`patch_size` convolution, one `hidden_size` vector per patch.
3. `num_hidden_layers` pre-norm blocks: RMSNorm -> bidirectional multi-head attention with biases
   -> residual; RMSNorm -> SwiGLU MLP -> residual. Positions: **2D RoPE** with `rope_theta` (half
   of each head's dimensions rotate with the patch row, half with the column). We chose RoPE over
   learned position tables because the config carries `rope_theta` and allows any grid up to the
   token budget (`image_size = 0`, dynamic resolution): a learned table would fix the grid.
4. A final RMSNorm, then pixel-unshuffle: each `downsample_ratio` x `downsample_ratio` square of
   patch vectors is concatenated into one vector (9 x 1024 / 4 x 64 numbers), so the token count
   drops by ratio^2.
5. The aligner (projector): Linear -> GELU -> Linear into the language model's `hidden_size`.
6. Layout in the sequence: `image_start`, then each row of image tokens followed by one
   `image_newline`, then `image_end`. The three markers are learned vectors (top-level tensors);
   in `input_ids` the span holds the tokenizer's `<|image_start|>`, `<|image|>` (= the config's
   `image_token_id`), `<|image_newline|>` and `<|image_end|>` ids, and `image_mask` is True over
   the whole span. The model's forward scatters the embeddings into those positions, routes them
   with `bias_vl`, and the Engram hasher treats them as dead (no n-gram spans an image). The ids of
   the span and the prompt around it are built in model/inference/vision_inputs.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..config import V41Config, VisionConfig
from ..errors import ImageError
from .norm import RMSNorm

VISION_EPS = 1e-6
VISION_PREFIXES = ("vision.", "aligner.", "image_start", "image_end", "image_newline")
MARKERS = ("image_start", "image_end", "image_newline")

__all__ = ["VisionModel", "Aligner", "attach_vision", "has_vision", "encode_image", "image_span_embeds",
           "vision_state_dict", "vision_param_count"]


# ------------------------------------------------------------------------------------------------
# The tower
# ------------------------------------------------------------------------------------------------

def rope_2d(rows: int, cols: int, head_dim: int, theta: float, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [rows*cols, head_dim] for rotate-half RoPE: first half of the angles from the row, second
    half from the column, each with head_dim/4 frequencies."""
    if head_dim % 4:
        raise ValueError(f"2D RoPE needs a head dimension divisible by 4, got {head_dim}")
    quarter = head_dim // 4
    inv = 1.0 / theta ** (torch.arange(quarter, device=device, dtype=torch.float32) / quarter)
    r = torch.arange(rows, device=device, dtype=torch.float32).repeat_interleave(cols)
    c = torch.arange(cols, device=device, dtype=torch.float32).repeat(rows)
    ang = torch.cat([r[:, None] * inv, c[:, None] * inv], dim=-1)      # [N, head_dim/2]
    ang = torch.cat([ang, ang], dim=-1)                                   # [N, head_dim]
    return ang.cos(), ang.sin()


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-b, a], dim=-1) * sin


class VisionAttention(torch.nn.Module):
    def __init__(self, vc: VisionConfig):
        super().__init__()
        self.heads = vc.num_attention_heads
        self.head_dim = vc.hidden_size // vc.num_attention_heads
        self.qkv = torch.nn.Linear(vc.hidden_size, 3 * vc.hidden_size, bias=True)
        self.proj = torch.nn.Linear(vc.hidden_size, vc.hidden_size, bias=True)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                want_probs: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        if want_probs:  # explicit softmax so a page can show which patches each patch reads
            probs = torch.softmax((q @ k.transpose(-1, -2)) / math.sqrt(self.head_dim), dim=-1)
            out = probs @ v
        else:
            probs, out = None, F.scaled_dot_product_attention(q, k, v)
        return self.proj(out.transpose(1, 2).reshape(b, n, -1)), probs


class VisionMLP(torch.nn.Module):
    def __init__(self, vc: VisionConfig):
        super().__init__()
        self.w1 = torch.nn.Linear(vc.hidden_size, vc.intermediate_size, bias=False)
        self.w2 = torch.nn.Linear(vc.intermediate_size, vc.hidden_size, bias=False)
        self.w3 = torch.nn.Linear(vc.hidden_size, vc.intermediate_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class VisionBlock(torch.nn.Module):
    def __init__(self, vc: VisionConfig):
        super().__init__()
        self.attn_norm = RMSNorm(vc.hidden_size, VISION_EPS)
        self.attn = VisionAttention(vc)
        self.ffn_norm = RMSNorm(vc.hidden_size, VISION_EPS)
        self.mlp = VisionMLP(vc)

    def forward(self, x, cos, sin, want_probs: bool = False):
        y, probs = self.attn(self.attn_norm(x), cos, sin, want_probs)
        x = x + y
        return x + self.mlp(self.ffn_norm(x)), probs


@dataclass
class TowerOutput:
    features: torch.Tensor            # [B, patch_rows, patch_cols, vision hidden] after the final norm
    attn: list[torch.Tensor] | None   # per block [B, heads, N, N] when asked


class VisionModel(torch.nn.Module):
    """Patch embedding + pre-norm transformer blocks with 2D RoPE + final norm (native prefix `vision.`)."""

    def __init__(self, cfg: V41Config | VisionConfig):
        super().__init__()
        vc = cfg.vision_config if isinstance(cfg, V41Config) else cfg
        if vc is None:
            raise ValueError("this config has no vision_config")
        vc.validate()
        self.vc = vc
        self.patch_embed = torch.nn.Conv2d(3, vc.hidden_size, vc.patch_size, stride=vc.patch_size, bias=True)
        self.blocks = torch.nn.ModuleList(VisionBlock(vc) for _ in range(vc.num_hidden_layers))
        self.norm = RMSNorm(vc.hidden_size, VISION_EPS)

    def forward(self, pixels: torch.Tensor, want_attn: bool = False) -> TowerOutput:
        p = self.vc.patch_size
        if pixels.ndim != 4 or pixels.shape[1] != 3 or pixels.shape[2] % p or pixels.shape[3] % p:
            raise ImageError(f"pixels must be [B, 3, H, W] with H, W multiples of patch_size={p}, "
                             f"got {tuple(pixels.shape)}")
        x = self.patch_embed(pixels.to(self.patch_embed.weight.dtype))   # [B, h, gh, gw]
        b, h, gh, gw = x.shape
        x = x.flatten(2).transpose(1, 2)                                    # [B, N, h] row-major patches
        cos, sin = rope_2d(gh, gw, h // self.vc.num_attention_heads, self.vc.rope_theta, x.device)
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        maps = [] if want_attn else None
        for blk in self.blocks:
            x, probs = blk(x, cos, sin, want_attn)
            if maps is not None:
                maps.append(probs)
        return TowerOutput(self.norm(x).view(b, gh, gw, h), maps)


def pixel_unshuffle(features: torch.Tensor, ratio: int) -> torch.Tensor:
    """[B, gh, gw, h] -> [B, gh/r, gw/r, r*r*h]: each r x r square of patch vectors becomes one vector
    (row-major inside the square)."""
    b, gh, gw, h = features.shape
    if gh % ratio or gw % ratio:
        raise ImageError(f"a {gh} x {gw} patch grid is not divisible by downsample_ratio={ratio}")
    x = features.view(b, gh // ratio, ratio, gw // ratio, ratio, h).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(b, gh // ratio, gw // ratio, ratio * ratio * h)


class Aligner(torch.nn.Module):
    """Projector from unshuffled tower vectors to the language model's hidden size (prefix `aligner.`)."""

    def __init__(self, cfg: V41Config):
        super().__init__()
        vc = cfg.vision_config
        self.ratio = vc.downsample_ratio
        self.fc1 = torch.nn.Linear(vc.hidden_size * vc.downsample_ratio ** 2, cfg.hidden_size, bias=True)
        self.fc2 = torch.nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=True)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """[B, gh, gw, h] tower output -> [B, rows, cols, D] image-token embeddings."""
        return self.fc2(F.gelu(self.fc1(pixel_unshuffle(features, self.ratio))))


# ------------------------------------------------------------------------------------------------
# Attaching to a V41Model
# ------------------------------------------------------------------------------------------------

def has_vision(model) -> bool:
    return getattr(model, "vision", None) is not None and getattr(model, "aligner", None) is not None


def attach_vision(model, seed: int | None = None):
    """Register `model.vision`, `model.aligner` and the `image_start/end/newline` vectors, so that
    `model.state_dict()` holds them under the native names. With `seed`, draw fresh weights
    (otherwise PyTorch's defaults, which also work on the meta device). Returns the model."""
    cfg = model.cfg
    if cfg.vision_config is None:
        raise ValueError("the model's config has no vision_config")
    dev = model.embed.weight.device
    dtype = model.embed.weight.dtype
    model.set_part("vision", VisionModel(cfg).to(device=dev, dtype=dtype))
    model.set_part("aligner", Aligner(cfg).to(device=dev, dtype=dtype))
    model.set_vectors({name: torch.nn.Parameter(torch.zeros(cfg.hidden_size, device=dev, dtype=dtype))
                       for name in MARKERS})
    if seed is not None and dev.type != "meta":
        init_vision(model, seed)
    return model


def init_vision(model, seed: int = 0) -> None:
    """Fresh vision weights: N(0, 1/fan_in) matrices, zero biases, unit norms; markers at the scale
    of the text embedding rows so they start as ordinary-looking tokens."""
    g = torch.Generator().manual_seed(seed)
    emb_std = float(model.embed.weight.detach().float().std()) or model.cfg.initializer_range
    with torch.no_grad():
        for name, p in vision_named_parameters(model):
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            elif name.endswith(".bias"):
                p.zero_()
            elif name in MARKERS:
                p.copy_(torch.randn(p.shape, generator=g) * emb_std)
            else:
                fan_in = p[0].numel()
                p.copy_(torch.randn(p.shape, generator=g) * fan_in ** -0.5)
        # fc2's input (after GELU) has entries of order 1, so scaling by the embedding std starts the
        # image tokens at roughly the size of text embedding rows
        model.aligner.fc2.weight.mul_(emb_std)


def vision_named_parameters(model):
    return [(n, p) for n, p in model.named_parameters() if n.startswith(VISION_PREFIXES)]


def vision_state_dict(model) -> dict[str, torch.Tensor]:
    return {k: v for k, v in model.state_dict().items() if k.startswith(VISION_PREFIXES)}


def vision_param_count(cfg: V41Config) -> int:
    """Parameters of tower + aligner + markers, from the config (closed form; equals the modules)."""
    v = cfg.vision_config
    if v is None:
        return 0
    h, i, d = v.hidden_size, v.intermediate_size, cfg.hidden_size
    block = (3 * h * h + 3 * h) + (h * h + h) + 3 * h * i + 2 * h   # qkv, proj (with biases), SwiGLU, 2 norms
    patch = 3 * v.patch_size ** 2 * h + h
    aligner = (h * v.downsample_ratio ** 2) * d + d + d * d + d
    return v.num_hidden_layers * block + patch + h + aligner + 3 * d


# ------------------------------------------------------------------------------------------------
# Image-token embeddings
# ------------------------------------------------------------------------------------------------

def encode_image(model, pixels: torch.Tensor) -> torch.Tensor:
    """[B, 3, H, W] -> [B, rows, cols, D] image-token embeddings (tower, then aligner)."""
    if not has_vision(model):
        raise ImageError("this model has no vision tower: its weights carry no vision.* tensors "
                         "(call model.arch.vision.attach_vision(model) for random ones)")
    return model.aligner(model.vision(pixels.to(model.embed.weight.device)).features)


def image_span_embeds(model, tokens: torch.Tensor) -> torch.Tensor:
    """[B, rows, cols, D] -> [B, rows*(cols+1)+2, D] in span order: start, rows (+ newline), end."""
    b, rows, cols, d = tokens.shape
    nl = model.image_newline.to(tokens.dtype).view(1, 1, 1, d).expand(b, rows, 1, d)
    body = torch.cat([tokens, nl], dim=2).reshape(b, rows * (cols + 1), d)
    start = model.image_start.to(tokens.dtype).view(1, 1, d).expand(b, 1, d)
    end = model.image_end.to(tokens.dtype).view(1, 1, d).expand(b, 1, d)
    return torch.cat([start, body, end], dim=1)
