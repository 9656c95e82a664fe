"""Images in the app: a picture input (upload with limits, or a sample) and the vision drawings.

For the Figure 3 walkthrough's vision box and the prompt inspector (docs/design/architecture.md §3.6):
- `image_input(key)` -> PIL image or None: samples from model/scenes.py or an upload checked by
  content (PNG/JPEG only, size and pixel limits); problems are shown with `st.error`, never raised.
- `draw_vision_steps(model, image)`: picture -> patches -> image tokens -> sequence positions.
- `draw_image_prompt(model, text, image)`: which positions are image tokens, how the routers treat
  them (bias_vl) and how much attention the text gives them, from a trace of the prompt.
The figure builders at the top are plain Plotly (no Streamlit) so tests can call them directly.
"""

from __future__ import annotations

import io
from typing import Callable

import numpy as np
import plotly.graph_objects as go
import streamlit as st
import torch
from PIL import Image

from lessons import vision as lv
from model import ImageError, InputError
from model.arch import encode_image, has_vision
from model.inference import (
    MAX_UPLOAD_BYTES,
    MAX_UPLOAD_PIXELS,
    build_inputs,
    generate_with_image,
    load_image,
    marker_ids,
    resize_to_grid,
    to_pixels,
    trace_with_image,
)
from model.scenes import draw_scene, sample_scenes
from ui import url
from ui.axes import share_axis
from ui.text import plain, quoted
from ui.url import KEEP

KIND_COLORS = {"text": "#d9dde3", "image_start": "#2ca02c", "image": "#1f77b4", "image_newline": "#9467bd",
               "image_end": "#d62728"}
KIND_NAMES = {"text": "text", "image_start": "image start", "image": "image token", "image_newline": "row end",
              "image_end": "image end"}


# ------------------------------------------------------------------------------------------------
# Figures (no Streamlit)
# ------------------------------------------------------------------------------------------------

def patches_figure(picture: Image.Image, pg: lv.PatchGrid, height: int = 360) -> go.Figure:
    """The model-input picture with patch borders (thin) and image-token borders (thick)."""
    g = pg.grid
    fig = go.Figure(go.Image(z=_array(picture), hoverinfo="skip"))
    shapes = []
    for x in range(0, g.width + 1, g.patch_size):
        thick = x % g.unit == 0
        shapes.append(dict(type="line", x0=x - .5, x1=x - .5, y0=-.5, y1=g.height - .5,
                           line=dict(color="white" if thick else "rgba(255,255,255,0.55)",
                                     width=2.5 if thick else 0.7)))
    for y in range(0, g.height + 1, g.patch_size):
        thick = y % g.unit == 0
        shapes.append(dict(type="line", y0=y - .5, y1=y - .5, x0=-.5, x1=g.width - .5,
                           line=dict(color="white" if thick else "rgba(255,255,255,0.55)",
                                     width=2.5 if thick else 0.7)))
    fig.update_layout(shapes=shapes, height=height, margin=dict(l=0, r=0, t=30, b=0),
                      title=f"{g.patch_rows} x {g.patch_cols} patches of {g.patch_size} px",
                      xaxis=dict(visible=False), yaxis=dict(visible=False, scaleanchor="x"))
    return fig


def _array(picture: Image.Image):
    return np.asarray(picture.convert("RGB"))


def tokens_figure(pg: lv.PatchGrid, values: list[list[float]] | None = None, title: str | None = None,
                  height: int = 360) -> go.Figure:
    """The image-token grid, numbered in sequence order; coloured by `values` (e.g. vector size) if given."""
    g = pg.grid
    z = values if values is not None else [[r * g.cols + c for c in range(g.cols)] for r in range(g.rows)]
    text = [[f"{r * g.cols + c}" for c in range(g.cols)] for r in range(g.rows)]
    fig = go.Figure(go.Heatmap(z=z, text=text, texttemplate="%{text}" if g.n_image_tokens <= 256 else None,
                               colorscale="Blues", showscale=values is not None,
                               hovertemplate="token %{text}<br>row %{y}, col %{x}<br>value %{z:.3g}<extra></extra>"))
    fig.update_layout(height=height, margin=dict(l=0, r=0, t=30, b=0),
                      title=title or f"{g.rows} x {g.cols} = {g.n_image_tokens} image tokens",
                      xaxis=dict(visible=False), yaxis=dict(visible=False, autorange="reversed", scaleanchor="x"))
    return fig


