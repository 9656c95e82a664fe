"""Plotly figure builders shared by the pages (no Streamlit here): one function per recurring figure."""

from __future__ import annotations

import plotly.graph_objects as go

ROLE_COLORS = {"SWA": "#9aa5b1", "Full": "#1f77b4", "Reuse": "#8fbbe0", "Reindex": "#ff7f0e"}


def show_token(t: str) -> str:
    """A token as text that survives display: spaces and control characters made visible."""
    out = []
    for ch in t:
        if ch == " ":
            out.append("\u2423")
        elif ch == "\n":
            out.append("\u21b5")
        elif ord(ch) < 32 or ord(ch) == 127:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "".join(out) or "\u2205"


def top_tokens_bar(table, title: str = "Next-token probability") -> go.Figure:
    labels = [f"{show_token(t)}  ({i})" for t, i in zip(table.tokens, table.ids)]
    fig = go.Figure(go.Bar(x=table.probs[::-1], y=labels[::-1], orientation="h",
                           text=[f"{p:.1%}" for p in table.probs[::-1]], textposition="outside",
                           marker_color="#1f77b4"))
    fig.update_layout(title=title, xaxis_title="probability", yaxis_title="", height=36 * len(labels) + 120,
                      margin=dict(l=10, r=40, t=50, b=40), xaxis=dict(range=[0, max(table.probs) * 1.25 + 1e-9]))
    return fig
