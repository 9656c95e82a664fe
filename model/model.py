"""V41Model: the backbone together with its tokenizer, cache, trace and generation.

The one class where the architecture (model/arch/backbone.py) meets inference (model/inference/):
`generate`, `trace`, `new_cache`, `encode` and `decode` live here, so the backbone itself never
imports the engine. Loading from disk is model/checkpoint/'s job.
"""

from __future__ import annotations

from typing import Any

from .arch.backbone import Backbone, ModelOutput
from .arch.engram import NgramHasher
from .config import V41Config
from .errors import InputError
from .inference.cache import Cache
from .inference.generation import GenerateResult, SpecOptions, generate
from .inference.sampling import Sampler
from .inference.trace import run_trace
from .tokenizer import compressed_token_map

__all__ = ["V41Model", "ModelOutput", "InputError"]


class V41Model(Backbone):
    def __init__(self, cfg: V41Config):
        super().__init__(cfg)
        self.tokenizer = None                 # a `tokenizers.Tokenizer`, bound with bind_tokenizer
        self.source_path: str | None = None   # the checkpoint it was loaded from, if any
        self.release: Any = None              # model.checkpoint.ReleaseInfo when loaded from a release layout

    @property
    def drafter(self):
        return self.mtp

    def bind_tokenizer(self, tokenizer) -> "V41Model":
        """Attach a `tokenizers.Tokenizer`; builds the Engram compressed-token map from it."""
        n = tokenizer.get_vocab_size(with_added_tokens=True)
        if n != self.cfg.vocab_size:
            raise InputError(f"tokenizer has {n} tokens but the config's vocab_size is {self.cfg.vocab_size}")
        self.tokenizer = tokenizer
        if self.cfg.engram_layer_ids:
            token_map, size = compressed_token_map(tokenizer)
            if size != self.cfg.engram_compressed_vocab_size:
                raise InputError(f"the tokenizer's compressed vocabulary has {size} entries but "
                                 f"engram_compressed_vocab_size is {self.cfg.engram_compressed_vocab_size}: "
                                 f"the Engram hashes would not match the tables")
            self.hasher = NgramHasher(self.cfg, token_map, size).to(self.device)
        return self

    # ---------------------------------------------------------------------------------------------
    # Inference entry points (implemented in model/inference/)
    def trace(self, input_ids, **kw: Any):
        return run_trace(self, input_ids, **kw)

    def generate(self, input_ids, max_new_tokens: int = 32, *, temperature: float = 0.0, top_p: float = 1.0,
                 seed: int | None = None, draft=None, draft_length: int | str | None = None,
                 confidence_threshold: float = 0.3, **kw: Any) -> GenerateResult:
        """model/inference/generation.py's `generate` with its knobs flat: the sampling ones make a Sampler,
        `draft` (a drafter, e.g. self.drafter) with its draft_length / confidence_threshold a SpecOptions;
        the rest (prefill_mode, stop_at_eos, stream, prefix_cache, ...) pass through."""
        spec = SpecOptions(draft, draft_length, confidence_threshold) if draft is not None else None
        return generate(self, input_ids, max_new_tokens, sampler=Sampler(temperature, top_p, seed), spec=spec, **kw)

    def new_cache(self, **kw: Any):
        return Cache(self.cfg, device=self.device, **kw)

    def encode(self, text: str) -> list[int]:
        if self.tokenizer is None:
            raise InputError("this model has no tokenizer")
        return self.tokenizer.encode(text).ids

    def decode(self, ids) -> str:
        if self.tokenizer is None:
            raise InputError("this model has no tokenizer")
        return self.tokenizer.decode(list(map(int, ids)), skip_special_tokens=False)
