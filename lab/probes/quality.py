"""`python -m lab.probes.quality`: answer quality of the shipped tiny model, whole and with parts removed.

Measures, on held-out data shipped in data/heldout (no download needed):
- loss per token on natural text (a Shakespeare play and a Bible book never trained on), next to a
  unigram baseline (token frequencies of the training stream, or of the held-out text itself when
  the stream is absent, which flatters the baseline);
- recall accuracy on held-out generated stories, bucketed by the distance between the fact and the
  question: inside the window, just past it, far past it;
- copy accuracy: held-out text spans said twice, near (inside the window) and far (past it), the
  plainest test of whether the model can look back at all (lab.training.evaluation.copy_accuracy);
- the same with one component removed at inference time (model.arch.context.Ablation), and with bounded
  instead of exact prefill.
- far recall on stories whose names, objects and fact/question templates never occur in training
  (data/heldout/stories_heldout_templates.jsonl): retrieval, not template matching.
- binding: on far stories that hold other facts, how often the answer is another fact's colour (a model that
  finds "a fact" but not the asked object's one scores about one over the number of facts), and the same with
  the distance taken out: drills whose facts put exactly 0, 3 or 6 words between object and colour.
Prints one table and a last line `quality: loss=… unigram_loss=… recall_far=… recall_far_window_only=…
recall_far_heldout_templates=… copy_near=… copy_far=… copy_far_window_only=… copy_first=… fact_in_pool=…
other_fact=…` (fact_in_pool: the share of far held-out stories whose fact entry is in the candidate pool at the
answer row; other_fact: the share of far stories with distractors answered with a distractor's colour).
The held-out evaluation itself (`evaluate`, `natural_loss`, `story_recall`) is lab/training/evaluation.py,
which the Ablation lab runs too.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

from model.cli import add_device_option, pick_device
from model.heldout import HELDOUT_TEMPLATES_PATH as HELDOUT_TEMPLATES, Quality, evaluate, natural_loss, story_recall

ROOT = Path(__file__).resolve().parents[2]


# Ablations the lab offers: name -> (Ablation kwargs, prefill mode, one-line description)
ABLATIONS: dict[str, tuple[dict, str, str]] = {
    "full model": ({}, "exact", "the model as trained"),
    "window only": ({"window_only": True}, "exact", "compressed entries ignored: each layer reads its window only"),
    "no candidate pool": ({"no_candidates": True}, "exact", "Reindex layers search every entry, not the pool"),
    "top-k 4": ({"index_topk": 4}, "exact", "each query reads 4 selected entries instead of the configured number"),
    "no Engram": ({"no_engram": True}, "exact", "the n-gram memory adds nothing"),
    "every layer selects": ({"reselect_all": True}, "exact", "Reuse layers choose their own entries too"),
    "mHC comb off": ({"mhc_identity": True}, "exact", "mHC comb replaced by the identity"),
    "bounded prefill": ({}, "bounded", "decoder replays only the last window of the prompt"),
}


def unigram_logprobs(vocab: int, heldout: np.ndarray) -> tuple[torch.Tensor, str]:
    stream = ROOT / ".cache" / "corpus" / "tokens_train.npy"
    if stream.exists():
        counts = np.bincount(np.load(stream, mmap_mode="r"), minlength=vocab)
        source = "training stream"
    else:
        counts = np.bincount(heldout, minlength=vocab)
        source = "held-out text itself (optimistic)"
    p = (counts + 1.0) / (counts.sum() + vocab)
    return torch.log(torch.tensor(p, dtype=torch.float64)), source


def main(argv: list[str] | None = None) -> int:
    from model import Ablation, load

    ap = argparse.ArgumentParser(prog="python -m lab.probes.quality")
    ap.add_argument("--weights", default=str(ROOT / "data" / "weights" / "tiny"))
    ap.add_argument("--max-stories", type=int, default=None)
    ap.add_argument("--max-natural-tokens", type=int, default=None)
    ap.add_argument("--only", nargs="*", default=None, help="ablation names to run (default: all)")
    ap.add_argument("--record", action="store_true",
                    help="write the last line's figures into the weights' training.json ('measured'), where the "
                         "Far fact panel reads them")
    add_device_option(ap)
    a = ap.parse_args(argv)
    unknown = sorted(set(a.only or ()) - set(ABLATIONS))
    if unknown:
        print(f"no ablation named {', '.join(map(repr, unknown))}; the names are: "
              + ", ".join(map(repr, ABLATIONS)), file=sys.stderr)
        return 2
    if not (Path(a.weights) / "model.safetensors").exists():
        print(f"no trained weights at {a.weights}", file=sys.stderr)
        return 2
    model = load(a.weights, device=pick_device(a.device))
    base_loss, n, toks = natural_loss(model, a.max_natural_tokens)
    uni, source = unigram_logprobs(model.cfg.vocab_size, toks)
    y = torch.from_numpy(np.asarray(toks[1:], dtype=np.int64))[:n]
    unigram_loss = float(-uni[y].mean())
    print(f"held-out natural text: {n:,} tokens; unigram baseline from the {source}")
    header = f"{'configuration':22} {'loss':>7} {'inside':>7} {'past':>7} {'far':>7} {'sec':>6}"
    print(header)
    print("-" * len(header))
    results: dict[str, Quality] = {}
    for name, (kw, mode, _desc) in ABLATIONS.items():
        if a.only and name not in a.only:
            continue
        q = evaluate(model, Ablation(**kw), mode, a.max_stories, a.max_natural_tokens)
        results[name] = q
        r = q.row()
        print(f"{name:22} {r['loss']:7.3f} {r['recall_inside']:7.1%} {r['recall_just_past']:7.1%} "
              f"{r['recall_far']:7.1%} {q.seconds:6.1f}", flush=True)
    print(f"{'unigram baseline':22} {unigram_loss:7.3f}")
    from lab.probes.evaluation import link_binding, pair_formats, pair_reads, rival_reads
    from lab.training import copy_accuracy, fact_in_pool, frequent_ids, kv_lookup
    from model.heldout import fact_binding, heldout_natural_tokens

    every = heldout_natural_tokens(model.tokenizer)
    copy_near, copy_far = (copy_accuracy(model, every, gap) for gap in (4, 200))
    seen_once = copy_accuracy(model, every, 4, first=True)
    copy_far_wo = copy_accuracy(model, every, 200, ablation=Ablation(window_only=True))
    print(f"16-token held-out spans said twice, the repeat predicted: {copy_near:.1%} 4 tokens later, "
          f"{copy_far:.1%} 200 tokens later ({copy_far_wo:.1%} window only); the first time they are seen: "
          f"{seen_once:.1%}")
    held = story_recall(model, a.max_stories, path=HELDOUT_TEMPLATES)[0].get("far", float("nan"))
    print(f"far recall on stories whose names, objects and templates were never trained on: {held:.1%}")
    in_pool = fact_in_pool(model, model.tokenizer)
    print(f"far held-out stories whose fact entry is in the candidate pool at the answer row: {in_pool:.1%}")
    bind = fact_binding(model)
    print(f"far held-out stories with other facts in them ({bind.stories}): {bind.right:.1%} answered right, "
          f"{bind.other_fact:.1%} with another fact's colour (one of the story's facts at random: "
          f"{bind.random_fact:.1%}); with no other fact: {bind.alone_right:.1%} right")
    rivals = rival_reads(model)
    if rivals:
        first = next(iter(rivals.values()))
        print(f"the same far stories ({first.stories}), at the answer row of each layer that selects ratio-1 entries: "
              + "; ".join(f"layer {r.layer}: top-k holds the fact {r.fact_in_topk:.0%} and its rivals "
                          f"{r.rivals_in_topk:.0%}, index score ranks it first {r.fact_first:.0%}, attention "
                          f"{r.read_first:.0%}" for r in rivals.values())
              + f" (one of the story's facts at random: {first.chance:.0%})")
    links = link_binding(model)
    print("drills with k words between each object and its colour, the asked object's colour picked among the "
          "colours: " + ", ".join(f"k={k} {r:.1%} (random {g:.1%})" for k, (r, g) in links.items()))
    formats = pair_formats(model)
    print("one-token objects and colours said in five ways, the asked object's colour picked among the colours: "
          + ", ".join(f"{name} {r:.1%}" for name, (r, _) in formats.items())
          + f" (random {sum(g for _, g in formats.values()) / len(formats):.1%})")
    facts = 5
    reads = pair_reads(model, facts=facts)
    print(f"the same texts with {facts} facts each, the fact colour the decoder's attention falls on most at the "
          "answer row: " + ", ".join(f"{name} {r:.1%}" for name, (r, _) in reads.items())
          + f" (random {1 / facts:.1%}; right there and wrong in the answer: the readout fails, not the lookup)")
    lookups = kv_lookup(model, frequent_ids(every))
    print("key-value lookups (2-8 pairs of familiar tokens, then every key again), values predicted: "
          + ", ".join(f"{r:.1%} with up to {gap} other tokens between" for gap, r in lookups.items()))
    full = results.get("full model")
    wo = results.get("window only")
    nan = float("nan")
    print(f"quality: loss={full.loss if full else nan:.4f} unigram_loss={unigram_loss:.4f} "
          f"recall_far={full.recall.get('far', nan) if full else nan:.3f} "
          f"recall_far_window_only={wo.recall.get('far', nan) if wo else nan:.3f} "
          f"recall_far_heldout_templates={held:.3f} "
          f"copy_near={copy_near:.3f} copy_far={copy_far:.3f} copy_far_window_only={copy_far_wo:.3f} "
          f"copy_first={seen_once:.3f} fact_in_pool={in_pool:.3f} other_fact={bind.other_fact:.3f}")
    if a.record:
        figures = {"recall_far": full.recall.get("far") if full else None,
                   "recall_inside": full.recall.get("inside") if full else None,
                   "recall_just_past": full.recall.get("just_past") if full else None,
                   "recall_far_window_only": wo.recall.get("far") if wo else None,
                   "recall_far_heldout_templates": held, "copy_near": copy_near, "copy_far": copy_far,
                   "copy_far_window_only": copy_far_wo, "copy_first": seen_once, "fact_in_pool": in_pool,
                   "distractors_right": bind.right, "distractors_other_fact": bind.other_fact,
                   "distractors_random_fact": bind.random_fact, "alone_right": bind.alone_right,
                   **{f"rivals_layer{r.layer}_{k}": getattr(r, k) for r in rivals.values()
                      for k in ("fact_in_topk", "rivals_in_topk", "fact_first", "read_first")},
                   **{f"binding_link{k}": r for k, (r, _) in links.items()},
                   **{f"binding_link{k}_random": g for k, (_, g) in links.items()},
                   **{f"kv_lookup{gap}": r for gap, r in lookups.items()},
                   **{"pairs_" + name.replace(" ", "_"): r for name, (r, _) in formats.items()},
                   **{"reads_" + name.replace(" ", "_"): r for name, (r, _) in reads.items()},
                   "loss": full.loss if full else None, "unigram_loss": unigram_loss}
        record_measured(Path(a.weights), figures, "python -m lab.probes.quality " + " ".join(argv or sys.argv[1:]))
    return 0 if full and math.isfinite(full.loss) else 1


def record_measured(weights: Path, figures: dict, command: str) -> None:
    """Keep the figures in the weights' training.json under "measured" (None values left out)."""
    path = weights / "training.json"
    info = json.loads(path.read_text()) if path.exists() else {}
    info["measured"] = {"command": command, "date": time.strftime("%Y-%m-%d"),
                        **{k: round(v, 4) for k, v in figures.items() if v is not None}}
    path.write_text(json.dumps(info, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
