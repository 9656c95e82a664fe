"""The Figure 3 walkthrough: the drawing's layout, the story steps, and what each box does.

Follows ARCHITECTURE.md §2 (layer map) and reference-brief.md §5 (CED, CSA2, hierarchical indexer,
mHC, MoE, Engram, DSpark). The drawing is GENERATED from `layer_map(cfg)`: the same function lays
out the released 40-layer config and the running tiny model. The story follows the first seed's
path (the job, why change attention, a fresh question, the two halves, the other boxes, recurrence,
the check) in our own words. No Streamlit or Plotly here: boxes are plain coordinates.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from model import V41Config, layer_map
from model.layer_map import LayerSpec
from model.quant import LATENT_FMT

from .layers import Run, stack_runs
from .sources import REPORT

KIND_COLORS = {"vision": "#c9b3e6", "embed": "#dddddd", "states": "#eeeeee", "head": "#dddddd",
               "moe": "#b7dfb2", "engram": "#f6cf86", "drafter": "#f3a9a9", "mhc": "#ffffff", "line": "#ffffff"}
ROLE_FILL = {"SWA": "#aab4be", "Full": "#2f7fc1", "Reuse": "#a9cbe8", "Reindex": "#f08a24"}

# geometry (plot units): encoder column starts at x=0, decoder column at DEC_X
ATTN_W, MOE_W, GAP, DEC_X, ROW = 6.2, 2.0, 0.2, 16.0, 1.0
BOX_H = 0.78


@dataclass
class Box:
    id: str
    kind: str                  # vision | embed | states | attn | moe | engram | mhc | line | head | drafter
    label: str
    x0: float
    y0: float
    x1: float
    y1: float
    layers: tuple[int, ...] = ()
    tags: frozenset = frozenset()
    fill: str = "#ffffff"
    dash: bool = False         # dotted outline: drawn once, stands for several layers
    hover: str = ""

    @property
    def center(self) -> tuple[float, float]:
        return (self.x0 + self.x1) / 2, (self.y0 + self.y1) / 2


@dataclass
class Line:
    xs: list[float]
    ys: list[float]
    color: str = "#444444"
    dash: str = "solid"        # plotly dash name
    width: float = 1.5
    arrow: bool = False


@dataclass
class Label:
    x: float
    y: float
    text: str
    anchor: str = "left"       # left | right | center
    size: int = 11
    color: str = "#333333"


@dataclass
class Diagram:
    boxes: list[Box]
    lines: list[Line]
    labels: list[Label]
    x_range: tuple[float, float]
    y_range: tuple[float, float]
    compact: bool
    cfg_name: str

    def box(self, box_id: str) -> Box | None:
        return next((b for b in self.boxes if b.id == box_id), None)

    def height_px(self, per_unit: int = 34) -> int:
        """A drawing height that keeps rows readable whatever the number of layers."""
        return int(per_unit * (self.y_range[1] - self.y_range[0])) + 30

    def layer_boxes(self) -> list[Box]:
        return [b for b in self.boxes if b.kind == "attn"]


def _num(i: int, one_based: bool) -> int:
    return i + 1 if one_based else i


def _role_label(spec: LayerSpec) -> str:
    if spec.role == "SWA":
        return "window only"
    r = f" r{spec.compress_ratio}"
    extra = " +pool" if spec.candidate_source else ""
    return spec.role + r + extra


def _layer_tags(spec: LayerSpec) -> set[str]:
    t = {"layer", spec.stack, spec.role}
    if spec.selects:
        t.add("selects")
    if spec.candidate_source or spec.uses_candidates:
        t.add("pool")
    if spec.stack == "decoder" and spec.role == "Full":
        t.add("line")
    return t


def layout(cfg: V41Config, compact: bool = False, one_based: bool = False) -> Diagram:
    """Both stacks, bottom to top. `compact` draws each repeated run once with a dotted "xN" frame,
    as the report's figure does; otherwise every layer gets its own row."""
    specs = layer_map(cfg)
    by_index = {s.index: s for s in specs}
    boxes: list[Box] = []
    lines: list[Line] = []
    labels: list[Label] = []
    tops: dict[str, float] = {}
    mhc_rows: dict[str, tuple[float, float]] = {}
    row_of: dict[int, float] = {}       # layer -> y centre of the row that shows it
    col_x = {"encoder": 0.0, "decoder": DEC_X}

    def add_layer_row(x: float, y: float, layer_ids: tuple[int, ...], spec: LayerSpec, label: str, dash: bool):
        tags = frozenset(_layer_tags(spec) | ({"repeat"} if dash else set()))
        nums = ", ".join(str(_num(i, one_based)) for i in layer_ids)
        boxes.append(Box(f"attn:{layer_ids[0]}", "attn", label, x, y - BOX_H / 2, x + ATTN_W, y + BOX_H / 2,
                         layer_ids, tags, ROLE_FILL[spec.role], dash,
                         f"layer{'s' if len(layer_ids) > 1 else ''} {nums}: {spec.role} attention"))
        boxes.append(Box(f"moe:{layer_ids[0]}", "moe", "MoE", x + ATTN_W + GAP, y - BOX_H / 2,
                         x + ATTN_W + GAP + MOE_W, y + BOX_H / 2, layer_ids, frozenset({"moe", spec.stack}),
                         KIND_COLORS["moe"], dash, f"MoE of layer{'s' if len(layer_ids) > 1 else ''} {nums}"))
        for i in layer_ids:
            row_of[i] = y
        eng = [i for i in layer_ids if by_index[i].engram]
        if eng:
            which = ", ".join(str(_num(i, one_based)) for i in eng)
            lab = "Engram" + (f" (layer {which} only)" if len(layer_ids) > len(eng) else "")
            boxes.append(Box(f"engram:{eng[0]}", "engram", lab, x - 3.4, y - BOX_H / 2, x - 0.3, y + BOX_H / 2,
                             tuple(eng), frozenset({"engram", spec.stack}), KIND_COLORS["engram"], False,
                             f"Engram lookup before attention, layer {which}"))
            lines.append(Line([x - 0.3, x], [y, y], "#b07a10", arrow=True))

    for stack in ("encoder", "decoder"):
        runs: list[Run] = stack_runs(specs, stack)
        if not runs:
            continue
        x = col_x[stack]
        y = 0.0
        y_start = y
        for run in runs:
            if compact:
                # the run drawn once; each Reuse stretch drawn once with a dotted "x reuse" frame
                reps = run.units
                heads = tuple(u.layers[0] for u in reps)
                y_run0 = y
                if run.head == "SWA":
                    add_layer_row(x, y, heads, by_index[heads[0]], "window only", len(heads) > 1)
                    y += ROW
                else:
                    add_layer_row(x, y, heads, by_index[heads[0]], _role_label(by_index[heads[0]]), len(heads) > 1)
                    y += ROW
                    if run.reuse:
                        rest = tuple(i for u in reps for i in u.layers[1:])
                        add_layer_row(x, y, rest, by_index[rest[0]], "Reuse", run.reuse > 1)
                        if run.reuse > 1:
                            labels.append(Label(x + ATTN_W - 0.15, y, f"x{run.reuse}", "right", 12, "#1b3a57"))
                        y += ROW
                if run.repeats > 1:
                    x1 = x + ATTN_W + GAP + MOE_W + 0.25
                    y0, y1 = y_run0 - ROW / 2 + 0.03, y - ROW / 2 - 0.03
                    boxes.append(Box(f"frame:{run.layers[0]}", "frame", "", x - 0.25, y0, x1, y1, run.layers,
                                     frozenset({"repeat", stack}), "rgba(0,0,0,0)", True,
                                     f"drawn once, built {run.repeats} times"))
                    labels.append(Label(x1 + 0.15, (y0 + y1) / 2, f"x{run.repeats}", "left", 13, "#222222"))
            else:
                for u in run.units:
                    for i in u.layers:
                        s = by_index[i]
                        add_layer_row(x, y, (i,), s, f"{_num(i, one_based)}  {_role_label(s)}", False)
                        y += ROW
                if run.head != "SWA" and (run.repeats > 1 or run.reuse):
                    x1 = x + ATTN_W + GAP + MOE_W + 0.25
                    for k, u in enumerate(run.units):
                        y0 = row_of[u.layers[0]] - ROW / 2 + 0.04
                        y1 = row_of[u.layers[-1]] + ROW / 2 - 0.04
                        boxes.append(Box(f"frame:{u.layers[0]}", "frame", "", x - 0.25, y0, x1, y1, u.layers,
                                         frozenset({"repeat", stack}), "rgba(0,0,0,0)", True,
                                         f"copy {k + 1} of {run.repeats} of ({run.pattern_text()})"))
                        if run.repeats > 1:
                            labels.append(Label(x1 + 0.15, (y0 + y1) / 2, f"{k + 1}/{run.repeats}", "left", 10,
                                                "#555555"))
        tops[stack] = y - ROW / 2
        mhc_rows[stack] = (y_start - ROW / 2, y - ROW / 2)

    enc_top, dec_top = tops.get("encoder", 0.0), tops.get("decoder", 0.0)
    right = ATTN_W + GAP + MOE_W
    # bottom of the encoder: embeddings, with the vision encoder feeding image rows into them
    boxes.append(Box("embed", "embed", "token embedding (ids to rows)", 0, -1.4, right, -0.65, (),
                     frozenset({"embed", "encoder", "job"}), KIND_COLORS["embed"]))
    boxes.append(Box("vision", "vision", "vision encoder", 0, -2.8, 4.0, -2.05, (),
                     frozenset({"vision"}), KIND_COLORS["vision"]))
    labels.append(Label(6.0, -2.45, "text tokens", "center", 11))
    lines.append(Line([2.0, 2.0], [-2.05, -1.4], "#6a4fa0", arrow=True))
    lines.append(Line([6.0, 6.0], [-2.25, -1.4], "#444444", arrow=True))
    lines.append(Line([right / 2, right / 2], [-0.65, -0.5], "#444444", arrow=True))
    # mHC streams beside each stack: hc_mult thin lines
    for stack, (y0, y1) in mhc_rows.items():
        x = col_x[stack] + right + 1.35  # right of the frame labels
        n = cfg.hc_mult
        for k in range(n):
            lines.append(Line([x + 0.22 * k, x + 0.22 * k], [y0 - 0.6, y1 + 0.1], "#7a7a7a", width=1.2))
        xc = x + 0.11 * (n - 1)
        boxes.append(Box(f"mhc:{stack}", "mhc", f"mHC: {n} streams", xc - 1.25, y0 - 1.4, xc + 1.25,
                         y0 - 0.65, (), frozenset({"mhc", stack}), KIND_COLORS["mhc"]))
    # the line: encoder's final states carried across into the decoder
    if "decoder" in tops:
        mid = DEC_X - 1.7
        lines.append(Line([right / 2, right / 2, mid, mid, DEC_X], [enc_top, enc_top + 0.7, enc_top + 0.7, -1.0, -1.0],
                          "#c0392b", width=2.4, arrow=True))
        boxes.append(Box("states", "states", "encoder's final states", DEC_X, -1.4, DEC_X + right, -0.65, (),
                         frozenset({"line", "decoder"}), KIND_COLORS["states"]))
        boxes.append(Box("line", "line", "states go across", mid - 1.6, enc_top / 2 - 0.4, mid + 1.6,
                         enc_top / 2 + 0.4, (), frozenset({"line"}), "#fbe3e0"))
        lines.append(Line([DEC_X + right / 2, DEC_X + right / 2], [-0.65, -0.5], "#444444", arrow=True))
    top_x = DEC_X if "decoder" in tops else 0.0
    top_y = dec_top if "decoder" in tops else enc_top
    boxes.append(Box("head", "head", "norm + head: next-token scores", top_x, top_y + 0.25, top_x + right,
                     top_y + 1.0, (), frozenset({"head", "job"}), KIND_COLORS["head"]))
    lines.append(Line([top_x + right / 2, top_x + right / 2], [top_y - 0.1, top_y + 0.25], "#444444", arrow=True))
    # DSpark drafter fed by its target layers' attention inputs
    targets = [i for i in cfg.dspark_target_layer_ids if i in row_of]
    if cfg.num_nextn_predict_layers and targets:
        dx0 = top_x + right + 2.6
        ys = [row_of[i] for i in targets]
        y0, y1 = min(ys) - BOX_H / 2, max(max(ys) + BOX_H / 2, top_y + 1.0)
        boxes.append(Box("drafter", "drafter", "DSpark drafter", dx0, y0, dx0 + 3.6, y1, tuple(targets),
                         frozenset({"drafter"}), KIND_COLORS["drafter"]))
        for yy in sorted(set(ys)):
            lines.append(Line([top_x + right + 2.15, dx0], [yy, yy], "#b03a3a", "dot", 1.3, arrow=True))
    x_lo = -4.0
    x_hi = (top_x + right + 6.6) if targets else DEC_X + right + 2.5
    return Diagram(boxes, lines, labels, (x_lo, x_hi), (-3.1, max(enc_top, top_y + 1.0) + 0.9), compact,
                   cfg.name)


