"""Pictures in: upload checks, the resize policy and pixel tensors.

Follows docs/design/architecture.md §1 and §3.6 (the vision tower's `vision_config`: patch size, pixel-unshuffle
ratio, `max_image_tokens`, `min_pixels`, `max_wh_ratio`).

Two parts, both free of Streamlit (the generated training scenes are in model/scenes.py;
the prompt around a picture is model/inference/vision_inputs.py):

1. `load_image(data)`: an uploaded file's bytes -> an RGB `PIL.Image`, or `ImageError` with a
   message a reader can act on. The type is decided by the file's first bytes (PNG or JPEG), never
   by its name; size limits apply to the bytes and, before decoding, to the pixel count in the header.
2. `plan_grid(vision_config, width, height) -> ImageGrid` and `to_pixels(image, grid)`: the resize
   policy. One view per image (no tiles): the picture is padded to the allowed aspect ratio, scaled
   so its pixel count lies between `min_pixels` and the `max_image_tokens` budget, and snapped to a
   multiple of `patch_size * downsample_ratio` (one image token per such square). A config with
   `image_size > 0` (the tiny presets) pads to a square and resizes to that fixed side instead.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass

import torch
from PIL import Image

from ..config import VisionConfig
from ..errors import ImageError

MAX_UPLOAD_BYTES = 8 * 1024 * 1024       # what the app accepts in one file
MAX_UPLOAD_PIXELS = 24_000_000           # checked from the header, before any decoding
MIN_SIDE = 4                             # smaller pictures hold nothing a patch could show
PAD_RGB = (128, 128, 128)                # padding normalises to 0, "no signal"
ACCEPTED_MODES = ("1", "L", "LA", "P", "PA", "RGB", "RGBA", "RGBa", "CMYK", "YCbCr")


# ------------------------------------------------------------------------------------------------
# Upload checks
# ------------------------------------------------------------------------------------------------

_SIGNATURES = (  # (prefix test, name) for formats we recognise only to name them in the message
    (lambda b: b.startswith(b"GIF87a") or b.startswith(b"GIF89a"), "a GIF image"),
    (lambda b: b[:4] == b"RIFF" and b[8:12] == b"WEBP", "a WebP image"),
    (lambda b: b.startswith(b"BM"), "a BMP image"),
    (lambda b: b[:4] in (b"II*\x00", b"MM\x00*"), "a TIFF image"),
    (lambda b: b.startswith(b"%PDF"), "a PDF document"),
    (lambda b: b[4:8] == b"ftyp", "an HEIC/AVIF or MP4 file"),
    (lambda b: b.startswith(b"PK\x03\x04"), "a ZIP archive"),
    (lambda b: b.lstrip()[:1] == b"<", "an SVG/XML or HTML text file"),
)


def sniff_format(head: bytes) -> str | None:
    """'PNG' or 'JPEG' from the first bytes, else None."""
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "PNG"
    if head.startswith(b"\xff\xd8\xff"):
        return "JPEG"
    return None


def load_image(data: bytes | bytearray | memoryview, *, max_bytes: int = MAX_UPLOAD_BYTES,
               max_pixels: int = MAX_UPLOAD_PIXELS) -> Image.Image:
    """Bytes of an uploaded file -> RGB image (alpha composited on white); `ImageError` otherwise."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ImageError(f"expected the file's bytes, got {type(data).__name__}")
    data = bytes(data)
    if not data:
        raise ImageError("The file is empty.")
    if len(data) > max_bytes:
        raise ImageError(f"The file is {len(data) / 2**20:.1f} MiB; the limit is {max_bytes / 2**20:.1f} MiB. "
                         f"Save a smaller PNG or JPEG.")
    fmt = sniff_format(data[:16])
    if fmt is None:
        what = next((name for test, name in _SIGNATURES if test(data[:16])), None)
        raise ImageError(f"This file is {what}; only PNG and JPEG images are accepted." if what else
                         "This file is not a PNG or JPEG image (its first bytes match neither format).")
    try:
        im = Image.open(io.BytesIO(data), formats=[fmt])
    except Image.DecompressionBombError:
        raise ImageError(f"The image header declares far more than {max_pixels / 1e6:g} million pixels; "
                         f"scale it down first.") from None
    except Exception as e:  # PIL raises several types for a damaged header
        raise ImageError(f"The {fmt} header cannot be read: the file is corrupt ({e}).") from None
    w, h = im.size
    if w * h > max_pixels:
        raise ImageError(f"The image is {w} x {h} = {w * h / 1e6:.1f} million pixels; the limit is "
                         f"{max_pixels / 1e6:g} million. Scale it down first.")
    if min(w, h) < MIN_SIDE:
        raise ImageError(f"The image is {w} x {h} pixels; each side must be at least {MIN_SIDE}.")
    if im.mode not in ACCEPTED_MODES:
        raise ImageError(f"The image has pixel mode {im.mode!r} (16-bit or floating-point samples), which is "
                         f"not supported; save it as an 8-bit RGB or greyscale PNG or JPEG.")
    try:
        im.load()
    except Exception as e:  # truncated data, bad CRC, bomb limits ...
        raise ImageError(f"The {fmt} data is corrupt or truncated ({e}).") from None
    return to_rgb(im)


