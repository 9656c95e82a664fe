"""The weights that ship with the project, found from the package itself (never from the working folder).

`shipped_weights()` is the directory `load` reads for the trained tiny model; `random_tiny(seed)` builds the
same architecture with random weights and the shipped tokenizer bound, exactly as the app's "Random tiny"
choice does. A script run from any folder gets the same model as the app (the "Reproduce in Python"
snippets rely on this).
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..arch.engram import compressed_token_map
from ..config import V41Config
from ..corpus.tokenizer import load_tokenizer
from ..model import V41Model

ROOT = Path(__file__).resolve().parents[2]


def shipped_weights() -> Path:
    """The shipped trained tiny weights' directory (config.json, model.safetensors, tokenizer.json)."""
    return ROOT / "data" / "weights" / "tiny"


def random_tiny(seed: int = 0, device: str | torch.device | None = None):
    """The tiny preset with random weights (`init_weights(seed)`) and the shipped tokenizer bound."""
    dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
    tok = load_tokenizer(shipped_weights() / "tokenizer.json")
    _, n = compressed_token_map(tok)
    cfg = V41Config.preset("tiny").replace(engram_compressed_vocab_size=n).validate()
    torch.manual_seed(seed)
    m = V41Model(cfg).init_weights(seed).to(dev).eval()
    return m.bind_tokenizer(tok)
