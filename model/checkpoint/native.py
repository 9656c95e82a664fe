"""The native checkpoint format: weights under the NATIVE tensor names (docs/design/checkpoints.md §1).

A checkpoint directory holds `config.json` (flat or composite), one `model.safetensors` or several
shards with `model.safetensors.index.json`, and optionally `tokenizer.json`. `load_state_dict` is
strict (loader.py assembles the model around it): a missing, unexpected or mis-shaped tensor raises
`CheckpointError` naming the tensor and file.
Only safetensors are read: nothing in a checkpoint can execute code.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from ..config import V41Config
from ..errors import CheckpointError
from .parts import IGNORED_SUFFIXES


def shard_map(path: Path) -> dict[str, Path]:
    """tensor name -> shard file, from the index when present, else from the single file(s)."""
    index = path / "model.safetensors.index.json"
    if index.exists():
        try:
            wm = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise CheckpointError(f"{index}: not a valid safetensors index ({e})") from None
        out = {}
        for name, fname in wm.items():
            f = path / fname
            if not f.exists():
                raise CheckpointError(f"{index}: tensor {name!r} is in shard {fname!r}, which does not exist")
            out[name] = f
        return out
    single = path / "model.safetensors"
    files = [single] if single.exists() else sorted(path.glob("model*.safetensors"))
    if not files:
        raise CheckpointError(f"{path}: no *.safetensors files")
    out = {}
    for f in files:
        try:
            with safe_open(str(f), "pt") as sf:
                for k in sf.keys():
                    out[k] = f
        except Exception as e:  # safetensors raises several types for a damaged header
            raise CheckpointError(f"{f}: not a readable safetensors file ({e})") from None
    return out


def read_tensor(f: Path, name: str) -> torch.Tensor:
    try:
        with safe_open(str(f), "pt") as sf:
            if name not in sf.keys():
                raise CheckpointError(f"{f}: tensor {name!r} is listed in the index but not in the file")
            return sf.get_tensor(name)
    except CheckpointError:
        raise
    except Exception as e:
        raise CheckpointError(f"{f}: tensor {name!r} cannot be read ({e}); the file may be truncated") from None


def load_state_dict(model: torch.nn.Module, path: str | Path, prefix_filter=None, strict: bool = True,
                    dequantize=None) -> list[str]:
    """Copy tensors from a checkpoint dir into `model`'s parameters (by native name).

    `dequantize(name, tensor, shards)` may turn a stored low-precision tensor into the compute form;
    returns the checkpoint names that were not used (empty when strict).
    """
    path = Path(path)
    shards = shard_map(path)
    own = dict(model.state_dict())
    want = {k for k in own if prefix_filter is None or prefix_filter(k)}
    aux = {k for k in shards if k.endswith(".scale") and k[:-6] in shards and k[:-6] not in own}
    aux |= {k for k in shards if k.endswith(IGNORED_SUFFIXES)}
    have = {k for k in shards if k not in aux}
    if strict:
        _check_names(path, shards, want - have, {k for k in have - set(own) if prefix_filter is None
                                                 or prefix_filter(k)})
    params = dict(model.named_parameters())
    params.update(dict(model.named_buffers()))
    with torch.no_grad():
        for name in sorted(want & have):
            t = read_tensor(shards[name], name)
            if dequantize is not None:
                t = dequantize(name, t, shards)
            _copy_tensor(params[name], t, name, shards[name])
    return sorted(have - set(own))


def _check_names(path: Path, shards: dict[str, Path], missing: set[str], extra: set[str]) -> None:
    """A strict load: every tensor the model wants is there, and nothing else is."""
    if missing:
        first = sorted(missing)[0]
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise CheckpointError(f"{path}: missing tensor {first!r}{more}")
    if extra:
        first = sorted(extra)[0]
        more = f" (and {len(extra) - 1} more)" if len(extra) > 1 else ""
        raise CheckpointError(f"{path}: unexpected tensor {first!r} in {shards[first].name}{more}: "
                              f"the checkpoint does not match the config")


def _copy_tensor(target: torch.Tensor, t: torch.Tensor, name: str, f: Path) -> None:
    if tuple(t.shape) != tuple(target.shape):
        raise CheckpointError(f"{f.name}: tensor {name!r} has shape {tuple(t.shape)}, "
                              f"the config needs {tuple(target.shape)}")
    if not (t.is_floating_point() or t.dtype == target.dtype):
        raise CheckpointError(f"{f.name}: tensor {name!r} has dtype {t.dtype}, expected a floating-point tensor")
    if target.device.type != "meta":
        target.copy_(t.to(target.dtype))


def save_checkpoint(model: torch.nn.Module, path: str | Path, cfg: V41Config | None = None,
                    tokenizer=None, extra_tensors: dict[str, torch.Tensor] | None = None,
                    metadata: dict[str, str] | None = None) -> Path:
    """Write config.json + model.safetensors (+ tokenizer.json) with native names."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    cfg = cfg or model.cfg
    cfg.save_json(path / "config.json")
    tensors = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    tensors.update(extra_tensors or {})
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt", **(metadata or {})})
    if tokenizer is not None:
        tokenizer.save(str(path / "tokenizer.json"))
    return path


def rewrite_tensors(path: str | Path, new: dict[str, torch.Tensor], *, drop: str | None = None,
                    metadata: dict[str, str] | None = None) -> Path:
    """Rewrite `path/model.safetensors` atomically: every stored tensor (less those whose names start
    with `drop`) plus, or overwritten by, `new`; the file's metadata kept and `metadata` added. Written
    to a temp file, synced, then renamed, so an interrupted write never leaves a damaged checkpoint."""
    f = Path(path) / "model.safetensors"
    with safe_open(str(f), "pt") as sf:
        meta = dict(sf.metadata() or {})
        tensors = {k: sf.get_tensor(k) for k in sf.keys() if drop is None or not k.startswith(drop)}
    tensors.update({k: v.detach().contiguous().cpu() for k, v in new.items()})
    tmp = f.with_suffix(".safetensors.tmp")
    save_file(tensors, str(tmp), metadata={"format": "pt", **meta, **(metadata or {})})
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, f)
    return f


def default_device() -> torch.device:
    """Where a loaded model goes when the caller names no device: CUDA when PyTorch sees one, else the CPU.
    The environment variable V41_DEVICE (`cpu`, `cuda`, `auto`) overrides the choice: the test suite sets
    `cpu`, so tests written for the CPU stay on it on a GPU machine."""
    want = os.environ.get("V41_DEVICE", "auto").strip().lower() or "auto"
    if want == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if want not in ("cpu", "cuda"):
        raise ValueError(f"V41_DEVICE={want!r}: use cpu, cuda or auto")
    return torch.device(want)
