"""The home page's live part: the next-token scores of the running model for a prompt; the release beside
the running model, size by size."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from model import V41Config

RANDOM_NOTE = (
    "These are random weights: the model has every part of the real architecture but has learned nothing, so "
    "its scores are close to uniform noise. Everything the other pages count (layers, entries, picks, shares) "
    "is still real computation."
)


@dataclass
class NextTokens:
    tokens: list[str]
    ids: list[int]
    probs: list[float]
    n_tokens: int


def prompt_ids(model, text: str) -> list[int]:
    """The prompt's token ids, the last max_position_embeddings of them."""
    ids = model.encode(text)
    if not ids:
        raise ValueError("the prompt produced no tokens")
    return ids[-model.cfg.max_position_embeddings:]


def next_token_table(model, text: str, k: int = 10) -> NextTokens:
    ids = prompt_ids(model, text)
    with torch.no_grad():
        logits = model(torch.tensor([ids]), last_only=True).logits[0, -1]
    return top_tokens(model, logits, len(ids), k)


def top_tokens(model, logits: torch.Tensor, n_tokens: int, k: int = 10) -> NextTokens:
    """The k most likely next tokens from next-token logits [V]."""
    p = torch.softmax(logits.float(), -1)
    top = p.topk(min(k, p.numel()))
    toks = [model.decode([i]) for i in top.indices.tolist()]
    return NextTokens(tokens=toks, ids=top.indices.tolist(), probs=top.values.tolist(), n_tokens=n_tokens)


def scale_rows(release: V41Config, running: V41Config) -> list[dict]:
    """The release beside the model running here, size by size: the running model shares the layer kinds, not
    the sizes, so a number read on a live page is the tiny model's."""

    def row(what: str, fn) -> dict:
        return {"": what, "released V4.1-Flash": fn(release), "tiny model here": fn(running)}

    return [
        row("layers (encoder + decoder)", lambda c: f"{c.num_hidden_layers} ({c.decoder_start} + "
                                                     f"{c.num_hidden_layers - c.decoder_start})"),
        row("window (rows)", lambda c: f"{c.sliding_window:,}"),
        row("entries a query selects (top-k)", lambda c: f"{c.index_topk:,}"),
        row("candidate pool (positions)", lambda c: f"{c.candidate_topk_blocks * c.candidate_block_size:,}"),
        row("routed experts (chosen of)", lambda c: f"{c.num_experts_per_tok} of {c.n_routed_experts}"),
        row("Engram layers", lambda c: str(sum(1 for i in c.engram_layer_ids if i < c.num_hidden_layers))),
        row("hidden width", lambda c: f"{c.hidden_size:,}"),
    ]
