"""Generated training scenes: coloured boxes holding a key, a coin or a letter, with captions and questions.

Follows docs/design/architecture.md §3.6 (the vision tower is trained on the teaching texts' running example as
pictures): "The key is in the blue box." and "Where is the key?", as the recall stories ask it in text
(lab/corpus/stories.py). A scene is a pure function of its seed; seeds are disjoint between training, held-out
and the app's sample scenes, as for the stories.
"""

from __future__ import annotations

import io
import random
from dataclasses import dataclass, field

from PIL import Image, ImageDraw

TRAIN_SEED_BASE = 0
HELDOUT_SEED_BASE = 1_000_000_000
SAMPLE_SEED_BASE = 2_000_000_000


# Colour words from the story generator (lab/corpus/stories.py) that draw as clearly different colours.
PALETTE: dict[str, tuple[int, int, int]] = {
    "red": (214, 39, 40), "blue": (31, 90, 220), "green": (44, 160, 44), "yellow": (240, 210, 30),
    "pink": (247, 150, 200), "purple": (128, 50, 170), "orange": (250, 130, 20), "brown": (125, 75, 35),
}
OBJECTS = ("key", "coin", "letter")
INK = (25, 25, 25)


@dataclass
class Box:
    colour: str
    xyxy: tuple[float, float, float, float]   # in units of the picture side (0..1)
    content: str | None = None


@dataclass
class Scene:
    seed: int
    boxes: list[Box]
    background: tuple[int, int, int]
    placed: dict[str, str] = field(default_factory=dict)  # object -> colour of its box

    def caption(self) -> str:
        return " ".join(f"The {o} is in the {c} box." for o, c in self.placed.items())

    def questions(self) -> list[tuple[str, str, str]]:
        """(question, answer sentence, answer colour) for each object in the picture."""
        return [(f"Where is the {o}?", f"The {o} is in the {c} box.", c) for o, c in self.placed.items()]


def make_scene(seed: int, n_boxes: int | None = None, n_objects: int | None = None) -> Scene:
    """2-4 boxes of different colours on a 2 x 2 layout, 1-3 different objects in different boxes."""
    rng = random.Random(seed)
    n_boxes = n_boxes or rng.randint(2, 4)
    n_objects = min(n_objects or rng.randint(1, min(3, n_boxes)), n_boxes, len(OBJECTS))
    colours = rng.sample(list(PALETTE), n_boxes)
    cells = rng.sample([(0, 0), (0, 1), (1, 0), (1, 1)], n_boxes)
    boxes = []
    for col, (r, c) in zip(colours, cells):
        side = rng.uniform(0.36, 0.44)
        x0 = c * 0.5 + rng.uniform(0.02, 0.48 - side)
        y0 = r * 0.5 + rng.uniform(0.02, 0.48 - side)
        boxes.append(Box(col, (x0, y0, x0 + side, y0 + side)))
    objs = rng.sample(list(OBJECTS), n_objects)
    placed = {}
    for obj, box in zip(objs, rng.sample(boxes, n_objects)):
        box.content = obj
        placed[obj] = box.colour
    bg = tuple(rng.randint(225, 250) for _ in range(3))
    return Scene(seed=seed, boxes=boxes, background=bg, placed=placed)


def _draw_object(d: ImageDraw.ImageDraw, kind: str, cx: float, cy: float, s: float) -> None:
    """An object of size ~s centred at (cx, cy), in dark ink."""
    lw = max(1, round(s * 0.14))
    if kind == "key":      # a ring, a shaft to the right, two teeth down
        r = s * 0.22
        hx = cx - s * 0.28
        d.ellipse((hx - r, cy - r, hx + r, cy + r), outline=INK, width=lw)
        d.line((hx + r, cy, cx + s * 0.48, cy), fill=INK, width=lw)
        for tx in (cx + s * 0.22, cx + s * 0.42):
            d.line((tx, cy, tx, cy + s * 0.24), fill=INK, width=lw)
    elif kind == "coin":   # a solid disc with a light rim
        r = s * 0.36
        d.ellipse((cx - r, cy - r, cx + r, cy + r), fill=INK)
        r2 = r * 0.6
        d.ellipse((cx - r2, cy - r2, cx + r2, cy + r2), outline=(200, 200, 200), width=max(1, lw // 2))
    elif kind == "letter":  # an envelope: white rectangle, dark outline, a V flap
        w, h = s * 0.9, s * 0.6
        x0, y0 = cx - w / 2, cy - h / 2
        d.rectangle((x0, y0, x0 + w, y0 + h), fill=(255, 255, 255), outline=INK, width=lw)
        d.line((x0, y0, cx, cy + h * 0.1, x0 + w, y0), fill=INK, width=lw)
    else:
        raise ValueError(f"unknown object {kind!r}")


def draw_scene(scene: Scene, size: int = 64, supersample: int = 4) -> Image.Image:
    """The scene as a `size` x `size` RGB picture (drawn larger and scaled down for clean edges)."""
    big = size * supersample
    im = Image.new("RGB", (big, big), scene.background)
    d = ImageDraw.Draw(im)
    for box in scene.boxes:
        x0, y0, x1, y1 = (v * big for v in box.xyxy)
        d.rectangle((x0, y0, x1, y1), fill=PALETTE[box.colour], outline=INK, width=max(1, big // 64))
        if box.content:
            _draw_object(d, box.content, (x0 + x1) / 2, (y0 + y1) / 2, (x1 - x0) * 0.62)
    return im.resize((size, size), Image.Resampling.LANCZOS) if supersample > 1 else im


def sample_scenes(n: int = 4) -> list[Scene]:
    """Fixed scenes for the app's "try a sample" buttons (their own seed range)."""
    return [make_scene(SAMPLE_SEED_BASE + i) for i in range(n)]


def scene_png(scene: Scene, size: int = 256) -> bytes:
    buf = io.BytesIO()
    draw_scene(scene, size).save(buf, format="PNG")
    return buf.getvalue()
