"""Sampling: the next token from a row of logits (greedy, or temperature + top-p with a seeded
generator), and the tokens that end a generation.

Follows docs/design/architecture.md §3.1 (generation). A `Sampler` owns its torch.Generator, so a seed gives the
same draws on every device (draws are made on the CPU); speculative decoding (model/inference/
speculative.py) reads `probs` as the distribution p (or q) of its verification rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..arch.backbone import Backbone
from ..errors import InputError


@dataclass
class Sampler:
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    generator: torch.Generator | None = field(default=None, repr=False)

    def __post_init__(self):
        if self.temperature < 0 or not (0 < self.top_p <= 1):
            raise InputError("temperature must be >= 0 and top_p in (0, 1]")
        self.generator = torch.Generator()
        self.generator.manual_seed(0 if self.seed is None else int(self.seed))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """[..., V] logits -> the distribution this sampler draws from (top-p applied)."""
        if self.greedy:
            return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
        p = torch.softmax(logits.float() / self.temperature, dim=-1)
        if self.top_p < 1:
            sp, si = p.sort(dim=-1, descending=True)
            keep = sp.cumsum(-1) - sp < self.top_p
            sp = sp * keep
            p = torch.zeros_like(p).scatter_(-1, si, sp)
            p = p / p.sum(-1, keepdim=True)
        return p

    def sample(self, logits: torch.Tensor) -> torch.Tensor:
        if self.greedy:
            return logits.argmax(-1)
        p = self.probs(logits).cpu()
        return torch.multinomial(p.reshape(-1, p.shape[-1]), 1, generator=self.generator).reshape(p.shape[:-1]).to(
            logits.device)


def eos_ids(model: Backbone) -> set[int]:
    """The config's end-of-sequence ids (one id, a list, or none) as a set."""
    e = model.cfg.eos_token_id
    return set(e) if isinstance(e, list) else ({e} if e is not None else set())
