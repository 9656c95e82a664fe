"""Cache calculator: every byte of a design's cache from an explained formula, checked against the running model."""

import pandas as pd
import streamlit as st

from lessons import reproduce as snippets
from lessons.calculator import (
    CALC_INTRO,
    LEAVES_OUT,
    REPLAY_TEXT,
    CalcError,
    calculate,
    replay_tradeoff,
    replay_verdict,
    windows_persist,
)
from lessons.designs import CALCULATOR_PRESETS, DESIGNS, SHARING_BUTTON, build, defaults, sharing_help
from lessons.layers import map_line
from lessons.units import human_bytes, human_flops
from lessons.workload import check_against_engine
from model import V41Config, layer_map
from ui.common import built, page_header
from ui.figures import layer_map_figure
from ui.figures_memory import kind_bar, layer_bar
from ui.memory import (
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
)
from ui.reproduce import reproduce
from ui.state import KEEP, qp_bool, qp_choice, qp_get, qp_int_or_none, qp_set, seed
from ui.text import plain

P = "cc"
CHECK_TOKENS = 4096        # the check against the running model prefills at most this many tokens
sess = page_header("Cache calculator")
st.markdown(CALC_INTRO)

# ---- design and inputs (mirrored in the URL) -----------------------------------------------------
seed(f"{P}_preset", qp_choice("preset", CALCULATOR_PRESETS, "the teaching example", "a design here"), "teaching")


def _reset_knobs() -> None:
    init_knobs(P, defaults(st.session_state[f"{P}_preset"]), force=True)


preset = st.selectbox("Design", CALCULATOR_PRESETS, format_func=lambda k: DESIGNS[k][0], key=f"{P}_preset",
                      on_change=_reset_knobs, persist_state=KEEP)
base = defaults(preset)
for msg in init_knobs(P, base):
    st.warning(f"URL parameter {plain(msg, limit=400)}")
used = build(preset, base).knobs_used

c = st.columns(4)
knob_widget(P, "context", True, "Context length (tokens)", c[0])
knob_widget(P, "batch", True, "Batch (sequences)", c[1])
knob_widget(P, "bits", "bits" in used, "Bits per number" + (" (latents)" if preset == "v4.1-flash" else ""), c[2])
knob_widget(P, "window", "window" in used, "Window (rows)", c[3])
c = st.columns(4)
knob_widget(P, "group", "group" in used, "Layers sharing one copy", c[0])
knob_widget(P, "ratio", "ratio" in used, "Tokens per entry (ratio)", c[1])
knob_widget(P, "layers", "layers" in used, "Layers", c[2])
knob_widget(P, "numbers", "numbers" in used, "Numbers per entry", c[3])
c = st.columns(4)
knob_widget(P, "replay", "replay" in used, "Bounded-replay rows", c[0])
knob_widget(P, "rollback", "rollback" in used, "Rollback slack", c[1])
with c[2]:
    knob_widget(P, "mode", "mode" in used, "Prefill mode")
seed(f"{P}_keepwin", {"1": True, "0": False}.get(qp_get("keepwin") or "") if qp_get("keepwin") else None, False)
keep_windows = c[3].toggle("Persist windows", key=f"{P}_keepwin", persist_state=KEEP,
                           help="Off, with bounded prefill: the persistent cache keeps the replay "
                                "input and bounded replay recomputes the decoder's windows. "
                                "Exact prefill always keeps the windows.")

knobs = read_knobs(P)
if preset == "teaching":
    def _seed_sharing() -> None:
        st.session_state[f"{P}_group"] = 4

    try:
        share_help = sharing_help(knobs)
    except CalcError as e:
        share_help = plain(e)
    st.button(SHARING_BUTTON, key=f"{P}_seed4", on_click=_seed_sharing, help=share_help)
try:
    design = build(preset, knobs)
    calc = calculate(design, knobs, keep_windows=keep_windows, first_layer=int(sess.one_based))
except CalcError as e:
    st.error(f"Cannot compute this design: {plain(e)}")
    st.stop()
qp_set(preset=preset if preset != "teaching" else None, keepwin="1" if keep_windows else None)
mirror_knobs(knobs, used, base)

hbm, per = calc.hbm, calc.persistent
m = st.columns(4)
m[0].metric("HBM (accelerator)", human_bytes(hbm.total), help=f"{hbm.total:,} bytes for {knobs.batch} "
            f"sequence(s) of {knobs.context:,} tokens")
