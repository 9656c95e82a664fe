"""Checkpoints on disk (docs/design/checkpoints.md): loader.py assembles a model from a directory.

native.py: the native format (model.safetensors, strict state dict, save). Release layout: policy.py
(fp32 tensors, optional-part prefixes, ignored keys), quantization.py (quantization_config, FP8 / MXFP4
formats), shards.py (headers, index), plans.py (checks, dequantize, fill), budget.py, streaming.py,
mapped_engram.py, release.py (the loading steps), writer.py (write_release, describe). parts.py attaches
the drafter and the vision tower; shipped.py finds the shipped weights.
"""
