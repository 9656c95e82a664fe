"""Plotly figures of the "Run a prompt" pages (inspector, indexer pools, DSpark, ablation lab). No Streamlit.

Every text that comes from the user or the tokenizer goes through `label()`: control characters made
visible (ui.figures.show_token) and HTML-escaped, because Plotly renders a subset of HTML tags in
labels and hover text; escaped entities display as the literal characters.
"""

from __future__ import annotations

import html
import math

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ui.axes import is_share_title, log_axis, share_axis, token_axis
from ui.figures import ROLE_COLORS, show_token

WINDOW_C, ENTRY_C, SINK_C, POOL_C, PICK_C, DROP_C = "#1f77b4", "#ff7f0e", "#7f7f7f", "#c7e9c0", "#2ca02c", "#d62728"


def label(tok: str, limit: int = 40) -> str:
    t = show_token(tok)
    if len(t) > limit:
        t = t[: limit - 1] + "\u2026"
    return html.escape(t, quote=False)


def _layout(fig: go.Figure, title: str, height: int = 320, **kw) -> go.Figure:
    kw.setdefault("margin", dict(l=10, r=10, t=50, b=40))
    fig.update_layout(title=title, height=height, **kw)
    return fig


# --------------------------------------------------------------------------------------------------
# Inspector
# --------------------------------------------------------------------------------------------------

def attention_figure(view, tokens: list[str], pos: int, title: str) -> go.Figure:
    """Shares over the prompt's tokens: window rows (one bar per token), selected compressed entries (one bar
    spanning the r tokens each packs) and the sink (its own bar left of position 0)."""
    fig = go.Figure()
    wp = list(view.window_pos)
    fig.add_bar(x=wp, y=view.window_share, name="window row", marker_color=WINDOW_C, width=0.9,
                customdata=[label(tokens[p]) for p in wp],
                hovertemplate="position %{x}: %{customdata}<br>window share %{y:.3%}<extra></extra>")
    if view.entry_ids:
        r = max(1, view.ratio)
        xs = [a + (b - a - 1) / 2 for a, b in view.entry_spans]
        packed = [" ".join(label(tokens[p], 12) for p in range(a, min(b, len(tokens)))) for a, b in view.entry_spans]
        fig.add_bar(x=xs, y=view.entry_share, width=[0.9 * r] * len(xs), name=f"compressed entry (packs {r})",
                    marker_color=ENTRY_C, opacity=0.85,
                    customdata=list(zip(view.entry_ids, [f"{a}-{b - 1}" for a, b in view.entry_spans], packed)),
                    hovertemplate="entry %{customdata[0]} packs tokens %{customdata[1]}: %{customdata[2]}"
                                  "<br>share %{y:.3%}<extra></extra>")
    fig.add_bar(x=[-2], y=[view.sink], name="sink", marker_color=SINK_C, width=1.5,
                hovertemplate="sink share %{y:.3%}<extra></extra>")
    fig.add_vline(x=pos, line_dash="dot", line_color="#444", annotation_text="query", annotation_position="top")
    # the tokens' text under their bars (the sink sits left of the first token)
    fig.update_xaxes(range=[-4, pos + 2], **token_axis(tokens[: pos + 1], title="source token",
                                                       show=lambda t: label(t, 12)))
    fig.update_yaxes(**share_axis("attention share"))
    return _layout(fig, title, 340, barmode="overlay", legend=dict(orientation="h", y=-0.25))


def selection_figure(sel, title: str) -> go.Figure:
    """Index scores of the visible entries, with the candidate pool shaded and the selected entries marked."""
    fig = go.Figure()
    n = sel.visible
    x = list(range(n))
    if sel.pool is not None:
        pool = set(sel.pool)
        fig.add_bar(x=x, y=[1 if e in pool else 0 for e in x], name="in the candidate pool", marker_color=POOL_C,
                    yaxis="y2", width=1.0, hoverinfo="skip")
    if sel.scores is not None:
        sc = [s if np.isfinite(s) else None for s in sel.scores]
        fig.add_scatter(x=x, y=sc, mode="lines", name="index score", line=dict(color="#555", width=1))
        ys = [sel.scores[e] if e < len(sel.scores) and np.isfinite(sel.scores[e]) else None for e in sel.selected]
    else:
        ys = [0] * len(sel.selected)
    fig.add_scatter(x=sel.selected, y=ys, mode="markers", name="selected", marker=dict(color=PICK_C, size=9))
    fig.update_layout(yaxis2=dict(overlaying="y", range=[0, 1], visible=False))
    fig.update_xaxes(title="compressed entry (visible to this query)", range=[-1, max(n, 1)])
    fig.update_yaxes(title="index score")
    return _layout(fig, title, 300, legend=dict(orientation="h", y=-0.3))


