"""Evaluation during training: held-out loss, story recall by distance bucket and copy accuracy at
three gaps, in the default (sparse) mode and with every visible entry attended (dense) side by side;
the "fact in pool" rate (is the far fact's entry in the candidate pool at the answer row?); and the
copy probe that gates a curriculum stage. The held-out sets and the evaluation the app shows (`evaluate`,
recall by bucket, fact binding) are model/heldout.py's; the research probes are lab/probes/evaluation.py.

Dense numbers say whether the look-back circuit exists; sparse ones whether the indexer's selection
delivers it (lab/README.md).
"""

from __future__ import annotations

import torch

from lab.corpus.dataset import TokenStream, heldout_story_batches
from model.arch.context import Ablation
from model.heldout import (
    HELDOUT_TEMPLATES_PATH,
    answers_binding,
    bucket_rates,
    forward_with,
    heldout_natural_batches,
    heldout_natural_tokens,
    load_heldout_stories,
    recall_by_bucket,
    story_answers,
)
from model.model import V41Model

from .batches import CopyIds, copy_ids_for, copy_rows, kv_rows, kv_rows_for
from .schedule import window_at
from .step import set_window

EVAL_KEYS = ("heldout", "recall", "copy", "kv_lookup", "fact_in_pool", "probe")   # the prefixes of evaluation keys


@torch.no_grad()
def quick_eval(m: V41Model, tok, seq_len: int = 512, max_batches: int = 4, window: int = 0,
               modes: tuple[str, ...] = ("sparse", "dense")) -> dict[str, float]:
    """Held-out natural-text loss, recall accuracy per story bucket and copy accuracy at gaps 4, 40, 200,
    at the sliding `window` (0: the config's), once per mode: "sparse" (the default selection; plain
    keys) and "dense" (every visible entry attended; keys ending in `_dense`); the sparse mode's story answers
    also give `recall_bound` (`Binding.right`), and key-value lookups (`kv_lookup`) at up to 0 and 200 other
    tokens between the pairs and the queries; then the fact-in-pool rate. The model is left in train mode at
    the config's window."""
    set_window(m, window)
    m.eval()
    natural = heldout_natural_tokens(tok)
    stories = load_heldout_stories()
    out: dict[str, float] = {}
    for mode in modes:
        ab = Ablation(dense_compressed=True) if mode == "dense" else None
        suffix = "_dense" if mode == "dense" else ""
        tot, n = 0.0, 0
        for i, (x, y) in enumerate(heldout_natural_batches(natural, 8, seq_len)):
            if i >= max_batches:
                break
            lg = forward_with(m, x, ab).logits
            tot += float(torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), y.reshape(-1).to(lg.device),
                                                           reduction="sum"))
            n += y.numel()
        out[f"heldout_loss{suffix}"] = tot / max(1, n)
        answers = list(story_answers(m, tok, stories, ab))
        out.update({f"recall_{k}{suffix}": v for k, v in bucket_rates(answers).items()})
        if ab is None:   # far stories holding other facts: answered with the asked object's colour, not any fact's
            far = [i for i, r in enumerate(stories) if r["bucket"] == "far"]
            out["recall_bound"] = answers_binding([stories[i] for i in far], [answers[i] for i in far], tok).right
        out.update({f"copy_gap{gap}{suffix}": copy_accuracy(m, natural, gap, ablation=ab) for gap in (4, 40, 200)})
        out.update({f"kv_lookup{gap}{suffix}": r
                    for gap, r in kv_lookup(m, frequent_ids(natural), seq_len=seq_len, ablation=ab).items()})
    # far recall (default selection) on stories told with names, objects and sentences never trained on
    out["recall_templates"] = recall_by_bucket(m, tok, load_heldout_stories(HELDOUT_TEMPLATES_PATH), None)["far"]
    out["fact_in_pool"] = fact_in_pool(m, tok)
    set_window(m, 0)
    m.train()
    return out


@torch.no_grad()
def fact_in_pool(m: V41Model, tok, bucket: str = "far", max_stories: int = 24) -> float:
    """The share of held-out `bucket` stories whose fact entry (the fact's colour token's entry at the
    candidate source's ratio) is in the candidate pool at the row that predicts the answer: the first
    thing the hierarchical selection must get right to bring a far fact back (0 when the config has no
    candidate pool). One exact traced forward per story, without the logit lens."""
    hits = n = 0
    for b in heldout_story_batches(tok, batch_size=1, bucket=bucket):
        if n >= max_stories:
            break
        a, f = int(b["answer_pos"][0]), int(b["fact_pos"][0])
        tr = m.trace(b["input_ids"][:, : a + 1].to(m.device), lens=False)
        src = next((r for r in tr.layers if r.spec.candidate_source and r.candidates is not None), None)
        if src is None:
            return 0.0
        pool = src.candidates[0, a]
        entry = f // src.spec.compress_ratio
        hits += int(entry < pool.shape[-1] and bool(pool[entry]))
        n += 1
    return hits / max(1, n)


