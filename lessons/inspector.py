"""The prompt inspector's lesson: run a prompt (and a few generated tokens) with the tracer on, then
read one layer at one token, or one quantity over every layer and token.

Follows docs/design/architecture.md §3.1 (bounded vs exact prefill), §3.7 and §4 (`Trace` / `LayerRecord`),
docs/design/equations.md §3 (shares over window rows, selected entries and the sink), §5-6 (CSA2
roles, candidate pool), §8 (mHC pre/post/comb), §9 (router), §10 (Engram hashing).

Everything here is a pure function of a `Run` (a `Trace` plus the token texts), so the page only
draws and the tests reach every number without a browser.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from model import Sampler
from model.inference import LAZY, LayerRecord, LensChoice, Trace, trace_generate

from .figure3 import MHC_SITE
from .layers import Agreement, describe_layer

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ROOT / "data" / "prompts.json"
MAX_PROMPT_TOKENS = 4096   # the inspector keeps every record of every row: CPU seconds, not minutes
MAX_NEW_TOKENS = 64

INTRO = (
    "Run a prompt with a recorder switched on, then step through the layers for one token: the layer's role, "
    "where its attention went, its experts, Engram, the residual-stream mixing, and what the layer would "
    "already predict if the model stopped there."
)

BOUNDED_NOTE = (
    "Bounded prefill runs the encoder layers over every prompt token, lets the first decoder layer publish "
    "its compressed entries and index keys for every token, and then runs the decoder layers only over the "
    "last {w} prompt tokens (the replay segment). Earlier prompt tokens therefore have no records in the "
    "decoder layers: that work was never done. Generated tokens go through both halves."
)

EXACT_NOTE = ("Exact prefill runs every layer over every prompt token, so every layer has a record for every "
              "token.")

ABSENT_BOUNDED = (
    "Layer {layer} did not process token {pos}: in bounded prefill the decoder runs only over the last {w} "
    "prompt tokens (positions {start}-{end}) and over generated tokens. This token reached the decoder only "
    "as an entry published by the first decoder layer, never as a query."
)


# --------------------------------------------------------------------------------------------------
# Samples and input checks
# --------------------------------------------------------------------------------------------------

@dataclass
class Sample:
    name: str
    text: str
    kind: str
    answer: str | None = None


def load_samples(path: Path = PROMPTS) -> list[Sample]:
    try:
        rows = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return [Sample("Key in the blue box", "The key is in the blue box. The box is", "short", "blue")]
    return [Sample(r["name"], r["text"], r.get("kind", ""), r.get("answer")) for r in rows]


def token_texts(model, ids) -> list[str]:
    return [model.decode([int(i)]) for i in ids]


# --------------------------------------------------------------------------------------------------
# Running a prompt with the tracer
# --------------------------------------------------------------------------------------------------

@dataclass
class Run:
    trace: Trace
    ids: list[int]             # prompt + generated
    tokens: list[str]          # one decoded text per id
    n_prompt: int
    mode: str                  # "bounded" | "exact"
    window: int
    decoder_start: int
    prefill_s: float = 0.0
    decode_s: float = 0.0
    step_s: list[float] = field(default_factory=list)
    memo: dict = field(default_factory=dict, repr=False)   # quantity -> overview matrix (the run is read-only)
    decode: Callable[[list[int]], str] | None = field(default=None, repr=False)   # the tokenizer's, for lens tokens

    @property
    def n(self) -> int:
        return len(self.ids)

    @property
    def n_layers(self) -> int:
        return len(self.trace.layers)

    @property
    def generated(self) -> list[int]:
        return self.ids[self.n_prompt:]

    @property
    def replay_start(self) -> int:
        """First prompt position the decoder processed (0 in exact mode)."""
        return max(0, self.n_prompt - self.window) if self.mode == "bounded" else 0

    def layer(self, i: int) -> LayerRecord:
        return self.trace.layers[i]


def run_prompt(model, ids: list[int], mode: str = "bounded", new_tokens: int = 0, temperature: float = 0.0,
               seed: int = 0, chunk_size: int = 512, lens_topk: int = 5,
               progress: Callable[[float, str], None] | None = None, lens: LensChoice = LAZY) -> Run:
    """Prefill `ids` with the tracer on, then decode `new_tokens` one at a time into the same trace. Every
    generated token is fed back once, so it has a record in every layer (its lens shows the next prediction).
    The logit lens is computed for the layer and token a view draws when it draws them (`lens`: see
    model.inference.trace.lens_plan; True computes every layer during the run)."""
    if mode not in ("bounded", "exact"):
        raise ValueError(f"prefill mode must be 'bounded' or 'exact', got {mode!r}")
    if not 0 <= new_tokens <= MAX_NEW_TOKENS:
        raise ValueError(f"generate between 0 and {MAX_NEW_TOKENS} tokens")
    tr = trace_generate(model, torch.tensor([ids]), mode, new_tokens, Sampler(temperature=temperature, seed=seed),
                        chunk_size=chunk_size, lens=lens, lens_topk=lens_topk, progress=progress,
                        meta={"prompt_tokens": len(ids)})
    trace, out, steps, decode_s = tr.trace, tr.generated, tr.step_s, tr.decode_s
    all_ids = list(ids) + out
    cfg = model.cfg
    return Run(trace=trace, ids=all_ids, tokens=token_texts(model, all_ids), n_prompt=len(ids), mode=mode,
               window=cfg.sliding_window, decoder_start=cfg.decoder_start, prefill_s=tr.prefill_s, decode_s=decode_s,
               step_s=steps, decode=model.decode)


def visible_chars(text: str, spaces: bool = False) -> str:
    """Text whose invisible characters show: a line break as ↵, a tab as →, other control characters as \\xNN,
    and (with `spaces`) a space as ␣."""
    marks = {"\n": "\u21b5", "\t": "\u2192"} | ({" ": "\u2423"} if spaces else {})
    return "".join(marks.get(ch) or (f"\\x{ord(ch):02x}" if ord(ch) < 32 or ord(ch) == 127 else ch) for ch in text)


def one_line(text: str) -> str:
    """Generated text on one line, so a token after a break ('[' after '\\n') stays beside the text it follows
    instead of on a line of its own."""
    return visible_chars(text)


def covered_rows(run: Run) -> np.ndarray:
    """[layers, tokens] bool: did layer l run token t as a query? (Generated tokens not yet fed are False.)"""
    m = np.zeros((run.n_layers, run.n), dtype=bool)
    for i, rec in enumerate(run.trace.layers):
        p = rec.positions.numpy()
        m[i, p[p < run.n]] = True
    return m


def absent_reason(run: Run, layer: int, pos: int, num: Callable[[int], int] = lambda i: i) -> str:
    """Why layer `layer` has no record for token `pos` (always a sentence, never an error); `num` maps a 0-based
    layer to the reader's numbering."""
    if pos >= run.n_prompt and pos == run.n - 1 and run.generated:
        return ("This is the last generated token: it was sampled from the previous step's scores but not fed back "
                "through the model yet, so no layer has processed it.")
    if run.mode == "bounded" and layer >= run.decoder_start and pos < run.replay_start:
        return ABSENT_BOUNDED.format(layer=num(layer), pos=pos, w=run.window, start=run.replay_start,
                                     end=run.n_prompt - 1)
    return f"Layer {num(layer)} has no record for token {pos}."


