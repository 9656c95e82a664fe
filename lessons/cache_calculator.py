"""The cache calculator: every byte a design keeps per request, derived the way it is written on a blackboard.

Follows the second seed's formula (entries x numbers per entry x stored layer copies x bits per number),
docs/design/equations.md §14 (V4-Flash) and §7 (V4.1 FP4 storage), and docs/design/architecture.md §3.2, §3.4 and
§6. A design is a list of `Store`s (one kind of cached data held by one or more layers); each store is made of
`Part`s (values, block scales, ...) so that block scales are counted as their own rows. `calculate()` returns two
separate results: what stays on the accelerator (HBM) and what a persistent prefix cache (host memory / SSD) keeps
per saved context. They are never added together.

For DeepSeek-V4.1 configs the stores come from `lessons.designs.v41_design`; their bytes per layer equal
`model.accounting.cache_bytes` and the bytes the engine's `Cache` really holds (tests/lessons/test_cache_calculator.py).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Callable, Mapping

from model import V41Config, layer_map
from model.accounting import keep_rows

from .units import counted, human_bytes

SUPPORTED_BITS = (4, 8, 16, 32)
MODES = ("exact", "bounded")
# display kinds, in chart order; "block_scales" gathers the scale bytes of every store
KINDS = ("window", "recurrent_state", "latents", "kv", "index_keys", "block_scales", "pending", "replay_input",
         "drafter")
KIND_LABELS = {
    "window": "window rows", "latents": "compressed entries (latents)", "kv": "full K/V rows",
    "index_keys": "index keys",
    "block_scales": "block scales", "pending": "pending rows", "recurrent_state": "recurrent state",
    "drafter": "drafter cache", "replay_input": "replay input (streams + pre)",
}
ENGINE_KINDS = ("window", "latents", "index_keys", "pending")  # what model.inference.cache.Cache.nbytes() reports
MAX_BYTES = 2 ** 63 - 1  # results must fit a signed 64-bit integer (pandas, JSON consumers)


class CalcError(ValueError):
    """An input the calculator cannot honour; the message names the input and the allowed range."""


# ------------------------------------------------------------------------------------------------
# Inputs
# ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Knobs:
    """The free inputs. A design uses the ones listed in its `knobs_used`."""

    context: int = 4096        # tokens held per sequence
    batch: int = 1             # sequences held at once (HBM only)
    layers: int = 16           # uniform designs: layers
    numbers: int = 128         # uniform designs: numbers per entry
    bits: int = 8              # bits per number of the main entries
    group: int = 1             # layers sharing one stored copy
    ratio: int = 1             # tokens pooled into one entry
    window: int = 128          # sliding-window rows
    replay: int = 128          # bounded replay: rows recomputed instead of stored
    rollback: int = 1          # engine slack: positions that can be dropped again (speculative decoding)
    mode: str = "bounded"      # prefill mode of the V4.1 engine: "exact" | "bounded"


LIMITS: dict[str, tuple[int, int]] = {
    "context": (1, 1 << 24), "batch": (1, 1024), "layers": (1, 512), "numbers": (1, 65536),
    "group": (1, 512), "ratio": (1, 4096), "window": (1, 1 << 20), "replay": (1, 1 << 16), "rollback": (0, 64),
}
KNOB_HELP = {
    "context": "tokens held per sequence", "batch": "sequences held at once", "layers": "layers",
    "numbers": "numbers per entry", "bits": "bits per number", "group": "layers sharing one stored copy",
    "ratio": "tokens pooled into one entry", "window": "sliding-window rows",
    "replay": "prompt rows the decoder runs over again when a saved context comes back, instead of storing its "
              "windows (bounded prefill; the engine replays its window)",
    "rollback": "rows a window keeps beyond its size, so that speculative decoding can drop refused guesses",
    "mode": "exact: every layer reads every prompt row; bounded: the encoder reads every row, the decoder only the "
            "last rows",
}

def validate_knobs(k: Knobs) -> Knobs:
    """Raise CalcError naming the first bad input; return k when every input is in range."""
    for name, (lo, hi) in LIMITS.items():
        v = getattr(k, name)
        if isinstance(v, bool) or not isinstance(v, int):
            raise CalcError(f"{KNOB_HELP[name]} ({name}) must be a whole number, got {v!r}")
        if not lo <= v <= hi:
            raise CalcError(f"{KNOB_HELP[name]} ({name}) must be between {lo:,} and {hi:,}, got {v:,}")
    if k.bits not in SUPPORTED_BITS:
        raise CalcError(f"bits per number must be one of {', '.join(map(str, SUPPORTED_BITS))}, got {k.bits!r}")
    if k.mode not in MODES:
        raise CalcError(f"prefill mode must be 'exact' or 'bounded', got {k.mode!r}")
    if k.group > k.layers:
        raise CalcError(f"a sharing group of {k.group} layers is larger than the {k.layers} layers")
    return k


def parse_knobs(raw: Mapping[str, object], defaults: Knobs) -> tuple[Knobs, list[str]]:
    """Knobs from text values (a URL's query parameters); each bad value falls back to its default with a message."""
    vals = dataclasses.asdict(defaults)
    msgs: list[str] = []
    for name in list(LIMITS) + ["bits", "mode"]:
        if name not in raw or raw[name] is None:
            continue
        text = str(raw[name]).strip()
        said = text if len(text) <= 40 else text[:39] + "\u2026"   # a URL value is quoted short
        if name == "mode":
            if text in MODES:
                vals[name] = text
            else:
                msgs.append(f"{name}={said!r} is not a prefill mode (exact or bounded); using {defaults.mode}.")
            continue
        try:
            v = int(text.replace(",", "").replace("_", ""))
        except ValueError:
            msgs.append(f"{name}={said!r} is not a whole number; using {getattr(defaults, name):,}.")
            continue
        if name == "bits":
            ok, rng = v in SUPPORTED_BITS, "one of " + ", ".join(map(str, SUPPORTED_BITS))
        else:
            lo, hi = LIMITS[name]
            ok, rng = lo <= v <= hi, f"between {lo:,} and {hi:,}"
        if ok:
            vals[name] = v
        else:
            msgs.append(f"{name}={v:,} must be {rng}; using {getattr(defaults, name):,}.")
    k = Knobs(**vals)
    if k.group > k.layers:
        msgs.append(f"group={k.group} is larger than layers={k.layers}; using group=1.")
        k = dataclasses.replace(k, group=1)
    return k, msgs


# ------------------------------------------------------------------------------------------------
# Designs: stores made of parts
# ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Part:
    """Numbers of one precision inside every entry of a store (values, block scales, padding)."""

    label: str
    numbers: int
    bits: int
    kind: str      # display kind; block scales get "block_scales"


@dataclass(frozen=True)
class Store:
    """One kind of cached data: `len(layers)` stored copies, each with `entries(T)` entries of `parts`."""

    name: str
    kind: str                      # the store's kind (what the engine reports it under)
    layers: tuple[int, ...]        # layers that hold a stored copy
    parts: tuple[Part, ...]
    growth: str = "tokens"         # "tokens": T // ratio (capped); "pending": incomplete group; "fixed"
    ratio: int = 1
    cap: int | None = None         # most entries kept (a sliding window); None = grows with the context
    fixed: int = 0                 # entries of a fixed-size state
    slack: int = 1                 # rollback slack (pending rows)
    read_by: int = 0               # layers that read this data (>= stored copies when shared)
    persist: str = "always"        # in the persistent prefix cache: "always" | "window" (only if the decoder's
                                   # windows are kept) | "replay" (only if they are not) | "never"
    hbm: bool = True               # held on the accelerator between steps (the replay input is not)
    in_engine: bool = False        # held by model.inference.cache.Cache (V4.1 configs; not the drafter's cache)
    note: str = ""
    # layer groups the note names, one per "{}" in it: numbered when a calculation is drawn, so that the note
    # follows the reader's layer numbering (0- or 1-based) like every other layer label
    note_refs: tuple[tuple[int, ...], ...] = ()

    def note_for(self, d: "Design", first: int = 0) -> str:
        return self.note.format(*(_span(g, d, first) for g in self.note_refs)) if self.note_refs else self.note

    @property
    def copies(self) -> int:
        return len(self.layers)

    def entries(self, t: int) -> int:
        if t <= 0:
            return 0
        if self.growth == "fixed":
            return self.fixed
        if self.growth == "pending":
            return keep_rows(self.ratio, t, self.slack)
        n = t // self.ratio
        return n if self.cap is None else min(n, self.cap)

    def entries_rule(self, t: int) -> str:
        if self.growth == "fixed":
            return f"fixed {self.fixed:,}"
        if self.growth == "pending":
            if self.slack == 0:
                return f"T mod {self.ratio} = {self.entries(t):,}"
            return f"min(T, {self.slack} + {self.ratio} - 1) = {self.entries(t):,}"
        base = "T" if self.ratio == 1 else f"T // {self.ratio}"
        if self.cap is not None:
            base = f"min({base}, {self.cap:,})"
        return f"{base} = {self.entries(t):,}"

    def entry_bytes(self) -> int:
        return sum(p.numbers * p.bits for p in self.parts) // 8


@dataclass
class Design:
    """A model's cache layout plus what the comparison page says about it."""

    key: str
    label: str
    stores: list[Store]
    n_layers: int
    roles: list[str]                          # one role label per layer, for the layer-role picture
    summary: str = ""
    status: str = "illustrative"              # "config" | "published formats" | "illustrative"
    sources: list[str] = field(default_factory=list)
    unknowns: list[str] = field(default_factory=list)
    shares: dict[str, str] = field(default_factory=dict)  # prepared data / selection / update rule / state
    knobs_used: tuple[str, ...] = ("context", "batch")
    layer_names: dict[int, str] = field(default_factory=dict)  # labels for extra layers (the drafter)
    has_replay: bool = False                  # V4.1-style bounded replay of the decoder's windows
    decoder_layers: tuple[int, ...] = ()
    short: str = ""                           # a few words, for chart axes


def check_design(d: Design) -> None:
    for s in d.stores:
        if s.copies < 1:
            raise CalcError(f"{s.name}: a store needs at least one stored copy")
        if s.ratio < 1 or (s.cap is not None and s.cap < 0) or s.fixed < 0:
            raise CalcError(f"{s.name}: ratio must be >= 1 and sizes >= 0")
        for p in s.parts:
            if p.numbers < 1:
                raise CalcError(f"{s.name}: numbers per entry must be >= 1, got {p.numbers}")
            if p.bits not in SUPPORTED_BITS:
                raise CalcError(f"{s.name}: {p.bits} bits per number is not supported "
                                f"(choose {', '.join(map(str, SUPPORTED_BITS))})")
            if (p.numbers * p.bits) % 8:
                raise CalcError(f"{s.name}: {p.numbers} numbers x {p.bits} bits is not a whole number of bytes; "
                                f"use an even number of numbers at 4 bits")


# ------------------------------------------------------------------------------------------------
# Results
# ------------------------------------------------------------------------------------------------

@dataclass
class DerivationRow:
    item: str
    kind: str
    store: str
    memory: str                # "HBM" | "persistent"
    entries_rule: str
    entries: int
    numbers: int
    copies: int
    bits: int
    batch: int
    bytes: int
    read_by: int
    layers: str
    note: str = ""

    @property
    def formula(self) -> str:
        b = f" x {counted(self.batch, 'sequence')}" if self.batch != 1 else ""
        return (f"{counted(self.entries, 'entry', 'entries')} x {counted(self.numbers, 'number')} x "
                f"{counted(self.copies, 'stored copy', 'stored copies')} x {self.bits} bits / 8{b} = {self.bytes:,} B")

    def record(self) -> dict:
        d = dataclasses.asdict(self)
        d["formula"] = self.formula
        return d


@dataclass
class CacheResult:
    design: str
    memory: str
    context: int
    batch: int
    rows: list[DerivationRow]
    by_kind: dict[str, int]
    by_layer: dict[int, dict[str, int]]          # display kinds, at the layer holding each copy
    engine_by_layer: dict[int, dict[str, int]]   # stores held by the engine, under the engine's kinds
    growth_per_token: float                      # bytes added per further token, long run

    @property
    def total(self) -> int:
        return sum(self.by_kind.values())

    @property
    def per_token(self) -> float:
        """Average bytes per held token at this context (batch included)."""
        return self.total / (self.context * self.batch)

    def engine_by_kind(self) -> dict[str, int]:
        return {k: sum(v.get(k, 0) for v in self.engine_by_layer.values()) for k in ENGINE_KINDS}


def _compute(d: Design, context: int, batch: int, memory: str, stores: list[Store], first: int = 0) -> CacheResult:
    rows: list[DerivationRow] = []
    by_kind = dict.fromkeys(KINDS, 0)
    by_layer: dict[int, dict[str, int]] = {}
    engine: dict[int, dict[str, int]] = {}
    growth = 0.0
    for s in stores:
        n = s.entries(context)
        layers, note = _span(s.layers, d, first), s.note_for(d, first)
        for p in s.parts:
            b = n * p.numbers * s.copies * p.bits // 8 * batch
            rows.append(DerivationRow(item=f"{s.name}: {p.label}", kind=p.kind, store=s.kind, memory=memory,
                                      entries_rule=s.entries_rule(context), entries=n, numbers=p.numbers,
                                      copies=s.copies, bits=p.bits, batch=batch, bytes=b,
                                      read_by=max(s.read_by, s.copies), layers=layers, note=note))
            by_kind[p.kind] += b
            for layer in s.layers:
                per = n * p.numbers * p.bits // 8 * batch
                by_layer.setdefault(layer, dict.fromkeys(KINDS, 0))[p.kind] += per
                if s.in_engine:
                    engine.setdefault(layer, dict.fromkeys(ENGINE_KINDS, 0))[s.kind] += per
            if s.growth == "tokens" and s.cap is None:
                growth += s.copies * p.numbers * p.bits / 8 / s.ratio * batch
    res = CacheResult(design=d.key, memory=memory, context=context, batch=batch, rows=rows, by_kind=by_kind,
                      by_layer=dict(sorted(by_layer.items())), engine_by_layer=dict(sorted(engine.items())),
                      growth_per_token=growth)
    if res.total > MAX_BYTES:
        raise CalcError(f"{res.total:,} bytes does not fit a 64-bit count; lower the context or the batch")
    return res


def layer_label(d: Design, layer: int, first: int = 0) -> str:
    """A layer's label, numbered from `first` (0 or 1); a design's named extra layers (the drafter) keep their name."""
    return d.layer_names.get(layer, str(layer + first))


def _span(layers: tuple[int, ...], d: Design, first: int = 0) -> str:
    names = [layer_label(d, i, first) for i in layers]
    if len(names) > 6:
        return f"{names[0]}, {names[1]}, ..., {names[-1]} ({len(names)} layers)"
    return ", ".join(names)


@dataclass
class Calculation:
    design: Design
    knobs: Knobs
    hbm: CacheResult               # on the accelerator, for `batch` sequences
    persistent: CacheResult        # host memory / SSD, per saved context (one sequence)
    keep_windows: bool

    def records(self) -> list[dict]:
        return [r.record() for r in self.hbm.rows + self.persistent.rows]

    def to_json(self) -> str:
        def res(r: CacheResult) -> dict:
            return {"total_bytes": r.total, "bytes_per_token_average": r.per_token,
                    "bytes_added_per_token": r.growth_per_token, "by_kind": r.by_kind,
                    "by_layer": {str(k): v for k, v in r.by_layer.items()}, "rows": [x.record() for x in r.rows]}
        return json.dumps({"design": self.design.key, "label": self.design.label, "status": self.design.status,
                           "inputs": dataclasses.asdict(self.knobs), "keep_windows_in_persistent": self.keep_windows,
                           "hbm": res(self.hbm), "persistent_per_saved_context": res(self.persistent),
                           "note": "HBM and persistent bytes are separate results; they are never added together."},
                          indent=2)


def windows_persist(knobs: Knobs, keep_windows: bool) -> bool:
    """Does the persistent cache hold the decoder's windows? Exact prefill leaves them filled, so the engine saves
    them; bounded prefill saves the replay input instead, unless the reader asks to keep the windows."""
    return keep_windows or knobs.mode == "exact"


def calculate(d: Design, knobs: Knobs, keep_windows: bool = False, first_layer: int = 0) -> Calculation:
    """HBM bytes for `knobs.batch` sequences of `knobs.context` tokens, and, separately, the persistent bytes of
    one saved context, as our engine's prefix cache saves it: global entries always; the decoder's window rows
    when they are kept (exact prefill, or `keep_windows`), else the replay input bounded replay rebuilds them
    from. `first_layer` (0 or 1) numbers the layers the derivation's rows and notes name."""
    validate_knobs(knobs)
    check_design(d)
    hbm = _compute(d, knobs.context, knobs.batch, "HBM", [s for s in d.stores if s.hbm], first_layer)
    win = windows_persist(knobs, keep_windows)
    keep = [s for s in d.stores if s.persist == "always" or (s.persist == "window" and win)
            or (s.persist == "replay" and not win)]
    per = _compute(d, knobs.context, 1, "persistent", keep, first_layer)
    return Calculation(design=d, knobs=knobs, hbm=hbm, persistent=per, keep_windows=keep_windows)


# ------------------------------------------------------------------------------------------------
# Lesson texts (the cache calculator page)
# ------------------------------------------------------------------------------------------------

CALC_INTRO = (
    "While a model reads a request, it keeps prepared data for every token so that later tokens can attend to "
    "it without redoing the work: the cache. Here every cache figure is written as one product, "
    "**entries x numbers per entry x stored layer copies x bits per number**, one row per kind of data."
)

CALC_LEVERS = (
    "Shrinking the cache can mean fewer entries (a window, or pooling tokens), fewer numbers, fewer stored copies "
    "(layers sharing one), or fewer bits. For DeepSeek-V4.1 the same product is checked against the bytes the "
    "running model actually holds."
)

ROW_FORMULA = ("Each row: **entries x numbers per entry x stored layer copies x bits per number / 8** (x sequences). "
               "Block scales and padding are rows of their own.")
GROWTH_HELP = "bytes the growing stores add per token, long run (batch included)"
SHARED_COPY = ("A shared copy is drawn at the layer that makes it; the derivation's 'read_by' column says how many "
               "layers read it.")


def persistent_help(persistent_bytes: int) -> str:
    return (f"{persistent_bytes:,} bytes in host memory or on SSD for one saved context, as our engine's prefix cache "
            "saves it; a separate budget")


def arrows_note(moved: str) -> str:
    """Under the metrics: what their arrows compare (`moved`: the inputs the reader changed)."""
    return f"Arrows: the change from before you moved {moved}."


def about_title(d: Design) -> str:
    return f"About {d.label} ({d.status}), and why the two memories are never added"


def about_design(d: Design) -> str:
    """The design's summary, and why its two figures are never added."""
    return (f"{d.summary} The accelerator figure and the persistent figure are two separate results; adding them "
            "would say nothing about either memory. The release, too, reports its savings against V4-Flash for "
            "accelerator memory and for the persistent cache separately.")


def full_layers_line(cfg: V41Config, num: Callable[[int], int]) -> str:
    """Which layers of `cfg` hold the stored latents and index keys (`num`: the reader's layer numbering)."""
    full = [f"{num(s.index)} (ratio {s.compress_ratio})" for s in layer_map(cfg) if s.role == "Full"]
    return (f"Layers {', '.join(full)} are the Full layers holding the stored latents and index keys; every other "
            "compressed layer reads theirs.")


LEAVES_OUT = (
    "The formula counts the per-request cache and nothing else. It leaves out, on purpose:\n\n"
    "- **the weights**: a smaller cache does not shrink hundreds of billions of parameters, which every request "
    "needs in memory (or streamed) no matter how short its context;\n"
    "- activations and scratch buffers of the forward pass, and the engine's own padding, paging and "
    "fragmentation;\n"
    "- for the uniform teaching example, everything real: its sizes are made up and it cannot estimate a "
    "release's runtime memory.\n\n"
    "So the right use of this page is as a checklist of what an optimisation changes, not as a total-memory "
    "prediction."
)

WEIGHTS_LABEL = "Parameters the cache formula does not count (counted from the config)"


def _billions(n: float) -> str:
    return f"{n / 1e9:,.0f}B" if n >= 10e9 else f"{n / 1e9:,.1f}B"


def weights_left_out(counts: Mapping[str, float], cache_bytes: float) -> str:
    """The weights the formula leaves out, beside the whole cache: `counts` from model.count_params (total,
    backbone, engram, drafter, vision). The total is our count from the config, which the sentence says where the
    reader sees the number (the release itself quotes the backbone only)."""
    total = counts["total"]
    parts = [f"{_billions(counts[k])} {name}" for k, name in
             (("backbone", "backbone"), ("engram", "Engram tables"), ("drafter", "drafter"), ("vision", "vision tower"))
             if counts.get(k)]
    said = (parts[0] + ", the one part the release quotes" + "".join("; " + p for p in parts[1:])
            if counts.get("backbone") else "; ".join(parts))
    return (f"Our count from the config, not a figure the release quotes: {total:,.0f} parameters in all ({said}). "
            f"Even at 4 bits per parameter they take at least {human_bytes(total / 2)}: the whole cache above is "
            f"{human_bytes(cache_bytes)}.")
