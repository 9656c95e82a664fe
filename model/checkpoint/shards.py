"""The tensors of a safetensors checkpoint directory, read from the index and the shard headers alone.

Follows docs/design/checkpoints.md §1 and §3. `read_header` parses a shard's
header (8-byte length + JSON) and checks the file holds every tensor's bytes, so a truncated or
mis-indexed checkpoint fails with a `CheckpointError` naming the file and the tensor before any data
is read; `ReleaseCheckpoint.read` then reads tensors memory-mapped, one shard open at a time.
Only safetensors are read: nothing in a checkpoint can execute code.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open

from ..errors import CheckpointError

INDEX = "model.safetensors.index.json"

# safetensors dtype codes -> torch dtypes (the ones a V4.1 checkpoint may hold)
ST_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
             "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2, "F8_E8M0": torch.float8_e8m0fnu,
             "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16, "I32": torch.int32, "I64": torch.int64,
             "BOOL": torch.bool}
DENSE = {"F64", "F32", "F16", "BF16"}
ELT_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "U8": 1, "I8": 1,
             "I16": 2, "I32": 4, "I64": 8, "BOOL": 1, "U16": 2, "U32": 4, "U64": 8}


@dataclass(frozen=True)
class TensorInfo:
    name: str
    file: Path
    dtype: str                 # safetensors code, e.g. "F8_E4M3"
    shape: tuple[int, ...]
    offset: int = 0            # absolute byte offset of the data in the file

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * ELT_BYTES.get(self.dtype, 1)

    @property
    def torch_dtype(self) -> torch.dtype | None:
        return ST_DTYPES.get(self.dtype)


def read_header(f: Path) -> dict[str, TensorInfo]:
    """Parse a safetensors header (8-byte length + JSON) and check the file holds every tensor's bytes."""
    try:
        size = f.stat().st_size
        with open(f, "rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                raise CheckpointError(f"{f}: truncated ({size} bytes): not even a safetensors header")
            n = struct.unpack("<Q", head)[0]
            if 8 + n > size:
                raise CheckpointError(f"{f}: truncated ({size} bytes): the header alone needs {8 + n}")
            meta = json.loads(fh.read(n))
    except CheckpointError:
        raise
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{f}: not a readable safetensors file ({e})") from None
    if not isinstance(meta, dict):
        raise CheckpointError(f"{f}: not a safetensors file (header is not an object)")
    data = size - 8 - n
    out = {}
    for name, v in meta.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (a, b) = v["dtype"], tuple(int(x) for x in v["shape"]), v["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise CheckpointError(f"{f}: tensor {name!r} has a malformed header entry") from None
        if b > data:
            raise CheckpointError(f"{f}: truncated: tensor {name!r} needs data bytes {a}..{b} but the file holds "
                                  f"only {data} (re-download or re-copy this shard)")
        out[name] = TensorInfo(name, f, dtype, shape, 8 + n + int(a))
    return out


class ReleaseCheckpoint:
    """The tensors of a checkpoint directory, by native name, from the index and the shard headers."""

    def __init__(self, path: Path):
        self.path = path
        index = path / INDEX
        self.index: Path | None = index if index.exists() else None
        self.tensors: dict[str, TensorInfo] = {}
        self.files: list[Path] = []
        if self.index is not None:
            self._read_index(self.index)
        else:
            self._read_shards()

    def _read_index(self, index: Path) -> None:
        """Every tensor the index maps, checked against the header of the shard it names."""
        try:
            wm = json.loads(index.read_text())["weight_map"]
            if not isinstance(wm, dict):
                raise TypeError("weight_map is not an object")
        except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError) as e:
            raise CheckpointError(f"{index}: not a valid safetensors index ({e})") from None
        headers: dict[str, dict[str, TensorInfo]] = {}
        for name, fname in wm.items():
            f = self.path / str(fname)
            if fname not in headers:
                if not f.is_file():
                    raise CheckpointError(f"{index}: tensor {name!r} is in shard {fname!r}, which is missing "
                                          f"from {self.path}")
                headers[fname] = read_header(f)
            info = headers[fname].get(name)
            if info is None:
                raise CheckpointError(f"{index}: tensor {name!r} is mapped to {fname!r}, but that shard has "
                                      f"no such tensor")
            self.tensors[name] = info
        self.files = sorted({self.path / f for f in headers})

    def _read_shards(self) -> None:
        """Without an index: model.safetensors, else every model*.safetensors, which must not overlap."""
        single = self.path / "model.safetensors"
        self.files = [single] if single.exists() else sorted(self.path.glob("model*.safetensors"))
        if not self.files:
            raise CheckpointError(f"{self.path}: not a checkpoint: no {INDEX} and no model*.safetensors files")
        for f in self.files:
            for name, info in read_header(f).items():
                if name in self.tensors:
                    raise CheckpointError(f"{f}: tensor {name!r} is also in {self.tensors[name].file.name}; "
                                          f"without an index the shards must not overlap")
                self.tensors[name] = info

    def where(self) -> Path:
        return self.index or self.path

    def read(self, names: list[str]) -> dict[str, torch.Tensor]:
        """Read tensors (CPU), opening each shard once, memory-mapped, for the duration of the read."""
        by_file: dict[Path, list[str]] = {}
        for n in names:
            by_file.setdefault(self.tensors[n].file, []).append(n)
        out = {}
        for f, ns in by_file.items():
            try:
                with safe_open(str(f), framework="pt", device="cpu") as sf:
                    for n in ns:
                        out[n] = sf.get_tensor(n)
            except Exception as e:  # safetensors raises its own error types for damaged files
                raise CheckpointError(f"{f}: cannot read tensor(s) {ns[:3]} ({e}); the file may be truncated or "
                                      f"damaged") from None
        return out