def span_figure(positions: list[lv.Position], labels: list[str] | None = None, height: int = 150) -> go.Figure:
    """One square per sequence position, coloured by kind (text, start, image token, row end, end)."""
    fig = go.Figure()
    for kind, colour in KIND_COLORS.items():
        pts = [p for p in positions if p.kind == kind]
        if not pts:
            continue
        hover = [f"position {p.position}: {KIND_NAMES[kind]}" + (f" (row {p.row}, col {p.col})" if p.col is not None
                                                                 else "")
                 + (f"<br>{labels[p.position]}" if labels else "") for p in pts]
        fig.add_trace(go.Scatter(x=[p.position for p in pts], y=[0] * len(pts), mode="markers",
                                 name=KIND_NAMES[kind], marker=dict(symbol="square", size=13, color=colour,
                                                                    line=dict(width=0.5, color="#555")),
                                 hovertext=hover, hoverinfo="text"))
    fig.update_layout(height=height, margin=dict(l=10, r=10, t=10, b=30), yaxis=dict(visible=False),
                      xaxis=dict(title="position"), legend=dict(orientation="h", y=1.3))
    return fig


def routing_figure(rs: lv.RoutingShare, layer_label: str) -> go.Figure:
    experts = list(range(rs.n_experts))
    fig = go.Figure([go.Bar(x=experts, y=rs.image, name=f"image-span tokens ({rs.n_image_tokens})",
                            marker_color=KIND_COLORS["image"]),
                     go.Bar(x=experts, y=rs.text, name=f"text tokens ({rs.n_text_tokens})", marker_color="#ff7f0e")])
    fig.update_layout(barmode="group", height=320, margin=dict(l=10, r=10, t=40, b=40),
                      title=f"{layer_label}: share of expert picks (overlap {rs.overlap:.0%})",
                      xaxis=dict(title="routed expert", dtick=1), yaxis=share_axis("share of picks"),
                      legend=dict(orientation="h", y=-0.25))
    return fig


def image_attention_figure(att: list[lv.ImageAttention], num: Callable[[int], int] = lambda i: i) -> go.Figure:
    x = [f"{num(a.layer)} {a.role}" for a in att]
    fig = go.Figure([go.Bar(x=x, y=[a.window for a in att], name="through the window", marker_color="#1f77b4"),
                     go.Bar(x=x, y=[a.entries for a in att], name="through selected entries", marker_color="#ff7f0e")])
    fig.update_layout(barmode="stack", height=320, margin=dict(l=10, r=10, t=40, b=40),
                      title="Attention from the text after the picture onto image positions (mean over rows, heads)",
                      xaxis=dict(title="layer"), yaxis=share_axis("share"),
                      legend=dict(orientation="h", y=-0.3))
    return fig


# ------------------------------------------------------------------------------------------------
# Input
# ------------------------------------------------------------------------------------------------

def read_upload(uploaded) -> tuple[Image.Image | None, str | None]:
    """(image, problem) from a Streamlit UploadedFile (or None)."""
    if uploaded is None:
        return None, None
    size = getattr(uploaded, "size", None)
    if size is not None and size > MAX_UPLOAD_BYTES:
        return None, (f"{plain(uploaded.name)}: the file is {size / 2**20:.1f} MiB; the limit is "
                      f"{MAX_UPLOAD_BYTES / 2**20:.0f} MiB.")
    try:
        return load_image(uploaded.getvalue()), None
    except ImageError as e:
        return None, f"{plain(uploaded.name)}: {plain(e)}"


@st.cache_data(show_spinner=False)
def _sample_png(i: int, size: int = 256) -> tuple[bytes, str]:
    sc = sample_scenes(max(4, i + 1))[i]
    buf = io.BytesIO()
    draw_scene(sc, size).save(buf, format="PNG")
    return buf.getvalue(), sc.caption()


def sample_caption(i: int) -> str:
    return _sample_png(i)[1]


IMAGE_SAMPLE = url.whole("imgsample", 0, 3, 0, "showing sample 1")    # one of the four generated samples


def image_input(key: str, label: str = "Picture", allow_none: bool = True) -> Image.Image | None:
    """A picture chooser: none, one of four generated samples, or an upload (PNG/JPEG, checked by content).

    The chosen sample's caption is kept in `st.session_state[f"{key}_caption"]` (None for uploads)."""
    options = (["none"] if allow_none else []) + ["sample", "upload"]
    names = {"none": "No picture", "sample": "Generated sample", "upload": "Upload PNG/JPEG"}
    img = url.choice("img", options, options[0], " or ".join(options), instead=f"showing {names[options[0]]} instead")
    choice = url.bound(st.radio, f"{key}_source", img, label, options, format_func=names.get, horizontal=True)
    st.session_state[f"{key}_caption"] = None
    if choice != "sample":
        url.leave_out(IMAGE_SAMPLE)
    if choice == "none":
        return None
    if choice == "sample":
        i = url.bound(st.selectbox, f"{key}_sample", IMAGE_SAMPLE, "Sample", range(4),
                      format_func=lambda j: f"Sample {j + 1}: {sample_caption(j)}")
        png, caption = _sample_png(int(i))
        st.session_state[f"{key}_caption"] = caption
        image = load_image(png)
        st.image(png, width=160, caption=caption)
        return image
    up = st.file_uploader(f"PNG or JPEG, at most {MAX_UPLOAD_BYTES // 2**20} MiB and "
                          f"{MAX_UPLOAD_PIXELS / 1e6:.0f} million pixels", type=["png", "jpg", "jpeg"],
                          key=f"{key}_file")
    image, problem = read_upload(up)
    if problem:
        st.error(problem)
        return None
    if image is None:
        st.info("Choose a file, or pick a generated sample instead.")
        return None
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    st.image(buf.getvalue(), width=160, caption=f"{image.size[0]} x {image.size[1]} pixels")
    return image


