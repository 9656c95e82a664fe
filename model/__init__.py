"""DeepSeek-V4.1-Flash in PyTorch: config, layer map, model, engine, trace (ARCHITECTURE.md §4)."""

from .config import ConfigError, V41Config
from .context import Ablation
from .layer_map import LayerSpec, layer_map
from .model import InputError, ModelOutput, V41Model
from .weights import CheckpointError, load

__all__ = ["V41Config", "ConfigError", "V41Model", "ModelOutput", "InputError", "CheckpointError", "Ablation",
           "layer_map", "LayerSpec", "load", "count_params"]


def count_params(cfg):
    from .accounting import count_params as _count

    return _count(cfg)
