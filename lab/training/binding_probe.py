"""Does a fact's entry name its object? Frozen linear probes of binding (lab/README.md §3, the entry probe).

A far fact comes back only if the answer row's query (which holds the asked object) meets an entry that holds the
same object: the colour's decoder entry must say which object it belongs to. `entry_reads` fits a linear read-out,
on the model's frozen features, from each fact colour's decoder entry (the ratio-1 KV source's latent) to its
object, and from the answer row's decoder input to the asked object, over texts in the stories' own sentences, and
scores it on texts it was not fitted on. A high answer-row read with a low entry read says the lookup has a query
and nothing to match it with.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from model.heldout import COLOURS, token_index_at_char, word_token_ids

from ..corpus.stories import CONTAINERS, TRAIN_CAST, Cast, filler_sentence
from .step import EntryProbe, LatentTap


@dataclass
class ProbeText:
    """One text of facts and answers, and where each labelled feature sits."""

    text: str
    facts: list[tuple[int, str]]     # (character of a fact's colour, its object)
    asks: list[tuple[int, str]]      # (character of an answer's colour, the asked object)


def probe_texts(n: int, seed: int, objects: list[str], cast: Cast = TRAIN_CAST) -> list[ProbeText]:
    """`n` texts of 4-6 facts in the cast's sentences with 0-3 filler sentences after each, then three of the
    objects asked and answered ("Where is the key? The key is in the blue box.")."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        names = rng.sample(cast.names, 3)
        objs = rng.sample(objects, rng.randint(4, 6))
        cols = [rng.choice(COLOURS) for _ in objs]
        parts: list[str] = []
        facts, asks = [], []

        def say(sentence: str, colour: str | None = None, obj: str = "", into: list | None = None) -> None:
            start = sum(len(p) + 1 for p in parts)
            parts.append(sentence)
            if colour is not None and into is not None:
                into.append((start + sentence.index(f" {colour} ") + 1, obj))

        for o, c in zip(objs, cols):
            fact = rng.choice(cast.facts).format(who=rng.choice(names), obj=o, col=c, con=rng.choice(CONTAINERS))
            say(fact, c, o, facts)
            for _ in range(rng.randint(0, 3)):
                say(filler_sentence(rng, names[0], names[1:]))
        for i in rng.sample(range(len(objs)), 3):
            say(f"Where is the {objs[i]}?")
            say(f"The {objs[i]} is in the {cols[i]} {rng.choice(CONTAINERS)}.", cols[i], objs[i], asks)
        out.append(ProbeText(" ".join(parts), facts, asks))
    return out


def probe_accuracy(features: torch.Tensor, labels: torch.Tensor, train: torch.Tensor, steps: int = 400,
                   seed: int = 0) -> float:
    """A linear read-out (standardised features, softmax over the labels seen, weight decay) fitted on the rows
    `train` marks and scored on the others -> their accuracy."""
    torch.manual_seed(seed)
    classes, y = torch.unique(labels, return_inverse=True)
    x = features.float()
    mu, sd = x[train].mean(0), x[train].std(0) + 1e-6
    x = (x - mu) / sd
    head = torch.nn.Linear(x.shape[1], len(classes))
    opt = torch.optim.Adam(head.parameters(), lr=1e-2, weight_decay=1e-3)
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(head(x[train]), y[train]).backward()
        opt.step()
    with torch.no_grad():
        return float((head(x[~train]).argmax(-1) == y[~train]).float().mean())


def entry_reads(model, texts: int = 200, seed: int = 12345, tok=None) -> dict[str, tuple[float, float]]:
    """{"colour entry": (held-out accuracy of reading a fact colour's decoder entry as its object, chance),
    "answer row": (the same for the answer row's decoder input and the asked object, chance)}, fitted on 70% of
    `texts` texts and scored on the rest. Objects are the cast's one-token ones; chance is 1 / their number."""
    tok = tok or model.tokenizer
    objects = list(word_token_ids(tok, TRAIN_CAST.objects))
    layer = EntryProbe.source_layer(model.cfg)
    rows: dict[str, list[tuple[torch.Tensor, int, int]]] = {"colour entry": [], "answer row": []}
    for t, item in enumerate(probe_texts(texts, seed, objects)):
        enc = tok.encode(item.text, add_special_tokens=False)
        tap = LatentTap(layer)
        with torch.no_grad():
            out = model(torch.tensor([enc.ids]).to(model.device), trace=tap, tap_layers=(layer,))
        for at, obj in item.facts:
            rows["colour entry"].append((tap.got[0, token_index_at_char(enc.offsets, at)].cpu(),
                                         objects.index(obj), t))
        for at, obj in item.asks:   # the row that predicts the colour: the token before it
            rows["answer row"].append((out.taps[layer][0, token_index_at_char(enc.offsets, at) - 1].cpu(),
                                       objects.index(obj), t))
    result = {}
    for name, got in rows.items():
        text_of = torch.tensor([r[2] for r in got])
        result[name] = (probe_accuracy(torch.stack([r[0] for r in got]), torch.tensor([r[1] for r in got]),
                                       text_of < int(0.7 * texts)), 1.0 / len(objects))
    return result
