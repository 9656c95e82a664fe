"""The "Reproduce in Python" snippets: for each live page, a short script that computes the numbers the page
shows for the current inputs, using only the public surface of `model` and `lessons`.

A snippet finds the shipped weights through `model.shipped_weights()` (from the package, not the working
folder), never names a server path (a checkpoint directory is left as a placeholder), and prints the page's
numbers at the page's precision, one `label: value` line each, so a reader (and the tests, which run every
snippet in a fresh process from a temporary folder) can compare them with the page.
"""

from __future__ import annotations

from dataclasses import asdict

from .inspector import load_samples

TRACE_TOKENS = 1024          # the live pages trace the last 1,024 tokens of a prompt (ui/live.py)
CHECKPOINT_PLACEHOLDER = "/path/to/your/checkpoint"


def model_lines(weights: str) -> list[str]:
    """Lines that build the model the page ran on."""
    if weights == "trained":
        return ["from model import load, shipped_weights", "", "model = load(shipped_weights())"]
    if weights == "random":
        return ["from model import random_tiny", "", "model = random_tiny(seed=0)   # the app's 'Random tiny'"]
    return ["from model import load", "", f"model = load({CHECKPOINT_PLACEHOLDER!r})   # your checkpoint directory"]


def text_lines(text: str) -> list[str]:
    """The prompt: a shipped sample by index when it is one, else the text itself as a Python literal."""
    for i, s in enumerate(load_samples()):
        if s.text == text:
            return ["from lessons.inspector import load_samples", "", f"text = load_samples()[{i}].text   # {s.name}"]
    return [f"text = {text!r}"]


def _join(*blocks: list[str]) -> str:
    out: list[str] = []
    for b in blocks:
        if out and b:
            out.append("")
        out += b
    return "\n".join(out) + "\n"


def _trace_lines() -> list[str]:
    return [f"ids = model.encode(text)[-{TRACE_TOKENS}:]", "trace = model.trace([ids])"]


# ---- one snippet per live page ------------------------------------------------------------------------------------

def csa2_modes(weights: str, text: str, one_based: bool) -> str:
    return _join(model_lines(weights), text_lines(text),
                 ["from lessons.layers import computed_by_layer, computed_rows"], _trace_lines(),
                 [f"for row in computed_rows(computed_by_layer(trace), one_based={one_based}):",
                  "    print(\"; \".join(f\"{k}: {v}\" for k, v in row.items()))"])


def attention_shares(weights: str, text: str, layer: int, position: int, reuse: int | None = None,
                     head: int = 0) -> str:
    lines = ["tokens = [model.decode([i]) for i in ids]",
             f"view = share_view(trace, layer={layer}, position={position}, tokens=tokens)",
             "for head, t in enumerate(view.totals):",
             "    print(f\"head {head}: window {t['window']:.3f}; selected entries {t['entries']:.3f}; \"",
             "          f\"sink {t['sink']:.3f}; sum {sum(t.values()):.3f}\")"]
    if reuse is not None:
        lines += [f"cmp = reuse_comparison(trace, layer={reuse}, position={position}, head={head}, tokens=tokens)",
                  "print(f\"Reuse layer: {len(cmp.entry_ids)} entries read, same as its source: {cmp.same_entries}, \"",
                  "      f\"largest share difference {cmp.largest_gap:.3f}\")"]
    return _join(model_lines(weights), text_lines(text),
                 ["from lessons.attention_shares import reuse_comparison, share_view"], _trace_lines(), lines)


def recurrence(weights: str, text: str, layer: int) -> str:
    return _join(model_lines(weights), text_lines(text),
                 ["from model import layer_map",
                  "from lessons.recurrence import layer_param_count, param_comparison, reuse_facts, storage_check"],
                 [f"layer = {layer}", "source = layer_map(model.cfg)[layer].kv_source",
                  "rows = param_comparison(model, layer, source)",
                  "both = [r for r in rows if r.where == 'both']",
                  "print(f\"tensors in both layers: {len(both)}\")",
                  "print(f\"of them the same storage: {sum(bool(r.same_storage) for r in both)}\")",
                  "print(f\"tensors only the source has: {sum(r.where == 'source only' for r in rows)}\")",
                  "print(f\"parameters of this layer: {layer_param_count(model, layer):,}\")",
                  "print(f\"parameters of its source: {layer_param_count(model, source):,}\")",
                  "sc = storage_check(model)",
                  "print(f\"parameter tensors: {sc.tensors}; distinct storages: {sc.distinct}\")"],
                 _trace_lines(),
                 ["rf = reuse_facts(trace, layer)",
                  "print(f\"entries made by the source: {rf.entries_read}\")",
                  "print(f\"most entries one query read: {rf.max_read_per_query}\")",
                  "print(f\"largest share gap: {rf.share_gap:.3f}\")",
                  "print(f\"rows whose lens top token differs: {rf.lens_differs}\")"])