# --------------------------------------------------------------------------------------------------
# One layer at one token
# --------------------------------------------------------------------------------------------------

@dataclass
class AttentionView:
    ratio: int
    window_pos: list[int]          # absolute positions of the valid window slots
    window_share: list[float]      # share of each slot (mean over heads or one head)
    entry_ids: list[int]           # selected compressed entries read by this layer
    entry_share: list[float]
    entry_spans: list[tuple[int, int]]  # tokens [start, end) each entry packs
    sink: float
    heads: int

    @property
    def window_total(self) -> float:
        return float(sum(self.window_share))

    @property
    def entries_total(self) -> float:
        return float(sum(self.entry_share))

    def per_token(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(window share, entry share) per source token over [0, n); an entry's share is spread evenly over
        the r tokens it packs (the attention itself reads the packed entry, not the tokens)."""
        win, ent = np.zeros(n), np.zeros(n)
        for p, s in zip(self.window_pos, self.window_share):
            if 0 <= p < n:
                win[p] += s
        for (a, b), s in zip(self.entry_spans, self.entry_share):
            b = min(b, n)
            if b > a:
                ent[a:b] += s / (b - a)
        return win, ent

    def packing_caption(self) -> str:
        return f"Each compressed entry e packs tokens [e·{self.ratio}, (e+1)·{self.ratio}); its bar spans them."


@dataclass
class SelectionView:
    selects: bool                  # this layer scored the entries itself (Full / Reindex)
    source: int | None             # layer whose selection it reads
    visible: int                   # entries visible to this query
    selected: list[int]
    pool: list[int] | None         # entries in the candidate pool (None when no pool applies)
    scores: list[float] | None     # index scores of the visible entries (this layer's when it selects)
    note: str


@dataclass
class RouterView:
    scores: list[float]
    experts: list[int]
    weights: list[float]
    n_shared: int

    def sentence(self) -> str:
        return (f"Every token also runs {self.n_shared} shared expert(s); the router adds {len(self.experts)} of "
                f"{len(self.scores)} routed experts, weighted by their normalised scores.")


@dataclass
class EngramView:
    ngrams: list[dict]             # order, head, row, tokens
    gate: list[float]              # per stream


@dataclass
class LayerView:
    layer: int
    pos: int
    role: str
    stack: str
    description: str
    attention: AttentionView | None
    selection: SelectionView | None
    router: RouterView | None
    engram: EngramView | None
    hc: dict[str, dict[str, np.ndarray]] | None      # site -> pre/post/comb
    lens: list[tuple[int, str, float]]
    stream_norms: list[float]


def _row(rec: LayerRecord, pos: int) -> int | None:
    if rec.positions.numel() == 0:
        return None
    return rec.row(pos)


def attention_view(rec: LayerRecord, pos: int, row: int, head: int | None = None) -> AttentionView | None:
    sh = rec.shares
    if sh is None:
        return None
    sel = (lambda t: t[0, row].mean(0)) if head is None else (lambda t: t[0, row, head])
    w = sh.window.shape[-1]
    slot_pos = [pos - (w - 1) + j for j in range(w)]
    ws = sel(sh.window).tolist()
    keep = [j for j in range(w) if slot_pos[j] >= 0]
    ids = sh.entry_ids[0, row].tolist() if sh.entry_ids.numel() else []
    es = sel(sh.entries).tolist() if sh.entries.shape[-1] else []
    pairs = [(e, s) for e, s in zip(ids, es) if e >= 0]
    r = max(1, sh.ratio)
    return AttentionView(ratio=sh.ratio, window_pos=[slot_pos[j] for j in keep], window_share=[ws[j] for j in keep],
                         entry_ids=[e for e, _ in pairs], entry_share=[s for _, s in pairs],
                         entry_spans=[(e * r, (e + 1) * r) for e, _ in pairs],
                         sink=float(sel(sh.sink)), heads=sh.window.shape[2])


def selection_view(run: Run, layer: int, pos: int, num: Callable[[int], int] = lambda i: i) -> SelectionView | None:
    rec = run.layer(layer)
    spec = rec.spec
    if spec.compress_ratio == 0:
        return None
    row = _row(rec, pos)
    if row is None:
        return None
    visible = (pos + 1) // spec.compress_ratio
    selected = sorted(e for e in (rec.shares.entry_ids[0, row].tolist() if rec.shares is not None else []) if e >= 0)
    src = run.layer(spec.index_source) if spec.index_source is not None else None
    scores = None
    if src is not None and src.index_scores is not None:
        srow = _row(src, pos)
        if srow is not None:
            scores = src.index_scores[0, srow, :visible].tolist()
    pool = None
    cand = next((r for r in run.trace.layers if r.spec.candidate_source), None)
    in_pool_group = spec.candidate_source or (src is not None and src.spec.uses_candidates)
    if cand is not None and cand.candidates is not None and in_pool_group:
        crow = _row(cand, pos)
        if crow is not None:
            pool = cand.candidates[0, crow, :visible].nonzero().flatten().tolist()
    if spec.selects:
        note = (f"Layer {num(layer)} scored the {visible} visible entries with its own indexer query and kept the "
                f"top {len(selected)}" + (" inside the candidate pool (entries outside it were scored, then masked "
                                          "out)." if spec.uses_candidates else "."))
        if spec.candidate_source:
            note += " Its block scores also chose the candidate pool that later Reindex layers search."
        if selected and len(selected) >= visible:
            note += (f" Every visible entry is selected because the prompt is short: the top-k chooses only once "
                     f"more than {len(selected)} entries are visible (pick a long sample).")
    else:
        note = (f"Layer {num(layer)} is a Reuse layer: it owns no indexer and reads the entries layer "
                f"{num(spec.index_source)} selected for this token, with its own query.")
    return SelectionView(selects=spec.selects, source=spec.index_source, visible=visible, selected=selected,
                         pool=pool, scores=scores, note=note)


def selection_line(view: LayerView, tokens: list[str]) -> str:
    """One sentence on a layer's selection for one token: how many of the visible entries it kept, the share of
    its attention they got, and the text of the entry that got the most (plain text, shown as it is)."""
    sel, a = view.selection, view.attention
    if sel is None or a is None:
        return "No compressed branch at this layer: nothing is selected."
    kept = f"Keeps {len(sel.selected)} of {sel.visible} entries"
    if not a.entry_ids:
        return kept + "."
    i = max(range(len(a.entry_ids)), key=a.entry_share.__getitem__)
    s, e = a.entry_spans[i]
    text = "".join(tokens[p] for p in range(s, min(e, len(tokens)))).strip()
    total = a.entries_total
    share = f"{100 * total:.0f}%" if total >= 0.01 else "under 1%"
    top = f"; most on entry {a.entry_ids[i]} ('{text[:24]}')" if total >= 0.01 else ""
    return f"{kept}; they get {share} of its attention{top}."


def too_short_to_choose(sel: SelectionView | None) -> str | None:
    """A sentence in place of the selection chart when the prompt is too short for the top-k to choose: it keeps at
    least half of the visible entries (and any pool holds them all), so a chart would be one solid block. None when
    the chart shows a real choice."""
    if sel is None or sel.visible == 0:
        return None
    pooled = sel.pool is None or len(sel.pool) >= sel.visible
    if not (pooled and 2 * len(sel.selected) >= sel.visible):
        return None
    return (f"Too short to choose much: {sel.visible} entries are visible and the top-k keeps {len(sel.selected)} "
            "of them, so there is no chart of the choice here. A prompt of a few hundred tokens shows a real one.")


def engram_view(model_cfg, run: Run, rec: LayerRecord, pos: int, row: int) -> EngramView | None:
    if rec.engram_gate is None or rec.engram_hash is None:
        return None
    heads = model_cfg.engram_n_heads
    hashes = rec.engram_hash[0, row].tolist()
    grams = []
    for c, h in enumerate(hashes):
        order, head = 2 + c // heads, c % heads
        start = pos - order + 1
        toks = [run.tokens[p] if p >= 0 else "<pad>" for p in range(start, pos + 1)]
        grams.append({"order": order, "head": head, "row": int(h), "tokens": toks})
    return EngramView(ngrams=grams, gate=rec.engram_gate[0, row].tolist())


def layer_view(run: Run, layer: int, pos: int, cfg, head: int | None = None,
               num: Callable[[int], int] = lambda i: i) -> LayerView | str:
    """Everything recorded for one layer at one token, or the sentence saying why there is nothing. `num` maps a
    0-based layer to the reader's numbering in every sentence (the description, the selection note, the absence
    message). Lens tokens are decoded with the run's tokenizer (`run_prompt` keeps it on the run)."""
    if not 0 <= layer < run.n_layers:
        return f"There is no layer {num(layer)}; this model has layers {num(0)}-{num(run.n_layers - 1)}."
    if not 0 <= pos < run.n:
        return f"There is no token {pos}; this run has tokens 0-{run.n - 1}."
    rec = run.layer(layer)
    row = _row(rec, pos)
    if row is None:
        return absent_reason(run, layer, pos, num)
    hc = None
    if rec.hc_attn is not None:
        hc = {site: {"pre": m.pre[0, row].numpy(), "post": m.post[0, row].numpy(), "comb": m.comb[0, row].numpy()}
              for site, m in (("attention", rec.hc_attn), ("ffn", rec.hc_ffn))}
    router = None
    if rec.router_scores is not None:
        router = RouterView(scores=rec.router_scores[0, row].tolist(), experts=rec.router_experts[0, row].tolist(),
                            weights=rec.router_weights[0, row].tolist(), n_shared=cfg.n_shared_experts)
    lens = [(i, run_decode(run, i), p) for i, p in rec.lens_at(row)]   # a lazy lens computes this row only
    return LayerView(layer=layer, pos=pos, role=rec.spec.role, stack=rec.spec.stack,
                     description=describe_layer(rec.spec, num),
                     attention=attention_view(rec, pos, row, head), selection=selection_view(run, layer, pos, num),
                     router=router, engram=engram_view(cfg, run, rec, pos, row), hc=hc, lens=lens,
                     stream_norms=rec.stream_norms[0, row].tolist() if rec.stream_norms is not None else [])