def box_choices(d: Diagram, one_based: bool = False) -> dict[str, str]:
    """{box id: readable name} for the select box beside the drawing, in drawing order."""
    out = {}
    order = ["vision", "embed"] + [b.id for b in d.boxes if b.kind in ("engram", "attn", "moe")] + \
            ["mhc:encoder", "line", "states", "mhc:decoder", "head", "drafter"]
    for bid in order:
        b = d.box(bid)
        if b is None or bid in out:
            continue
        if b.kind in ("attn", "moe", "engram"):
            nums = [_num(i, one_based) for i in b.layers]
            which = f"layer {nums[0]}" if len(nums) == 1 else f"layers {', '.join(map(str, nums))}"
            what = {"attn": "attention", "moe": "MoE", "engram": "Engram"}[b.kind]
            role = b.label.split("  ")[-1] if b.kind == "attn" else ""
            out[bid] = f"{which}: {what}" + (f" ({role})" if role else "")
        else:
            out[bid] = b.label
    return out


def picked_box(points: list, pick_ids: list[str], marker_curve: int) -> str | None:
    """The box a plotly selection event names: its marker's `customdata`, or failing that the point's
    index on the marker trace (`marker_curve`). Clicks on anything else name no box."""
    for p in points or []:
        cd = p.get("customdata")
        if isinstance(cd, (list, tuple)):
            cd = cd[0] if cd else None
        if isinstance(cd, str) and cd in pick_ids:
            return cd
        k = p.get("point_index", p.get("point_number"))
        if p.get("curve_number") == marker_curve and isinstance(k, int) and 0 <= k < len(pick_ids):
            return pick_ids[k]
    return None