FIGURE3_LINES = {
    "attn": ["print(f\"window rows read: {ll.window_rows}\")",
             "print(f\"entries stored: {ll.entries_stored}\")",
             "print(f\"entries read: {ll.entries_selected}\")",
             "print(f\"entries visible: {ll.entries_visible}\")",
             "sh = ll.shares",
             "print(f\"shares: window {sh['window']:.1%}, selected entries {sh['entries']:.1%}, \"",
             "      f\"sink {sh['sink']:.1%}\")"],
    "moe": ["print(f\"experts: {', '.join(map(str, ll.experts))}\")",
            "print(f\"weights: {', '.join(f'{w:.2f}' for w in ll.expert_weights)}\")"],
    "engram": ["print(f\"gate: {', '.join(f'{g:.2f}' for g in ll.engram_gate)}\")"],
    "mhc": ["for k, row in enumerate(ll.comb):",
            "    print(f\"from {k}: {', '.join(f'{v:.3f}' for v in row)}\")"],
}


def figure3_box(weights: str, text: str, kind: str, layer: int) -> str:
    """The live numbers of one Figure 3 box (attention, MoE, Engram or mHC) at one layer, last position."""
    return _join(model_lines(weights), text_lines(text), ["from lessons.figure3 import live_layer"], _trace_lines(),
                 [f"ll = live_layer(trace, layer={layer})   # the query at the last position"] + FIGURE3_LINES[kind])


def cache_calculator(preset: str, knobs, keep_windows: bool) -> str:
    kw = ", ".join(f"{k}={v!r}" for k, v in asdict(knobs).items())
    return _join(["from lessons.cache_calculator import Knobs, calculate",
                  "from lessons.units import human_bytes",
                  "from lessons.designs import build"],
                 [f"knobs = Knobs({kw})",
                  f"calc = calculate(build({preset!r}, knobs), knobs, keep_windows={keep_windows})",
                  "print(f\"HBM (accelerator): {human_bytes(calc.hbm.total)} ({calc.hbm.total:,} bytes)\")",
                  "print(f\"Per further token: {calc.hbm.growth_per_token:,.1f} B\")",
                  "print(f\"Average per token: {calc.hbm.per_token:,.1f} B\")",
                  "print(f\"Persistent, per context: {human_bytes(calc.persistent.total)} \"",
                  "      f\"({calc.persistent.total:,} bytes)\")"])


def prefill_decode(read: int, written: int, rounds: int) -> str:
    return _join(["from model import V41Config, count_params",
                  "from lessons.workload import agent_round"],
                 ["pc = count_params(V41Config.preset('v4.1-flash'))   # ~10 s: the full config on the meta device",
                  f"work = agent_round({read}, {written}, pc.active_prefill, pc.active_decode, pc.backbone, {rounds})",
                  "for item, formula, value, shown in work.rows:",
                  "    print(f\"{item}: {shown}\")"])


def where_time_goes(gpu: str, batch: int, context: int, drafts: int, gpus: int = 1) -> str:
    return _join(["from model import V41Config",
                  "from lessons.cost import Workload, cost",
                  "from lessons.deploy import deployment",
                  "from lessons.roofline import GPUS, compute_bound_batch, per_sequence, place, verdict",
                  "from lessons.where_time_goes import agent_round, kind_rows"],
                 ["cfg = V41Config.preset('v4.1-flash')",
                  f"chip = GPUS[{gpu!r}]",
                  f"step = cost(cfg, Workload('decode', {context}, batch={batch}))",
                  f"one = per_sequence(cost(cfg, Workload('decode', {context})))",
                  f"print('verdict:', verdict(place(step, chip), compute_bound_batch(cfg, chip, {context}), {batch}, "
                  "one))",
                  f"print('round:', agent_round(cfg, deployment({gpu!r}, {gpus}), {drafts}).sentence())",
                  "for row in kind_rows(step):",
                  "    print(f\"{row['op kind']}: {row['FLOPs']} FLOPs, {row['bytes']}\")"])


