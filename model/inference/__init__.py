"""Running the model: cache, prefill and decode, sampling, generation, DSpark, trace, image inputs.

cache (the per-request store, as packed bytes), prefix_cache (reuse across requests), engine
(exact and bounded prefill, decode steps), sampling, generation (whole generations, plain or
speculative), speculative (draft, verify, roll back, statistics), trace (per-layer records),
batch (several prompts in one padded forward), images and vision_inputs (pictures into a prompt).
Imports arch/ and the leaves, never model.py, checkpoint/, training/ or cli/.

This file is the package's face: callers outside model/ import these names from `model.inference`,
not from its modules (modules inside model/ import the module that defines a name).
"""

from .batch import batched_logits, batched_next_logits, batched_traces, pad_rows, split_trace
from .cache import KINDS, Bytes, Cache, PackedRows, SourceStore, WindowStore
from .engine import DEFAULT_CHUNK, Prefill, PrefillDivergence, compare_prefill, decode_step, prefill
from .generation import MAX_NEW_TOKENS, GenerateResult, SpecOptions, generate, speculative_generate
from .images import (
    ACCEPTED_MODES,
    MAX_UPLOAD_BYTES,
    MAX_UPLOAD_PIXELS,
    MIN_SIDE,
    PAD_RGB,
    ImageGrid,
    load_image,
    plan_grid,
    resize_to_grid,
    sniff_format,
    to_pixels,
    to_rgb,
)
from .prefix_cache import PrefixCache, PrefixStats, model_fingerprint
from .sampling import Sampler, eos_ids
from .speculative import (
    CalibrationRow,
    Draft,
    DraftContext,
    SpecState,
    SpecStats,
    StepLog,
    Verdict,
    context_from_prefill,
    draft_block,
    expected_tokens_per_pass,
    residual,
    speculative_start,
    summarize,
    verify,
    verify_step,
)
from .trace import (
    FULL,
    LAZY,
    LAZY_LENS_BYTES,
    SUMMARY,
    LayerRecord,
    LensChoice,
    LogitLens,
    Shares,
    Trace,
    TracedRun,
    Tracer,
    lens_plan,
    run_trace,
    trace_generate,
)
from .vision_inputs import (
    IMAGE_PLACEHOLDER,
    VisionInputs,
    build_inputs,
    doc_prefix,
    generate_with_image,
    image_grid,
    marker_ids,
    span_ids,
    trace_with_image,
)

__all__ = [
    # the cache and reading a prompt into it, then one token at a time
    "Cache", "Bytes", "PackedRows", "WindowStore", "SourceStore", "KINDS",
    "prefill", "decode_step", "Prefill", "compare_prefill", "PrefillDivergence", "DEFAULT_CHUNK",
    "PrefixCache", "PrefixStats", "model_fingerprint",
    # sampling and whole generations
    "Sampler", "eos_ids", "generate", "speculative_generate", "GenerateResult", "SpecOptions", "MAX_NEW_TOKENS",
    # DSpark: draft, verify, step by step, statistics
    "speculative_start", "verify_step", "SpecState", "StepLog", "SpecStats", "CalibrationRow", "summarize",
    "expected_tokens_per_pass", "Draft", "DraftContext", "context_from_prefill", "draft_block", "Verdict", "verify",
    "residual",
    # the trace: per-layer records of a forward (FULL / SUMMARY detail, a LAZY logit lens)
    "Trace", "LayerRecord", "Shares", "LogitLens", "LensChoice", "Tracer", "TracedRun", "run_trace", "trace_generate",
    "lens_plan", "FULL", "SUMMARY", "LAZY", "LAZY_LENS_BYTES",
    # several prompts in one forward
    "batched_next_logits", "batched_logits", "batched_traces", "split_trace", "pad_rows",
    # pictures into a prompt
    "load_image", "to_rgb", "sniff_format", "plan_grid", "resize_to_grid", "to_pixels", "ImageGrid",
    "MAX_UPLOAD_BYTES", "MAX_UPLOAD_PIXELS", "MIN_SIDE", "PAD_RGB", "ACCEPTED_MODES",
    "build_inputs", "VisionInputs", "generate_with_image", "trace_with_image", "marker_ids", "span_ids",
    "image_grid", "doc_prefix", "IMAGE_PLACEHOLDER",
]
