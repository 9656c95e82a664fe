"""The far-fact lesson: does the token that must name a fact stated far back reach that fact?

A recall story places an object early ("Noah put the watch in the orange tin.") and asks for it at the end
("Where is the watch? The watch is in the ..."). The token before the answer slot must predict the colour.
When the fact sits beyond the sliding window (docs/design/equations.md §3), no layer reads it directly there;
the direct road to it is the global branch: the compressed entries that pack the fact's tokens (an entry e of a
layer with compress ratio r packs tokens [e*r, (e+1)*r)), found by the indexer (docs/design/equations.md §5-§6:
candidate pool, then top-k). Stacked windows can still relay it indirectly, up to layers x (window - 1)
positions back (`window_reach`). This lesson follows the direct road for one story, from a trace of the running
model, and reports what it finds, whatever the weights do:

- where the fact is: its token positions, and the entries that pack them in every compressed layer;
- the attention the answer-predicting token gave those entries (per head, and the mean over heads);
- whether the candidate pool and the top-k selection that layer reads contain them, and the fact entry's
  rank in the layer's index scores;
- the predicted answer with everything on and with the global branch switched off
  (`Ablation(window_only=True)`), and the probability of the right colour in each.

The stories and their token positions (the fixed-rule sample `far_sample`, the reader's own `own_story`) are in
lessons/far_story.py; what the loaded weights do on far recall, by their training record, in lessons/far_weights.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from lessons.far_story import FactStory, FactTokens
from lessons.far_weights import (  # noqa: F401  (the far-fact lesson's public names, kept in one place)
    CHANCE,
    NO_RECORD,
    ShippedFacts,
    checkpoints_offer,
    far_recall_of,
    measured_note,
    near_recall_of,
    no_better_than_guess,
    set_line,
    weights_note,
)
from model import Ablation
from model.heldout import BUCKETS, COLOURS, colour_token_ids

FAR_BUCKET = BUCKETS["far"]  # (first, last) distance in tokens

FAR_RULE = (
    "The far-fact sample is the held-out story (from the far bucket of stories never trained on) whose distance "
    "from the "
    "fact's colour to the answer, measured with the loaded model's tokenizer, is the median of that bucket (the "
    "lower median; equal distances in seed order), among the far stories whose distance exceeds the model's "
    "window. So it is neither the easiest nor the hardest far story, and it changes only when the held-out set, "
    "the tokenizer or the window does."
)


def far_definition(layers: int, window: int) -> str:
    """Where the panel says what "far" means for the loaded config: the held-out bucket's distances against the
    window and against the stacked windows' reach L x (W - 1) (`window_reach`)."""
    reach = window_reach(layers, window)
    lo, hi = FAR_BUCKET
    beyond = ("every far story lies beyond that reach, so only the compressed entries can bring its fact back"
              if reach < lo else
              f"far stories up to {reach} tokens can still be relayed hop by hop; beyond that only the compressed "
              "entries can bring the fact back")
    return (f"Far means {lo}-{hi} tokens between the fact's colour and the answer. This model reads {window} tokens "
            f"directly and its {layers} stacked windows reach {layers} x {window - 1} = {reach:,} positions back: "
            f"{beyond}.")

INTRO = (
    "A fact stated far back: the story puts an object in a coloured container, then talks about other things "
    "for hundreds of tokens, then asks where the object is. The token just before the answer has to predict the "
    "colour, and the fact lies outside its window of recent tokens, so no layer reads the fact's tokens directly "
    "there. The direct road back is the global branch: the compressed entries that pack the fact's tokens, found "
    "by the indexer.\n\nIt is not the only road: each layer's window passes along what the rows in it already hold, "
    "so stacked windows can relay the fact hop by hop, and the entries of later tokens can carry it once those "
    "tokens have absorbed it.\n\nBelow, for that one token, how much attention went to the fact's entries in each "
    "compressed layer, whether the candidate pool and the top-k selection contain them, and what the model "
    "answers with the global branch switched off (which tests whether these weights use the direct road)."
)

OWN_HELP = (
    "Write a story that ends right before the word the model should predict (for example '... Where is the key? "
    "The key is in the'), and copy the fact from it (a word or the whole sentence) into the second box."
)


