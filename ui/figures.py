"""Plotly figure builders shared by the pages (no Streamlit here): one function per recurring figure."""

from __future__ import annotations

import plotly.graph_objects as go

from lessons.inspector import visible_chars
from ui.axes import axis_for, bar_mode, share_axis

ROLE_COLORS = {"SWA": "#9aa5b1", "Full": "#1f77b4", "Reuse": "#8fbbe0", "Reindex": "#ff7f0e"}
ROLE_LETTERS = {"SWA": "W", "Full": "F", "Reuse": "R", "Reindex": "Ri"}


def show_token(t: str) -> str:
    """A token as text that survives display: spaces and control characters made visible, ∅ for an empty one."""
    return visible_chars(t, spaces=True) or "\u2205"


def top_tokens_bar(table, title: str = "Next-token probability") -> go.Figure:
    """The home page's bars. Built from one spec in one step (validated as usual): it is drawn after every batched
    prompt run, once per visitor, and the step-by-step form (update_layout) costs four times as long."""
    labels = [f"{show_token(t)}  ({i})" for t, i in zip(table.tokens, table.ids)]
    # the whole 0-100% (a 1% bar must not look full), with room for the top bar's label
    return go.Figure(dict(
        data=[dict(type="bar", x=table.probs[::-1], y=labels[::-1], orientation="h",
                   text=[f"{p:.1%}" for p in table.probs[::-1]], textposition="outside", marker=dict(color="#1f77b4"))],
        layout=dict(title=dict(text=title), height=36 * len(labels) + 120, margin=dict(l=10, r=40, t=50, b=40),
                    xaxis=share_axis("probability", headroom=0.15),
                    yaxis=dict(title=dict(text="")))))