def run_decode(run: Run, tid: int) -> str:
    """One token's text: the run's tokenizer, else the text of the token where it occurs in the run."""
    if run.decode is not None:
        return run.decode([tid])
    try:
        return run.tokens[run.ids.index(tid)]
    except ValueError:
        return f"#{tid}"


# --------------------------------------------------------------------------------------------------
# The whole-prompt overview: one quantity over layers x tokens
# --------------------------------------------------------------------------------------------------

QUANTITIES = {
    "processed": "1 where the layer ran this token as a query, 0 where it did not (bounded prefill skips the "
                 "decoder for early prompt tokens).",
    "sink share": "share of attention (mean over heads) given to the sink: attention the head chose not to spend.",
    "compressed share": "share of attention (mean over heads) given to the selected compressed entries.",
    "attention entropy": "entropy in nats of each head's attention over window rows, entries and sink, mean over "
                         "heads: low = focused, high = spread out.",
    "top expert": "the routed expert with the highest weight for this token.",
    "top expert weight": "the routing weight of that expert.",
    "Engram gate": "Engram's gate, mean over the residual streams (Engram layers only).",
    "stream norm": "RMS of the residual streams after the layer, mean over streams.",
    "lens prob. of final prediction": "probability the logit lens at this layer gives to the token the whole model "
                                      "finally predicts at this position (0 when it is outside the lens's top 5; "
                                      "blank where the last layer did not run the token).",
}