# ------------------------------------------------------------------------------------------------
# Drawings
# ------------------------------------------------------------------------------------------------

def _token_sizes(model, image: Image.Image, pg: lv.PatchGrid) -> list[list[float]] | None:
    if not has_vision(model):
        return None
    with torch.no_grad():
        tok = encode_image(model, to_pixels(image, pg.grid)[None])[0]        # [rows, cols, D]
    return tok.float().norm(dim=-1).cpu().tolist()


def draw_vision_steps(model, image: Image.Image, key: str = "vision_steps") -> lv.PatchGrid | None:
    """Picture -> patches -> image tokens -> positions in the sequence, for this model's vision config."""
    vc = getattr(model.cfg, "vision_config", None)
    if vc is None:
        st.info("This model's config has no vision tower.")
        return None
    try:
        pg = lv.patch_grid(vc, *image.size)
        picture = resize_to_grid(image, pg.grid)
    except ImageError as e:
        st.error(plain(e))
        return None
    c1, c2 = st.columns(2)
    with c1:
        st.plotly_chart(patches_figure(picture, pg), key=f"{key}_patches")
        st.caption(f"1. The picture as the tower sees it ({pg.grid.width} x {pg.grid.height}), cut into "
                   f"{pg.n_patches} patches. Each patch becomes one vector of {vc.hidden_size} numbers; "
                   f"{vc.num_hidden_layers} layers let the patches read each other.")
    with c2:
        sizes = _token_sizes(model, image, pg)
        title = None if sizes is None else "Image tokens, coloured by the size of their vector"
        st.plotly_chart(tokens_figure(pg, sizes, title), key=f"{key}_tokens")
        r = vc.downsample_ratio
        st.caption(f"2. Every {r} x {r} square of patches (thick lines) is merged into one vector, and the aligner "
                   f"maps it to a row of {model.cfg.hidden_size} numbers: {pg.n_image_tokens} image tokens.")
    st.markdown("**3. How many positions the picture takes in the sequence**")
    st.table([{"step": r.item, "how": r.formula, "count": f"{r.value:,}"} for r in pg.rows])
    if not has_vision(model):
        st.caption("These weights carry no trained vision tower, so only the shapes and counts are shown.")
    return pg


def draw_image_prompt(model, text: str, image: Image.Image | None, num: Callable[[int], int] = lambda i: i,
                      key: str = "vision_prompt") -> None:
    """Positions, routing and attention for a prompt with a picture (for the prompt inspector)."""
    if image is None:
        st.info("No picture chosen.")
        return
    if not has_vision(model):
        st.info("These weights carry no vision tower (no vision.* tensors), so a picture cannot be read. "
                "Choose the trained tiny weights.")
        return
    try:
        with st.spinner("Reading the picture and the text ..."):
            inputs = build_inputs(model, text, image)
            tr = trace_with_image(model, inputs)
            answer = model.decode(generate_with_image(model, inputs, max_new_tokens=8))
    except (ImageError, InputError) as e:
        st.error(plain(e))
        return
    ids = inputs.input_ids[0].tolist()
    pos = lv.image_positions(ids, inputs.image_mask, marker_ids(model))
    labels = [model.decode([t]) for t in ids]
    n_img = sum(p.kind == "image" for p in pos)
    st.markdown(f"**Which positions are image tokens.** {len(ids)} positions: {n_img} image tokens, "
                f"{sum(p.kind == 'image_newline' for p in pos)} row ends, 2 markers, "
                f"{sum(p.kind == 'text' for p in pos)} text tokens.")
    st.plotly_chart(span_figure(pos, labels), key=f"{key}_span")
    st.markdown(f"**The model continues:** {quoted(text.split('<image>')[-1].strip())} → "
                f"**{plain(answer.strip())}**")
    shares = lv.routing_shares(tr, inputs.image_mask)
    if shares:
        opts = [s.layer for s in shares]
        layer = st.selectbox("Layer", opts, format_func=lambda i: f"layer {num(i)}", key=f"{key}_layer",
                             persist_state=KEEP)
        rs = next(s for s in shares if s.layer == layer)
        st.plotly_chart(routing_figure(rs, f"layer {num(layer)}"), key=f"{key}_routing")
        st.caption(lv.ROUTING)
    att = lv.attention_to_image(tr, inputs.image_mask)
    if att:
        st.plotly_chart(image_attention_figure(att, num), key=f"{key}_attention")
        st.caption(lv.ATTENTION)