@torch.no_grad()
def copy_probe(m: V41Model, tc, stream, n: int = 16, seed: int = 99_991, broad: bool = False,
               step: int = 0) -> dict[str, float]:
    """The gate of a curriculum stage: copy accuracy on fresh synthetic copy rows made with the stage's
    own settings (rows, span, ids) at its longest distances (the top quarter of a spread row's gaps, or
    exactly `copy_gap`), read at the training window of `step`, dense and sparse. `broad` draws the ids
    from the unigram^0.5 over the whole vocabulary instead (does the copy carry to ids it was not drilled
    on?). Keys: probe, probe_sparse (or probe_broad, probe_broad_sparse)."""
    span = max(3, tc.copy_span)
    top = max(0, tc.seq_len + 1 - 2 * span) if tc.copy_spread else tc.copy_gap
    gap_min = (3 * top) // 4 if tc.copy_spread else tc.copy_gap
    ids = CopyIds(weights=stream.unigram_weights(0.5)) if broad else copy_ids_for(tc, stream)
    g = torch.Generator().manual_seed(seed)
    x, y, answers, _ = copy_rows(ids, n, tc.seq_len, g, span, top, gap_min=gap_min, spread=tc.copy_spread)
    return _probe(m, tc, step, "probe_broad" if broad else "probe", x, y, answers)


def _probe(m: V41Model, tc, step: int, name: str, x: torch.Tensor, y: torch.Tensor,
           answers: torch.Tensor) -> dict[str, float]:
    """A gate's reading: marked-target accuracy at the training window of `step`, dense (`name`) and sparse
    (`name`_sparse); the model is left in train mode at the config's window."""
    set_window(m, window_at(tc, step))
    m.eval()
    out = {name + suffix: _marked_accuracy(m, x, y, answers, ab)
           for suffix, ab in (("", Ablation(dense_compressed=True)), ("_sparse", None))}
    set_window(m, 0)
    m.train()
    return out


@torch.no_grad()
def kv_probe(m: V41Model, tc, stream, n: int = 16, seed: int = 99_989, broad: bool = False,
             step: int = 0, tok=None) -> dict[str, float]:
    """The gate of a stage that drills key-value rows and no copies: lookups on fresh rows made with the
    stage's own keys, values and pairs (`kv_rows_for`; the story vocabulary needs `tok`), at its longest distances
    (the top quarter of 0..`kv_gap`), read at the training window of `step`, dense and sparse; `broad` draws
    the ids from the unigram^0.5 as `copy_probe` does. Same keys as `copy_probe`."""
    x, y, answers, _ = kv_rows_for(tc, stream, tok, n, torch.Generator().manual_seed(seed),
                                gap_min=(3 * tc.kv_gap) // 4, broad=broad)
    return _probe(m, tc, step, "probe_broad" if broad else "probe", x, y, answers)


def _marked_accuracy(m: V41Model, x: torch.Tensor, y: torch.Tensor, marks: torch.Tensor,
                     ablation: Ablation | None) -> float:
    """The share of the marked targets that the model's argmax predicts exactly."""
    if not marks.any():
        return 0.0
    pred = forward_with(m, x, ablation).logits.argmax(-1).cpu()
    return float((pred == y)[marks].float().mean())


def frequent_ids(tokens, n: int = 1000) -> torch.Tensor:
    """The n most frequent ids of a token array (`TokenStream.frequent_ids` over all of it): familiar tokens to
    build synthetic rows from at evaluation, as training draws them from its own stream."""
    return TokenStream(tokens, {}).frequent_ids(n, prefix=len(tokens))


@torch.no_grad()
def kv_lookup(m: V41Model, ids: torch.Tensor, gaps: tuple[int, ...] = (0, 200), rows: int = 8, seq_len: int = 512,
              seed: int = 11, ablation: Ablation | None = None) -> dict[int, float]:
    """Associative recall measured directly: for each `gap`, `rows` fresh key-value rows (`kv_rows`: 2-8 pairs,
    0..gap other tokens, then every key again) and the share of queried values predicted exactly. Apart from
    the last pair's value and the first query, every pair lies beyond a 2-token window, so at a narrow window
    only a match through the compressed entries scores above chance (1 / len(ids))."""
    out = {}
    for gap in gaps:
        x, y, marks, _ = kv_rows(ids, rows, seq_len, torch.Generator().manual_seed(seed), max_pairs=8, max_gap=gap)
        out[gap] = _marked_accuracy(m, x, y, marks, ablation)
    return out


@torch.no_grad()
def said_twice(tokens, gap: int, n: int = 24, span: int = 16, seed: int = 5) -> torch.Tensor:
    """`copy_accuracy`'s rows [n, 8 + 2 * span + gap]: 8 tokens (reversed, so they do not lead into the span), a
    held-out span, `gap` tokens of other text, the span again; the second copy starts at 8 + span + gap."""
    toks = torch.as_tensor(tokens, dtype=torch.long)
    g = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(n):
        s = int(torch.randint(0, len(toks) - 2 * (span + gap) - 16, (1,), generator=g))
        said = toks[s:s + span]
        filler = toks[s + span + 8: s + span + 8 + gap]  # other text, not the span's own continuation
        rows.append(torch.cat([toks[s + span: s + span + 8].flip(0), said, filler, said]))
    return torch.stack(rows)


def copy_accuracy(m: V41Model, tokens, gap: int, n: int = 24, span: int = 16, seed: int = 5,
                  first: bool = False, ablation: Ablation | None = None) -> float:
    """Does the model copy? n held-out text spans of `span` tokens, said again after `gap` other
    tokens; the share of the repeat's tokens 2..span predicted exactly (argmax). A model that
    cannot look back scores what the text alone predicts (about 0.2 here); copying lifts it
    towards 1. gap + span > window means the first copy is reachable only through compressed entries.
    `first=True` scores the first time the span is seen instead: the no-copy baseline; `ablation`
    switches parts off (window only: can the far copy be made without the compressed entries?)."""
    x = said_twice(tokens, gap, n, span, seed).to(m.device)
    lg = (m(x) if ablation is None else m(x, ablation=ablation)).logits
    start = 8 if first else 8 + span + gap
    return float((lg[:, start:start + span - 1].argmax(-1) == x[:, start + 1:start + span]).float().mean())
