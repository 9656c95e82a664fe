"""Running the model: cache, prefill and decode, sampling, generation, DSpark, trace, image inputs.

cache (the per-request store, as packed bytes), prefix_cache (reuse across requests), engine
(exact and bounded prefill, decode steps), sampling, generate (whole generations, plain or
speculative), speculative (draft, verify, roll back, statistics), trace (per-layer records),
images and vision_inputs (pictures into a prompt). Imports arch/ and the leaves, never model.py,
checkpoint/, training/ or cli/.
"""