def router_figure(router, title: str) -> go.Figure:
    chosen = dict(zip(router.experts, router.weights))
    e = list(range(len(router.scores)))
    fig = go.Figure(go.Bar(x=e, y=router.scores, marker_color=[PICK_C if i in chosen else "#c0c0c0" for i in e],
                           text=[f"w={chosen[i]:.2f}" if i in chosen else "" for i in e], textposition="outside",
                           hovertemplate="expert %{x}: score %{y:.3f}<extra></extra>"))
    fig.update_xaxes(title="routed expert", dtick=1 if len(e) <= 32 else None)
    fig.update_yaxes(title="router score")
    return _layout(fig, title, 300)


def small_bar(values, names, title: str, fmt: str = ".3f", color: str = WINDOW_C, y_title: str = "") -> go.Figure:
    fig = go.Figure(go.Bar(x=list(names), y=list(values), marker_color=color,
                           text=[format(v, fmt) for v in values], textposition="outside"))
    fig.update_yaxes(title=y_title)
    return _layout(fig, title, 260)


def comb_figure(hc: dict, title: str) -> go.Figure:
    """The two comb matrices (attention and FFN site) side by side; comb[j, k] = stream j -> stream k."""
    sites = list(hc)
    fig = make_subplots(rows=1, cols=len(sites), subplot_titles=[f"{s} site comb" for s in sites])
    for c, s in enumerate(sites, 1):
        m = np.asarray(hc[s]["comb"])
        n = m.shape[0]
        fig.add_trace(go.Heatmap(z=m, x=[f"to {k}" for k in range(n)], y=[f"from {j}" for j in range(n)],
                                 zmin=0, zmax=1, colorscale="Blues", showscale=c == len(sites),
                                 texttemplate="%{z:.2f}", textfont=dict(size=14)), 1, c)
        fig.update_yaxes(autorange="reversed", row=1, col=c)
    return _layout(fig, title, 300)


def lens_figure(lens, title: str) -> go.Figure:
    labels = [f"{label(t)} ({i})" for i, t, _ in lens]
    probs = [p for _, _, p in lens]
    fig = go.Figure(go.Bar(x=probs[::-1], y=labels[::-1], orientation="h", marker_color=WINDOW_C,
                           text=[f"{p:.1%}" for p in probs[::-1]], textposition="outside"))
    fig.update_xaxes(**share_axis("probability", headroom=0.15))
    return _layout(fig, title, 60 + 36 * max(1, len(lens)))


def overview_figure(matrix: np.ndarray, tokens: list[str], layer_labels: list[str], roles: list[str], title: str,
                    mark: tuple[int, int] | None = None, n_prompt: int | None = None,
                    categorical: bool = False) -> go.Figure:
    """Layers x tokens heatmap; blank cells = no record (the layer did not run that token)."""
    n = matrix.shape[1]
    hover = np.array([[label(t, 20) for t in tokens]] * matrix.shape[0], dtype=object)
    fig = go.Figure(go.Heatmap(z=matrix, x=list(range(n)), y=[f"{lab} {r}" for lab, r in zip(layer_labels, roles)],
                               customdata=hover, colorscale="Turbo" if categorical else "Viridis",
                               hovertemplate="%{y}, token %{x}: %{customdata}<br>value %{z:.4g}<extra></extra>"))
    if mark is not None:
        layer, pos = mark
        fig.add_scatter(x=[pos], y=[f"{layer_labels[layer]} {roles[layer]}"], mode="markers", showlegend=False,
                        marker=dict(symbol="square-open", size=14, color="red", line=dict(width=2)), hoverinfo="skip")
    if n_prompt is not None and n_prompt < n:
        fig.add_vline(x=n_prompt - 0.5, line_color="white", line_dash="dash", annotation_text="generated \u2192")
    fig.update_xaxes(**token_axis(tokens[:n], title="token", show=lambda t: label(t, 12)))
    fig.update_yaxes(autorange="reversed")
    return _layout(fig, title, 120 + 26 * matrix.shape[0])