# --------------------------------------------------------------------------------------------------
# The story
# --------------------------------------------------------------------------------------------------
@dataclass
class Step:
    key: str
    title: str
    body: str
    focus: frozenset = field(default_factory=frozenset)   # box tags to highlight
    box: str | None = None                                 # the box opened with this step
    table: list[dict] | None = None                        # an optional small table shown under the text
    read_along: str = ""                                   # where in the report this step's point is made


def facts(cfg: V41Config) -> dict:
    specs = layer_map(cfg)
    enc = [s for s in specs if s.stack == "encoder"]
    dec = [s for s in specs if s.stack == "decoder"]
    enc_ratio = next((s.compress_ratio for s in enc if s.compress_ratio), 0)
    cand = next((s for s in specs if s.candidate_source), None)
    return {
        "n": len(specs), "n_enc": len(enc), "n_dec": len(dec), "W": cfg.sliding_window,
        "n_swa": sum(s.role == "SWA" for s in specs), "enc_ratio": enc_ratio,
        "topk": cfg.index_topk, "pool": cfg.candidate_topk_blocks * cfg.candidate_block_size,
        "pool_blocks": cfg.candidate_topk_blocks, "pool_block": cfg.candidate_block_size,
        "cand": None if cand is None else cand.index,
        "experts": cfg.n_routed_experts, "per_tok": cfg.num_experts_per_tok, "shared": cfg.n_shared_experts,
        "hc": cfg.hc_mult, "engram": list(cfg.engram_layer_ids), "ngram": cfg.engram_max_ngram_size,
        "draft_block": cfg.dspark_block_size, "targets": list(cfg.dspark_target_layer_ids),
        "runs": {st: stack_runs(specs, st) for st in ("encoder", "decoder")},
    }