def overview(run: Run, quantity: str) -> np.ndarray:
    """[layers, tokens] float array, NaN where the layer has no record for the token."""
    if quantity not in QUANTITIES:
        raise ValueError(f"unknown quantity {quantity!r}")
    if quantity not in run.memo:
        run.memo[quantity] = _overview(run, quantity)
    return run.memo[quantity]


def _overview(run: Run, quantity: str) -> np.ndarray:
    n = run.n
    out = np.full((run.n_layers, n), np.nan)
    final = None
    if quantity == "lens prob. of final prediction":
        last = run.trace.layers[-1]
        final = np.full(n, -1, dtype=np.int64)
        if last.lens_ids is not None:
            p = last.positions.numpy()
            keep = p < n
            final[p[keep]] = last.lens_ids[0, :, 0].numpy()[keep]
    for i, rec in enumerate(run.trace.layers):
        p = rec.positions.numpy()
        keep = p < n
        pos = p[keep]
        if quantity == "processed":
            out[i] = 0.0
            out[i, pos] = 1.0
            continue
        val = None
        sh = rec.shares
        if quantity == "sink share" and sh is not None:
            val = sh.sink[0].mean(-1).numpy()
        elif quantity == "compressed share" and sh is not None:
            val = sh.entries[0].sum(-1).mean(-1).numpy() if sh.entries.shape[-1] else np.zeros(len(p))
        elif quantity == "attention entropy" and sh is not None:
            parts = [sh.window[0], sh.entries[0], sh.sink[0].unsqueeze(-1)]
            probs = torch.cat([t.float() for t in parts], -1)
            ent = -(probs * torch.log(probs.clamp_min(1e-30))).sum(-1)
            val = ent.mean(-1).numpy()
        elif quantity == "top expert" and rec.router_experts is not None:
            best = rec.router_weights[0].argmax(-1, keepdim=True)
            val = rec.router_experts[0].gather(-1, best).squeeze(-1).float().numpy()
        elif quantity == "top expert weight" and rec.router_weights is not None:
            val = rec.router_weights[0].max(-1).values.numpy()
        elif quantity == "Engram gate" and rec.engram_gate is not None:
            val = rec.engram_gate[0].mean(-1).numpy()
        elif quantity == "stream norm" and rec.stream_norms is not None:
            val = rec.stream_norms[0].mean(-1).numpy()
        elif quantity == "lens prob. of final prediction" and rec.lens_ids is not None:
            ids, pr = rec.lens_ids[0].numpy(), rec.lens_probs[0].numpy()
            target = final[np.clip(p, 0, n - 1)]
            hit = ids == target[:, None]
            val = np.where(target >= 0, (pr * hit).sum(-1), np.nan)
        if val is not None:
            out[i, pos] = np.asarray(val, dtype=float)[keep]
    return out