def compare_designs(keys: list[str], context: int, batch: int) -> str:
    return _join(["from lessons.cache_calculator import calculate",
                  "from lessons.units import human_bytes",
                  "from lessons.designs import build, with_context"],
                 [f"for key in {keys!r}:",
                  f"    k = with_context(key, {context}, {batch})",
                  "    c = calculate(build(key, k), k)",
                  "    print(f\"{c.design.label}: {c.hbm.total} bytes ({human_bytes(c.hbm.total)}); \"",
                  "          f\"added per token {c.hbm.growth_per_token:.1f} B; \"",
                  "          f\"persistent {human_bytes(c.persistent.total)}\")"])


def inspector(weights: str, text: str, mode: str, new_tokens: int, layer: int, position: int,
              head: int | None = None) -> str:
    return _join(model_lines(weights), text_lines(text),
                 ["from lessons.inspector import layer_view, run_prompt"],
                 ["ids = model.encode(text)",
                  f"run = run_prompt(model, ids, {mode!r}, {new_tokens})   # greedy, as the page",
                  f"view = layer_view(run, layer={layer}, pos={position}, cfg=model.cfg, head={head})"
                  + ("   # mean over heads" if head is None else ""),
                  "a = view.attention",
                  "print(f\"Window rows: {a.window_total:.1%}\")",
                  "print(f\"Compressed entries: {a.entries_total:.1%}\")",
                  "print(f\"Sink: {a.sink:.1%}\")",
                  "sel = view.selection",
                  "if sel is not None:",
                  "    print(f\"Visible entries: {sel.visible}\")",
                  "    print(f\"Selected: {len(sel.selected)}\")",
                  "    print(f\"Candidate pool: {'none' if sel.pool is None else len(sel.pool)}\")",
                  "print(f\"routed experts: {view.router.experts}\")",
                  "print(\"Generated: \" + repr(\"\".join(run.tokens[run.n_prompt:])))"])


def home(weights: str, text: str) -> str:
    return _join(model_lines(weights), text_lines(text), ["from lessons.home import next_token_table"],
                 ["table = next_token_table(model, text, 12)",
                  "print(f\"prompt tokens: {table.n_tokens}\")",
                  "for token, i, p in zip(table.tokens, table.ids, table.probs):",
                  "    print(f\"{i}: {token!r} {p:.1%}\")"])


def dspark(weights: str, text: str, max_new: int, mode: str, draft_length, threshold: float = 0.3) -> str:
    return _join(model_lines(weights), text_lines(text),
                 ["from model import Sampler, speculative_generate"],
                 ["ids = model.encode(text)",
                  f"plain = model.generate([ids], {max_new}, prefill_mode={mode!r}, stop_at_eos=True, temperature=0.0)",
                  f"spec = speculative_generate(model, model.mtp, [ids], {max_new}, sampler=Sampler(0.0, 1.0, 0), "
                  f"prefill_mode={mode!r}, draft_length={draft_length!r}, confidence_threshold={threshold!r})",
                  "print(f\"Target passes (plain): {plain.target_passes}\")",
                  "print(f\"Target passes (DSpark): {spec.target_passes}\")",
                  "print(f\"Identical output: {'yes' if plain.tokens == spec.tokens else 'no'}\")",
                  "print(f\"tokens per pass: {spec.stats.tokens_per_pass:.2f}\")"])


def indexer_pools(weights: str, text: str, mode: str, pool_blocks: int, k: int, one_based: bool) -> str:
    return _join(model_lines(weights), text_lines(text),
                 ["from lessons.indexer_pools import reindex_inputs, reselect, summary_rows, trace_for_pools"],
                 ["ids = model.encode(text)",
                  f"inp = reindex_inputs(model, trace_for_pools(model, ids, {mode!r}))",
                  f"results = reselect(inp, {pool_blocks}, {k})",
                  f"for row in summary_rows(inp, results, one_based={one_based}):",
                  "    print(\"; \".join(f\"{key}: {v:.4f}\" if isinstance(v, float) else f\"{key}: {v}\" "
                  "for key, v in row.items()))"])