# --------------------------------------------------------------------------------------------------
# Shared drawings: box diagram (Figure 3), layer map strip, attention-share heatmap, bars, byte bars
# --------------------------------------------------------------------------------------------------
def fmt_bytes(n: float) -> str:
    """1536 -> '1.5 KiB' (binary units, as the cache formulas use)."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.3g} {unit}"
        n /= 1024
    return f"{n:.3g} TiB"


def diagram_figure(diagram, focus_tags=frozenset(), selected: str | None = None, height: int = 820,
                   pick_kinds=None) -> go.Figure:
    """Draw a box diagram (e.g. `lessons.figure3_layout.layout`): boxes as shapes with their labels, lines with
    optional arrows, free labels. Boxes whose tags meet `focus_tags` stay bright, the rest fade (no
    fading when `focus_tags` is empty); `selected` gets a thick outline. One marker per pickable box
    carries its id in `customdata`, so a plotly selection event names the box; it sits where no label is:
    left of an attention box's label, on the top right corner of any other box. Shapes and annotations
    are passed in one layout update (adding them one by one costs milliseconds each)."""
    focus_tags = frozenset(focus_tags)
    shapes, notes, traces = [], [], []
    for ln in diagram.lines:
        traces.append(go.Scatter(x=ln.xs, y=ln.ys, mode="lines", hoverinfo="skip", showlegend=False,
                                 line=dict(color=ln.color, width=ln.width, dash=ln.dash)))
        if ln.arrow and len(ln.xs) >= 2:
            notes.append(dict(x=ln.xs[-1], y=ln.ys[-1], ax=ln.xs[-2], ay=ln.ys[-2], xref="x", yref="y",
                              axref="x", ayref="y", showarrow=True, arrowhead=2, arrowsize=1.1,
                              arrowwidth=ln.width, arrowcolor=ln.color, text=""))
    px, py, pid, phover = [], [], [], []
    for b in diagram.boxes:
        lit = not focus_tags or bool(b.tags & focus_tags)
        sel = b.id == selected
        frame = b.kind == "frame"
        shapes.append(dict(type="rect", x0=b.x0, y0=b.y0, x1=b.x1, y1=b.y1, layer="below" if frame else "above",
                           fillcolor=b.fill, opacity=1.0 if lit else 0.28,
                           line=dict(color="#d62728" if sel else ("#555555" if frame else "#333333"),
                                     width=3.5 if sel else (1.3 if frame else 0.8),
                                     dash="dot" if b.dash else "solid")))
        if b.label:
            left = b.kind == "attn"
            # a two-line label, or a long one ("20  Full r1 +pool"): a size smaller, to fit its box
            two = "\n" in b.label or len(b.label) > 15
            notes.append(dict(x=b.x0 + 0.55 if left else (b.x0 + b.x1) / 2, y=(b.y0 + b.y1) / 2,
                              text=b.label.replace("\n", "<br>"), showarrow=False,
                              xanchor="left" if left else "center",
                              font=dict(size=10 if two else 11, color="#111111" if lit else "#9a9a9a")))
        if not frame and (pick_kinds is None or b.kind in pick_kinds):
            px.append(b.x0 + 0.25 if b.kind == "attn" else b.x1)
            py.append((b.y0 + b.y1) / 2 if b.kind == "attn" else b.y1)
            pid.append(b.id)
            phover.append(b.hover or b.label.replace("\n", " "))
    for lb in diagram.labels:
        notes.append(dict(x=lb.x, y=lb.y, text=lb.text, showarrow=False, xanchor=lb.anchor,
                          font=dict(size=lb.size, color=lb.color)))
    traces.append(go.Scatter(x=px, y=py, mode="markers", customdata=pid, hovertext=phover, hoverinfo="text",
                             showlegend=False, name="boxes", cliponaxis=False,
                             marker=dict(size=8, color="#222222", opacity=0.45, symbol="circle"),
                             selected=dict(marker=dict(color="#d62728", opacity=1.0)),
                             unselected=dict(marker=dict(opacity=0.45))))
    return go.Figure(data=traces, layout=dict(
        height=height, margin=dict(l=5, r=5, t=10, b=5), plot_bgcolor="white", shapes=shapes, annotations=notes,
        xaxis=dict(range=list(diagram.x_range), visible=False, fixedrange=True),
        yaxis=dict(range=list(diagram.y_range), visible=False, fixedrange=True),
        dragmode=False, clickmode="event+select", hovermode="closest"))


def diagram_pick_ids(diagram, pick_kinds=None) -> list[str]:
    """The box ids in the order `diagram_figure` gives their markers (point index -> box id)."""
    return [b.id for b in diagram.boxes if b.kind != "frame" and (pick_kinds is None or b.kind in pick_kinds)]


def layer_map_figure(maps, one_based: bool = False, highlight: int | None = None) -> go.Figure:
    """One strip of coloured cells per config: `maps` is [(name, list[LayerSpec])]. Cells show the
    role initial; Engram layers are marked with a gold outline; hover tells the full story. The cells are
    drawn between the gridlines and the traces, so the letters (a text trace) stay on top of them."""
    fig = go.Figure()
    names = [name for name, _ in maps]
    shapes = []  # one layout update: add_shape one at a time is quadratic
    for row, (name, specs) in enumerate(maps):
        for s in specs:
            x = s.index + (1 if one_based else 0)
            shapes.append(dict(type="rect", x0=x - 0.45, x1=x + 0.45, y0=row - 0.38, y1=row + 0.38, layer="between",
                               fillcolor=ROLE_COLORS.get(s.role, "#cccccc"),
                               line=dict(color="#d62728" if s.index == highlight else ("#e0a000" if s.engram
                                                                                      else "#ffffff"),
                                         width=3 if (s.engram or s.index == highlight) else 1)))
        xs = [s.index + (1 if one_based else 0) for s in specs]
        fig.add_trace(go.Scatter(
            x=xs, y=[row] * len(specs), mode="text", text=[ROLE_LETTERS.get(s.role, "?") for s in specs],
            # white on the dark Full cells, near black on the pale ones
            textfont=dict(size=11, color=["#ffffff" if s.role == "Full" else "#111111" for s in specs]),
            showlegend=False,
            hovertext=[f"{name} layer {x}: {s.stack}, {s.role}, ratio {s.compress_ratio}"
                       + (f", KV from {s.kv_source + (1 if one_based else 0)}" if s.kv_source is not None else "")
                       + (", Engram" if s.engram else "") for x, s in zip(xs, specs)], hoverinfo="text"))
        dec = [s.index for s in specs if s.stack == "decoder"]
        if dec:
            xb = dec[0] + (1 if one_based else 0) - 0.5
            shapes.append(dict(type="line", x0=xb, x1=xb, y0=row - 0.5, y1=row + 0.5,
                               line=dict(color="#c0392b", width=3)))
    n_max = max((len(specs) for _, specs in maps), default=1)
    first = 1 if one_based else 0
    fig.update_layout(height=70 + 60 * len(maps), margin=dict(l=10, r=10, t=30, b=30), plot_bgcolor="white",
                      shapes=shapes,
                      xaxis=dict(range=[first - 0.6, first + n_max - 0.4], title="layer", dtick=2 if n_max > 20 else 1,
                                 fixedrange=True),
                      yaxis=dict(tickvals=list(range(len(names))), ticktext=names, range=[-0.6, len(names) - 0.4],
                                 fixedrange=True),
                      title=dict(text="W window-only · F Full · R Reuse · Ri Reindex · gold edge: Engram · "
                                      "red bar: decoder starts", font=dict(size=12)))
    return fig


def share_heatmap(z, x_labels, y_labels, title: str = "Attention shares", kinds=None,
                  zmax: float | None = None) -> go.Figure:
    """Rows (e.g. heads) by columns (window rows, selected entries, sink); `kinds` per column draws
    separators between the groups."""
    fig = go.Figure(go.Heatmap(z=z, x=list(range(len(x_labels))), y=list(range(len(y_labels))),
                               customdata=[[xl for xl in x_labels] for _ in y_labels], colorscale="Blues",
                               zmin=0, zmax=zmax, colorbar=dict(title="share"),
                               hovertemplate="%{customdata}<br>share %{z:.3f}<extra></extra>"))
    if kinds:
        for j in range(1, len(kinds)):
            if kinds[j] != kinds[j - 1]:
                fig.add_vline(x=j - 0.5, line=dict(color="#d62728", width=2))
    fig.update_layout(title=title, height=140 + 34 * len(y_labels), margin=dict(l=10, r=10, t=50, b=10),
                      xaxis=dict(tickvals=list(range(len(x_labels))), ticktext=list(x_labels), tickangle=-60,
                                 tickfont=dict(size=9)),
                      yaxis=dict(tickvals=list(range(len(y_labels))), ticktext=list(y_labels), autorange="reversed"))
    return fig


def grouped_bars(categories, series: dict, title: str = "", yaxis_title: str = "", text_fmt: str = "{:.3f}",
                 height: int = 360) -> go.Figure:
    """Side-by-side bars: one group per category, one bar per named series."""
    fig = go.Figure()
    for name, vals in series.items():
        fig.add_trace(go.Bar(x=list(categories), y=list(vals), name=name, text=[text_fmt.format(v) for v in vals],
                             textposition="outside"))
    fig.update_layout(barmode="group", title=title, yaxis=axis_for(yaxis_title, headroom=0.15), height=height,
                      margin=dict(l=10, r=10, t=50, b=10), legend=dict(orientation="h", y=1.02, x=1, xanchor="right"))
    return fig


def two_places(v: float) -> str:
    """A share as a bar label: 0.85."""
    return f"{v:.2f}"


def stacked_bars(labels, parts: dict, title: str = "", axis_title: str = "", text_fmt=None,
                 horizontal: bool = True, height: int | None = None) -> go.Figure:
    """Stacked bars: one bar per label, one segment per named part (values in the same unit)."""
    fig = go.Figure()
    fmt = text_fmt or (lambda v: f"{v:g}")
    for name, vals in parts.items():
        vals = list(vals)
        kw = dict(x=vals, y=list(labels), orientation="h") if horizontal else dict(x=list(labels), y=vals)
        fig.add_trace(go.Bar(name=name, text=[fmt(v) if v else "" for v in vals], textposition="inside",
                             hovertemplate=f"{name}: %{{text}}<extra></extra>", **kw))
    # the legend sits above the plot, under the title (anchored at its bottom, it never covers the first bar)
    fig.update_layout(barmode=bar_mode(True, False), title=title, height=height or (110 + 42 * len(labels)),
                      margin=dict(l=10, r=10, t=70, b=30),
                      legend=dict(orientation="h", y=1.0, yanchor="bottom", x=1, xanchor="right"))
    if horizontal:
        fig.update_layout(xaxis=axis_for(axis_title), yaxis=dict(autorange="reversed"))
    else:
        fig.update_layout(yaxis=axis_for(axis_title))
    return fig


def byte_bars(labels, by_kind: dict, title: str = "Bytes", horizontal: bool = True) -> go.Figure:
    """Stacked byte counts by kind (window, latents, index keys, ...) with human-readable labels."""
    return stacked_bars(labels, by_kind, title=title, axis_title="bytes", text_fmt=fmt_bytes, horizontal=horizontal)