# --------------------------------------------------------------------------------------------------
# Downloads
# --------------------------------------------------------------------------------------------------

def _plain(x):
    """Tensors and arrays -> nested lists; non-finite floats (-inf = not visible / outside the pool) -> None."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu()
        if x.dtype == torch.bool:
            return x.tolist()
        if x.is_floating_point():
            return _plain(x.double().numpy())
        return x.tolist()
    if isinstance(x, np.ndarray):
        if x.dtype.kind == "f":
            obj = x.astype(object)
            obj[~np.isfinite(x)] = None
            return obj.tolist()
        return x.tolist()
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    return x


def trace_to_json(trace: Trace, tokens: list[str], include_scores: bool = True, indent: int | None = None) -> str:
    """A trace as JSON: per layer the spec and every recorded tensor as nested lists ([batch][row]...),
    -inf and NaN as null. `include_scores=False` drops the index scores and the candidate pool, which
    grow with the square of the prompt length."""
    layers = []
    heavy = ("index_scores", "candidates", "block_scores")
    for rec in trace.layers:
        spec = rec.spec
        d: dict = {"layer": spec.index, "stack": spec.stack, "role": spec.role, "compress_ratio": spec.compress_ratio,
                   "kv_source": spec.kv_source, "index_source": spec.index_source, "engram": spec.engram,
                   "candidate_source": spec.candidate_source, "uses_candidates": spec.uses_candidates,
                   "positions": _plain(rec.positions), "source_len": rec.source_len}
        if rec.shares is not None:
            d["shares"] = {"window": _plain(rec.shares.window), "entries": _plain(rec.shares.entries),
                           "entry_ids": _plain(rec.shares.entry_ids), "sink": _plain(rec.shares.sink),
                           "ratio": rec.shares.ratio,
                           "window_slot_j_is_position": "t - (W-1) + j",
                           "entry_e_packs_tokens": "[e*ratio, (e+1)*ratio)"}
        for site in ("hc_attn", "hc_ffn"):
            m = getattr(rec, site)
            if m is not None:
                d[site] = {"pre": _plain(m.pre), "post": _plain(m.post), "comb": _plain(m.comb)}
        for key in ("pre_mix", "stream_norms", "router_logits", "router_scores", "router_experts", "router_weights",
                    "engram_gate", "engram_hash", "topk", "lens_ids", "lens_probs") + heavy:
            if key in heavy and not include_scores:
                continue
            v = getattr(rec, key)
            if v is not None:
                d[key] = _plain(v)
        layers.append(d)
    doc = {"format": "v41-explorer trace 1", "mode": trace.mode, "ids": _plain(trace.ids),
           "positions": _plain(trace.positions), "tokens": list(tokens),
           "meta": {k: v for k, v in trace.meta.items() if isinstance(v, (int, float, str, bool))},
           "layers": layers}
    return json.dumps(doc, indent=indent, allow_nan=False, ensure_ascii=False)


# --------------------------------------------------------------------------------------------------
# The page's other texts
# --------------------------------------------------------------------------------------------------

PROMPT_HELP = "The long stories put an object somewhere early and ask for it at the end, far past the attention window."
GENERATE_HELP = "Generated tokens are inspected like prompt tokens."
LIMIT_WHY = "the inspector, which records every layer for every token,"    # what the prompt limit is for
SLIDING_ONLY = "A sliding-window layer: no compressed branch, only its own recent rows and the sink."
NO_SELECTION = "This layer has no compressed branch, so it selects nothing."
ENGRAM_TEXT = ("Engram hashes the n-grams ending at this token (each order with several hash heads) into table rows, "
               "and a gate per residual stream decides how much of the looked-up value to add.")
LENS_TEXT = ("The logit lens: the model's own final norm and output head applied to this layer's streams, as if the "
             "model stopped here.")


def run_caption(run: Run, mode: str, device: str, weights: str) -> str:
    """The run in one line: its tokens, its times and where it ran."""
    return (f"{run.n_prompt:,} prompt tokens + {len(run.generated)} generated; prefill {run.prefill_s:.2f} s "
            f"({mode}), decode {run.decode_s:.2f} s, on {device.upper()} with {weights}.")


def bounded_run_note(run: Run, agree: Agreement) -> str:
    """How bounded prefill shaped this run: the rows the decoder recorded, and how far it is from exact (measured)."""
    here = (f" Here: decoder records for prompt tokens {run.replay_start}-{run.n_prompt - 1} only."
            if run.replay_start > 0 else "")
    return BOUNDED_NOTE.format(w=run.window) + here + " " + agree.sentence()


def layer_sentence(view: LayerView, generated: bool) -> str:
    """What this layer does, and for a generated token that it ran through every layer."""
    return f"This layer {view.description}." + (" A generated token runs through every layer of both halves, "
                                                 "whatever the prefill mode." if generated else "")


def no_engram(engram_layers: list[int]) -> str:
    """This layer has no Engram lookup; the ones that do, as the reader numbers them."""
    return "No Engram lookup at this layer" + (" (Engram layers: " + ", ".join(map(str, engram_layers)) + ")."
                                               if engram_layers else ".")


def mhc_sentence(hc_mult: int, sinkhorn_iters: int) -> str:
    return (f"{hc_mult} residual streams. " + MHC_SITE + " In `comb`, rows are from and columns to; after "
            f"{sinkhorn_iters} normalisation rounds every row and column sums to about 1.")


def records_caption(covered: np.ndarray, quantity: str) -> str:
    """How many layer-token cells hold a record, and what an empty cell means for `quantity`."""
    return (f"Records: {int(covered.sum()):,} of {covered.size:,} layer-token cells ("
            + ("dark cells, value 0" if quantity == "processed" else "blank cells") + ": the layer never ran that "
            "token" + ("" if quantity == "processed" else ", or the quantity does not apply there") + ").")