def to_rgb(im: Image.Image) -> Image.Image:
    """Any accepted mode -> RGB; transparent parts become white (a page background, not black)."""
    if im.mode not in ACCEPTED_MODES:
        raise ImageError(f"pixel mode {im.mode!r} is not supported; use 8-bit RGB or greyscale")
    if im.mode in ("P", "PA") or "A" in im.getbands() or im.mode == "RGBa":
        rgba = im.convert("RGBA")
        bg = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(bg, rgba).convert("RGB")
    return im.convert("RGB")


# ------------------------------------------------------------------------------------------------
# The resize policy
# ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ImageGrid:
    """How one picture becomes image tokens."""

    src_width: int
    src_height: int
    width: int                 # model input size in pixels (a multiple of `unit`)
    height: int
    content: tuple[int, int, int, int]  # (x0, y0, x1, y1) of the picture inside the padded input
    patch_size: int
    downsample_ratio: int

    @property
    def unit(self) -> int:
        """Side in pixels of the square one image token covers."""
        return self.patch_size * self.downsample_ratio

    @property
    def patch_rows(self) -> int:
        return self.height // self.patch_size

    @property
    def patch_cols(self) -> int:
        return self.width // self.patch_size

    @property
    def rows(self) -> int:
        return self.height // self.unit

    @property
    def cols(self) -> int:
        return self.width // self.unit

    @property
    def n_patches(self) -> int:
        return self.patch_rows * self.patch_cols

    @property
    def n_image_tokens(self) -> int:
        """Tower outputs after pixel-unshuffle: one per `unit` x `unit` square."""
        return self.rows * self.cols

    @property
    def n_span_tokens(self) -> int:
        """Positions the image occupies in the sequence: start, rows of tokens each + newline, end."""
        return self.rows * (self.cols + 1) + 2


def _pad_box(w: int, h: int, max_wh_ratio: float | None, square: bool) -> tuple[int, int, int, int]:
    """(canvas_w, canvas_h, x0, y0): the picture centred on a canvas with an allowed aspect ratio."""
    cw, ch = w, h
    if square:
        cw = ch = max(w, h)
    elif max_wh_ratio:
        if w / h > max_wh_ratio:
            ch = math.ceil(w / max_wh_ratio)
        elif h / w > max_wh_ratio:
            cw = math.ceil(h / max_wh_ratio)
    return cw, ch, (cw - w) // 2, (ch - h) // 2


def plan_grid(vc: VisionConfig, width: int, height: int) -> ImageGrid:
    """The model input size for a `width` x `height` picture under the config's budget."""
    if width < 1 or height < 1:
        raise ImageError(f"an image needs a positive size, got {width} x {height}")
    unit = vc.patch_size * vc.downsample_ratio
    cw, ch, x0, y0 = _pad_box(width, height, vc.max_wh_ratio, square=vc.image_size > 0)
    if vc.image_size > 0:
        side = vc.image_size
        if side % unit:
            raise ImageError(f"vision_config.image_size={side} is not a multiple of patch_size x downsample_ratio "
                             f"= {unit}")
        out_w = out_h = side
    else:
        # scale s: at least min_pixels, at most max_image_tokens squares of unit x unit
        s = 1.0
        if cw * ch < vc.min_pixels:
            s = math.sqrt(vc.min_pixels / (cw * ch))
        budget = vc.max_image_tokens * unit * unit
        if cw * ch * s * s > budget:
            s = math.sqrt(budget / (cw * ch))
        rows, cols = max(1, round(ch * s / unit)), max(1, round(cw * s / unit))
        while rows * cols > vc.max_image_tokens:  # rounding up may overshoot by a row or a column
            if cols / rows > cw / ch:
                cols -= 1
            else:
                rows -= 1
        out_w, out_h = cols * unit, rows * unit
    sx, sy = out_w / cw, out_h / ch
    content = (round(x0 * sx), round(y0 * sy), round((x0 + width) * sx), round((y0 + height) * sy))
    grid = ImageGrid(width, height, out_w, out_h, content, vc.patch_size, vc.downsample_ratio)
    if grid.n_image_tokens > vc.max_image_tokens:
        raise ImageError(f"{grid.rows} x {grid.cols} image tokens exceed max_image_tokens={vc.max_image_tokens}")
    return grid


def resize_to_grid(image: Image.Image, grid: ImageGrid) -> Image.Image:
    """The RGB picture the tower sees: padded with grey to the canvas, resized to the grid size."""
    im = to_rgb(image)
    if im.size != (grid.src_width, grid.src_height):
        raise ImageError(f"the grid was planned for {grid.src_width} x {grid.src_height}, "
                         f"the image is {im.size[0]} x {im.size[1]}")
    x0, y0, x1, y1 = grid.content
    out = Image.new("RGB", (grid.width, grid.height), PAD_RGB)
    if (x1 - x0, y1 - y0) != im.size:
        im = im.resize((max(1, x1 - x0), max(1, y1 - y0)), Image.Resampling.BICUBIC)
    out.paste(im, (x0, y0))
    return out


def to_pixels(image: Image.Image, grid: ImageGrid) -> torch.Tensor:
    """[3, H, W] float32 in [-1, 1] (mean 0.5, std 0.5 per channel)."""
    im = resize_to_grid(image, grid)
    t = torch.frombuffer(bytearray(im.tobytes()), dtype=torch.uint8).view(grid.height, grid.width, 3)
    return t.permute(2, 0, 1).float().div(127.5).sub(1.0)