def levers(cfg: V41Config, earlier: int = 16, pick: int = 2) -> list[dict]:
    """The four ways to make reading cheaper, on a small example: `earlier` positions to read."""
    r = next((x for x in cfg.backbone_ratios if x > 1), 2)
    packed = earlier // r
    w = min(cfg.sliding_window, earlier)
    return [
        {"move": f"read only the last {w} of {earlier} positions" if w < earlier else
                 "read only the most recent positions (a window)",
         "name in the report": "sliding-window attention (SWA)",
         "what you give up": "direct access to anything older, in that branch"},
        {"move": f"pack every {r} positions into one entry: {earlier} become {packed}",
         "name in the report": f"compression (ratio {r})", "what you give up": "fine detail inside each packed group"},
        {"move": f"read only {pick} chosen entries of the {packed}", "name in the report": "sparse attention (top-k)",
         "what you give up": "direct access to the entries not chosen"},
        {"move": "prepare the entries once and let several layers read them", "name in the report": "KV reuse (CSA2)",
         "what you give up": "each layer preparing its own"},
    ]


def read_along(where: str | None) -> str:
    """The "Read along" line of a step: the report section our source texts name for the point, or the
    report without a section where they name none (a section number is never invented)."""
    if where:
        return f"Read along: {REPORT}, {where}."
    return f"Read along: {REPORT} (our source texts name no section for this point)."