def role_strip(roles: list[str], layer_labels: list[str], current: int) -> go.Figure:
    """A one-row layer map with the current layer outlined (orientation for the layer stepper)."""
    fig = go.Figure(go.Bar(x=layer_labels, y=[1] * len(roles), marker_color=[ROLE_COLORS.get(r, "#ccc") for r in roles],
                           marker_line=dict(color=["red" if i == current else "white" for i in range(len(roles))],
                                            width=[3 if i == current else 0 for i in range(len(roles))]),
                           text=roles, textposition="inside", hoverinfo="skip"))
    fig.update_yaxes(visible=False)
    fig.update_xaxes(type="category")
    return _layout(fig, "", 90, margin=dict(l=10, r=10, t=5, b=5))


# --------------------------------------------------------------------------------------------------
# Indexer pools
# --------------------------------------------------------------------------------------------------

def block_scores_figure(detail, block_size: int, title: str) -> go.Figure:
    kept = set(detail.kept_blocks)
    x = list(range(len(detail.blocks)))
    colors = [DROP_C if b == detail.pinned_block else (PICK_C if b in kept else "#c0c0c0") for b in x]
    fig = go.Figure(go.Bar(x=x, y=detail.blocks, marker_color=colors,
                           hovertemplate=f"block %{{x}} (entries %{{x}}x{block_size}...): max score %{{y:.3f}}"
                                         "<extra></extra>"))
    fig.update_xaxes(title=f"block of {block_size} entries (green: kept in the pool, red: pinned newest block)")
    fig.update_yaxes(title="block score (max)")
    return _layout(fig, title, 300)


def pool_strip_figure(detail, title: str) -> go.Figure:
    """Every visible entry on one axis: pool, restricted picks, exhaustive picks, dropped picks."""
    fig = go.Figure()
    rows = [("candidate pool", detail.pool, POOL_C), ("restricted top-k (read)", detail.restricted, PICK_C),
            ("exhaustive top-k", detail.exhaustive, "#9467bd"), ("dropped: outside the pool", detail.dropped, DROP_C)]
    for name, xs, color in rows:
        fig.add_scatter(x=xs, y=[name] * len(xs), mode="markers", name=name, showlegend=False,
                        marker=dict(symbol="line-ns-open", size=16, color=color, line=dict(width=3, color=color)),
                        hovertemplate="entry %{x}<extra>" + name + "</extra>")
    fig.update_xaxes(title="compressed entry", range=[-1, max(1, detail.visible)])
    fig.update_yaxes(autorange="reversed", categoryorder="array", categoryarray=[r[0] for r in rows])
    return _layout(fig, title, 260)


def recall_rows_figure(positions, series: dict, title: str, y_title: str = "") -> go.Figure:
    fig = go.Figure()
    for name, ys in series.items():
        fig.add_scatter(x=list(positions), y=list(ys), mode="lines", name=name)
    fig.update_xaxes(title="query position")
    fig.update_yaxes(**share_axis(y_title or "recall", headroom=0.05))
    return _layout(fig, title, 300, legend=dict(orientation="h", y=-0.3))


def reach_figure(points, window: int, title: str) -> go.Figure:
    """Look-back heads: the strongest head's share on the token to copy, and the span continued, by how far back
    the token to copy lies (log axis); the window's edge dotted."""
    back = [p.back for p in points]
    fig = go.Figure()
    fig.add_scatter(x=back, y=[p.share for p in points], mode="lines+markers", name="strongest head's share",
                    customdata=[[p.gap, p.layer, p.head] for p in points], line=dict(color=ENTRY_C),
                    hovertemplate="gap %{customdata[0]}: %{y:.2f} (layer %{customdata[1]}, head %{customdata[2]})"
                                  "<extra></extra>")
    fig.add_scatter(x=back, y=[p.copied for p in points], mode="lines+markers", name="span continued, second time",
                    line=dict(color=PICK_C), hovertemplate="%{y:.2f}<extra></extra>")
    fig.add_scatter(x=back, y=[p.first for p in points], mode="lines", name="... first time",
                    line=dict(color=SINK_C, dash="dot"), hovertemplate="%{y:.2f}<extra></extra>")
    edge = max(window - 1, 1)                    # a log axis has no 0 (the edge of a one-row window)
    fig.add_vline(x=edge, line=dict(color=DROP_C, dash="dot"))
    # on a log axis an annotation's x is the exponent (a shape's is the value)
    fig.add_annotation(x=math.log10(edge), y=1.05, text="window edge", showarrow=False, xanchor="left",
                       font=dict(color=DROP_C))
    fig.update_xaxes(**log_axis(back + [edge], "tokens back to the token to copy"))
    fig.update_yaxes(**share_axis("share, or rate of spans continued", headroom=0.1))
    return _layout(fig, title, 340, legend=dict(orientation="h", y=-0.35))