m[1].metric("Per further token", f"{hbm.growth_per_token:,.1f} B",
            help="bytes the growing stores add per token, long run (batch included)")
m[2].metric("Average per token", f"{hbm.per_token:,.1f} B", help="total / (context x batch)")
m[3].metric("Persistent, per context", human_bytes(per.total),
            help=f"{per.total:,} bytes in host memory or on SSD for one saved context, as our engine's prefix cache "
                 "saves it; a separate budget")
st.caption(f"**{design.label}** ({design.status}). {design.summary} The accelerator figure and the persistent "
           "figure are two separate results; adding them would say nothing about either memory. The release, too, "
           "reports its savings against V4-Flash for accelerator memory and for the persistent cache separately.")

reproduce(snippets.cache_calculator(preset, knobs, keep_windows), f"cache-{preset}")

tabs = st.tabs(["Bytes by kind", "By layer", "Derivation", "Check against the running model", "Bounded replay",
                "What the formula leaves out"])
with tabs[0]:
    fmt = chart_format(f"{P}_fmt")
    chart(built(kind_bar, hbm, f"{design.label}: {human_bytes(hbm.total)} at {knobs.context:,} tokens"),
          f"{P}_kind", fmt, f"cache-{preset}-by-kind")
    if per.total:
        chart(built(kind_bar, per, "Persistent cache per saved context (separate budget)"), f"{P}_kind_p", fmt,
              f"cache-{preset}-persistent")
with tabs[1]:
    seed(f"{P}_log", qp_bool("log"), True)
    log = st.toggle("Log scale", key=f"{P}_log", persist_state=KEEP)
    qp_set(log=None if log else "0")

    def label(i: int) -> str:
        return design.layer_names.get(i, str(sess.num(i)))

    chart(built(layer_bar, hbm, label, "Bytes by the layer that holds each stored copy", log), f"{P}_layer",
          st.session_state.get(f"{P}_fmt", "png"), f"cache-{preset}-by-layer")
    st.caption("A shared copy is drawn at the layer that makes it; the derivation's 'read_by' column says how many "
               "layers read it.")
    if preset == "v4.1-flash":
        st.plotly_chart(built(layer_map_figure, [(design.label, layer_map(V41Config.preset("v4.1-flash")))],
                              sess.one_based), width="stretch", key=f"{P}_map")
        full = [f"{sess.num(s.index)} (ratio {s.compress_ratio})" for s in layer_map(V41Config.preset("v4.1-flash"))
                if s.role == "Full"]
        st.caption(f"Layers {', '.join(full)} are the Full layers holding the stored latents and index keys; every "
                   "other compressed layer reads theirs.")
with tabs[2]:
    st.markdown("Each row: **entries x numbers per entry x stored layer copies x bits per number / 8** "
                "(x sequences). Block scales and padding are rows of their own.")
    st.dataframe(derivation_table(calc), hide_index=True, width="stretch", key=f"{P}_rows",
                 column_config={"bytes": st.column_config.NumberColumn(format="localized")})
    downloads(calc, f"cache-{preset}-{knobs.context}", P)