def fp4_sentence(cfg: V41Config) -> str:
    """How one compressed entry is stored, from the engine's storage format (model.quant.LATENT_FMT)."""
    f, d = LATENT_FMT, cfg.head_dim
    vals, scales = d * f.element_bits // 8, d // f.block * f.scale_bits // 8
    return (f"Each entry is stored in FP4: {f.element_bits}-bit numbers (E2M1: one sign bit, two exponent bits, "
            f"one mantissa bit) with one shared scale per block of {f.block} numbers, itself an 8-bit E4M3 number. "
            f"An entry of {d} numbers takes {vals} B of values plus {scales} B of scales. The entry is \"K=V\": "
            "the same stored row serves as the key a query scores and as the value it mixes in.")


def notation(cfg: V41Config, one_based: bool = False) -> str:
    """The report's notation next to the drawing's labels, with this config's numbers."""
    ratios = sorted({s.compress_ratio for s in layer_map(cfg) if s.compress_ratio}, reverse=True)
    pool_layer = cfg.candidate_source_layer_id
    r = " and ".join(f"r{x}" for x in ratios) or "none"
    return ("Notation. The report writes a layer's attention as CSA2(r, ...): r is the compress ratio, how many "
            "tokens are packed into one global entry, so CSA2(2, ...) packs pairs of tokens and a ratio of 1 means "
            f"no packing at all (one entry per token). The drawing's labels {r} are these ratios; 'window only' "
            "layers have no global entries. Each attention box with its MoE box counts as one layer. The pool's "
            "first broad scan"
            + (f", at layer {_num(pool_layer, one_based)}," if pool_layer is not None else "")
            + " still scores every visible entry; only the later Reindex layers search inside the pool.")


