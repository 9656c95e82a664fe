"""Figure 3 walkthrough: both stacks drawn from layer_map(cfg), a story stepped with Back/Next, and any
box opened by a click on its dot or from the list, with live numbers from a trace of the running model."""

import importlib.util

import streamlit as st
import torch

from lessons import reproduce as snippets
from lessons.figure3 import (
    COMB_CAPTION,
    COMPACT_HELP,
    ENTRIES_STORED_HELP,
    HOW_TO_READ,
    LIVE_NEEDS_RUNNING,
    MECHANISM_LINK,
    MECHANISM_STEPS,
    NO_BOX,
    NO_VISION_PANEL,
    VISION_BELOW,
    box_text,
    drawing_caption,
    lens_guesses,
    live_caption,
    live_layer,
    notation,
    sample_image,
    steps,
)
from lessons.figure3_layout import box_choices, layout, picked_box
from lessons.layers import map_line
from model import V41Config
from ui import url
from ui.cache import built
from ui.figures import diagram_figure, diagram_pick_ids, show_token
from ui.home import far_picture
from ui.live import live_trace, prompt_picker
from ui.memory import param_counts
from ui.reproduce import reproduce
from ui.session import page_header
from ui.sources import page_link
from ui.stepper import stepper
from ui.text import plain, quoted
from ui.tour import open_stop, shows
from ui.url import KEEP, fragment
from ui.vision_panel import draw_vision_steps

sess = page_header("Figure 3, read from the bottom up")
if shows("fig3_intro"):
    st.caption(HOW_TO_READ)

CONFIGS = {"full": "Released V4.1-Flash", "running": "The running model"}
NONE = "(none)"


@st.cache_resource
def _full_cfg() -> V41Config:
    return V41Config.preset("v4.1-flash")


# ---- controls seeded from the URL --------------------------------------------------------------
CONFIG = url.choice("config", list(CONFIGS), "full", "a drawing here (full or running)",
                    instead=f"showing {CONFIGS['full']} instead")
COMPACT = url.flag("compact", True)   # compact by default: the whole drawing and the story share one screen
top = st.columns([3, 2, 2], vertical_alignment="center") if shows("fig3_controls") else None
if top is not None:
    with top[0]:
        which = url.bound(st.radio, "fig3_config", CONFIG, "Draw", list(CONFIGS), format_func=CONFIGS.get,
                          horizontal=True)
    with top[1]:
        compact = url.bound(st.toggle, "fig3_compact", COMPACT, "Compact",
                            help=COMPACT_HELP)
else:       # a tour stop reads the release's compact drawing, with the stop's step and nothing else around it
    which, compact = "full", True
if which == "running" and sess.model is None:
    st.info((sess.error or "No model is loaded.") + " Drawing the released config instead.")
    which = "full"
cfg = _full_cfg() if which == "full" else sess.model.cfg
counts = param_counts("v4.1-flash") if which == "full" else {}   # the tiny config's Engram tables: from cfg
story = steps(cfg, sess.one_based, engram_params=counts.get("engram"), total_params=counts.get("total"),
              engram_proj=counts.get("engram_proj_per_layer"), active_decode=counts.get("active_decode"))
diagram = layout(cfg, compact=compact, one_based=sess.one_based)
choices = box_choices(diagram, sess.one_based)
if top is not None:
    top[2].caption(drawing_caption(cfg, sess.one_based))

STEP = url.ordinal("step", len(story), 0, "showing step 1")
url.seeded("fig3_step", STEP)
if st.session_state["fig3_step"] >= len(story):
    st.session_state["fig3_step"] = len(story) - 1
tour_stop = open_stop()     # a tour stop opens the walkthrough at its own step
tour_step = next((i for i, s in enumerate(story) if tour_stop is not None and s.key == tour_stop.step), None)
if tour_step is not None:
    st.session_state["fig3_step"] = tour_step


def _box(raw: str) -> str:
    if raw not in choices:
        raise url.Refused("names no box in this drawing", kept=NONE)
    return raw


BOX = url.Param("box", NONE, _box, instead="nothing is opened")
AT = url.layer(cfg.num_hidden_layers, None, name="at")   # the layer an open box of several shows (_pick_layer)
url.seeded("fig3_box", BOX)
if st.session_state["fig3_box"] not in choices and st.session_state["fig3_box"] != NONE:
    st.session_state["fig3_box"] = NONE   # the drawing changed under the open box
# A box keeps its id across drawings but not its label ("layer 8: attention (Full r2)" in the release, "(Reindex
# r1)" in the running model). The browser shows the label it last sent unless the value is set again here.
_label = choices.get(st.session_state["fig3_box"], NONE)
if st.session_state.get("fig3_box_label", _label) != _label:
    st.session_state["fig3_box"] = st.session_state["fig3_box"]
