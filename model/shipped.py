"""The sets of trained weights that ship with the project, as data: each set's kind, directory, short title and
what it is for. Shipping another set is one more row of `SHIPPED`.

A leaf: it knows where the files are, not what they hold (config.json, model.safetensors, tokenizer.json and the
training record training.json sit in each directory) nor what they measure; docs/design/checkpoints.md describes
the files, lab/README.md how each set was trained.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# found from the package itself, never from the working folder
WEIGHTS_ROOT = Path(__file__).resolve().parents[1] / "data" / "weights"


@dataclass(frozen=True)
class ShippedSet:
    """One shipped set of trained weights."""

    kind: str           # "text" | "unaided" | "recall": how the app and the lessons name it
    folder: str         # its directory under data/weights
    title: str          # a column or caption title, plain text
    purpose: str        # what the set is here to show, one line
    heading: str        # its picture's heading beside another set's ("Plain training")
    short: str          # its label in a one-row choice of what to draw beside ("recall, plain training")
    far_recall: bool    # trained to recall a fact far back (the side-by-side draws these first)

    @property
    def directory(self) -> Path:
        return WEIGHTS_ROOT / self.folder


SHIPPED: tuple[ShippedSet, ...] = (
    ShippedSet("text", "tiny", "Text model",
               "English from a small corpus, with the configuration's windows",
               "Text model", "text model", far_recall=False),
    ShippedSet("unaided", "unaided", "Recall checkpoint, plain training",
               "far recall learned from the answers alone, with 2-token windows",
               "Plain training", "recall, plain training", far_recall=True),
    ShippedSet("recall", "recall", "Recall checkpoint, shown where to look",
               "far recall trained with losses that point attention and index scores at the fact",
               "Shown where to look", "recall, shown where to look", far_recall=True),
)

KINDS = tuple(s.kind for s in SHIPPED)
RECALL_KINDS = tuple(s.kind for s in SHIPPED if s.far_recall)   # in SHIPPED's order: plain training first


def shipped_set(kind: str = "text") -> ShippedSet:
    """The shipped set of `kind` (one of KINDS); a KeyError names the kinds there are."""
    for s in SHIPPED:
        if s.kind == kind:
            return s
    raise KeyError(f"no shipped weights of kind {kind!r}; kinds: {', '.join(KINDS)}")


def shipped_weights(kind: str = "text") -> Path:
    """The directory of a shipped set of trained weights (the text model by default)."""
    return shipped_set(kind).directory