def steps(cfg: V41Config, one_based: bool = False, engram_params: int | None = None,
          total_params: int | None = None) -> list[Step]:
    """The story. `engram_params` / `total_params` (from model.count_params, computed by the caller) let the
    Engram step say how much memory its tables take; without them it counts the tables from the config."""
    from .dspark import block_sentence
    from .layers import MODES, bounded_note
    from .shares import TOY_QUERIES, fmt, two_value_mix

    f = facts(cfg)
    n = lambda i: _num(i, one_based)  # noqa: E731
    enc_runs = " + ".join(r.formula() for r in f["runs"]["encoder"])
    dec_runs = " + ".join(r.formula() for r in f["runs"]["decoder"])
    engram = ((("layers " if len(f["engram"]) > 1 else "layer ") + " and ".join(str(n(i)) for i in f["engram"]))
              if f["engram"] else "no layer of this config")
    cand = "-" if f["cand"] is None else n(f["cand"])
    dec_full = next((s for s in layer_map(cfg) if s.stack == "decoder" and s.role == "Full"), None)
    dec_first = "-" if dec_full is None else n(dec_full.index)
    rep = next((r for r in f["runs"]["encoder"] + f["runs"]["decoder"] if r.reuse > 1), None)
    rep_n = rep.reuse if rep else 1
    outer = next((r for r in f["runs"]["encoder"] + f["runs"]["decoder"] if r.repeats > 1 and r.head != "SWA"), None)
    mixes = [two_value_mix(round(share * 100)) for _, share in TOY_QUERIES]
    toy = " and ".join(f"{fmt(m.shares[0] * 100)}%/{fmt(m.shares[1] * 100)}% give {fmt(m.result)}" for m in mixes)
    modes = [dict(m, **{"also, in every mode": "a new query, its own window keys and values, its own attention "
                                               "output" + (" (reads only a selected subset)" if m["mode"] == "Full"
                                                           else "")}) for m in MODES]
    tables = engram_params if engram_params is not None else sum(cfg.engram_num_embeddings) * cfg.engram_head_dim
    share = (f", out of {total_params / 1e9:,.0f}B parameters in all" if total_params else "")
    big = f"{tables / 1e9:,.0f}B parameters" if tables >= 1e9 else f"{tables:,} parameters"
    return [
        Step("job", "Start with the job",
             "Read the drawing from the bottom. Text comes in as token ids; the embedding turns each id into a "
             "row of numbers. Every box above rewrites those rows, and at the very top the last row becomes a "
             "score for every possible next token. The two columns are one model cut into halves: "
             f"{f['n_enc']} layers on the left, {f['n_dec']} on the right, {f['n']} in all.",
             frozenset({"job"}), "embed", read_along=read_along("Figure 3")),
        Step("why", "Why change attention?",
             "Inside each layer box, attention lets a row pull in information from earlier positions. For a long "
             "prompt, preparing and reading every earlier position in every layer is the expensive part. This "
             "design trims it four ways at once: a window (each layer reads only its last "
             f"{f['W']} raw rows), packing ({f['enc_ratio']} tokens squeezed into one entry in the left half), "
             f"picking (a query reads at most {f['topk']} global entries), and preparing once for several "
             "layers. Packing means fewer entries to keep; picking means fewer entries touched by each query. "
             "These counts do not say by themselves how much faster the whole model runs: that has to be "
             "measured.",
             frozenset({"layer"}), None, levers(cfg), read_along=read_along("§2.3")),
        Step("fresh", "Same information, a fresh question",
             "Keys decide how relevant a stored position is; values are what gets mixed in. A layer's query "
             "turns keys into shares, and the shares weight the values. With two stored values, 10 and 30, "
             f"shares of {toy}: the values did not move, the mix did. So reused entries are not a reused answer. "
             "The three labels of the layers (table below) say which preparation a layer does itself; whatever "
             "the label, every layer still computes its own query, window keys and values, and attention output, "
             "and a Full layer, although it makes everything, still reads only the subset it selects.",
             frozenset({"Reuse"}), None, modes, read_along=read_along("Figure 4 in §2.3.1")),
        Step("encoder", "The left half: a causal encoder",
             f"The left column is the causal encoder: {enc_runs}. \"Causal\" means a row only ever sees "
             "positions up to its own, so its work on a prompt never has to be redone when more text arrives. "
             f"The bottom {f['n_swa']} layers only look at their window. Each Full layer (dark blue) packs "
             "its input into entries and picks some to read; the pale Reuse layers above it keep both the "
             "entries and the picks. " + fp4_sentence(cfg),
             frozenset({"encoder"}), None, read_along=read_along("§2.2 (the encoder-decoder) and §2.3 (CSA2)")),
        Step("line", "The line between the halves",
             f"The red line carries the encoder's final rows across. The decoder's first layer ({dec_first}, Full, "
             "ratio 1) turns each of those rows into one global entry, and every decoder layer reads from that same "
             "set. When a long prompt is read in bounded mode, most prompt positions stop at the top of the "
             f"left column: only the last {f['W']} rows climb the decoder. Every newly generated token still "
             "goes through both halves. " + bounded_note(cfg),
             frozenset({"line"}), "line", read_along=read_along("§2.2, and §3.2.2 for bounded replay")),
        Step("decoder", "The right half: a decoder over shared memory",
             f"The right column: {dec_runs}. Only its first layer ({dec_first}, Full) prepares global entries, "
             "from the encoder's final rows; no layer above it prepares them again. The Reindex layers (orange) "
             "keep those entries but choose again with their own indexer, and the Reuse layers keep the latest "
             "choice. Each decoder layer still has its own window, query, output and MoE.",
             frozenset({"decoder"}), None, read_along=read_along("§2.2 and Figure 4 in §2.3.1")),
        Step("repeat", "A frame drawn once stands for many layers",
             "The report's figure draws a repeated structure once, in a dotted frame with a count such as x5: the "
             "drawn structure occurs that many times in a row. A count does not say the copies share weights. "
             "In this model every copy "
             "is a separate layer with its own tensors; the Is this recurrence? page checks that on the real "
             "weights. The default drawing here gives every layer its own row and numbers the repeated groups "
             "1/n, 2/n, ...: switch on Compact to see the frames. In Compact mode the count inside a pale Reuse row "
             f"(x{rep_n}) is how many Reuse layers it stands for in each group, and the count beside a dotted frame"
             + (f" (x{outer.repeats})" if outer else "") + " is how many times the whole group repeats.",
             frozenset({"repeat"}), None, read_along=read_along("Figure 3")),
        Step("vision", "Images come in from the side",
             "Pictures do not go through the tokenizer. A separate network, the vision encoder, cuts an image "
             "into patches and turns them into rows of the same width as token rows; those rows take the place "
             "of image placeholder tokens and then climb the same stacks.",
             frozenset({"vision"}), "vision", read_along=read_along(None)),
        Step("moe", "MoE: pick which small networks run",
             "After attention, every layer transforms each row with a feed-forward network. Here that network "
             f"is a mixture: {f['shared']} shared expert that always runs plus {f['per_tok']} of "
             f"{f['experts']} routed experts chosen by a router for each row. The experts that are not chosen "
             "cost no arithmetic for that row but still take up memory.",
             frozenset({"moe"}), None, read_along=read_along("§4.2.1")),
        Step("engram", "Engram: look up a short pattern",
             f"At {engram}, the last few token ids (up to {f['ngram']} in a row) are hashed into addresses "
             "of large learned tables. The rows found there are gated into the state before attention runs. "
             "The lookup itself is only a few table rows per token, but projecting those rows into the streams "
             "is ordinary matrix work at each Engram layer, and the tables are large in memory: they hold "
             f"{big}{share}, learned like any other weight.",
             frozenset({"engram"}), None, read_along=read_along("§2.4.2")),
        Step("mhc", "mHC: several residual paths",
             f"A plain residual connection keeps one copy of each row and adds every update to it. Here each "
             f"row travels as {f['hc']} parallel streams (the thin grey lines). Before and after every "
             "attention and MoE site, mixing coefficients decide how the streams feed the sublayer and how they "
             "are blended again. The coefficients are not fixed numbers: learned projections (plus learned offsets) "
             "compute them for every token from the streams themselves. The single-pass form computes them once "
             "per site, serving that site and the next, to save memory traffic.",
             frozenset({"mhc"}), None, read_along=read_along("§2.4.1")),
        Step("pool", "Narrowing the search in two steps",
             f"At layer {cand}, the indexer scores every visible entry (this broad scan still costs work), groups "
             f"them in blocks of {f['pool_block']} and keeps the {f['pool_blocks']} best blocks: a pool of up to "
             f"{f['pool']:,} positions. Later Reindex layers pick their {f['topk']} entries only from inside that "
             "pool. An entry left out of the pool cannot be picked by them, however useful it would have been.",
             frozenset({"pool"}), None, read_along=read_along("§2.3.2")),
        Step("drafter", "DSpark: draft, then verify",
             f"A small drafter reads the states of layers {', '.join(str(n(i)) for i in f['targets'])} and drafts "
             f"several tokens at once. {block_sentence(f['draft_block'])} The main model then checks the drafted "
             "tokens in one pass and keeps them up to the first one its acceptance rule refuses (an exact match "
             "with its own top token under greedy decoding, a min(1, p/q) draw under sampling). So the output "
             "follows what the main model alone would produce (the same tokens under greedy decoding, the same "
             "distribution under sampling), and good drafts save sequential steps.",
             frozenset({"drafter"}), "drafter", read_along=read_along("§2.4.3")),
        Step("check", "Check the idea",
             "If a Reuse layer reads the same entries at the same positions as its source, why is its output "
             "different? Try to answer before opening the Attention shares page, where the answer is one click "
             "away. Then ask what would show that these shortcuts pay off: quality, time and memory compared at "
             "equal budgets, and ablations that switch one piece off. Two cautions while reading the release: "
             "image input, the Engram lookup, the mixing of residual streams and drafting are separate "
             "components, so a gain from one of them should not be credited to cache sharing; and the "
             "encoder-decoder split moves work between reading the prompt and writing the answer rather than "
             "making every token cheaper (each generated token still climbs both halves).",
             frozenset({"Reuse", "selects"}), None, read_along=read_along(None)),
    ]


