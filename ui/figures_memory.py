"""Plotly figures for the Memory pages (no Streamlit here): bytes by kind, bytes by layer, designs side by side,
and a layer-role strip per design."""

from __future__ import annotations

import re
from typing import Callable, Sequence

import plotly.graph_objects as go

from lessons.calculator import KIND_LABELS, KINDS, CacheResult, Design
from lessons.units import human_bytes
from ui.figures import ROLE_COLORS

KIND_COLORS = {
    "window": "#9aa5b1", "latents": "#1f77b4", "kv": "#d62728", "index_keys": "#ff7f0e", "block_scales": "#bcbd22",
    "pending": "#8c564b", "recurrent_state": "#2ca02c", "drafter": "#9467bd", "replay_input": "#e377c2",
}
EXTRA_ROLE_COLORS = {
    "Drafter": "#9467bd", "CSA (ratio 4)": "#3b4cc0", "HCA (ratio 128)": "#17becf", "MLA + indexer": "#d62728",
    "Own copy": "#d62728", "Shares copy": "#f4a6a6", "Local": "#9aa5b1", "Global": "#d62728",
    "Local (shared K/V)": "#cfd5db", "Global (shared K/V)": "#f4a6a6", "Sparse attention (K/V)": "#d62728",
    "Gated DeltaNet (state)": "#2ca02c", "Block layer 0": "#6a3d9a", "Block layer 1": "#9e7cc1",
    "Block layer 2": "#c2a5cf", "Block layer 3": "#e7d4e8",
}


def chart_config(fmt: str = "png", filename: str = "cache") -> dict:
    """Plotly modebar options: the camera button downloads the chart client-side as PNG or SVG."""
    return {"displaylogo": False, "toImageButtonOptions": {"format": fmt, "filename": filename, "scale": 2}}


def kind_bar(res: CacheResult, title: str) -> go.Figure:
    kinds = [k for k in KINDS if res.by_kind.get(k, 0)]
    vals = [res.by_kind[k] for k in kinds]
    fig = go.Figure(go.Bar(x=vals, y=[KIND_LABELS[k] for k in kinds], orientation="h",
                           marker_color=[KIND_COLORS[k] for k in kinds], text=[human_bytes(v) for v in vals],
                           textposition="auto", hovertemplate="%{y}: %{x:,} bytes<extra></extra>"))
    fig.update_layout(title=title, xaxis_title="bytes", height=80 + 44 * max(1, len(kinds)),
                      margin=dict(l=10, r=20, t=50, b=40), yaxis=dict(autorange="reversed"))
    return fig


def layer_bar(res: CacheResult, label: Callable[[int], str], title: str, log: bool = False) -> go.Figure:
    layers = list(res.by_layer)
    xs = [label(i) for i in layers]
    fig = go.Figure()
    for k in KINDS:
        ys = [res.by_layer[i].get(k, 0) for i in layers]
        if any(ys):
            fig.add_bar(x=xs, y=ys, name=KIND_LABELS[k], marker_color=KIND_COLORS[k],
                        hovertemplate="%{x}: %{y:,} bytes<extra>" + KIND_LABELS[k] + "</extra>")
    fig.update_layout(barmode="stack", title=title, xaxis_title="layer holding the stored copy", yaxis_title="bytes",
                      yaxis_type="log" if log else "linear", height=380, margin=dict(l=10, r=10, t=50, b=40),
                      xaxis=dict(type="category"), legend=dict(orientation="h", y=-0.25))
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
    fig.update_layout(barmode="stack", title=title, yaxis_title="bytes on the accelerator",
                      yaxis_type="log" if log else "linear", height=420, margin=dict(l=10, r=10, t=50, b=40),
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
            text = [f"{d.label}<br>{d.layer_names.get(i, 'layer ' + str(i + one_based))}: {shown}" for i in idx]
            fig.add_scatter(x=[i + one_based for i in idx], y=[d.label] * len(idx), mode="markers", name=shown,
                            legendgroup=role, showlegend=role not in seen, text=text, hoverinfo="text",
                            marker=dict(symbol="square", size=11, color=color, line=dict(width=0.5, color="#444")))
            seen.add(role)
    fig.update_layout(title="Layer roles: what each layer stores or shares", height=120 + 60 * len(designs),
                      xaxis_title="layer (" + ("1-based" if one_based else "0-based") + ")",
                      yaxis=dict(autorange="reversed", type="category"), margin=dict(l=10, r=10, t=50, b=40),
                      legend=dict(orientation="h", y=-0.35))
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
