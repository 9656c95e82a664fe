"""Plotly figures for "Where the time goes" (no Streamlit here): the roofline of several chips with workloads placed
under the chosen one."""

from __future__ import annotations

import math
from typing import Sequence

import plotly.graph_objects as go

from lessons.roofline import Chip
from ui.axes import log_axis, si_text

Point = tuple[str, float, float, str]      # (label, FLOP/byte, FLOP/s, what the hover adds)

CHIP_COLORS = {"h100": "#1f77b4", "h200": "#2ca02c", "b200": "#9467bd", "here": "#7f7f7f"}
POINT_COLORS = ("#d62728", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")


def roofline_figure(chips: Sequence[Chip], chosen: str, points: Sequence[Point],
                    title: str = "Roofline: where each workload sits under each chip's roof",
                    ceiling: tuple[str, float] | None = None) -> go.Figure:
    """Log-log: attainable FLOP/s against arithmetic intensity, one roof per chip (compute and HBM), an optional
    third roof (the interconnect's, flat: FLOP/s per GPU its link time allows), and the points."""
    xs = [p[1] for p in points if p[1] > 0] + [c.ridge for c in chips] + [c.fp4 / c.bandwidth for c in chips if c.fp4]
    lo = 10 ** math.floor(math.log10(min(xs) / 3))
    hi = 10 ** math.ceil(math.log10(max(xs) * 3))
    fig = go.Figure()
    for c in chips:
        x = [lo, c.ridge, hi]
        y = [lo * c.bandwidth, c.peak, c.peak]
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines", name=c.name,
                                 line=dict(color=CHIP_COLORS.get(c.key, "#333333"),
                                           width=4 if c.key == chosen else 1.5,
                                           dash="solid" if c.key == chosen else "dot"),
                                 hovertemplate=f"{c.name}<br>ridge {c.ridge:,.0f} FLOP/byte<extra></extra>"))
    for c in chips:
        if c.key == chosen and c.fp4:   # the routed experts' own roof where the chip multiplies in FP4
            ridge4 = c.fp4 / c.bandwidth
            fig.add_trace(go.Scatter(x=[lo, ridge4, hi], y=[lo * c.bandwidth, c.fp4, c.fp4], mode="lines",
                                     name=f"{c.name}, FP4 (experts)",
                                     line=dict(color=CHIP_COLORS.get(c.key, "#333333"), width=2, dash="dashdot"),
                                     hovertemplate=f"{c.name} FP4<br>ridge {ridge4:,.0f} FLOP/byte<extra></extra>"))
    if ceiling is not None:
        name, y = ceiling
        fig.add_trace(go.Scatter(x=[lo, hi], y=[y, y], mode="lines", name=name,
                                 line=dict(color="#e6550d", width=2.5, dash="dash"),
                                 hovertemplate=f"{name}<br>{y:,.3g} FLOP/s per GPU<extra></extra>"))
    for j, (label, x, y, note) in enumerate(points):
        fig.add_trace(go.Scatter(x=[x], y=[y], mode="markers", name=label,
                                 marker=dict(size=12, color=POINT_COLORS[j % len(POINT_COLORS)], symbol="diamond"),
                                 hovertemplate=f"{label}<br>{x:,.1f} FLOP/byte, {note}<extra></extra>"))
    ys = [lo * c.bandwidth for c in chips] + [max(c.peak, c.fp4) for c in chips] + [p[2] for p in points] + \
        ([ceiling[1]] if ceiling is not None else [])
    fig.update_xaxes(**log_axis([lo, hi], "arithmetic intensity (FLOP/byte)"))
    fig.update_yaxes(**log_axis(ys, "attainable compute (FLOP/s)", text=si_text))
    fig.update_layout(height=460, margin=dict(l=10, r=10, t=40, b=10),
                      title=title,
                      legend=dict(orientation="v", x=1.01, y=1))
    return fig
