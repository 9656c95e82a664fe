"""A prompt with a picture: the image span's token ids, the model inputs, greedy answers and a trace.

Follows docs/design/architecture.md §3.6 (layout of the image span: `image_start`, rows of image tokens each
followed by `image_newline`, `image_end`; `image_mask` True over the whole span). The tower and aligner maths
(pixels -> image-token embeddings) is model/arch/vision.py; the resize policy and pixels are
model/inference/images.py.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from PIL import Image

from ..arch.backbone import Backbone
from ..arch.vision import MARKERS, encode_image, image_span_embeds
from ..errors import ImageError, InputError
from .images import ImageGrid, plan_grid, to_pixels
from .sampling import eos_ids
from .trace import Trace, Tracer

IMAGE_PLACEHOLDER = "<image>"


def marker_ids(model) -> dict[str, int]:
    """Token ids written into the span: the config's image_token_id plus the tokenizer's marker ids
    (the image id again when a tokenizer lacks them: the embeddings come from the markers anyway)."""
    img = model.cfg.image_token_id
    out = {"image": img}
    tok = getattr(model, "tokenizer", None)
    for name in MARKERS:
        tid = tok.token_to_id(f"<|{name}|>") if tok is not None else None
        out[name] = img if tid is None else int(tid)
    return out


def span_ids(model, grid: ImageGrid) -> list[int]:
    """[start] + rows x ([image] * cols + [newline]) + [end]."""
    m = marker_ids(model)
    row = [m["image"]] * grid.cols + [m["image_newline"]]
    return [m["image_start"]] + row * grid.rows + [m["image_end"]]


class VisionInputs(NamedTuple):
    input_ids: torch.Tensor     # [1, S]
    image_mask: torch.Tensor    # [1, S] True over the image span (markers included)
    image_embeds: torch.Tensor  # [1, n_span, D]: what the forward scatters into the masked positions


def doc_prefix(model) -> list[int]:
    """Documents in our training stream start after <|eos|> (lab/corpus/dataset.py); the release uses bos."""
    eos = model.cfg.eos_token_id
    eos = eos[0] if isinstance(eos, list) else eos
    return [] if eos is None else [int(eos)]


@torch.no_grad()
def build_inputs(model, text: str, image: Image.Image | None, *, prefix_ids: list[int] | None = None
                 ) -> VisionInputs:
    """Token ids, image mask and image embeddings for `text` with `image` placed at "<image>" (or first).

    Without an image this is the plain text prompt (mask all False, no embeddings)."""
    pre = doc_prefix(model) if prefix_ids is None else list(prefix_ids)
    before, after = text.split(IMAGE_PLACEHOLDER, 1) if IMAGE_PLACEHOLDER in text else ("", text)
    if IMAGE_PLACEHOLDER in after:
        raise InputError("one image per prompt: the text has more than one <image> placeholder")
    def enc(s):
        return model.encode(s) if s else []

    dev = model.embed.weight.device
    if image is None:
        ids = pre + enc(before) + enc(after)
        if not ids:
            raise InputError("the prompt is empty")
        t = torch.tensor([ids], dtype=torch.long, device=dev)
        return VisionInputs(t, torch.zeros_like(t, dtype=torch.bool),
                            torch.zeros(1, 0, model.cfg.hidden_size, device=dev))
    vc = model.cfg.vision_config
    if vc is None:
        raise ImageError("this model's config has no vision_config")
    grid = plan_grid(vc, *image.size)
    embeds = image_span_embeds(model, encode_image(model, to_pixels(image, grid)[None]))
    head, span, tail = pre + enc(before), span_ids(model, grid), enc(after)
    ids = torch.tensor([head + span + tail], dtype=torch.long, device=dev)
    mask = torch.zeros_like(ids, dtype=torch.bool)
    mask[0, len(head):len(head) + len(span)] = True
    return VisionInputs(ids, mask, embeds.to(model.embed.weight.dtype))


def image_grid(model, image: Image.Image) -> ImageGrid:
    if model.cfg.vision_config is None:
        raise ImageError("this model's config has no vision_config")
    return plan_grid(model.cfg.vision_config, *image.size)


@torch.no_grad()
def generate_with_image(model, inputs: VisionInputs, max_new_tokens: int = 12, stop_at: tuple[str, ...] = (".",)
                        ) -> list[int]:
    """Greedy continuation of a prompt with an image (a full forward per token: prompts here are short,
    and the engine's chunked prefill does not carry image embeddings)."""
    ids, mask, emb = inputs
    out: list[int] = []
    eos = eos_ids(model)  # one id or a list, as the config gives it
    for _ in range(max_new_tokens):
        logits = model(ids, image_embeds=emb, image_mask=mask, last_only=True).logits[0, -1]
        nxt = int(logits.argmax())
        out.append(nxt)
        if nxt in eos or (model.tokenizer is not None and model.decode([nxt]).strip() in stop_at):
            break
        ids = torch.cat([ids, ids.new_tensor([[nxt]])], dim=1)
        mask = torch.cat([mask, mask.new_zeros(1, 1)], dim=1)
    return out


@torch.no_grad()
def trace_with_image(model: Backbone, inputs: VisionInputs, lens_topk: int = 5) -> Trace:
    """A summary trace (model/inference/trace.py) of one exact forward over a prompt with an image."""
    tracer = Tracer(lens_topk=lens_topk)
    ids, mask, emb = inputs
    model(ids, trace=tracer, image_embeds=emb if mask.any() else None, image_mask=mask if mask.any() else None)
    tr = tracer.result("exact")
    tr.meta["image_mask"] = mask.cpu()
    return tr
