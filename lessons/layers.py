"""The layer map as a lesson: per-layer rows, the grouped count table, the CSA2 mode table, what each layer
actually computed on a traced prompt, and how far bounded prefill lands from exact on one prompt (measured).

Follows docs/design/architecture.md §2 (the layer map, derived from the config) and docs/design/equations.md §5-6
(CSA2 modes, candidate pool). Everything here is computed from `layer_map(cfg)` or from a `Trace`;
nothing is a typed-in table, so the same code explains the full config and the running tiny model.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from model import V41Config, layer_map, prefill
from model.layer_map import LayerSpec, describe

from .sources import EXPLAINER_1

ROLE_WORDS = {"SWA": "window-only", "Full": "Full", "Reuse": "Reuse", "Reindex": "Reindex"}


# --------------------------------------------------------------------------------------------------
# Grouping the map into the repeated structures a figure draws once
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Unit:
    """One drawn structure: a window-only layer, or a selecting layer followed by the Reuse layers
    that keep its choice."""

    layers: tuple[int, ...]
    roles: tuple[str, ...]

    @property
    def pattern(self) -> tuple[str, int]:
        """(head role, number of Reuse layers after it)."""
        return self.roles[0], len(self.roles) - 1


@dataclass(frozen=True)
class Run:
    """Consecutive units with the same pattern: drawn once, marked "x repeats"."""

    stack: str
    units: tuple[Unit, ...]

    @property
    def head(self) -> str:
        return self.units[0].roles[0]

    @property
    def reuse(self) -> int:
        return self.units[0].pattern[1]

    @property
    def repeats(self) -> int:
        return len(self.units)

    @property
    def layers(self) -> tuple[int, ...]:
        return tuple(i for u in self.units for i in u.layers)

    def pattern_text(self) -> str:
        if self.head == "SWA":
            return "window-only"
        return f"1 {self.head}" + (f" + {self.reuse} Reuse" if self.reuse else "")

    def formula(self) -> str:
        if self.head == "SWA":
            return f"{self.repeats} window-only"
        return (f"{self.repeats}x" if self.repeats > 1 else "") + f"({self.pattern_text()})"

    def count(self) -> int:
        return self.repeats * (1 + self.reuse)


def units(specs: list[LayerSpec]) -> list[Unit]:
    """Split a list of layers into units: a new unit starts at every layer that is not Reuse
    (and at every stack boundary)."""
    out: list[list[LayerSpec]] = []
    for s in specs:
        if not out or s.role != "Reuse" or s.stack != out[-1][0].stack:
            out.append([s])
        else:
            out[-1].append(s)
    return [Unit(tuple(s.index for s in u), tuple(s.role for s in u)) for u in out]


def stack_runs(specs: list[LayerSpec], stack: str) -> list[Run]:
    """The stack's units with consecutive equal patterns merged into runs."""
    runs: list[list[Unit]] = []
    for u in units([s for s in specs if s.stack == stack]):
        if runs and runs[-1][0].pattern == u.pattern:
            runs[-1].append(u)
        else:
            runs.append([u])
    return [Run(stack, tuple(r)) for r in runs]


@dataclass
class CountRow:
    part: str
    formula: str
    count: int
    derivation: str   # the arithmetic behind the count, e.g. "2 + 3 x (1 + 5) = 20"


def count_table(cfg: V41Config) -> list[CountRow]:
    """The first seed's reference table, derived from the config: encoder, decoder, backbone total."""
    specs = layer_map(cfg)
    rows = []
    for stack, name in (("encoder", "Encoder"), ("decoder", "Decoder")):
        runs = stack_runs(specs, stack)
        if not runs:
            continue
        terms = [str(r.repeats) if r.head == "SWA" else
                 (f"{r.repeats} x " if r.repeats > 1 else "") + f"(1 + {r.reuse})" for r in runs]
        n = sum(r.count() for r in runs)
        rows.append(CountRow(name, " + ".join(r.formula() for r in runs), n, " + ".join(terms) + f" = {n}"))
    total = sum(r.count for r in rows)
    rows.append(CountRow("Backbone total", " + ".join(r.part.lower() for r in rows), total,
                         " + ".join(str(r.count) for r in rows) + f" = {total}"))
    return rows


