"""DeepSeek-V4.1-Flash in PyTorch: config, layer map, model, engine, trace (docs/design/architecture.md §4).

The names most callers need; each sub-package (`model.arch`, `model.inference`, `model.checkpoint`,
`model.cli`) is a face of its own with an `__all__`, and the top-level modules (`model.config`,
`model.layer_map`, `model.quant`, `model.fusion`, `model.tokenizer`, `model.scenes`, `model.accounting`,
`model.heldout`, `model.shipped`) are imported as they are.
"""

from .accounting import count_params
from .arch import Ablation
from .checkpoint import default_device, load, random_tiny
from .config import V41Config
from .errors import CacheError, CheckpointError, ConfigError, ImageError, InputError
from .inference import Sampler, decode_step, prefill, speculative_generate
from .layer_map import LayerSpec, layer_map
from .model import ModelOutput, V41Model
from .shipped import SHIPPED, ShippedSet, shipped_set, shipped_weights

__all__ = ["V41Config", "ConfigError", "V41Model", "ModelOutput", "InputError", "CheckpointError", "ImageError",
           "CacheError", "Ablation", "layer_map", "LayerSpec", "load", "count_params", "shipped_weights",
           "SHIPPED", "ShippedSet", "shipped_set", "random_tiny", "default_device", "prefill", "decode_step", "Sampler",
           "speculative_generate"]