def ablation(weights: str, names: list[str], topk: int, stories: int, natural: int, cost_text: str) -> str:
    return _join(model_lines(weights), text_lines(cost_text), ["from lessons.ablation import run_config"],
                 ["cost_ids = model.encode(text)",
                  f"for name in {names!r}:",
                  f"    row = run_config(model, name, cost_ids, topk={topk} if name == 'smaller top-k' else None, "
                  f"max_stories={stories}, max_natural_tokens={natural or None})",
                  "    print(f\"{row['configuration']}: loss {row['loss']:.3f}; recall far {row['recall_far']:.2f}; \"",
                  "          f\"recall inside {row['recall_inside']:.2f}; cache bytes {row['cache_bytes']}\")"])


def far_fact(weights: str, own: bool, text: str = "", fact: str = "", answer: str = "", one_based: bool = False,
             rank: int | None = None) -> str:
    """The far-fact panel (lessons/far_fact.py): the fixed-rule held-out sample, or the reader's story and fact."""
    if own:
        story = [f"text = {text!r}", f"fact = {fact!r}", f"answer = {answer!r}   # empty: the colour in the fact",
                 "story, tokens, problem = own_story(text, fact, answer, model.tokenizer)",
                 "if problem:", "    raise SystemExit(problem)"]
        names = ["from lessons.far_fact import analyse, summary, table_rows", "from lessons.far_story import own_story"]
    else:
        pick = "" if rank is None else f", rank={rank}"
        why = "the fixed rule: FAR_RULE" if rank is None else f"far story {rank + 1} in distance order"
        story = [f"sample = far_sample(model.tokenizer, model.cfg.sliding_window{pick})   # {why}",
                 "story, tokens = sample.story, sample.tokens"]
        names = ["from lessons.far_fact import analyse, summary, table_rows",
                 "from lessons.far_story import far_sample"]
    num = "lambda i: i + 1" if one_based else "lambda i: i"
    return _join(model_lines(weights), names, story,
                 ["result = analyse(model, story, tokens)   # one traced forward, one with the global branch off",
                  f"for line in summary(result, num={num}):", "    print(line)",
                  f"for row in table_rows(result, num={num}):",
                  "    print(f\"layer {row['layer']} ({row['role']}): share on fact entries \"",
                  "          f\"{100 * row['share on fact entries (mean over heads)']:.2f}%; in top-k \"",
                  "          f\"{row['in top-k']}; in candidate pool {row['in candidate pool']}; \"",
                  "          f\"index rank {row['index rank']}\")"])


def lookback_heads(weights: str, passage: int, span: int, gap: int, layer: int, head: int,
                   own_text: str | None = None) -> str:
    """The Look-back heads page: passage `passage` (0-based) of the held-out prose, or the reader's text as the span."""
    row = [f"lead, span, filler = passage_parts(tokens, {passage}, span={span}, gap={gap})"]
    if own_text is not None:
        row += [f"span = model.encode({own_text!r})[:{span}]   # your text's first tokens are the span"]
    return _join(model_lines(weights),
                 ["from model.heldout import heldout_natural_tokens",
                  "from lessons.lookback_heads import copy_row, head_pattern, lens_rise, look_back, passage_parts"],
                 ["tokens = heldout_natural_tokens(model.tokenizer)"] + row +
                 ["ids, layout = copy_row(lead, span, filler)",
                  "trace = model.trace([ids], lens='lazy')   # each layer's logit lens, computed when read",
                  "lb = look_back(trace, layout)", "best = lb.best()",
                  "print(f\"Strongest look-back share: {best.induction:.2f} (layer {best.layer}, head {best.head})\")",
                  "n = len(lb.copy.expected)",
                  "print(f\"Copied, second time: {round(lb.copy.second_rate * n)} of {n}\")",
                  "print(f\"Right, first time: {round(lb.copy.first_rate * n)} of {n}\")",
                  f"hp = head_pattern(trace, layout, layer={layer}, head={head})",
                  "mean = sum(hp.after_match) / len(hp.after_match)",
                  "print(f\"Mean share on the token after the match: {mean:.3f}\")",
                  "rise = lens_rise(trace, layout)",
                  "print(f\"Second time against first, at the output: {rise.rise[-1]:+.2f} nats\")"])