def window_reach(layers: int, window: int) -> int:
    """How far back stacked windows alone can relay a token: each of `layers` layers reads `window` rows (its own
    position and window - 1 before it), and a row that read a token passes it on to the next layer's window, so
    the reach is layers x (window - 1) positions. Nothing older than one window is ever read directly."""
    return max(0, layers) * max(0, window - 1)


def reach_sentence(layers: int, window: int) -> str:
    """The direct-road rule with the reach computed from a layer count and a window (one wording everywhere)."""
    return (f"Beyond the {window}-token window no layer reads a token directly: the compressed entries that pack it "
            f"are the direct road. Indirectly it can still arrive, hop by hop through the stacked windows (each of "
            f"the {layers} layers adds {window - 1} positions: up to {layers} x {window - 1} = "
            f"{window_reach(layers, window):,} positions back), or inside entries of later tokens whose rows already "
            "absorbed it.")


# --------------------------------------------------------------------------------------------------
# Entries that pack the fact
# --------------------------------------------------------------------------------------------------

def entry_ids(positions: list[int], ratio: int) -> list[int]:
    """Compressed entries (at compress ratio `ratio`) that pack any of `positions`: entry e packs [e*r, (e+1)*r)."""
    if ratio <= 0:
        return []
    return sorted({int(p) // ratio for p in positions})


def visible_entries(query: int, ratio: int) -> int:
    """Entries complete (and so visible) to a query at `query`: those whose last token is at or before it."""
    return (query + 1) // ratio if ratio > 0 else 0


# --------------------------------------------------------------------------------------------------
# Reading a trace at the answer-predicting row
# --------------------------------------------------------------------------------------------------

@dataclass
class LayerFact:
    layer: int
    role: str
    stack: str
    ratio: int
    fact_entries: list[int]        # entries packing the fact's colour tokens
    sentence_entries: list[int]    # entries packing any token of the fact sentence
    visible: int                   # entries visible to the query
    head_shares: list[float]       # per head: attention share on the fact (colour) entries this layer read
    sentence_shares: list[float]   # per head: share on the sentence's entries
    window_shares: list[float]     # per head: share on the fact's colour tokens through the window (0 when far)
    read: list[int]                # fact entries among the entries this layer's attention read
    selected: list[int] | None     # fact entries in the top-k this layer uses (None: no record)
    k: int                         # entries in that selection
    pool: list[int] | None         # fact entries in the candidate pool (None: this layer's search has no pool)
    pool_size: int | None
    rank: int | None               # best rank of a fact entry in the selecting layer's index scores (1 = top)
    ranked: int | None             # entries with a finite index score (the ones ranked)
    entry_shares: dict[int, float] = field(default_factory=dict)  # every entry read -> share (mean over heads)

    @property
    def share(self) -> float:
        """Mean over heads (each head's shares add up to 1, so this is the fraction of the layer's attention)."""
        return sum(self.head_shares) / len(self.head_shares) if self.head_shares else 0.0

    @property
    def best_head(self) -> tuple[int, float]:
        if not self.head_shares:
            return -1, 0.0
        h = max(range(len(self.head_shares)), key=self.head_shares.__getitem__)
        return h, self.head_shares[h]


def _selection(trace, spec, row: int) -> list[int] | None:
    """The top-k a layer reads at `row`: its own when it selects, else its index source's."""
    src = trace.layers[spec.index_source] if spec.index_source is not None else None
    if src is None or src.topk is None:
        return None
    r = src.row(int(trace.layers[spec.index].positions[row]))
    if r is None:
        return None
    return [int(e) for e in src.topk[0, r].tolist() if e >= 0]


def layer_facts(trace, query: int, colour_positions: list[int], sentence_positions: list[int]) -> list[LayerFact]:
    """Per compressed layer: the fact's entries and what the query at `query` did with them (pure; reads the trace).

    The candidate pool is the candidate-source layer's recorded pool at that row; it restricts the layers marked
    `uses_candidates` (and is built by the candidate source itself, whose own selection is not restricted)."""
    cand = next((r for r in trace.layers if r.spec.candidate_source and r.candidates is not None), None)
    pool_row = None
    if cand is not None:
        cr = cand.row(query)
        pool_row = None if cr is None else cand.candidates[0, cr]
    out = []
    for rec in trace.layers:
        spec, sh = rec.spec, rec.shares
        ratio = spec.compress_ratio
        if ratio <= 0 or sh is None:
            continue
        row = rec.row(query)
        if row is None:
            continue
        fact = entry_ids(colour_positions, ratio)
        sent = entry_ids(sentence_positions, ratio)
        ids = [int(e) for e in sh.entry_ids[0, row].tolist()]
        shares = sh.entries[0, row]                          # [H, k]
        heads = shares.shape[0]
        fset, sset = set(fact), set(sent)
        head_shares = [sum(float(shares[h, i]) for i, e in enumerate(ids) if e in fset) for h in range(heads)]
        sent_shares = [sum(float(shares[h, i]) for i, e in enumerate(ids) if e in sset) for h in range(heads)]
        win = sh.window[0, row]                              # [H, W]; slot j holds position query-(W-1)+j
        w = win.shape[-1]
        slots = [p - (query - (w - 1)) for p in colour_positions if 0 <= p - (query - (w - 1)) < w and p <= query]
        window_shares = [sum(float(win[h, j]) for j in slots) for h in range(heads)]
        selected = _selection(trace, spec, row)
        pool = pool_size = None
        searched = spec.uses_candidates or spec.candidate_source
        if pool_row is not None and searched and ratio == cand.spec.compress_ratio:
            members = pool_row.nonzero().flatten().tolist()
            pool_size = len(members)
            pool = [e for e in fact if e < len(pool_row) and bool(pool_row[e])]
        rank = ranked = None
        src = trace.layers[spec.index_source] if spec.index_source is not None else None
        if src is not None and src.index_scores is not None:
            srow = src.row(query)
            if srow is not None:
                sc = src.index_scores[0, srow]
                finite = torch.isfinite(sc)
                ranked = int(finite.sum())
                in_range = [e for e in fact if e < len(sc) and bool(finite[e])]
                if in_range:
                    best = max(float(sc[e]) for e in in_range)
                    rank = 1 + int((sc[finite] > best).sum())
        out.append(LayerFact(layer=spec.index, role=spec.role, stack=spec.stack, ratio=ratio, fact_entries=fact,
                             sentence_entries=sent, visible=visible_entries(query, ratio), head_shares=head_shares,
                             sentence_shares=sent_shares, window_shares=window_shares,
                             read=[e for e in fact if e in set(ids)],
                             selected=None if selected is None else [e for e in fact if e in set(selected)],
                             k=0 if selected is None else len(selected), pool=pool, pool_size=pool_size, rank=rank,
                             ranked=ranked,
                             entry_shares={e: float(shares[:, i].mean()) for i, e in enumerate(ids) if e >= 0}))
    return out


# --------------------------------------------------------------------------------------------------
# The answer, with and without the global branch
# --------------------------------------------------------------------------------------------------

@dataclass
class Answer:
    label: str                     # "everything on" | "global branch off"
    token: str                     # the top predicted token's text
    token_id: int
    p_top: float
    p_right: float | None          # probability of the right answer token (None: unknown)
    top_colour: str | None         # the most probable colour word
    right: bool | None
    colour_share: float | None = None   # p(right answer) / p(all colour words): like for like with CHANCE


colour_ids = colour_token_ids   # colour word -> token id of ' colour' (the colours that are one token)


def read_answer(logits: torch.Tensor, answer_id: int | None, decode, colours: dict[str, int], label: str) -> Answer:
    """The prediction of one row of logits [V]: top token, p(right answer), the most probable colour."""
    p = torch.softmax(logits.float(), -1)
    top = int(p.argmax())
    top_colour = max(colours, key=lambda c: float(p[colours[c]])) if colours else None
    mass = sum(float(p[i]) for i in colours.values())
    share = (float(p[answer_id]) / mass if answer_id is not None and answer_id in colours.values() and mass > 0
             else None)
    return Answer(label=label, token=decode([top]), token_id=top, p_top=float(p[top]),
                  p_right=None if answer_id is None else float(p[answer_id]), top_colour=top_colour,
                  right=None if answer_id is None else top == answer_id, colour_share=share)


@dataclass
class FarFact:
    story: FactStory
    tokens: FactTokens
    window: int
    layers: list[LayerFact]
    answers: list[Answer]          # [everything on, global branch off]
    token_texts: list[str]         # decoded text of every input token
    derivation: list[str] = field(default_factory=list)
    n_layers: int = 0              # layers of the model (for the stacked-window reach; 0: not known)

    @property
    def reach(self) -> int:
        """Positions stacked windows can relay a token back (`window_reach`)."""
        return window_reach(self.n_layers, self.window)

    @property
    def past_window(self) -> int:
        return self.tokens.distance - self.window

    @property
    def far(self) -> bool:
        """The fact's colour lies outside the answer token's window (no layer reads it directly there)."""
        return self.tokens.colour_positions[-1] < self.tokens.query - (self.window - 1)


@torch.no_grad()
def analyse(model, story: FactStory, tokens: FactTokens, trace=None, off_logits: torch.Tensor | None = None) -> FarFact:
    """Trace the story (exact prefill, one forward), read every compressed layer at the answer-predicting row,
    and run it again with the global branch switched off. `trace` / `off_logits` (the next-token logits [V]
    with the global branch off): those forwards already run elsewhere (the app's batch worker)."""
    ids = torch.tensor([tokens.ids], device=model.device)
    tr = trace if trace is not None else model.trace(ids, lens=False)
    q = tokens.query
    layers = layer_facts(tr, q, tokens.colour_positions, tokens.sentence_positions)
    colours = colour_ids(model.tokenizer)
    full = tr.logits[0, -1] if tr.logits is not None and tr.logits.shape[1] == len(tokens.ids) else \
        model(ids).logits[0, -1]
    off = (off_logits if off_logits is not None else
           model(ids, ablation=Ablation(window_only=True)).logits[0, -1]).cpu()
    answers = [read_answer(full.cpu(), tokens.answer_id, model.decode, colours, "everything on"),
               read_answer(off, tokens.answer_id, model.decode, colours, "global branch off")]
    texts = [model.decode([i]) for i in tokens.ids]
    w = model.cfg.sliding_window
    derivation = [
        f"Input: <|eos|> then the story's {q} tokens, cut right before the answer (as lab/probes/quality.py scores "
        f"it); the answer is predicted from the last position, {q}.",
        f"The fact's colour is at {'position' if len(tokens.colour_positions) == 1 else 'positions'} "
        f"{', '.join(map(str, tokens.colour_positions))}: "
        f"{tokens.distance} tokens before the answer; the window of the query covers positions "
        f"{max(0, q - w + 1)}-{q}.",
        "A compressed entry e at ratio r packs tokens [e·r, (e+1)·r); the fact's entries are those packing a fact "
        "token: position p is in entry p // r.",
        "Attention on the fact: the recorded shares of the answer-predicting row on the fact's entries (summed over "
        "the entries this layer read; each head's shares add up to 1, the layer figure is the mean over heads).",
        "Pool: the candidate source layer's recorded pool at that row; top-k: the selection the layer reads (its own "
        "if it selects, else its index source's); rank: the fact entry's place in the index scores (1 = highest).",
        "Global branch off: the same input with Ablation(window_only=True): every layer ignores its compressed "
        "entries and reads only its window and the sink, so nothing older than the window is read directly; what "
        "the stacked windows relay remains.",
        f"Stacked-window reach: {model.cfg.num_hidden_layers} layers x ({w} - 1) = "
        f"{window_reach(model.cfg.num_hidden_layers, w):,} positions.",
        "Colour share: the right colour's probability divided by the probability of all the colour words, so it "
        f"compares like with like with chance (1 in {len(COLOURS)}).",
    ]
    return FarFact(story=story, tokens=tokens, window=w, layers=layers, answers=answers, token_texts=texts,
                   derivation=derivation, n_layers=model.cfg.num_hidden_layers)


# --------------------------------------------------------------------------------------------------
# Sentences and table rows (plain text; the page shows them as they are)
# --------------------------------------------------------------------------------------------------

def _pct(x: float) -> str:
    return f"{100 * x:.1f}%" if x >= 0.001 or x == 0 else f"{100 * x:.2f}%"


def _holds(part: list[int], whole: list[int]) -> str:
    """'contains the fact entry E5' / 'does not contain ...' / 'contains 1 of the 2 fact entries (E4, E5)'."""
    names = ", ".join(f"E{e}" for e in whole)
    if len(whole) == 1:
        return f"{'contains' if part else 'does not contain'} the fact entry {names}"
    return f"contains {len(part)} of the {len(whole)} fact entries ({names})"


def summary(ff: FarFact, num=lambda i: i) -> list[str]:
    """Plain sentences on what the answer token did with the fact; `num` maps a 0-based layer to the reader's."""
    t = ff.tokens
    colour = "".join(ff.token_texts[p] for p in t.colour_positions).strip()
    out = []
    if ff.far:
        head = (f"The fact's colour '{colour}' is {t.distance} tokens before the answer: {ff.past_window} past the "
                f"{ff.window}-token window, so no layer reads it directly; the direct road is the compressed entries "
                "that pack it.")
        if not ff.n_layers:
            tail = ""
        elif t.distance <= ff.reach:
            tail = (f" It is within the {ff.reach:,} positions that the {ff.n_layers} stacked windows can relay hop "
                    f"by hop ({ff.n_layers} x {ff.window - 1}), so it can also arrive indirectly.")
        else:
            tail = (f" It is farther back than the {ff.n_layers} stacked windows can relay ({ff.n_layers} x "
                    f"{ff.window - 1} = {ff.reach:,} positions), so besides those entries only entries of later "
                    "tokens that absorbed it could carry it.")
        out.append(head + tail)
    else:
        out.append(f"The fact's marked text ends inside the answer token's {ff.window}-token window ({t.distance} "
                   "tokens back), so the window itself can read it; the compressed entries are a second road.")
    if not ff.layers:
        out.append("This model has no compressed layers: nothing older than the window is read directly.")
    else:
        best = max(ff.layers, key=lambda lf: lf.best_head[1])
        h, s = best.best_head
        if s > 0:
            out.append(f"Attention to the fact's entries: at most {_pct(s)} of one head's weight (layer "
                       f"{num(best.layer)}, head {h}); on average over the heads, {_stack_means(ff.layers, num)}.")
        else:
            out.append(f"Attention to the fact's entries: none. None of the {len(ff.layers)} compressed layers read a "
                       "fact entry at the answer token.")
        pooled = [lf for lf in ff.layers if lf.pool is not None]
        if pooled:
            p = pooled[0]
            out.append(f"The candidate pool (layer {num(p.layer)}'s scan keeps "
                       f"{p.pool_size} of {p.visible} visible ratio-{p.ratio} entries) "
                       f"{_holds(p.pool, p.fact_entries)}.")
        sel = [lf for lf in ff.layers if lf.selected is not None]
        hit = [lf for lf in sel if lf.selected]
        if sel:
            out.append(f"The top-k selection contains a fact entry in {len(hit)} of the {len(sel)} compressed layers"
                       + (": layers " + ", ".join(str(num(lf.layer)) for lf in hit) if hit else "") + ".")
    on, off = ff.answers
    ans = ff.story.answer
    if ans is not None and on.p_right is not None:
        colour = ans.lower() in COLOURS

        def among(a: Answer) -> str:
            if not colour or a.colour_share is None:
                return ""
            top = "" if a.top_colour is None else (
                f"; the most likely colour, '{a.top_colour}', is {'right' if a.top_colour == ans.lower() else 'wrong'}")
            return f", {_pct(a.colour_share)} of the probability on the {len(COLOURS)} colours{top}"

        chance = (f"; chance: 1 in {len(COLOURS)} colours, {_pct(CHANCE)}"
                  if colour and on.colour_share is not None else "")
        out.append(f"Answer with everything on: '{on.token.strip()}' (the right {'colour' if colour else 'answer'} "
                   f"'{ans}' gets {_pct(on.p_right)}{among(on)}{chance}).")
        same = "same" if off.token_id == on.token_id else "different"
        out.append(f"Answer with the global branch switched off: '{off.token.strip()}' ({same}; '{ans}' gets "
                   f"{_pct(off.p_right)}{among(off)}).")
        if colour and on.colour_share is not None and near_tie(on.colour_share):
            read = any(lf.read for lf in ff.layers)
            out.append(f"The colours are nearly tied ('{ans}' has {_pct(on.colour_share)} of the colour probability "
                       f"against {_pct(CHANCE)} by chance): the top colour is a guess, not "
                       "recall" + ("" if read else "; no layer read a fact entry, so the change with the global "
                                   "branch off is noise in a flat spread, not the branch's work") + ".")
    else:
        out.append(f"Answer with everything on: '{on.token.strip()}' ({_pct(on.p_top)}); with the global branch "
                   f"switched off: '{off.token.strip()}' ({_pct(off.p_top)}).")
    return out


@dataclass
class Metric:
    label: str
    value: str
    help: str = ""


def metrics(ff: FarFact) -> list[Metric]:
    """The panel's four tiles: the largest share one head gave the fact's entries, the fact entries in the
    candidate pool, the layers whose top-k holds one, and the answer with the global branch off."""
    best = max(ff.layers, key=lambda lf: lf.best_head[1]) if ff.layers else None
    pooled = [lf for lf in ff.layers if lf.pool is not None]
    sel = [lf for lf in ff.layers if lf.selected is not None]
    off = ff.answers[1]
    return [
        Metric("Attention to the fact", "n/a" if best is None else f"{best.best_head[1]:.1%}",
               "The largest share one head of one compressed layer gave the fact's entries."),
        Metric("Fact entries in the pool", "no pool" if not pooled else
               f"{len(pooled[0].pool)} of {len(pooled[0].fact_entries)}"),
        Metric("Layers whose top-k has it", f"{sum(bool(lf.selected) for lf in sel)} of {len(sel)}",
               "Compressed layers whose top-k selection holds a fact entry."),
        Metric("Answer, global off", off.token.strip() or repr(off.token),
               "The top token with every layer reading only its window and the sink."),
    ]


def near_tie(colour_share: float) -> bool:
    """The right colour holds under twice the chance share of the colour probability: a guess among near-equal
    colours, not recall, whichever colour comes out on top."""
    return colour_share < 2 * CHANCE


def _stack_means(layers: list[LayerFact], num) -> str:
    """The mean share on the fact's entries, per stack, naming the layers each mean covers (an average over both
    stacks would mix layers that read the fact with layers that did not)."""
    parts = []
    for stack in dict.fromkeys(lf.stack for lf in layers):
        group = [lf for lf in layers if lf.stack == stack]
        names = (f"layer {num(group[0].layer)}" if len(group) == 1 else
                 f"layers {num(group[0].layer)}-{num(group[-1].layer)}")
        parts.append(f"{_pct(sum(lf.share for lf in group) / len(group))} in the {len(group)} {stack} {names}"
                     if len(group) > 1 else f"{_pct(group[0].share)} in {stack} {names}")
    return "; ".join(parts)


def table_rows(ff: FarFact, num=lambda i: i) -> list[dict]:
    """One row per compressed layer (plain values for a dataframe)."""
    rows = []
    for lf in ff.layers:
        h, s = lf.best_head
        rows.append({
            "layer": num(lf.layer), "role": lf.role, "ratio": lf.ratio,
            "fact entries": ", ".join(f"E{e}" for e in lf.fact_entries),
            "share on fact entries (mean over heads)": lf.share,
            "best head": h, "best head's share": s,
            "share on the fact sentence's entries": sum(lf.sentence_shares) / max(1, len(lf.sentence_shares)),
            "share through the window": sum(lf.window_shares) / max(1, len(lf.window_shares)),
            "read by attention": f"{len(lf.read)}/{len(lf.fact_entries)}",
            "in top-k": "n/a" if lf.selected is None else f"{len(lf.selected)}/{len(lf.fact_entries)} (k={lf.k})",
            "in candidate pool": "no pool" if lf.pool is None else f"{len(lf.pool)}/{len(lf.fact_entries)}",
            "index rank": (f"{lf.rank} of {lf.ranked}" if lf.rank is not None else
                           "n/a" if lf.ranked is None else "masked (outside the pool)"),
            "visible entries": lf.visible,
        })
    return rows


def head_rows(ff: FarFact, num=lambda i: i) -> list[dict]:
    """Per layer, each head's share on the fact's entries in percent (the Attention shares view)."""
    rows = []
    for lf in ff.layers:
        row = {"layer": num(lf.layer), "role": lf.role, "fact entries": ", ".join(f"E{e}" for e in lf.fact_entries)}
        row.update({f"head {h} (%)": 100 * s for h, s in enumerate(lf.head_shares)})
        row["mean (%)"] = 100 * lf.share
        row["fact sentence's entries, mean (%)"] = 100 * sum(lf.sentence_shares) / max(1, len(lf.sentence_shares))
        rows.append(row)
    return rows


def marked_text(ff: FarFact, ratio: int | None = None, context: int = 60) -> str:
    """The story around the fact, the tokens packed in the fact's entries (at `ratio`, default the largest)
    between ⟦ ⟧ and the start of the answer token's window marked ‖. Plain text."""
    ratios = [lf.ratio for lf in ff.layers]
    r = ratio or (max(ratios) if ratios else 1)
    t = ff.tokens
    packed = {p for e in entry_ids(t.colour_positions, r) for p in range(e * r, (e + 1) * r) if p <= t.query}
    wstart = max(0, t.query - ff.window + 1)
    lo = max(1, min(packed) - context // 4) if packed else 1
    pieces = []
    for p in range(lo, t.query + 1):
        if p == wstart:
            pieces.append(" ‖")
        if p in packed and p - 1 not in packed:
            pieces.append("⟦")
        pieces.append(ff.token_texts[p])
        if p in packed and p + 1 not in packed:
            pieces.append("⟧")
    body = "".join(pieces)
    # shorten the middle (between the fact and the window) to keep the excerpt readable
    if len(body) > 3 * context and "⟧" in body and "‖" in body:
        a, b = body.index("⟧") + 1 + context, body.index(" ‖") - context
        if b > a:
            body = body[:a] + " … " + body[b:]
    return ("…" if lo > 1 else "") + body


# ---- the whole panel, computed once ------------------------------------------------------------------------------

# the columns of the per-layer table each page's lesson reads ("shares" reads the per-head table instead)
FOCUS_TABLE: dict[str, tuple[str, ...] | None] = {
    "inspector": ("layer", "role", "ratio", "fact entries", "share on fact entries (mean over heads)", "best head",
                  "best head's share", "in top-k", "in candidate pool", "index rank"),
    "shares": None,
    "pools": ("layer", "role", "ratio", "fact entries", "visible entries", "in candidate pool", "in top-k",
              "index rank", "read by attention", "share on fact entries (mean over heads)"),
    "ablation": ("layer", "role", "ratio", "fact entries", "share on fact entries (mean over heads)", "in top-k",
                 "in candidate pool"),
}


def about(layers: int, window: int) -> list[str]:
    """What the panel shows and what counts as far, for a model of `layers` layers and `window`-row windows: the
    introduction, the far bucket against the reach, the roads back, and the rule that picks the sample story."""
    return [INTRO, far_definition(layers, window), reach_sentence(layers, window), FAR_RULE]


@dataclass
class FarFactView:
    """Everything the far-fact panel draws for one story, in the order it draws it; the page only renders.
    `rows`: the per-layer table for the page's focus, shares already in percent under names ending in "(%)"."""
    ff: FarFact
    metrics: list[Metric]
    lines: list[str]
    marked: str
    rows: list[dict]
    answers: list[dict]         # the answer under each configuration (the Ablation lab's table); empty elsewhere


def _percent_rows(rows: list[dict], columns: tuple[str, ...]) -> list[dict]:
    """The table's chosen columns, each share (a fraction) as a percent under a name ending in "(%)"."""
    return [{(f"{c} (%)" if "share" in c else c): (100 * r[c] if "share" in c else r[c]) for c in columns if c in r}
            for r in rows]


def view(ff: FarFact, focus: str, num=lambda i: i) -> FarFactView:
    """The far-fact panel for a page (`focus`, a key of FOCUS_TABLE); `num` maps a 0-based layer to its label."""
    columns = FOCUS_TABLE.get(focus)
    rows = head_rows(ff, num) if columns is None else _percent_rows(table_rows(ff, num), columns)
    answers = ([{"configuration": a.label, "answer": a.token, "p(answer)": a.p_top, "p(right colour)": a.p_right,
                 "most likely colour": a.top_colour} for a in ff.answers] if focus == "ablation" else [])
    return FarFactView(ff=ff, metrics=metrics(ff), lines=summary(ff, num), marked=marked_text(ff), rows=rows,
                       answers=answers)


def read_panel(model, story: FactStory, tokens: FactTokens, trace, off_logits: torch.Tensor, focus: str,
               num=lambda i: i) -> FarFactView:
    """`analyse` then `view`: the whole panel from the story's trace and its logits with the global branch off."""
    return view(analyse(model, story, tokens, trace=trace, off_logits=off_logits), focus, num)
