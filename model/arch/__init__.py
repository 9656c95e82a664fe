"""The architecture: nn.Modules and forward maths only (docs/design/equations.md §1-12,
docs/design/architecture.md §2).

norm, rope, mhc, moe, engram, compressor, indexer, attention, block, backbone (the text model's
forward), drafter (DSpark's modules), vision (tower and aligner); context types what a forward is
handed (the cache, the recorder, a layer source, as Protocols) and what one layer passes the next.
Imports only the leaves of model/ (config, errors, fusion, layer_map, quant) and itself.

This file is the package's face: callers outside model/ import these names from `model.arch`, not
from its modules (modules inside model/ import the module that defines a name).
"""

from .attention import Attention, DenseTable, attend
from .backbone import Backbone, ModelOutput, Segment
from .block import Block
from .compressor import Compressor
from .context import (
    Ablation,
    CompressedRead,
    Context,
    CsaState,
    EntryTable,
    KLInputs,
    LayerCache,
    LayerSource,
    LensHead,
    Recorder,
    SourceRows,
    WindowRows,
)
from .drafter import ConfidenceHead, DraftBlock, Drafter, MarkovHead, attach_drafter
from .engram import DEAD, Engram, EngramEmbedding, NgramHasher, engram_offsets, hash_multipliers
from .indexer import (
    NEG_INF,
    Indexer,
    candidate_pool,
    indexer_kl,
    mask_visible,
    select_topk,
    stable_topk,
    topk_mask,
    visible_counts,
)
from .mhc import Mix, collapse, expand, hc_mixes, one_hot_pre, sinkhorn
from .moe import Expert, MoE, Router, Routing, score_fn, swiglu
from .norm import RMSNorm, rms_norm, rms_unweighted
from .rope import RopeTables, Rotary, apply_rope, compress_inv_freq, main_inv_freq
from .vision import (
    MARKERS,
    VISION_PREFIXES,
    Aligner,
    TowerOutput,
    VisionModel,
    attach_vision,
    encode_image,
    has_vision,
    image_span_embeds,
    init_vision,
    pixel_unshuffle,
    rope_2d,
    vision_param_count,
    vision_state_dict,
)

__all__ = [
    # the text model: the backbone, its blocks and what a forward returns
    "Backbone", "Block", "ModelOutput", "Segment",
    # what a forward is handed and passes on (context.py)
    "Ablation", "Context", "Recorder", "LayerCache", "LayerSource", "LensHead", "CsaState", "CompressedRead",
    "EntryTable", "KLInputs", "WindowRows", "SourceRows",
    # attention: the compressor, the indexer and its selection, the attention itself
    "Attention", "attend", "DenseTable", "Compressor",
    "Indexer", "candidate_pool", "select_topk", "stable_topk", "topk_mask", "mask_visible", "visible_counts",
    "indexer_kl", "NEG_INF",
    # mHC streams, MoE, Engram, norms, rotary embeddings
    "Mix", "sinkhorn", "hc_mixes", "collapse", "expand", "one_hot_pre",
    "MoE", "Router", "Routing", "Expert", "score_fn", "swiglu",
    "Engram", "EngramEmbedding", "NgramHasher", "engram_offsets", "hash_multipliers", "DEAD",
    "RMSNorm", "rms_norm", "rms_unweighted",
    "Rotary", "RopeTables", "apply_rope", "main_inv_freq", "compress_inv_freq",
    # DSpark's drafter modules
    "Drafter", "attach_drafter", "MarkovHead", "ConfidenceHead", "DraftBlock",
    # the vision tower and aligner
    "VisionModel", "Aligner", "TowerOutput", "attach_vision", "init_vision", "has_vision", "encode_image",
    "image_span_embeds", "pixel_unshuffle", "rope_2d", "vision_state_dict", "vision_param_count", "MARKERS",
    "VISION_PREFIXES",
]
