"""DeepSeek-V4.1-Flash in PyTorch: config, layer map, model, engine, trace (docs/design/architecture.md §4)."""

from .accounting import count_params
from .arch.context import Ablation
from .checkpoint.loader import load, random_tiny, shipped_weights
from .config import ConfigError, V41Config
from .errors import CheckpointError
from .inference.engine import decode_step, prefill
from .inference.generate import speculative_generate
from .inference.sampling import Sampler
from .layer_map import LayerSpec, layer_map
from .model import InputError, ModelOutput, V41Model

__all__ = ["V41Config", "ConfigError", "V41Model", "ModelOutput", "InputError", "CheckpointError", "Ablation",
           "layer_map", "LayerSpec", "load", "count_params", "shipped_weights", "random_tiny", "prefill",
           "decode_step", "Sampler", "speculative_generate"]
