"""The one place a model is assembled from disk: `load(path)` for native and release-layout checkpoints.

Follows docs/design/checkpoints.md §1 (native tensor names), §3 and §5. `load` reads and checks
config.json, tells the layout apart (release: a `quantization_config` or a sharded index; native:
`model.safetensors`), builds the V41Model, attaches the optional parts the checkpoint has (parts.py),
fills it (native.py's strict state dict, or release.py's plans with layer streaming), binds
`tokenizer.json` and records `source_path`. A bad checkpoint raises `CheckpointError` naming the file
(and the tensor). Only safetensors are read: nothing in a checkpoint can execute code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import torch
from tokenizers import Tokenizer

from ..arch.engram import NgramHasher
from ..arch.rope import Rotary
from ..config import ConfigError, V41Config
from ..errors import CheckpointError
from ..model import V41Model
from ..shipped import shipped_weights
from ..tokenizer import compressed_token_map, load_tokenizer
from .native import default_device, load_state_dict, shard_map
from .parts import attach_parts, cast_params
from .quantization import QuantSpec
from .release import (
    check_complete,
    check_tensors,
    decide_residency,
    fill_resident,
    is_release,
    materialize,
    release_info,
)
from .shards import ReleaseCheckpoint
from .streaming import LayerLoad


def random_tiny(seed: int = 0, device: str | torch.device | None = None):
    """The tiny preset with random weights (`init_weights(seed)`) and the shipped tokenizer bound."""
    dev = device or default_device()
    tok = load_tokenizer(shipped_weights() / "tokenizer.json")
    _, n = compressed_token_map(tok)
    cfg = V41Config.preset("tiny").replace(engram_compressed_vocab_size=n).validate()
    torch.manual_seed(seed)
    m = V41Model(cfg).init_weights(seed).to(dev).eval()
    return m.bind_tokenizer(tok)


def load(path: str | Path, device: str | torch.device | None = None, dtype: torch.dtype | str | None = None,
         strict: bool = True, *, budget_bytes: int | str | None = None, stream: bool | None = None,
         progress: Callable[[LayerLoad], None] | None = None) -> V41Model:
    """Load a V41Model (with its tokenizer, drafter and vision tower when present) from a checkpoint directory.

    `dtype`: compute dtype (default: float32). Release layout only: `budget_bytes` is the memory the
    weights may use (default `memory_budget(device)`), `stream` forces (True) or forbids (False) layer
    streaming (None decides from the budget), `progress(LayerLoad)` is called per streamed layer load.
    """
    path = Path(path)
    cfg = read_config(path)
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype.replace("torch.", ""))
    device = torch.device(device) if device is not None else default_device()
    if is_release(path, cfg):
        model = _load_release(path, cfg, device, dtype or torch.float32, strict, budget_bytes, stream, progress)
    elif stream:
        raise ValueError(f"{path}: layer streaming needs the release layout (python -m model release export)")
    else:
        model = _load_native(path, cfg, device, dtype, strict)
    _bind_tokenizer(model, path / "tokenizer.json")
    model.source_path = str(path)
    return model


def read_config(path: Path) -> V41Config:
    """config.json, checked: a DeepSeek-V4.1 config (flat or composite) that validates; errors name the file."""
    if not path.is_dir():
        raise CheckpointError(f"{path}: not a checkpoint directory")
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise CheckpointError(f"{path}: not a checkpoint directory (no config.json)")
    try:
        raw = json.loads(cfg_file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{cfg_file}: not valid JSON ({e})") from None
    archs = raw.get("architectures") if isinstance(raw, dict) else None
    if isinstance(raw, dict) and "model_type" not in raw and archs and not any("V41" in str(a) for a in archs):
        raise CheckpointError(f"{cfg_file}: architectures {archs} is not DeepSeek-V4.1 (DeepseekV41ForCausalLM)")
    try:
        return V41Config.from_json(cfg_file)
    except ConfigError as e:  # name the file (from_json's own messages already do)
        msg = str(e)
        raise CheckpointError(msg if str(cfg_file) in msg else f"{cfg_file}: {msg}") from None


def _load_native(path: Path, cfg: V41Config, device: torch.device, dtype: torch.dtype | None,
                 strict: bool) -> V41Model:
    """model.safetensors under native names, copied strictly into a model built on the CPU."""
    model = V41Model(cfg)
    attach_parts(model, shard_map(path), cfg, notes=[])  # a part left out fails the strict load below
    load_state_dict(model, path, strict=strict)
    if dtype is not None:
        model.to(dtype)
    model.to(device)
    model.eval()
    return model


def _skeleton(cfg: V41Config, dtype: torch.dtype) -> V41Model:
    """The model on the meta device (shapes only) in the compute dtype, fp32-critical tensors in float32."""
    with torch.device("meta"):
        model = V41Model(cfg)
    cast_params(model, dtype)
    # non-persistent buffers computed at construction: rebuild them off the meta device
    model.rotary = Rotary(cfg)
    if model.hasher is not None:
        model.hasher = NgramHasher(cfg)
    return model


def _load_release(path: Path, cfg: V41Config, device: torch.device, dtype: torch.dtype, strict: bool,
                  budget_bytes: int | str | None, stream: bool | None,
                  progress: Callable[[LayerLoad], None] | None) -> V41Model:
    """Sharded FP8 / MXFP4 safetensors, checked from the headers first, resident or layer-streamed."""
    cfg_file = path / "config.json"
    spec = QuantSpec.parse(cfg.quantization_config, cfg_file)
    ck = ReleaseCheckpoint(path)
    model = _skeleton(cfg, dtype)
    notes: list[str] = []
    parts = attach_parts(model, ck.tensors, cfg, notes)
    plans = check_tensors(model, ck, spec, cfg_file, strict, notes)
    res = decide_residency(model, plans, parts, budget_bytes, stream, device, notes)
    materialize(model, parts, device, dtype, res.streamed)
    filled = fill_resident(model, plans, ck, spec, res, device, dtype, progress)
    check_complete(model, filled, res.streamed)
    model.requires_grad_(False)
    model.eval()
    model.release = release_info(path, spec, ck, res, dtype, notes)
    return model


def _bind_tokenizer(model: V41Model, tok: Path) -> None:
    if not tok.exists():
        return
    try:
        model.bind_tokenizer(Tokenizer.from_file(str(tok)))
    except Exception as e:
        raise CheckpointError(f"{tok}: {e}") from None