with tabs[3]:
    model = sess.model
    if model is None:
        st.info(sess.error or "No model loaded: choose weights in the sidebar.")
    else:
        cfg = model.cfg
        st.markdown(f"Runs a prompt through the running model ({sess.label}: {cfg.num_hidden_layers} layers, window "
                    f"{cfg.sliding_window}) with prefill mode **{knobs.mode}** and rollback slack "
                    f"**{knobs.rollback}**, "
                    "then compares the bytes its cache holds (`cache.nbytes()`) with the same formula applied to its "
                    "config.")
        seed(f"{P}_checkn", qp_int_or_none("checkn", 1, CHECK_TOKENS, "showing the session's value"),
             min(knobs.context, 200))
        n = st.number_input("Prompt length for the check (tokens)", 1, CHECK_TOKENS, step=1, key=f"{P}_checkn",
                            persist_state=KEEP)
        qp_set(checkn=int(n))
        chk = run_on_click("Run the check", f"{P}_check",
                           lambda progress: check_against_engine(model, int(n), knobs.mode, knobs.rollback, progress),
                           f"Prefilling {n} tokens ...")
        if chk is not None:
            rows = [{"kind": k, "formula bytes": chk.formula[k], "measured bytes": chk.measured.get(k, 0),
                     "difference": chk.measured.get(k, 0) - chk.formula[k]} for k in chk.formula]
            rows.append({"kind": "total", "formula bytes": sum(chk.formula.values()),
                         "measured bytes": sum(chk.measured.values()), "difference": chk.difference})
            st.dataframe(pd.DataFrame(rows), hide_index=True, key=f"{P}_checktable")
            text = (f"{chk.tokens} tokens, {chk.mode} prefill, rollback {chk.rollback}: formula "
                    f"{sum(chk.formula.values()):,} B, measured {sum(chk.measured.values()):,} B, "
                    f"difference {chk.difference:,} B (prefill took {chk.seconds:.2f} s).")
            if chk.equal:
                st.success("Equal, layer by layer. " + text)
            else:
                st.error("Not equal. " + text)
            st.caption(map_line(cfg, sess.one_based))
            with st.expander("Per layer"):
                lay = [{"layer": sess.num(i), **{f"formula {k}": v for k, v in chk.formula_by_layer.get(i, {}).items()},
                        **{f"measured {k}": v for k, v in chk.measured_by_layer.get(i, {}).items()}}
                       for i in sorted(set(chk.formula_by_layer) | set(chk.measured_by_layer))]
                st.dataframe(pd.DataFrame(lay), hide_index=True)
with tabs[4]:
    st.markdown(REPLAY_TEXT)
    if not design.has_replay:
        st.info(f"{design.label} keeps every window: it has no bounded replay. Choose DeepSeek-V4.1-Flash.")
    else:
        pc = param_counts("v4.1-flash")
        cfg = V41Config.preset("v4.1-flash")
        seed(f"{P}_reuse", qp_choice("reuse", [1, 10, 100, 1000, 10000], 10, "1, 10, 100, 1000 or 10000"), 10)
        reuse = st.select_slider("How often a saved context is reused as an input", [1, 10, 100, 1000, 10000],
                                 key=f"{P}_reuse", persist_state=KEEP)
        qp_set(reuse=reuse if reuse != 10 else None)
        tr = replay_tradeoff(design, knobs, pc["active_per_layer"], cfg.num_attention_heads, cfg.head_dim,
                             cfg.index_topk, input_numbers=cfg.hc_mult * (cfg.hidden_size + 1), reuses=(1, reuse))
        a, b, c3 = st.columns(3)
        a.metric("Store: decoder window rows per saved context", human_bytes(tr.stored_bytes),
                 help=f"{tr.stored_bytes:,} bytes")
        b.metric("Replay: input kept per saved context", human_bytes(tr.input_bytes), help=f"{tr.input_bytes:,} bytes")
        c3.metric(f"Replay: recompute {tr.rows_replayed} rows, per reuse", human_flops(tr.flops_per_reuse))
        st.dataframe(pd.DataFrame([{"item": i, "formula": f, "value": shown} for i, f, _, shown in tr.derivation]),
                     hide_index=True, key=f"{P}_replayrows")
        st.markdown(replay_verdict(tr))
        kept = "the decoder's windows" if windows_persist(knobs, keep_windows) else "the replay input"
        st.caption(f"The persistent figure above ({human_bytes(per.total)}) holds {kept} in this mode "
                   f"({knobs.mode} prefill{', windows kept' if keep_windows else ''}).")
        k, total, read = tr.by_reuse[-1]
        st.markdown(f"Reused **{k:,}** times, replay spends **{human_flops(total)}** in all; storing the windows keeps "
                    f"**{human_bytes(tr.stored_bytes)}** for as long as the context is kept and reads it back {k:,} "
                    f"times ({human_bytes(read)} moved). Which side wins depends on the hardware, on how long and how "
                    "often the context is kept, and on the size of the replay input, so the page gives the numbers "
                    "rather than a verdict on time.")
with tabs[5]:
    st.markdown(LEAVES_OUT)
    if preset == "v4.1-flash":
        pc = param_counts("v4.1-flash")
        st.metric("Parameters the cache formula does not count", f"{pc['total'] / 1e9:,.0f}B",
                  help="count_params: backbone + Engram + drafter + vision")
        st.markdown(f"Even at 4 bits per parameter, {pc['total']:,} parameters take at least "
                    f"{human_bytes(pc['total'] / 2)}: the whole cache above is {human_bytes(hbm.total)}.")