# --------------------------------------------------------------------------------------------------
# What a box does, and what it did on a traced prompt
# --------------------------------------------------------------------------------------------------
def box_text(box: Box, cfg: V41Config, one_based: bool = False) -> str:
    f = facts(cfg)
    n = lambda i: _num(i, one_based)  # noqa: E731
    specs = layer_map(cfg)
    if box.kind == "attn":
        s = specs[box.layers[0]]
        many = len(box.layers) > 1
        head = (f"Stands for layers {', '.join(str(n(i)) for i in box.layers)}: one drawing, "
                f"{len(box.layers)} separate layers with their own weights. " if many else "")
        if s.role == "SWA":
            body = (f"Window-only attention: each row reads the last {f['W']} raw rows of this layer and nothing "
                    "packed; nothing older is read directly, only what those rows already carry from layers below.")
        elif s.role == "Full":
            pack = "one entry per token" if s.compress_ratio == 1 else f"one entry per {s.compress_ratio} tokens"
            src = (" Its input here is the encoder's final states, so the whole decoder reads memory the "
                   "encoder prepared." if s.stack == "decoder" else "")
            pool = (f" It also builds the candidate pool ({f['pool']:,} positions at most) for the Reindex layers "
                    "above." if s.candidate_source else "")
            body = (f"Full: makes its group's compressed entries ({pack}) and index keys, then its indexer picks "
                    f"up to {f['topk']} entries for each query. Plus its own {f['W']}-row window.{src}{pool}")
        elif s.role == "Reindex":
            body = (f"Reindex: keeps the entries of layer {n(s.kv_source)}, but runs its own indexer query to "
                    f"choose up to {f['topk']} of them again" + (", inside the candidate pool" if s.uses_candidates
                                                                  else "") + f". Plus its own {f['W']}-row window.")
        else:
            body = (f"Reuse: reads the entries layer {n(s.kv_source)} made, at the positions layer "
                    f"{n(s.index_source)} picked. Its query, window, output and MoE are its own, so the same "
                    "entries get new shares.")
        return head + body
    if box.kind == "moe":
        return (f"Mixture of experts: a router scores {f['experts']} routed experts for each row and runs the "
                f"best {f['per_tok']}, plus {f['shared']} shared expert that always runs. Present in every layer.")
    if box.kind == "engram":
        return (f"Engram: hashes of the last 2 to {f['ngram']} token ids address learned tables; a gate per "
                "stream decides how much of the looked-up row is added before attention. The lookup is a few rows "
                "per token; projecting them into the streams is ordinary matrix work; the tables are large in "
                "memory.")
    if box.kind == "mhc":
        return (f"{f['hc']} residual streams per row. At every site, `pre` coefficients collapse them into the "
                "sublayer's input, `post` coefficients write the output back, and a doubly stochastic `comb` matrix "
                "blends the streams. All three are computed for each token from the streams by learned "
                "projections.")
    if box.kind in ("line", "states"):
        return ("The encoder's final rows, one per token, carried into the decoder. The decoder's Full layer "
                "turns them into the global entries all decoder layers share, so old prompt positions do not have "
                "to climb the decoder.")
    if box.kind == "vision":
        return ("A separate image network: it cuts the picture into patches, encodes them, and hands the language "
                "model one row per image token, in place of the image placeholder tokens.")
    if box.kind == "embed":
        return "Looks up one learned row per token id; the row is copied into every mHC stream."
    if box.kind == "head":
        return "Collapses the streams, normalises, and scores every token of the vocabulary as the next one."
    if box.kind == "drafter":
        from .dspark import block_sentence

        return (f"DSpark: reads the states of layers {', '.join(str(n(i)) for i in f['targets'])} and drafts "
                f"several tokens in one go; the main model verifies them together. "
                + block_sentence(f['draft_block']))
    return ""