def reference_numbers(cfg: V41Config, one_based: bool = False) -> list[dict]:
    """The implementation details the first seed lists under its reference table, read from the config."""
    pool = cfg.candidate_topk_blocks * cfg.candidate_block_size
    cand = next((s.index for s in layer_map(cfg) if s.candidate_source), None)
    dec = cfg.decoder_start
    return [
        {"item": "candidate pool (positions, at most)", "value": f"{pool:,}",
         "from the config": f"candidate_topk_blocks {cfg.candidate_topk_blocks:,} x candidate_block_size "
                            f"{cfg.candidate_block_size}, built at layer {cand + 1 if one_based else cand}"},
        {"item": "entries in one final selection (at most)", "value": f"{cfg.index_topk:,}",
         "from the config": "index_topk"},
        {"item": "local window per layer (rows)", "value": f"{cfg.sliding_window:,}",
         "from the config": "sliding_window"},
        {"item": "prompt rows replayed through the decoder (bounded prefill)", "value": f"{cfg.sliding_window:,}",
         "from the config": f"the last sliding_window rows go through layers {dec + (1 if one_based else 0)}"
                            f"-{cfg.num_hidden_layers - (0 if one_based else 1)}"},
        {"item": "routed experts per token", "value": f"{cfg.num_experts_per_tok} of {cfg.n_routed_experts:,} "
                                                      f"+ {cfg.n_shared_experts} shared",
         "from the config": "num_experts_per_tok, n_routed_experts, n_shared_experts"},
        {"item": "mHC streams", "value": str(cfg.hc_mult), "from the config": "hc_mult"},
    ]


def engram_layers(cfg: V41Config, one_based: bool = False) -> list[int]:
    return [i + 1 if one_based else i for i in cfg.engram_layer_ids if i < cfg.num_hidden_layers]


def engram_sentence(cfg: V41Config) -> str:
    z, o = engram_layers(cfg), engram_layers(cfg, True)
    if not z:
        return "This config has no Engram layers."
    return (f"Engram enters at {_and(z)} counting from 0 (as the code and the report do), "
            f"which is {_and(o)} counting from 1 (as {EXPLAINER_1} does).")


def _and(xs: list[int]) -> str:
    xs = [str(x) for x in xs]
    return xs[0] if len(xs) == 1 else ", ".join(xs[:-1]) + " and " + xs[-1]


# --------------------------------------------------------------------------------------------------
# The per-layer table
# --------------------------------------------------------------------------------------------------
def what_it_does(spec: LayerSpec, one_based: bool = False) -> str:
    n = (lambda i: i + 1) if one_based else (lambda i: i)
    if spec.role == "SWA":
        return "window only: reads its own recent raw rows, nothing compressed"
    if spec.role == "Full":
        pack = "one entry per token" if spec.compress_ratio == 1 else f"one entry per {spec.compress_ratio} tokens"
        pool = "; ranks blocks to build the candidate pool" if spec.candidate_source else ""
        return f"makes its group's entries ({pack}) and index keys, then picks entries to read{pool}"
    if spec.role == "Reindex":
        inside = " inside the candidate pool" if spec.uses_candidates else ""
        return f"keeps layer {n(spec.kv_source)}'s entries, picks again with its own indexer{inside}"
    return f"keeps layer {n(spec.kv_source)}'s entries and layer {n(spec.index_source)}'s picks"


def layer_rows(cfg: V41Config, one_based: bool = False) -> list[dict]:
    """One row per layer; source columns follow the chosen numbering."""
    n = (lambda i: None if i is None else i + 1) if one_based else (lambda i: i)
    out = []
    for s in layer_map(cfg):
        out.append({
            "layer (0-based)": s.index, "layer (1-based)": s.number, "stack": s.stack, "role": s.role,
            "compress ratio": s.compress_ratio,
            "KV source": "-" if s.kv_source is None else str(n(s.kv_source)),
            "index source": "-" if s.index_source is None else str(n(s.index_source)),
            "Engram": "yes" if s.engram else "",
            "what it does": what_it_does(s, one_based),
        })
    return out


def role_counts(cfg: V41Config) -> dict[str, dict[str, int]]:
    """{stack: {role: count}} straight from the layer map."""
    out: dict[str, dict[str, int]] = {}
    for s in layer_map(cfg):
        d = out.setdefault(s.stack, {})
        d[s.role] = d.get(s.role, 0) + 1
    return out


