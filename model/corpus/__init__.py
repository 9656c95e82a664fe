"""Training data: tokenizer, corpus sources, generated stories and scenes, token streams.

tokenizer (byte-level BPE), sources (public-domain text, cleaned), stories (long-range recall
stories), drills (dense recall exercises for training), scenes (box pictures for the vision tower),
dataset (the token stream and held-out batches). Depends on nothing else in model/ but the leaves.

This file is the package's face: callers outside model/ import these names from `model.corpus`, not
from its modules (modules inside model/ import the module that defines a name). The stories' word
lists and seeds, and the scenes' own seeds and object names, stay in their modules.
"""

from .dataset import (
    DEFAULT_STREAM,
    HELDOUT_TEMPLATES_PATH,
    TokenStream,
    build_token_stream,
    fresh_story_batches,
    heldout_natural_batches,
    heldout_natural_tokens,
    heldout_story_batches,
    load_stream,
    sample_batch,
    story_eval_batches,
)
from .drills import LINKS, link_sentence, recall_drill, recall_drill_sources
from .scenes import PALETTE, Box, Scene, draw_scene, make_scene, sample_scenes, scene_png
from .sources import CorpusError, Document, read_docs, sha256_file
from .stories import (
    BUCKET_NAMES,
    BUCKETS,
    COLOURS,
    DRILL_CASTS,
    HELDOUT_CAST,
    TRAIN_CAST,
    WIDE_CAST,
    Cast,
    Story,
    app_prompts,
    bucket_of,
    colour_token_ids,
    generate_narrative,
    generate_story,
    heldout_stories,
    heldout_template_stories,
    load_heldout_stories,
    measure_distance,
    token_index_at_char,
    training_story_text,
    word_token_ids,
    write_heldout,
)
from .tokenizer import (
    BOS_ID,
    EOS_ID,
    IMAGE_END_ID,
    IMAGE_ID,
    IMAGE_NEWLINE_ID,
    IMAGE_START_ID,
    NOISE_ID,
    PAD_ID,
    SPECIAL_TOKENS,
    VOCAB_SIZE,
    TokenizerFileError,
    compressed_token_map,
    decode,
    encode,
    load_tokenizer,
    train_tokenizer,
)

__all__ = [
    # the tokenizer and its special tokens
    "load_tokenizer", "train_tokenizer", "encode", "decode", "TokenizerFileError", "SPECIAL_TOKENS", "VOCAB_SIZE",
    "compressed_token_map",
    "PAD_ID", "BOS_ID", "EOS_ID", "NOISE_ID", "IMAGE_ID", "IMAGE_START_ID", "IMAGE_END_ID", "IMAGE_NEWLINE_ID",
    # the token stream and held-out batches
    "TokenStream", "load_stream", "build_token_stream", "sample_batch", "DEFAULT_STREAM", "story_eval_batches",
    "heldout_story_batches", "fresh_story_batches", "heldout_natural_tokens", "heldout_natural_batches",
    "HELDOUT_TEMPLATES_PATH",
    # recall stories: the teaching story's colours, buckets by distance, the held-out sets, the app's prompts
    "Story", "Cast", "TRAIN_CAST", "HELDOUT_CAST", "WIDE_CAST", "DRILL_CASTS", "COLOURS", "BUCKETS", "BUCKET_NAMES",
    "bucket_of", "colour_token_ids", "word_token_ids",
    "generate_story", "generate_narrative", "training_story_text", "heldout_stories",
    # recall drills for training (binding drills say 0..N link words between an object and its colour)
    "recall_drill", "recall_drill_sources", "LINKS", "link_sentence",
    "heldout_template_stories", "load_heldout_stories", "write_heldout", "measure_distance", "token_index_at_char",
    "app_prompts",
    # the corpus sources
    "Document", "CorpusError", "read_docs", "sha256_file",
    # the vision tower's generated scenes
    "Scene", "Box", "PALETTE", "make_scene", "draw_scene", "sample_scenes", "scene_png",
]