@dataclass
class LiveLayer:
    """Numbers from one layer of a trace, at one query position (plain Python, safe to cache)."""

    layer: int
    role: str
    position: int
    window_rows: int
    entries_stored: int | None
    entries_visible: int | None
    entries_selected: int | None
    selection_here: bool
    pool: int | None
    shares: dict              # mean over heads: window / entries / sink
    experts: list[int]
    expert_weights: list[float]
    engram_gate: list[float] | None
    comb: list[list[float]] | None
    lens: list[tuple[int, float]]


def live_layer(trace, layer: int, position: int | None = None) -> LiveLayer:
    rec = trace.layers[layer]
    s = rec.spec
    pos = int(rec.positions[-1]) if position is None else position
    row = rec.row(pos)
    if row is None:
        raise ValueError(f"layer {layer} did not process position {pos}")
    sh = rec.shares
    w = sh.window.shape[-1]
    stored = visible = selected = pool = None
    if s.compress_ratio:
        stored = trace.layers[s.kv_source].source_len
        visible = min((pos + 1) // s.compress_ratio, stored)
        selected = int((sh.entry_ids[0, row] >= 0).sum())
        if rec.index_scores is not None and (s.candidate_source or s.uses_candidates):
            pool = int(torch.isfinite(rec.index_scores[0, row]).sum())
    shares = {"window": float(sh.window[0, row].sum(-1).mean()), "entries": float(sh.entries[0, row].sum(-1).mean()),
              "sink": float(sh.sink[0, row].mean())}
    lens = rec.lens_at(row)
    return LiveLayer(
        layer=layer, role=s.role, position=pos, window_rows=min(w, pos + 1), entries_stored=stored,
        entries_visible=visible, entries_selected=selected, selection_here=rec.topk is not None, pool=pool,
        shares=shares, experts=[int(e) for e in rec.router_experts[0, row].tolist()],
        expert_weights=[float(x) for x in rec.router_weights[0, row].tolist()],
        engram_gate=None if rec.engram_gate is None else [float(g) for g in rec.engram_gate[0, row].tolist()],
        comb=None if rec.hc_attn is None else [[float(v) for v in r] for r in rec.hc_attn.comb[0, row].tolist()],
        lens=lens)


def sample_image(size: int = 64):
    """A small synthetic picture (four coloured quadrants and a diagonal) for the vision box."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (size, size), (240, 240, 240))
    d = ImageDraw.Draw(img)
    h = size // 2
    for (x, y), c in zip([(0, 0), (h, 0), (0, h), (h, h)], [(200, 60, 60), (60, 140, 200), (70, 170, 90),
                                                             (230, 190, 60)]):
        d.rectangle([x, y, x + h - 1, y + h - 1], fill=c)
    d.line([0, 0, size - 1, size - 1], fill=(20, 20, 20), width=max(1, size // 16))
    return img