def lens_rise_figure(rise, layer_labels: list[str], title: str) -> go.Figure:
    """Look-back heads: mean log p(the span's next token) per layer's lens, first copy against second."""
    fig = go.Figure()
    fig.add_scatter(x=layer_labels, y=rise.first, mode="lines+markers", name="first time", line=dict(color=SINK_C))
    fig.add_scatter(x=layer_labels, y=rise.second, mode="lines+markers", name="second time", line=dict(color=PICK_C))
    fig.update_yaxes(title="mean log p(next token of the span)")
    return _layout(fig, title, 320, legend=dict(orientation="h", y=-0.3))


# --------------------------------------------------------------------------------------------------
# DSpark
# --------------------------------------------------------------------------------------------------

def acceptance_figure(pos) -> go.Figure:
    """Acceptance rate per draft position (P(accept j | the drafts before j accepted))."""
    fig = go.Figure(go.Bar(x=list(pos["position"]), y=list(pos["rate"]), marker_color=PICK_C,
                           customdata=list(zip(pos["accepted"], pos["reached"])),
                           hovertemplate="position %{x}: %{customdata[0]} of %{customdata[1]}<extra></extra>"))
    fig.update_xaxes(title="draft position j", dtick=1)
    fig.update_yaxes(**share_axis("accepted when reached", headroom=0.05))
    return _layout(fig, "Acceptance per draft position", 320)


def calibration_figure(pos) -> go.Figure:
    """Predicted (confidence head) vs observed acceptance, per position and for whole prefixes."""
    fig = go.Figure()
    fig.add_scatter(x=list(pos["predicted"]), y=list(pos["rate"]), mode="markers+text", text=list(pos["position"]),
                    textposition="top center", name="position j")
    fig.add_scatter(x=list(pos["survival_predicted"]), y=list(pos["survival_observed"]), mode="markers",
                    marker=dict(symbol="diamond"), name="first j all kept")
    fig.add_scatter(x=[0, 1], y=[0, 1], mode="lines", line=dict(dash="dot", color="#999"), name="calibrated")
    fig.update_xaxes(**share_axis("predicted (mean confidence)", headroom=0.02))
    fig.update_yaxes(**share_axis("observed", headroom=0.05))
    return _layout(fig, "Confidence head calibration", 320, legend=dict(orientation="h", y=-0.3))


# --------------------------------------------------------------------------------------------------
# Ablation lab
# --------------------------------------------------------------------------------------------------

def ablation_figure(rows: list[dict], metrics: list[tuple[str, str]], title: str,
                    chance: float | None = None) -> go.Figure:
    """One panel per metric, one bar per configuration (the full model first). A recall or share panel runs over
    0-100%, with `chance` (a guess's rate) dotted across it."""
    names = [r["configuration"] for r in rows]
    fig = make_subplots(rows=1, cols=len(metrics), subplot_titles=[m[1] for m in metrics])
    for c, (key, _) in enumerate(metrics, 1):
        ys = [r.get(key) for r in rows]
        fig.add_trace(go.Bar(x=names, y=ys, marker_color=[PICK_C if i == 0 else WINDOW_C for i in range(len(rows))],
                             showlegend=False, hovertemplate="%{x}: %{y:.4g}<extra></extra>"), 1, c)
        fig.update_xaxes(tickangle=-40, row=1, col=c)
        if is_share_title(metrics[c - 1][1]):
            fig.update_yaxes(**share_axis(), row=1, col=c)
            if chance is not None:
                fig.add_hline(y=chance, line=dict(color=DROP_C, dash="dot"), row=1, col=c,
                              annotation_text=f"chance {chance:.1%}", annotation_position="top right")
    return _layout(fig, title, 420)
