"""Plotly figures for the Memory pages (no Streamlit here): bytes by kind, bytes by layer, designs side by side,
and a layer-role strip per design."""

from __future__ import annotations

import math
import re
from typing import Mapping, Sequence

import plotly.graph_objects as go

from lessons.cache_calculator import KIND_LABELS, KINDS, CacheResult, Design, layer_label
from lessons.units import BINARY, human_bytes
from ui.axes import bar_mode
from ui.figures import ROLE_COLORS

KIND_COLORS = {
    "window": "#9aa5b1", "latents": "#1f77b4", "kv": "#d62728", "index_keys": "#ff7f0e", "block_scales": "#bcbd22",
    "pending": "#8c564b", "recurrent_state": "#2ca02c", "drafter": "#9467bd", "replay_input": "#e377c2",
}
# every role its own colour, so that the strip's legend names one role per colour; V4.1's roles keep the layer
# map's colours (ROLE_COLORS), and a layer that reads another's copy is a lighter shade of its owner's colour
EXTRA_ROLE_COLORS = {
    "Drafter": "#9467bd", "CSA (ratio 4)": "#08306b", "HCA (ratio 128)": "#17becf", "MLA + indexer": "#00665e",
    "Own copy": "#d62728", "Shares copy": "#f4a6a6", "Local": "#e6c200", "Local (shared K/V)": "#f5e6a1",
    "Global": "#7a0177", "Global (shared K/V)": "#d4a5d9", "Sparse attention (K/V)": "#e7298a",
    "Gated DeltaNet (state)": "#2ca02c", "Block layer 0": "#543005", "Block layer 1": "#8c510a",
    "Block layer 2": "#bf812d", "Block layer 3": "#dfc27d",
}
# a legend placed from the figure's bottom edge: Plotly then widens the bottom margin to hold it under the x axis
# title (placed from the plot, at y=-0.25, it ran into the title, and wrapped into the plot when narrow)
UNDER_AXIS_TITLE = dict(orientation="h", yref="container", y=0, yanchor="bottom", x=0, xanchor="left")


def chart_config(fmt: str = "png", filename: str = "cache") -> dict:
    """Plotly modebar options: the camera button downloads the chart client-side as PNG or SVG."""
    return {"displaylogo": False, "toImageButtonOptions": {"format": fmt, "filename": filename, "scale": 2}}


def _stacks(stacks: Sequence[dict[str, int]]) -> list[int]:
    """The bytes a log axis must span for stacked bars: each bar's bottom segment and its total."""
    return [v for s in stacks for v in (next((s[k] for k in KINDS if s.get(k)), 0), sum(s.values()))]


def _parts(stacks: Sequence[dict[str, int]]) -> list[int]:
    """The bytes a log axis must span for bars side by side: every non-zero part."""
    return [v for s in stacks for v in s.values() if v]


def byte_ticks(values: Sequence[float], log: bool = False) -> dict:
    """Axis ticks that read bytes in binary units, as every byte label on these pages does (Plotly's own ticks are
    SI: "8M" beside "8.00 MiB"), for an axis spanning `values`. Log axes: powers of two, a step of 1, 2, 5, 10 or
    20 doublings so that 1 KiB, 1 MiB and 1 GiB are ticks; linear axes: at most 7 steps of 1, 2 or 5 x 10^k of the
    largest value's unit."""
    vals = [v for v in values if v > 0]
    if not vals:
        return {}
    top = max(vals)
    if log:
        lo, hi = math.floor(math.log2(min(vals))) - 1, math.ceil(math.log2(top)) + 1
        step = next((s for s in (1, 2, 5, 10) if (hi - lo) / s <= 10), 20)
        ticks = [2.0 ** e for e in range(lo - lo % step, hi + 1, step)]
    else:
        f = next((f for _, f in BINARY if top >= f), 1)
        span = top / f
        size = 10.0 ** (math.floor(math.log10(span)) - 1)
        step = next(m * size for m in (1, 2, 5, 10, 20, 50, 100) if span / (m * size) <= 7 and m * size * f >= 1)
        ticks = [i * step * f for i in range(int(span / step) + 1)]
    return dict(tickmode="array", tickvals=ticks, ticktext=[human_bytes(t, ",.4g") if t else "0" for t in ticks])


def kind_bar(res: CacheResult, title: str) -> go.Figure:
    kinds = [k for k in KINDS if res.by_kind.get(k, 0)]
    vals = [res.by_kind[k] for k in kinds]
    fig = go.Figure(go.Bar(x=vals, y=[KIND_LABELS[k] for k in kinds], orientation="h",
                           marker_color=[KIND_COLORS[k] for k in kinds], text=[human_bytes(v) for v in vals],
                           textposition="auto", hovertemplate="%{y}: %{x:,} bytes<extra></extra>"))
    fig.update_layout(title=title, xaxis=dict(title="bytes", **byte_ticks(vals)), height=80 + 44 * max(1, len(kinds)),
                      margin=dict(l=10, r=20, t=50, b=40), yaxis=dict(autorange="reversed"))
    return fig


