"""Checkpoints on disk (docs/design/checkpoints.md): loader.py assembles a model from a directory.

native.py: the native format (model.safetensors, strict state dict, save). parts.py: the load policy as
data (fp32 tensors, optional-part prefixes, ignored keys) and the attaching of the drafter and the vision
tower. Release layout: quantization.py (quantization_config, FP8 / MXFP4 formats), shards.py (headers,
index), plans.py (checks, dequantize, fill), streaming.py (the memory budget, layer streaming, memory-mapped
Engram rows), release.py (the loading steps), writer.py (write_release, describe). loader.py also
builds the random tiny model (the shipped sets are listed in model/shipped.py).

This file is the package's face: callers outside model/ import these names from `model.checkpoint`, not
from its modules (modules inside model/ import the module that defines a name). The loading steps that
only `load` runs (plans, residency, filling) stay in their modules.
"""

from .loader import load, random_tiny, read_config, shipped_weights
from .native import default_device, load_state_dict, read_tensor, rewrite_tensors, save_checkpoint, shard_map
from .parts import OPTIONAL_PARTS, attach_parts, fp32_critical
from .quantization import QuantSpec
from .release import ReleaseInfo, is_release
from .shards import INDEX, ReleaseCheckpoint, TensorInfo, read_header
from .streaming import GIB, LayerStreamer, MappedEngramTable, available_memory, memory_budget, parse_bytes
from .writer import describe, write_release

__all__ = [
    # reading: the one loader, the shipped weights, a random tiny model
    "load", "shipped_weights", "random_tiny", "read_config", "default_device",
    # the native format
    "save_checkpoint", "load_state_dict", "read_tensor", "rewrite_tensors", "shard_map",
    # which parts a checkpoint may carry and which tensors stay fp32
    "OPTIONAL_PARTS", "attach_parts", "fp32_critical",
    # the release layout: write, describe, read headers, stream within a memory budget
    "write_release", "describe", "is_release", "ReleaseInfo", "ReleaseCheckpoint", "QuantSpec", "read_header",
    "TensorInfo", "INDEX", "LayerStreamer", "MappedEngramTable", "memory_budget", "available_memory", "parse_bytes",
    "GIB",
]
