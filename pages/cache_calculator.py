"""Cache calculator: every byte of a design's cache from an explained formula, checked against the running model."""

from dataclasses import fields

import pandas as pd
import streamlit as st

from lessons import reproduce as snippets
from lessons.bounded_replay import (
    PERSIST_WINDOWS_HELP,
    REPLAY_TEXT,
    decoder_scans,
    no_replay,
    persistent_holds,
    replay_tradeoff,
    replay_verdict,
    reuse_sentence,
)
from lessons.cache_calculator import (
    CALC_INTRO,
    CALC_LEVERS,
    GROWTH_HELP,
    LEAVES_OUT,
    ROW_FORMULA,
    SHARED_COPY,
    WEIGHTS_LABEL,
    CalcError,
    Knobs,
    about_design,
    about_title,
    arrows_note,
    calculate,
    full_layers_line,
    layer_label,
    persistent_help,
    weights_left_out,
)
from lessons.cache_growth import growth_sum, growth_terms
from lessons.cost import replay_weight_bytes
from lessons.design_inputs import CALC_DESIGN, own_values, page_defaults, switch_design
from lessons.designs import CALCULATOR_PRESETS, DESIGNS, SHARING_BUTTON, build, sharing_help
from lessons.layers import map_line
from lessons.units import counted, human_bytes, human_flops
from lessons.workload import check_against_engine, check_intro
from model import V41Config, layer_map
from ui import url
from ui.cache import built
from ui.figures import layer_map_figure
from ui.figures_memory import kind_bar, layer_bar
from ui.memory import (
    change_since_last,
    chart,
    chart_format,
    derivation_table,
    downloads,
    init_knobs,
    knob_widget,
    mirror_knobs,
    param_counts,
    read_knobs,
    run_on_click,
    typed_warning,
)
from ui.reproduce import reproduce
from ui.session import NO_MODEL, page_header
from ui.text import plain
from ui.url import KEEP, stop, url_moved

P = "cc"
CHECK_TOKENS = 4096        # the check against the running model prefills at most this many tokens
sess = page_header("Cache calculator")
st.markdown(CALC_INTRO)

# ---- design and inputs (mirrored in the URL), with why this size beside them ----------------------------------
PRESET = url.choice("preset", CALCULATOR_PRESETS, CALC_DESIGN, "a design here",
                    instead=f"showing {DESIGNS[CALC_DESIGN][0]} instead")
KEEPWIN = url.flag("keepwin", False)
REUSES = [1, 10, 100, 1000, 10000]
REUSE = url.choice("reuse", REUSES, 10, url.either(REUSES))
url.seeded(f"{P}_preset", PRESET)


def _switch_design() -> None:
    """A new design starts from its defaults, but keeps the reader's context, and a batch or window they set."""
    old, new = st.session_state.get(f"{P}_shown", CALC_DESIGN), st.session_state[f"{P}_preset"]
    was = page_defaults(old)
    now = Knobs(**{f.name: st.session_state.get(f"{P}_{f.name}", getattr(was, f.name)) for f in fields(Knobs)})
    knobs_, note = switch_design(old, new, now)
    init_knobs(P, knobs_, force=True)
    st.session_state[f"{P}_switched"] = note


left, right = st.columns([1.2, 1], gap="medium")
with left:
    preset = st.selectbox("Design", CALCULATOR_PRESETS, format_func=lambda k: DESIGNS[k][0], key=f"{P}_preset",
                          on_change=_switch_design, persist_state=KEEP)
shown_before = st.session_state.get(f"{P}_shown")
st.session_state[f"{P}_shown"] = preset            # the design a change of design starts from
# what comes and goes with a run or a design (notes, the inputs a design takes) sits in two containers, so that the
# elements below keep their places between runs, and the tabs the tab the reader opened
notes, inputs = left.container(), left.container()
if note := st.session_state.pop(f"{P}_switched", None):   # an event, not a state: a link to the page never shows it
    st.toast(note, icon=":material/swap_horiz:", duration="long")
base = page_defaults(preset)
# a link to another design than the one this session showed: its URL is the whole state (defaults left out)
linked = PRESET.given() and shown_before not in (None, preset)
for msg in init_knobs(P, base, fresh=linked or url_moved()):
    notes.warning(f"URL parameter {plain(msg, limit=400)}")
own = build(preset, base)
used = own.knobs_used

# only the inputs this design takes; a line says what it sets itself
labels = {"context": "Context (tokens)", "batch": "Batch (sequences)",
          "bits": "Bits per number" + (" (latents)" if preset == "v4.1-flash" else ""), "window": "Window (rows)",
          "group": "Layers sharing one copy", "ratio": "Tokens per entry (ratio)", "layers": "Layers",
          "numbers": "Numbers per entry", "replay": "Replay rows", "rollback": "Rollback slack",
          "mode": "Prefill mode"}