# --------------------------------------------------------------------------------------------------
# CSA2 modes
# --------------------------------------------------------------------------------------------------
MODES = [
    {"mode": "Full", "prepared global entries": "make them", "selected locations": "choose them"},
    {"mode": "Reuse", "prepared global entries": "keep them", "selected locations": "keep the last choice"},
    {"mode": "Reindex", "prepared global entries": "keep them", "selected locations": "choose again"},
]

CSA2_PATH = ("One query's path through compressed sparse attention, read off a trace of the prompt: tokens packed "
             "into entries, scored, pooled, picked, then read by a Full, a Reuse and a Reindex layer.")
LABELS_TEXT = ("Each compressed layer carries one of three labels. The labels name which of two preparation steps "
               "the layer does itself: making the global entries, and choosing which of them to read.")
COUNTED_NOT_RESTATED = ("The table below is not a restatement of the labels: every count is read off a trace of the "
                        "running model on the prompt you choose.")
HOW_COUNTED = ("Index scores exist only where a layer ran its indexer; entries are recorded only where a layer made "
               "them; a reused selection is compared entry by entry with the one it claims to reuse.")
MAP_DISAGREES = "The trace disagrees with the layer map somewhere above."


def traced_caption(n_tokens: int, weights: str) -> str:
    return f"{n_tokens} tokens traced on {weights}. 'Last query reads' is for the query at the last position."


MODES_NOTE = (
    "The labels only say which preparation steps a layer skips. Whatever its label, every compressed "
    "layer still makes a fresh query from its own input, writes its own window keys and values, and "
    "computes its own attention output and MoE update. And \"Full\" does not mean it reads everything: "
    "a Full layer builds all the entries but then reads only the few its indexer picks (at most the top-k)."
)


SEPARATE_DECISIONS = (
    "Sharing the selection and sharing the entries are two separate decisions. Sharing the selection saves search "
    "work: a layer that keeps another layer's picks scores nothing, which the trace shows as 'not computed' in the "
    "**index scores** column. Sharing the entries saves storage: a layer that reads entries made below it stores none"
    " of its own, which the **compressed entries** column (entries stored as latents) shows as 'read ... made below'."
    " A Reindex layer takes one without the other: it reads the shared entries (no storage of its own) but computes "
    "its own index scores (search work of its own)."
)

POOL_SCORING = (
    "The candidate pool does not shrink that work in this engine: as in the Hugging Face port, a "
    "Reindex layer scores every visible entry and then masks out those outside the pool, so the column counts both "
    "the scores computed and the ones kept inside the pool. A production kernel could score only the pool; that "
    "saving is not measured here."
)


@dataclass
class Computed:
    """What one layer did on a traced prompt, counted from the trace."""

    layer: int
    role: str
    stack: str
    queries: int              # rows for which the layer made a new query
    window_rows: int          # window K/V rows the layer wrote (one per processed row)
    entries_made: int         # compressed entries this layer made (KV sources only)
    entries_in_group: int     # entries of the group it reads (made here or by its KV source)
    index_scores: int         # finite index scores (kept: visible, and inside the pool where one applies)
    selection: str            # "made" | "reused" | "none"
    same_as_source: bool | None  # for reused selections: identical to the source's picks (checked)
    read_last: int            # entries read by the last row's query
    visible_last: int         # entries the last row could have read
    pool_last: int | None     # candidate pool size for the last row (where a pool applied)
    index_visible: int = 0    # index scores computed: every visible entry of every row (0: no indexer here)
    pooled: bool = False      # a candidate pool masked this layer's scores


