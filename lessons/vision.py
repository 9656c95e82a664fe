"""Images in: how a picture becomes image tokens, and what the language model does with them.

Follows docs/design/architecture.md §3.6 and docs/design/checkpoints.md §4 (vision tower, aligner,
image_start/end/newline), docs/design/equations.md §9 (image-span tokens choose experts with `bias_vl`) and §3
(attention shares over window rows and selected entries). Pure computations over plain values, a `VisionConfig`, or
a trace from `model.inference.vision_inputs.trace_with_image`; every result carries the rows of its derivation so a
page can show how each number came about. No Streamlit here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from model import V41Config
from model.config import VisionConfig
from model.inference import ImageGrid, plan_grid


def _vision_layers(preset: str) -> int:
    return V41Config.preset(preset).vision_config.num_hidden_layers


INTRO = (
    "A picture cannot go through the tokenizer. It takes a side entrance instead: a separate network, the "
    "vision encoder, cuts the picture into small square patches, lets the patches exchange information through "
    f"its own transformer layers ({_vision_layers('v4.1-flash')} in the release, {_vision_layers('tiny')} in the "
    "tiny model), and then merges neighbouring patches so that fewer vectors come out. A small projector, "
    "the aligner, turns each merged vector into a row of the same width as a word's row. From there on the "
    "language model treats those rows like any other positions in the text."
)
LAYOUT = (
    "In the sequence, the picture occupies one contiguous span: a start marker, then the image tokens one "
    "grid row at a time with a newline marker after each row, then an end marker. The markers are learned "
    "vectors, so the model can tell where the picture begins, where each row ends and where text resumes."
)
ROUTING = (
    "Inside each MoE layer, the router picks experts by score plus a per-expert selection bias. Tokens in the "
    "image span use a bias of their own (bias_vl) instead of the text bias, so image and text tokens can be "
    "balanced across the experts separately. The Engram memory does not look up n-grams that would reach "
    "into a picture: image positions are treated as gaps."
)
ATTENTION = (
    "Text tokens after the picture read it through attention like any earlier text: through their window of "
    "recent rows while the picture is close, and through selected compressed entries once it is further "
    "back. The share below adds up, for the text rows, how much of each layer's attention lands on image "
    "positions."
)


@dataclass
class Row:
    item: str
    formula: str
    value: int


@dataclass
class PatchGrid:
    grid: ImageGrid
    rows: list[Row]                               # the derivation, input size to sequence positions
    patch_boxes: list[tuple[int, int, int, int]]  # (x0, y0, x1, y1) per patch in model-input pixels
    token_boxes: list[tuple[int, int, int, int]]  # one per image token (ratio x ratio patches)

    @property
    def n_patches(self) -> int:
        return self.grid.n_patches

    @property
    def n_image_tokens(self) -> int:
        return self.grid.n_image_tokens

    @property
    def n_span_tokens(self) -> int:
        return self.grid.n_span_tokens


def patch_grid(vc: VisionConfig, width: int, height: int) -> PatchGrid:
    """How a `width` x `height` picture is sized, cut into patches and merged into image tokens."""
    g = plan_grid(vc, width, height)
    p, r = g.patch_size, g.downsample_ratio
    policy = (f"pad to a square, resize to {vc.image_size} x {vc.image_size}" if vc.image_size > 0 else
              f"scale into [min_pixels={vc.min_pixels:,}, max_image_tokens x {g.unit}^2] and snap to "
              f"multiples of {g.unit}")
    rows = [
        Row("picture", f"{width} x {height} pixels", width * height),
        Row("model input", f"{policy}: {g.width} x {g.height}", g.width * g.height),
        Row("patches", f"({g.height} / {p}) x ({g.width} / {p}) = {g.patch_rows} x {g.patch_cols}", g.n_patches),
        Row("image tokens", f"merge {r} x {r} patches: {g.patch_rows // r} x {g.patch_cols // r}", g.n_image_tokens),
        Row("newline markers", f"one per token row: {g.rows}", g.rows),
        Row("start + end markers", "2", 2),
        Row("sequence positions", f"{g.n_image_tokens} + {g.rows} + 2", g.n_span_tokens),
    ]
    patch_boxes = [(c * p, rr * p, (c + 1) * p, (rr + 1) * p)
                   for rr in range(g.patch_rows) for c in range(g.patch_cols)]
    u = g.unit
    token_boxes = [(c * u, rr * u, (c + 1) * u, (rr + 1) * u) for rr in range(g.rows) for c in range(g.cols)]
    return PatchGrid(g, rows, patch_boxes, token_boxes)


def token_counts(vc: VisionConfig, sizes: list[tuple[int, int]]) -> list[dict]:
    """A table of (picture size -> input size, patches, image tokens, sequence positions)."""
    out = []
    for w, h in sizes:
        g = plan_grid(vc, w, h)
        out.append({"picture": f"{w} x {h}", "input": f"{g.width} x {g.height}", "patches": g.n_patches,
                    "image tokens": g.n_image_tokens, "positions": g.n_span_tokens})
    return out


# ------------------------------------------------------------------------------------------------
# Which positions are image tokens
# ------------------------------------------------------------------------------------------------

@dataclass
class Position:
    position: int
    token_id: int
    kind: str            # "text", "image_start", "image", "image_newline", "image_end"
    row: int | None = None
    col: int | None = None


def image_positions(ids, image_mask, marker_ids: dict[str, int]) -> list[Position]:
    """Label every position of one sequence; image tokens get their (row, col) in the token grid."""
    ids = [int(t) for t in torch.as_tensor(ids).reshape(-1)]
    mask = [bool(m) for m in torch.as_tensor(image_mask).reshape(-1)]
    if len(ids) != len(mask):
        raise ValueError(f"{len(ids)} ids but {len(mask)} mask entries")
    by_id = {v: k for k, v in marker_ids.items() if k != "image"}
    out, row, col = [], 0, 0
    for p, (t, m) in enumerate(zip(ids, mask)):
        if not m:
            out.append(Position(p, t, "text"))
            continue
        kind = by_id.get(t, "image") if t != marker_ids.get("image") else "image"
        if kind == "image_start":
            row, col = 0, 0
            out.append(Position(p, t, kind))
        elif kind == "image_newline":
            out.append(Position(p, t, kind, row=row))
            row, col = row + 1, 0
        elif kind == "image_end":
            out.append(Position(p, t, kind))
        else:
            out.append(Position(p, t, "image", row=row, col=col))
            col += 1
    return out


# ------------------------------------------------------------------------------------------------
# Routing of image vs text tokens
# ------------------------------------------------------------------------------------------------

@dataclass
class RoutingShare:
    layer: int
    n_experts: int
    image: list[float]     # share of the image-span tokens' expert slots that went to each expert
    text: list[float]
    n_image_tokens: int
    n_text_tokens: int
    overlap: float         # sum over experts of min(image, text): 1 = same distribution, 0 = disjoint


def routing_shares(trace, image_mask, layer: int | None = None) -> list[RoutingShare]:
    """Per layer (or one layer): how image-span and text tokens spread over the routed experts."""
    mask = torch.as_tensor(image_mask).reshape(-1).bool()
    out = []
    for rec in trace.layers:
        if layer is not None and rec.spec.index != layer:
            continue
        if rec.router_experts is None:
            continue
        ex = rec.router_experts[0]                      # [S, k]
        n = rec.router_scores.shape[-1]
        m = mask[: ex.shape[0]]

        def share(sel: torch.Tensor) -> list[float]:
            picks = ex[sel].flatten()
            if picks.numel() == 0:
                return [0.0] * n
            return (torch.bincount(picks, minlength=n).float() / picks.numel()).tolist()

        img, txt = share(m), share(~m)
        out.append(RoutingShare(rec.spec.index, n, img, txt, int(m.sum()), int((~m).sum()),
                                sum(min(a, b) for a, b in zip(img, txt))))
    return out


# ------------------------------------------------------------------------------------------------
# Attention from text onto the picture
# ------------------------------------------------------------------------------------------------

@dataclass
class ImageAttention:
    layer: int
    role: str
    per_row: list[float]                 # for each text row after the picture: share on image positions
    rows: list[int]                      # the positions of those rows
    window: float                        # mean over rows and heads, via the window
    entries: float                       # via selected compressed entries (split by packed image tokens)
    total: float = field(init=False)

    def __post_init__(self):
        self.total = self.window + self.entries


def attention_to_image(trace, image_mask) -> list[ImageAttention]:
    """Per layer: the attention share that text rows after the picture give to image positions.

    Window slot j of the row at position t is the key at t-(W-1)+j; an entry e packs the tokens
    [e*ratio, (e+1)*ratio) and counts in proportion to how many of them are image tokens."""
    mask = torch.as_tensor(image_mask).reshape(-1).bool()
    if not bool(mask.any()):
        return []
    end = int(mask.nonzero().max())
    out = []
    for rec in trace.layers:
        sh = rec.shares
        if sh is None:
            continue
        pos = rec.positions
        rows = [i for i, p in enumerate(pos.tolist()) if p > end]
        if not rows:
            continue
        ridx = torch.tensor(rows)
        win = sh.window[0, ridx].float()                           # [R, H, W]
        wpos = sh.window_positions(pos[ridx])                      # [R, W]
        valid = (wpos >= 0) & (wpos < mask.numel())
        on_img = torch.zeros_like(wpos, dtype=torch.float32)
        on_img[valid] = mask[wpos[valid]].float()
        w_share = (win * on_img.unsqueeze(1)).sum(-1).mean(-1)     # [R]
        e_share = torch.zeros(len(rows))
        if sh.entries.shape[-1] and sh.ratio > 0:
            ids = sh.entry_ids[0, ridx]                            # [R, k]
            frac = torch.zeros_like(ids, dtype=torch.float32)
            for j in range(sh.ratio):
                tp = ids * sh.ratio + j
                ok = (ids >= 0) & (tp < mask.numel())
                frac[ok] += mask[tp[ok]].float()
            frac /= sh.ratio
            e_share = (sh.entries[0, ridx].float() * frac.unsqueeze(1)).sum(-1).mean(-1)
        per_row = (w_share + e_share).tolist()
        out.append(ImageAttention(rec.spec.index, rec.spec.role, per_row, [int(pos[i]) for i in rows],
                                  float(w_share.mean()), float(e_share.mean())))
    return out