shown = [n for n in labels if n in used]
url.seeded(f"{P}_keepwin", KEEPWIN)
with inputs:
    per_row = 3
    cells = [cell for _ in range(0, len(shown) + own.has_replay, per_row) for cell in st.columns(per_row)]
    for name, cell in zip(shown, cells):
        knob_widget(P, name, labels[name], cell, design=preset)
    if own.has_replay:
        cells[len(shown)].toggle("Persist windows", key=f"{P}_keepwin", persist_state=KEEP,
                                 help=PERSIST_WINDOWS_HELP)
    typed_warning(P)
keep_windows = bool(st.session_state[f"{P}_keepwin"]) and own.has_replay   # the toggle is drawn only there

knobs = read_knobs(P)
if preset == "teaching":
    def _seed_sharing() -> None:
        st.session_state[f"{P}_group"] = min(4, st.session_state[f"{P}_layers"])   # a group fits the layers

    try:
        share_help = sharing_help(knobs)
    except CalcError as e:
        share_help = plain(e)
    inputs.button(SHARING_BUTTON, key=f"{P}_seed4", on_click=_seed_sharing, help=share_help)
try:
    design = build(preset, knobs)
    calc = calculate(design, knobs, keep_windows=keep_windows, first_layer=int(sess.one_based))
except CalcError as e:
    st.error(f"Cannot compute this design: {plain(e)}")
    stop()
url.to_link(PRESET, preset)      # once the design computes: the link always holds one that does
url.to_link(KEEPWIN, keep_windows)
mirror_knobs(knobs, used, base)

hbm, per = calc.hbm, calc.persistent
change = change_since_last(P, (preset, knobs, keep_windows),
                           {"hbm": hbm.total, "growth": hbm.growth_per_token, "average": hbm.per_token,
                            "persistent": per.total})
with left:
    m = st.columns(2)
    m[0].metric("HBM (accelerator)", human_bytes(hbm.total), delta=change.delta("hbm", human_bytes),
                delta_color="inverse", help=f"{hbm.total:,} bytes for {counted(knobs.batch, 'sequence')} of "
                                            f"{counted(knobs.context, 'token')}")
    m[1].metric("Per further token", f"{hbm.growth_per_token:,.1f} B", delta=change.delta("growth", "{:,.1f} B"),
                delta_color="inverse", help=GROWTH_HELP)
    m = st.columns(2)
    m[0].metric("Average per token", f"{hbm.per_token:,.1f} B", delta=change.delta("average", "{:,.1f} B"),
                delta_color="inverse", help="total / (context x batch)")
    m[1].metric("Persistent, per context", human_bytes(per.total), delta=change.delta("persistent", human_bytes),
                delta_color="inverse", help=persistent_help(per.total))
    if change.said:
        st.caption(arrows_note(change.said))
with right:
    st.markdown("**Why this size**")
    st.markdown(growth_sum(growth_terms(design, knobs.batch)))
    fmt = st.session_state.get(f"{P}_fmt", "png")
    chart(built(kind_bar, hbm, f"{design.label}: {human_bytes(hbm.total)} at {counted(knobs.context, 'token')}"),
          f"{P}_kind", fmt, f"cache-{preset}-by-kind")
    if line := own_values(own):
        st.caption(line)
with st.expander(about_title(design)):
    st.caption(about_design(design))

reproduce(snippets.cache_calculator(preset, knobs, keep_windows), f"cache-{preset}")

tabs = st.tabs(["Persistent cache", "By layer", "Derivation", "Check against the running model", "Bounded replay",
                "What the formula leaves out"])
with tabs[0]:
    fmt = chart_format(f"{P}_fmt")
    if per.total:
        chart(built(kind_bar, per, "Persistent cache per saved context (separate budget)"), f"{P}_kind_p", fmt,
              f"cache-{preset}-persistent")
with tabs[1]:
    log = url.bound(st.toggle, f"{P}_log", url.flag("log", True), "Log scale")

    names = {i: layer_label(design, i, int(sess.one_based)) for i in hbm.by_layer}
    chart(built(layer_bar, hbm, names, "Bytes by the layer that holds each stored copy", log), f"{P}_layer",
          st.session_state.get(f"{P}_fmt", "png"), f"cache-{preset}-by-layer")
    st.caption(SHARED_COPY)
    if preset == "v4.1-flash":
        st.plotly_chart(built(layer_map_figure, [(design.label, layer_map(V41Config.preset("v4.1-flash")))],
                              sess.one_based), width="stretch", key=f"{P}_map")
        st.caption(full_layers_line(V41Config.preset("v4.1-flash"), sess.num))