def computed_by_layer(trace) -> list[Computed]:
    """Count, per layer, what the traced forward actually computed."""
    recs = trace.layers
    out = []
    for r in recs:
        s = r.spec
        rows = int(r.positions.numel())
        sh = r.shares
        made = r.source_len if s.role == "Full" else 0
        group = recs[s.kv_source].source_len if s.kv_source is not None else 0
        n_scores = 0 if r.index_scores is None else int(torch.isfinite(r.index_scores).sum())
        if r.topk is not None:
            sel, same = "made", None
        elif s.index_source is not None and sh is not None and sh.entry_ids.shape[-1]:
            src = recs[s.index_source].topk
            sel = "reused"
            same = src is not None and src.shape == sh.entry_ids.shape and bool(torch.equal(src, sh.entry_ids))
        else:
            sel, same = "none", None
        read_last = int((sh.entry_ids[0, -1] >= 0).sum()) if sh is not None and sh.entry_ids.shape[-1] else 0
        last_pos = int(r.positions[-1]) if rows else 0
        visible = (last_pos + 1) // s.compress_ratio if s.compress_ratio else 0
        pool = None
        if r.index_scores is not None and (s.candidate_source or s.uses_candidates) and r.index_scores.shape[-1]:
            pool = int(torch.isfinite(r.index_scores[0, -1]).sum())
        scored = 0
        if r.index_scores is not None and s.compress_ratio:
            cap = group or r.index_scores.shape[-1]
            scored = int(torch.clamp((r.positions + 1) // s.compress_ratio, max=cap).sum())
        out.append(Computed(layer=s.index, role=s.role, stack=s.stack, queries=rows,
                            window_rows=int(sh.window.shape[1]) if sh is not None else 0, entries_made=made,
                            entries_in_group=group, index_scores=n_scores, selection=sel, same_as_source=same,
                            read_last=read_last, visible_last=min(visible, group) if group else visible,
                            pool_last=pool, index_visible=scored, pooled=s.uses_candidates))
    return out


def computed_rows(comp: list[Computed], one_based: bool = False) -> list[dict]:
    """The per-layer table the CSA2 page shows, in words and counts."""
    n = (lambda i: i + 1) if one_based else (lambda i: i)
    rows = []
    for c in comp:
        if c.role == "SWA":
            latents = "none (no compressed branch)"
        elif c.entries_made:
            latents = f"made {c.entries_made}"
        else:
            latents = f"read {c.entries_in_group} made below"
        if c.selection == "made":
            sel = "made here"
        elif c.selection == "reused":
            sel = "reused" + (" (identical: checked)" if c.same_as_source else " (DIFFERS from its source)")
        else:
            sel = "-"
        rows.append({
            "layer": n(c.layer), "role": c.role, "new query rows": c.queries, "window K/V rows": c.window_rows,
            "compressed entries": latents,
            "index scores": index_cell(c),
            "selection": sel,
            "last query reads": (f"{c.read_last} of {c.visible_last} entries" if c.role != "SWA" else "-"),
        })
    return rows


def index_cell(c: Computed) -> str:
    """The index-scores cell: how many scores the layer computed, and for a pool-restricted layer how many of them
    the pool kept (the rest were computed, then masked out)."""
    if not c.index_scores:
        return "not computed"
    scored = max(c.index_visible, c.index_scores)
    if c.pooled:
        return f"{scored:,} computed, {c.index_scores:,} kept inside the pool"
    return f"{scored:,} computed"


@dataclass
class ModeCheck:
    """Counts from the trace next to the counts the layer map predicts."""

    what: str
    from_trace: int
    from_map: int

    @property
    def ok(self) -> bool:
        return self.from_trace == self.from_map


def mode_checks(comp: list[Computed]) -> list[ModeCheck]:
    full = [c for c in comp if c.role == "Full"]
    sel = [c for c in comp if c.role in ("Full", "Reindex")]
    reuse = [c for c in comp if c.role == "Reuse"]
    return [
        ModeCheck("layers that made compressed entries (Full in the map)",
                  sum(c.entries_made > 0 for c in comp), len(full)),
        ModeCheck("layers that computed index scores (Full + Reindex)", sum(c.index_scores > 0 for c in comp),
                  len(sel)),
        ModeCheck("layers that reused a selection unchanged (Reuse)",
                  sum(c.selection == "reused" and bool(c.same_as_source) for c in comp), len(reuse)),
        ModeCheck("layers that made a new query (every layer)", sum(c.queries > 0 for c in comp), len(comp)),
    ]


def full_reads_subset(comp: list[Computed], one_based: bool = False) -> list[str]:
    """One sentence per Full layer: how many entries exist for the last query, and how many it read."""
    out = []
    for c in comp:
        if c.role != "Full":
            continue
        n = c.layer + 1 if one_based else c.layer
        if c.read_last < c.visible_last:
            out.append(f"Layer {n} (Full) built {c.entries_made} entries; the last query could see "
                       f"{c.visible_last} of them and read {c.read_last}.")
        else:
            out.append(f"Layer {n} (Full) built {c.entries_made} entries; the last query could see "
                       f"{c.visible_last} and read all of them, because the prompt is shorter than the "
                       f"selection size. Use a longer prompt to see it read a subset.")
    return out


# --------------------------------------------------------------------------------------------------
# Sentences several pages share
# --------------------------------------------------------------------------------------------------
RELEASE_NAME = "the full-size DeepSeek-V4.1-Flash"


def whose_config(cfg: V41Config) -> str:
    """Which model a config describes, in the reader's words: the released one (its preset) or the running one."""
    return RELEASE_NAME if cfg == V41Config.preset("v4.1-flash") else "the running model"


def bounded_note(cfg: V41Config, whose: str | None = None) -> str:
    """Why bounded replay is an approximation, in the same words wherever it is mentioned; `whose` names the model
    `cfg` describes (by default `whose_config`), since the replayed length is its window (128 rows at full size, 32
    in the tiny model)."""
    w = cfg.sliding_window
    whose = whose or whose_config(cfg)
    return (f"Bounded replay is an approximation: in {whose} the decoder runs only over the last {w} prompt rows "
            "(its window), and the "
            "windows of the first replayed rows are cut at the start of that segment, so those rows cannot read the "
            "older rows that exact prefill would let them read; the difference can travel up through the decoder "
            f"to the last row. Only a prompt that fits in the {w}-row segment loses nothing.")


@dataclass
class Agreement:
    """How far bounded prefill's next-token scores are from exact prefill's, on one prompt (measured)."""

    tokens: int
    window: int
    max_abs_diff: float        # largest |bounded - exact| over the next-token logits
    same_top: bool             # both pick the same most likely next token

    @property
    def identical(self) -> bool:
        return self.max_abs_diff == 0.0

    def sentence(self) -> str:
        fits = self.tokens <= self.window
        where = (f"This prompt ({self.tokens} tokens) fits in the {self.window}-row replay segment"
                 if fits else f"This prompt ({self.tokens} tokens) is longer than the {self.window}-row replay segment")
        if self.identical:
            how = "bounded and exact prefill gave identical next-token scores (measured)"
        else:
            how = (f"bounded and exact prefill differ by up to {self.max_abs_diff:.2g} in the next-token scores "
                   f"(measured), and {'agree' if self.same_top else 'disagree'} on the most likely next token")
        return f"{where}: {how}."


def bounded_agreement(model, ids: list[int]) -> Agreement:
    """Prefill `ids` both ways and compare the next-token logits."""
    x = torch.tensor([ids])
    b = prefill(model, x, "bounded").logits.float()
    e = prefill(model, x, "exact").logits.float()
    return Agreement(tokens=len(ids), window=model.cfg.sliding_window, max_abs_diff=float((b - e).abs().max()),
                     same_top=bool((b.argmax(-1) == e.argmax(-1)).all()))


def describe_layer(spec, num=lambda i: i) -> str:
    """model.layer_map.describe's sentence with every layer number in the reader's numbering (`num` maps a 0-based
    layer to it)."""

    def n(i):
        return None if i is None else num(i)

    return describe(dataclasses.replace(spec, index=num(spec.index), kv_source=n(spec.kv_source),
                                        index_source=n(spec.index_source)))


def map_line(cfg: V41Config, one_based: bool = False) -> str:
    """The running model's own layer map in one line, so live pages never leave a reader guessing which
    layer of the release a tiny-model layer number corresponds to (usually none)."""
    specs = layer_map(cfg)
    n = (lambda i: i + 1) if one_based else (lambda i: i)
    parts = []
    for stack in ("encoder", "decoder"):
        runs = [s for s in specs if s.stack == stack]
        if not runs:
            continue
        cells = []
        for s in runs:
            tag = "window" if s.role == "SWA" else f"{s.role} r{s.compress_ratio}"
            cells.append(f"{n(s.index)} {tag}")
        parts.append(f"{stack}: " + ", ".join(cells))
    base = "1-based" if one_based else "0-based"
    return (f"Layer map of the running model ({cfg.name}, {len(specs)} layers, {base}): " + "; ".join(parts)
            + ". Its layer numbers are its own: the released 40-layer model gives most numbers a different role.")
