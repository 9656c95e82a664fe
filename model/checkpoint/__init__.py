"""Checkpoints on disk (docs/design/checkpoints.md): loader.py assembles a model from a directory.

native.py: the native format (model.safetensors, strict state dict, save). parts.py: the load policy as
data (fp32 tensors, optional-part prefixes, ignored keys) and the attaching of the drafter and the vision
tower. Release layout: quantization.py (quantization_config, FP8 / MXFP4 formats), shards.py (headers,
index), plans.py (checks, dequantize, fill), streaming.py (the memory budget, layer streaming, memory-mapped
Engram rows), release.py (the loading steps), writer.py (write_release, describe). loader.py also finds the
shipped weights and builds the random tiny model.
"""
