"""The lab's data: corpus texts, generated stories and drills, the token stream, the tokenizer's trainer.

texts (public-domain text, downloaded through package clients and cleaned), stories (long-range recall
stories), drills (dense recall exercises for training), dataset (the token stream and story batches),
tokenizer (the byte-level BPE trainer). The runtime tokenizer is model/tokenizer.py, the held-out sets and
their reading model/heldout.py, the vision tower's scenes model/scenes.py: the app needs those, not these.

This file is the package's face: callers outside lab/corpus import these names from `lab.corpus`. The
stories' word lists and seeds stay in their modules.
"""

from .dataset import (
    DEFAULT_STREAM,
    TokenStream,
    build_token_stream,
    fresh_story_batches,
    heldout_story_batches,
    load_stream,
    sample_batch,
)
from .drills import LINKS, link_sentence, recall_drill, recall_drill_sources
from .stories import (
    BUCKET_NAMES,
    DRILL_CASTS,
    HELDOUT_CAST,
    TRAIN_CAST,
    WIDE_CAST,
    Cast,
    Story,
    app_prompts,
    bucket_of,
    generate_narrative,
    generate_story,
    heldout_stories,
    heldout_template_stories,
    measure_distance,
    training_story_text,
    write_heldout,
)
from .texts import CorpusError, Document, read_docs
from .tokenizer import train_tokenizer, training_sample

__all__ = [
    # the tokenizer's trainer
    "train_tokenizer", "training_sample",
    # the token stream and story batches
    "TokenStream", "load_stream", "build_token_stream", "sample_batch", "DEFAULT_STREAM",
    "heldout_story_batches", "fresh_story_batches",
    # recall stories: casts, buckets by distance, the held-out sets, the app's prompts
    "Story", "Cast", "TRAIN_CAST", "HELDOUT_CAST", "WIDE_CAST", "DRILL_CASTS", "BUCKET_NAMES", "bucket_of",
    "generate_story", "generate_narrative", "training_story_text", "heldout_stories",
    "heldout_template_stories", "write_heldout", "measure_distance", "app_prompts",
    # recall drills for training (binding drills say 0..N link words between an object and its colour)
    "recall_drill", "recall_drill_sources", "LINKS", "link_sentence",
    # the corpus texts
    "Document", "CorpusError", "read_docs",
]
