"""The Start page's lesson: what a next-token score is, computed on the running model."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from model import V41Config

INTRO = (
    "A language model does one job over and over: given the text so far, it gives every possible next "
    "piece of text a score. This explorer runs DeepSeek-V4.1-Flash's real architecture on small weights we "
    "trained ourselves, so you can watch each part of that job happen."
)

DEFINITIONS = [
    ("Token", "The model never sees letters. A tokenizer cuts the text into pieces (a word, part of a word, a "
              "space and a word) and gives each piece a number. Those numbers are what flows in, and the next "
              "number is what the model predicts."),
    ("Hidden state", "Each token becomes a row of numbers when it enters. Every layer rewrites that row using "
                     "the rows before it; the row that comes out on top for the last token is turned into the "
                     "next-token scores in the chart. These changing rows are the hidden states."),
    ("Weight", "The rules each layer applies are fixed numbers learned in training: the weights. Reading a "
               "prompt changes hidden states and fills caches; it never changes a weight."),
]

RANDOM_NOTE = (
    "These are random weights: the model has every part of the real architecture but has learned nothing, so "
    "its scores are close to uniform noise. Everything the other pages count (layers, entries, picks, shares) "
    "is still real computation."
)

NEXT = (
    "**Where to go next.** *Figure 3 walkthrough* draws the whole model bottom to top and lets you open any part "
    "of it; *Layer map* counts the layers; *CSA2 modes* and *Attention shares* show what a layer that reuses "
    "prepared entries still computes for itself; *Is this recurrence?* checks which weights are shared."
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