with tabs[2]:
    st.markdown(ROW_FORMULA)
    st.markdown(CALC_LEVERS)
    st.dataframe(derivation_table(calc), hide_index=True, width="stretch", key=f"{P}_rows",
                 column_config={"bytes": st.column_config.NumberColumn(format="localized")})
    # the files' layer column follows the sidebar's numbering: their name says which
    downloads(calc, f"cache-{preset}-{knobs.context}-layers-from-{int(sess.one_based)}", P)
with tabs[3]:
    model = sess.model
    if model is None:
        st.info(sess.error or NO_MODEL)
    else:
        cfg = model.cfg
        st.markdown(check_intro(sess.label, cfg.num_hidden_layers, cfg.sliding_window, knobs.mode, knobs.rollback))
        checkn = url.whole("checkn", 1, CHECK_TOKENS, min(knobs.context, 200), "showing the session's value")
        n = url.bound(st.number_input, f"{P}_checkn", checkn, "Prompt length for the check (tokens)", 1, CHECK_TOKENS,
                      step=1)
        chk = run_on_click("Run the check", f"{P}_check",
                           lambda progress: check_against_engine(model, int(n), knobs.mode, knobs.rollback, progress),
                           f"Prefilling {counted(int(n), 'token')} ...")
        if chk is not None:
            rows = [{"kind": k, "formula bytes": chk.formula[k], "measured bytes": chk.measured.get(k, 0),
                     "difference": chk.measured.get(k, 0) - chk.formula[k]} for k in chk.formula]
            rows.append({"kind": "total", "formula bytes": sum(chk.formula.values()),
                         "measured bytes": sum(chk.measured.values()), "difference": chk.difference})
            st.dataframe(pd.DataFrame(rows), hide_index=True, key=f"{P}_checktable")
            (st.success if chk.equal else st.error)(chk.sentence())
            st.caption(map_line(cfg, sess.one_based))
            with st.expander("Per layer"):
                lay = [{"layer": sess.num(i), **{f"formula {k}": v for k, v in chk.formula_by_layer.get(i, {}).items()},
                        **{f"measured {k}": v for k, v in chk.measured_by_layer.get(i, {}).items()}}
                       for i in sorted(set(chk.formula_by_layer) | set(chk.measured_by_layer))]
                st.dataframe(pd.DataFrame(lay), hide_index=True)
with tabs[4]:
    st.markdown(REPLAY_TEXT)
    if not design.has_replay:
        st.info(no_replay(design.label))
        url.leave_out(REUSE)   # a link's reuse value means nothing for this design
    else:
        pc = param_counts("v4.1-flash")
        cfg = V41Config.preset("v4.1-flash")
        reuse = url.bound(st.select_slider, f"{P}_reuse", REUSE, "How often a saved context is reused as an input",
                          REUSES)
        tr = replay_tradeoff(design, knobs, pc["active_per_layer"], cfg.num_attention_heads, cfg.head_dim,
                             cfg.index_topk, input_numbers=cfg.hc_mult * (cfg.hidden_size + 1), reuses=(1, reuse),
                             scans=decoder_scans(cfg), weights_read=(wread := replay_weight_bytes(cfg, knobs.context)))
        a, b, c3 = st.columns(3)
        a.metric("Store: decoder window rows per saved context", human_bytes(tr.stored_bytes),
                 help=f"{tr.stored_bytes:,} bytes")
        b.metric("Replay: input kept per saved context", human_bytes(tr.input_bytes), help=f"{tr.input_bytes:,} bytes")
        c3.metric(f"Replay: recompute {counted(tr.rows_replayed, 'row')}, per reuse", human_flops(tr.flops_per_reuse))
        st.dataframe(pd.DataFrame([{"item": i, "formula": f, "value": shown} for i, f, _, shown in tr.derivation]),
                     hide_index=True, key=f"{P}_replayrows")
        st.markdown(replay_verdict(tr))
        st.caption(persistent_holds(per.total, knobs, keep_windows))
        st.markdown(reuse_sentence(tr, wread))
with tabs[5]:
    st.markdown(LEAVES_OUT)
    if preset == "v4.1-flash":
        pc = param_counts("v4.1-flash")
        st.metric(WEIGHTS_LABEL, f"{pc['total'] / 1e9:,.0f}B")
        st.markdown(weights_left_out(pc, hbm.total))