st.session_state["fig3_box_label"] = _label


def _open_step_box() -> None:
    """A step opens the box it talks about and closes the open one when it names none (a box left open from
    another step, with its panel below, would look like part of this one)."""
    b = story[st.session_state["fig3_step"]].box
    st.session_state["fig3_box"] = b if b in choices else NONE


def _on_pick() -> None:
    """A click on a box's dot arrives as a plotly selection; turn it into the open box."""
    ev = st.session_state.get("fig3_chart") or {}
    points = (ev.get("selection") or {}).get("points") or []
    # the marker trace comes after one trace per line (ui.figures.diagram_figure)
    bid = picked_box(points, diagram_pick_ids(diagram), marker_curve=len(diagram.lines))
    if bid in choices:
        st.session_state["fig3_box"] = bid


@fragment
def walkthrough() -> None:
    """The stepper, the drawing, the story and the open box: a click on Back / Next / a dot reruns only this part,
    so fast clicks each land (a full rerun redraws the sidebar and rebuilds the layout first).

    The drawing sits on the left; on the right, beside it, the step's text and the open box. A box the reader
    opened (a click, the list) comes first, under the stepper, so it is in view where the click was; the box a
    step opens itself follows that step's text."""
    left, right = st.columns([3, 2], gap="medium")
    step_i = st.session_state["fig3_step"]
    step = story[step_i]
    box_id = st.session_state["fig3_box"]
    selected = None if box_id == NONE or not shows("fig3_box") else box_id   # a stop opens no box's panel
    below = st.container()  # full width, under the drawing (the vision panel needs the room)
    with left:
        if step.picture == "far":       # the story ends on the mechanism at work, where the drawing was
            far_picture(sess, "fig3_far")
        else:
            fig = built(diagram_figure, diagram, step.focus, selected or step.box,
                        height=diagram.height_px(30 if not compact else 44))
            st.plotly_chart(fig, key="fig3_chart", on_select=_on_pick, selection_mode="points",
                            config={"displayModeBar": False})
        if shows("fig3_notation"):
            with st.expander("Notation: what r2, r1 and the frames mean"):
                st.caption(notation(cfg, sess.one_based))
                if which == "running":
                    st.caption(map_line(cfg, sess.one_based))
    url.to_link(STEP, step_i)
    url.to_link(BOX, selected)
    if selected is None or which != "running":
        url.leave_out(AT)

    with right:
        if shows("fig3_stepper"):       # on a tour stop the card's Back / Next step the story
            with st.container(horizontal=True, vertical_alignment="center"):
                stepper("fig3_stepper", len(story), "fig3_step", then=_open_step_box)   # Back / Next
                st.selectbox("Step", list(range(len(story))), key="fig3_step", label_visibility="collapsed",
                             persist_state=KEEP, width="stretch",
                             format_func=lambda i: f"{i + 1}/{len(story)}  {story[i].title}",
                             on_change=_open_step_box)
        own = selected is not None and selected == step.box
        if selected is not None and not own:
            _box_panel(selected, below)
        st.subheader(f"{step_i + 1}. {step.title}" if shows("fig3_stepper") else step.title)
        st.write(step.body)
        more = shows("fig3_more")       # the step's fine print, source and links: off the tour
        if step.fine_print and more:    # the page's one fine-print box: the current step's caveats
            with st.expander("Fine print"):
                st.caption(step.fine_print)
        if step.read_along and more:
            st.caption(step.read_along)
        if step.table and shows("fig3_table"):
            st.table(step.table, hide_index=True)      # a static table wraps its cells to the column's width
        if step.key in MECHANISM_STEPS and more:
            page_link("pages/csa2_modes.py", MECHANISM_LINK, ":material/call_split:")
        for path, title in step.links if more else ():
            page_link(path, title, ":material/arrow_forward:")
        if own:
            _box_panel(selected, below)
        if shows("fig3_box"):
            st.divider()
            st.selectbox("Open a box", [NONE] + list(choices), key="fig3_box", persist_state=KEEP,
                         format_func=lambda b: b if b == NONE else choices[b])
            if selected is None:
                st.caption(NO_BOX)


def _close_box() -> None:
    st.session_state["fig3_box"] = NONE


def _box_panel(selected: str, below) -> None:
    """The open box in a bordered panel with a button that closes it."""
    with st.container(border=True, key="fig3_open"):
        head = st.columns([5, 1], vertical_alignment="center")
        head[0].markdown(f"**{choices[selected]}**")
        head[1].button("", key="fig3_close", on_click=_close_box, icon=":material/close:", type="tertiary",
                       help="Close this box")
        _open_box(selected, below)