def layer_bar(res: CacheResult, labels: Mapping[int, str], title: str, log: bool = False) -> go.Figure:
    """Bytes per layer holding a stored copy, stacked by kind; `labels` names each layer (a mapping, not a function,
    so that `ui.cache.built` keys the figure by the names it shows)."""
    layers = list(res.by_layer)
    xs = [labels[i] for i in layers]
    fig = go.Figure()
    for k in KINDS:
        ys = [res.by_layer[i].get(k, 0) for i in layers]
        if any(ys):
            fig.add_bar(x=xs, y=ys, name=KIND_LABELS[k], marker_color=KIND_COLORS[k],
                        hovertemplate="%{x}: %{y:,} bytes<extra>" + KIND_LABELS[k] + "</extra>")
    stacks = list(res.by_layer.values())
    fig.update_layout(barmode=bar_mode(True, log), title=title, xaxis_title="layer holding the stored copy",
                      yaxis=dict(title="bytes", type="log" if log else "linear",
                                 **byte_ticks(_parts(stacks) if log else _stacks(stacks), log)),
                      height=420, margin=dict(l=10, r=10, t=50, b=10), xaxis=dict(type="category"),
                      legend=UNDER_AXIS_TITLE)
    return fig


def compare_bar(results: Sequence[tuple[str, CacheResult]], title: str, log: bool = False) -> go.Figure:
    names = [n for n, _ in results]
    fig = go.Figure()
    for k in KINDS:
        ys = [r.by_kind.get(k, 0) for _, r in results]
        if any(ys):
            fig.add_bar(x=names, y=ys, name=KIND_LABELS[k], marker_color=KIND_COLORS[k],
                        hovertext=[human_bytes(y) for y in ys], hovertemplate="%{x}<br>%{hovertext}<extra>"
                        + KIND_LABELS[k] + "</extra>")
    stacks = [r.by_kind for _, r in results]
    fig.update_layout(barmode=bar_mode(True, log), title=title, height=420, margin=dict(l=10, r=10, t=50, b=40),
                      yaxis=dict(title="bytes on the accelerator", type="log" if log else "linear",
                                 **byte_ticks(_parts(stacks) if log else _stacks(stacks), log)),
                      legend=dict(orientation="h", y=-0.2))
    return fig


def _numbered(role: str, one_based: bool) -> str:
    """A role that names a layer inside a repeated block ("Block layer 0") in the reader's numbering."""
    m = re.fullmatch(r"(Block layer )(\d+)", role)
    return f"{m.group(1)}{int(m.group(2)) + one_based}" if m else role


def role_strip(designs: Sequence[Design], one_based: bool = False) -> go.Figure:
    """One row per design, one square per layer, coloured by what the layer stores or shares."""
    colors = {**ROLE_COLORS, **EXTRA_ROLE_COLORS}
    fig = go.Figure()
    seen: set[str] = set()
    for row, d in enumerate(designs):
        by_role: dict[str, list[int]] = {}
        for i, role in enumerate(d.roles):
            by_role.setdefault(role, []).append(i)
        for role, idx in by_role.items():
            color = colors.get(role, "#e377c2")
            shown = _numbered(role, one_based)
            text = [f"{d.label}<br>{'' if i in d.layer_names else 'layer '}{layer_label(d, i, one_based)}: {shown}"
                    for i in idx]
            fig.add_scatter(x=[i + one_based for i in idx], y=[d.label] * len(idx), mode="markers", name=shown,
                            legendgroup=role, showlegend=role not in seen, text=text, hoverinfo="text",
                            marker=dict(symbol="square", size=11, color=color, line=dict(width=0.5, color="#444")))
            seen.add(role)
    # room for the legend as a narrow page wraps it (about two names a row), so that it does not scroll
    legend_rows = math.ceil(len(seen) / 2)
    fig.update_layout(title="Layer roles: what each layer stores or shares",
                      height=120 + 60 * len(designs) + 22 * legend_rows,
                      xaxis_title="layer (" + ("1-based" if one_based else "0-based") + ")",
                      yaxis=dict(autorange="reversed", type="category"), margin=dict(l=10, r=10, t=50, b=10),
                      legend={**UNDER_AXIS_TITLE, "maxheight": 0.7})
    return fig


def pair_bar(labels: Sequence[str], values: Sequence[float], title: str, text: Sequence[str],
             colors: Sequence[str] = ("#1f77b4", "#ff7f0e")) -> go.Figure:
    fig = go.Figure(go.Bar(x=list(labels), y=list(values), text=list(text), textposition="auto",
                           marker_color=list(colors)[: len(labels)]))
    fig.update_layout(title=title, height=300, margin=dict(l=10, r=10, t=50, b=30))
    return fig


def waterfall_figure(steps, title: str) -> go.Figure:
    """V4-Flash -> V4.1 bytes per token, one change at a time (lessons.designs.v4_to_v41_waterfall)."""
    measure = ["absolute"] + ["relative"] * (len(steps) - 1) + ["total"]
    x = [s.step for s in steps] + ["DeepSeek-V4.1-Flash"]
    y = [steps[0].bytes_per_token] + [s.change for s in steps[1:]] + [steps[-1].bytes_per_token]
    text = [f"{steps[0].bytes_per_token:,.0f} B"] + [f"{s.change:+,.0f} B" for s in steps[1:]] + \
        [f"{steps[-1].bytes_per_token:,.0f} B"]
    fig = go.Figure(go.Waterfall(x=x, y=y, measure=measure, text=text, textposition="outside",
                                 connector={"line": {"color": "#999999"}}))
    fig.update_layout(title=title, yaxis_title="bytes per token (growing part)", height=380,
                      margin=dict(l=10, r=10, t=50, b=40), showlegend=False)
    return fig
