"""The Figure 3 drawing: boxes, lines and labels laid out from `layer_map(cfg)`, and picking a box.

Follows docs/design/architecture.md §2 (layer map). The same function lays out the released 40-layer
config and the running tiny model; lessons/figure3.py tells the story over it and says what each box
does. No Streamlit or Plotly here: boxes are plain coordinates (ui/figures.py draws them).
"""

from __future__ import annotations

from dataclasses import dataclass

from model import LayerSpec, V41Config, layer_map

from .layers import Run, stack_runs

KIND_COLORS = {"vision": "#c9b3e6", "embed": "#dddddd", "states": "#eeeeee", "head": "#dddddd",
               "moe": "#b7dfb2", "engram": "#f6cf86", "drafter": "#f3a9a9", "mhc": "#ffffff", "line": "#ffffff"}
ROLE_FILL = {"SWA": "#aab4be", "Full": "#2f7fc1", "Reuse": "#a9cbe8", "Reindex": "#f08a24"}

# geometry (plot units): encoder column starts at x=0, decoder column at DEC_X
ATTN_W, MOE_W, GAP, DEC_X, ROW = 6.2, 2.0, 0.2, 16.0, 1.0
BOX_H = 0.78
ENGRAM_W = 4.0     # room for "layer 14 only" in Compact mode (about 15 px a unit at 1400 px wide)
TALL = 0.9         # height of the boxes whose label takes two lines


@dataclass
class Box:
    id: str
    kind: str                  # vision | embed | states | attn | moe | engram | mhc | line | head | drafter
    label: str                 # "\n" breaks a line where the drawing's box is too narrow for one
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
            lab = "Engram" + (f"\nlayer {which} only" if len(layer_ids) > len(eng) else "")
            boxes.append(Box(f"engram:{eng[0]}", "engram", lab, x - 0.3 - ENGRAM_W, y - BOX_H / 2, x - 0.3,
                             y + BOX_H / 2, tuple(eng), frozenset({"engram", spec.stack}), KIND_COLORS["engram"], False,
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
    # (labels too long for a box's width take two lines, in boxes TALL high)
    boxes.append(Box("embed", "embed", "token embedding\n(ids to rows)", 0, -0.6 - TALL, right, -0.6, (),
                     frozenset({"embed", "encoder", "job"}), KIND_COLORS["embed"]))
    boxes.append(Box("vision", "vision", "vision\nencoder", 0, -2.1 - TALL, 4.0, -2.1, (),
                     frozenset({"vision"}), KIND_COLORS["vision"]))
    labels.append(Label(6.0, -2.55, "text tokens", "center", 11))
    lines.append(Line([2.0, 2.0], [-2.1, -1.5], "#6a4fa0", arrow=True))
    lines.append(Line([6.0, 6.0], [-2.35, -1.5], "#444444", arrow=True))
    lines.append(Line([right / 2, right / 2], [-0.6, -0.45], "#444444", arrow=True))
    # mHC streams beside each stack: hc_mult thin lines
    for stack, (y0, y1) in mhc_rows.items():
        x = col_x[stack] + right + 1.35  # right of the frame labels
        n = cfg.hc_mult
        for k in range(n):
            lines.append(Line([x + 0.22 * k, x + 0.22 * k], [y0 - 0.6, y1 + 0.1], "#7a7a7a", width=1.2))
        # under the streams, leaning right: the embedding box ends just left of them
        boxes.append(Box(f"mhc:{stack}", "mhc", f"mHC:\n{n} streams", x - 0.4, y0 - 0.7 - TALL, x + 2.6,
                         y0 - 0.7, (), frozenset({"mhc", stack}), KIND_COLORS["mhc"]))
    # the line: encoder's final states carried across into the decoder
    if "decoder" in tops:
        mid = DEC_X - 1.7
        lines.append(Line([right / 2, right / 2, mid, mid, DEC_X], [enc_top, enc_top + 0.7, enc_top + 0.7, -1.0, -1.0],
                          "#c0392b", width=2.4, arrow=True))
        boxes.append(Box("states", "states", "encoder's final states", DEC_X, -0.6 - TALL, DEC_X + right, -0.6,
                         (), frozenset({"line", "decoder"}), KIND_COLORS["states"]))
        # beside the red line, not on it: the line would cross out the label
        boxes.append(Box("line", "line", "states\ngo across", mid - 3.6, enc_top / 2 - TALL / 2, mid - 0.4,
                         enc_top / 2 + TALL / 2, (), frozenset({"line"}), "#fbe3e0"))
        lines.append(Line([DEC_X + right / 2, DEC_X + right / 2], [-0.6, -0.45], "#444444", arrow=True))
    top_x = DEC_X if "decoder" in tops else 0.0
    top_y = dec_top if "decoder" in tops else enc_top
    head_top = top_y + 0.25 + TALL
    boxes.append(Box("head", "head", "norm + head:\nnext-token scores", top_x, top_y + 0.25, top_x + right,
                     head_top, (), frozenset({"head", "job"}), KIND_COLORS["head"]))
    lines.append(Line([top_x + right / 2, top_x + right / 2], [top_y - 0.1, top_y + 0.25], "#444444", arrow=True))
    # DSpark drafter fed by its target layers' attention inputs
    targets = [i for i in cfg.dspark_target_layer_ids if i in row_of]
    if cfg.num_nextn_predict_layers and targets:
        dx0 = top_x + right + 2.6
        ys = [row_of[i] for i in targets]
        y0, y1 = min(ys) - BOX_H / 2, max(max(ys) + BOX_H / 2, head_top)
        boxes.append(Box("drafter", "drafter", "DSpark\ndrafter", dx0, y0, dx0 + 3.6, y1, tuple(targets),
                         frozenset({"drafter"}), KIND_COLORS["drafter"]))
        for yy in sorted(set(ys)):
            lines.append(Line([top_x + right + 2.15, dx0], [yy, yy], "#b03a3a", "dot", 1.3, arrow=True))
    x_lo = -ENGRAM_W - 0.6
    x_hi = (top_x + right + 6.6) if targets else DEC_X + right + 4.3   # the drafter, else the mHC box
    return Diagram(boxes, lines, labels, (x_lo, x_hi), (-3.25, max(enc_top, head_top) + 0.7), compact,
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
            out[bid] = b.label.replace("\n", " ")
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