def _open_box(selected: str, below) -> None:
    """What the open box says: its text, the vision steps for a vision box, and with the running model drawn,
    live numbers from a trace of a prompt."""
    box = diagram.box(selected)
    st.write(box_text(box, cfg, sess.one_based))
    if box.kind == "vision":
        _vision_steps(below)
    if which != "running":
        st.caption(LIVE_NEEDS_RUNNING)
        return

    with st.expander("Prompt for the live numbers", expanded=False):
        text = prompt_picker()
    if text is None:
        return
    lt = live_trace(sess, text)
    if lt is None:
        return
    tr = lt.trace
    last = lt.n_tokens - 1
    st.caption(live_caption(lt.n_tokens, sess.label, quoted(lt.tokens[last])))
    layer = _pick_layer(box, selected, tr)
    if layer is not None:
        ll = live_layer(tr, layer)
        _layer_numbers(box, ll)
        if box.kind in snippets.FIGURE3_LINES and (box.kind != "mhc" or ll.comb is not None) and \
                (box.kind != "engram" or ll.engram_gate is not None):
            reproduce(snippets.figure3_box(sess.weights, text, box.kind, layer), f"figure3-{box.kind}")
    else:
        _model_numbers(box, tr)


def _vision_steps(below) -> None:
    if importlib.util.find_spec("ui.vision_panel") is not None and sess.model is not None:
        st.caption(VISION_BELOW)
        with below:
            st.subheader("Inside the vision box, for a sample picture")
            try:
                draw_vision_steps(sess.model, sample_image())
            except Exception as e:  # the panel is optional; its failure must not break the walkthrough
                st.warning(f"The vision panel could not run: {plain(e)}")
    else:
        st.caption(NO_VISION_PANEL)


def _pick_layer(box, selected: str, tr) -> int | None:
    """The layer whose numbers the box shows: chosen (and kept in the URL) when the box stands for several."""
    layers = list(box.layers)
    if box.kind == "mhc":
        stack = selected.split(":")[1]
        layers = [s.spec.index for s in tr.layers if s.spec.stack == stack]
    if box.kind in ("attn", "moe", "engram", "mhc") and len(layers) > 1:
        return url.bound(st.selectbox, "fig3_mhc" if box.kind == "mhc" else "fig3_copy", AT.but(default=layers[0]),
                         "Mixing at layer" if box.kind == "mhc" else "Which copy?", layers,
                         fit=lambda v: v if v in layers else layers[0], format_func=lambda i: f"layer {sess.num(i)}")
    url.leave_out(AT)
    return layers[0] if box.kind in ("attn", "moe", "engram") else None


def _layer_numbers(box, ll) -> None:
    """One layer's live numbers for an attention, MoE, Engram or mHC box."""
    if box.kind == "attn":
        c = st.columns(3)
        c[0].metric("window rows read", ll.window_rows)
        if ll.entries_stored is not None:
            c[1].metric("entries stored", ll.entries_stored,
                        help=ENTRIES_STORED_HELP)
            # a label no longer than "entries stored": a third of the narrow column, with its help icon
            c[2].metric("entries read", ll.entries_selected,
                        help=ll.entries_read_help())
            st.write(ll.selection_sentence(cfg.candidate_topk_blocks * cfg.candidate_block_size))
        else:
            c[1].metric("entries stored", "none")
        st.write(ll.shares_sentence())
        if ll.lens:
            tok = ", ".join(f"{quoted(show_token(sess.model.decode([i])))} {p:.1%}" for i, p in ll.lens[:3])
            st.caption(lens_guesses(tok))
    elif box.kind == "moe":
        st.write(ll.experts_sentence(cfg.n_routed_experts))
    elif box.kind == "engram":
        st.write(ll.gate_sentence())
    elif box.kind == "mhc" and ll.comb is not None:
        st.write(COMB_CAPTION)
        st.dataframe({f"to {k}": [round(r[k], 3) for r in ll.comb] for k in range(len(ll.comb))},
                     hide_index=False)


def _model_numbers(box, tr) -> None:
    """Live numbers for the boxes that stand for the whole model: the hand-off, the head, the drafter."""
    n = sess.num
    if box.kind in ("line", "states"):
        dec_full = next((r for r in tr.layers if r.spec.stack == "decoder" and r.spec.role == "Full"), None)
        if dec_full is not None:
            st.metric(f"global entries layer {n(dec_full.spec.index)} made from the encoder's states",
                      dec_full.source_len)
    elif box.kind == "head" and tr.logits is not None:
        p = torch.softmax(tr.logits[0, -1].float(), -1).topk(5)
        st.write("Next-token guesses: " + ", ".join(
            f"{quoted(show_token(sess.model.decode([int(i)])))} {float(v):.1%}"
            for v, i in zip(p.values, p.indices)))
    elif box.kind == "drafter":
        has = getattr(sess.model, "mtp", None) is not None
        st.write("This model " + ("carries drafter weights." if has else "has no drafter weights loaded."))

walkthrough()
