"""Prompt inspector: run a prompt (and a few generated tokens) with the tracer on, then step through the
layers for one token. Thin: lessons/inspector.py computes every number, ui/figures_run.py draws.

User text (prompts, tokens) is only ever shown through st.text_area / st.code / dataframes / escaped
Plotly labels, never as Markdown or HTML.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from lessons import reproduce as snippets
from lessons.inspector import (
    ENGRAM_TEXT,
    EXACT_NOTE,
    GENERATE_HELP,
    INTRO,
    LENS_TEXT,
    LIMIT_WHY,
    MAX_NEW_TOKENS,
    MAX_PROMPT_TOKENS,
    NO_SELECTION,
    PROMPT_HELP,
    QUANTITIES,
    SLIDING_ONLY,
    bounded_run_note,
    covered_rows,
    layer_sentence,
    layer_view,
    load_samples,
    mhc_sentence,
    no_engram,
    one_line,
    overview,
    records_caption,
    run_caption,
    run_prompt,
    too_short_to_choose,
    trace_to_json,
)
from lessons.layers import bounded_agreement, bounded_note, map_line
from ui import url
from ui.cache import built, cached_with_progress
from ui.far_fact import far_fact_panel
from ui.figures import show_token
from ui.figures_run import (
    attention_figure,
    comb_figure,
    lens_figure,
    overview_figure,
    role_strip,
    router_figure,
    selection_figure,
    small_bar,
)
from ui.limits import LONG_PROMPT_CHARS
from ui.pair import far_pair, selection_pair
from ui.prompt import prompt_ids, sample_or_text
from ui.reproduce import reproduce
from ui.session import page_header, require_model
from ui.step_pair import attention_pair
from ui.stepper import stepper
from ui.text import plain
from ui.url import KEEP, arrived, stop
from ui.vision_panel import draw_image_prompt, image_input

sess = page_header("Prompt inspector", INTRO)
model = require_model(sess)
cfg = model.cfg
n_layers = cfg.num_hidden_layers


def vision_section(prompt: str) -> None:
    """A picture with the prompt. The layer-by-layer trace on this page is text-only; a picture is read by the
    vision panel's own traced run (ui/vision_panel.draw_image_prompt: image positions, routing with bias_vl,
    attention the text gives the image)."""
    with st.expander("Add a picture (vision tower)", expanded=False):
        try:
            image = image_input("insp_image")
            if image is not None:
                draw_image_prompt(model, prompt, image, num=sess.num, key="insp_vision")
        except Exception as e:  # the picture path must never take the inspector down
            st.error(f"The picture could not be read: {plain(e)}")


# ---- prompt (left column) beside the layer view (right column) ----------------------------------------------
# At 1400 x 1000 the controls, the layer stepper and the chart it drives share the first screen: the run's notes
# live in one expander under the controls, so after a run the first thing beside the prompt is the picture.
samples = load_samples()
ctl, right = st.columns([1, 2.4], gap="medium")
# a long story by default: hundreds of entries, so the top-k really chooses (a short prompt's selection keeps them all)
first_long = next((i for i, s in enumerate(samples) if s.kind == "long"), 0)
with ctl:
    sample_i, text = sample_or_text("insp", samples, first_long, LONG_PROMPT_CHARS, text_label="Prompt", height=110,
                                    help=PROMPT_HELP)
    c2, c3 = st.columns(2)
    with c2:
        mode = url.bound(st.radio, "insp_mode", url.PREFILL_MODE, "Prefill", url.PREFILL_MODES, horizontal=True)
    with c3:
        n_new = url.bound(st.number_input, "insp_gen", url.whole("gen", 0, MAX_NEW_TOKENS, 4, "showing 4"),
                          "Generate tokens", 0, MAX_NEW_TOKENS,
                                help=GENERATE_HELP)

with ctl:
    ids = prompt_ids(model, "insp", text, MAX_PROMPT_TOKENS, LIMIT_WHY, LONG_PROMPT_CHARS)
    prompt = text
    try:
        run = cached_with_progress("inspector", (sess.label, tuple(ids), mode, int(n_new)),
                                   lambda progress: run_prompt(model, ids, mode, int(n_new), progress=progress),
                                   f"Reading {len(ids):,} tokens ...")
    except Exception as e:  # any model-side rejection becomes a message, never a traceback
        st.error(f"The model could not run this prompt: {plain(e)}")
        stop()
    if run.generated:
        st.text("Generated: " + one_line("".join(run.tokens[run.n_prompt:])))
    st.caption(run_caption(run, mode, sess.device, sess.label))
    with st.expander(f"How {mode} prefill shaped this run"):
        if mode == "bounded":
            agree = cached_with_progress("inspector_agree", (sess.label, tuple(ids)),
                                         lambda progress: bounded_agreement(model, ids),
                                         "Comparing with exact prefill ...")
            st.write(bounded_run_note(run, agree))
            st.caption(bounded_note(cfg))
        else:
            st.write(EXACT_NOTE)
        st.caption(map_line(cfg, sess.one_based))
    vision_section(prompt)


# ---- layer and token steppers beside their chart ------------------------------------------------------------
roles = [r.spec.role for r in run.trace.layers]
first_layer = min(cfg.decoder_start, n_layers - 1)
LAYER = url.layer(n_layers, first_layer, f"showing layer {sess.num(first_layer)}")
url.seeded("insp_layer", LAYER)
if not 0 <= int(st.session_state["insp_layer"]) < n_layers:  # another model with fewer layers was chosen
    st.session_state["insp_layer"] = first_layer
run_key = (tuple(ids), mode, int(n_new))
TOKEN = url.whole("token", 0, max(0, run.n - 1), run.n_prompt - 1, f"showing the last prompt token, {run.n_prompt - 1}")
url_token = TOKEN.read()
if url_token is not None and arrived():
    st.session_state["insp_token"] = url_token
elif "insp_token" not in st.session_state or st.session_state.get("insp_run_key") != run_key:
    st.session_state["insp_token"] = run.n_prompt - 1     # a new prompt: start at its last token
st.session_state["insp_run_key"] = run_key
st.session_state["insp_token"] = min(int(st.session_state["insp_token"]), run.n - 1)
head_names = ["mean over heads"] + [f"head {h}" for h in range(cfg.num_attention_heads)]
HEAD_NO = url.whole("head", 0, cfg.num_attention_heads - 1, None, "showing the mean over heads")
HEAD = url.Param("head", head_names[0], lambda raw: head_names[HEAD_NO.parse(raw) + 1],   # the link: its number
                 write=lambda name: name.split()[1], instead=HEAD_NO.instead)
url.seeded("insp_head", HEAD)
if st.session_state["insp_head"] not in head_names:
    st.session_state["insp_head"] = head_names[0]

with right:
    lc1, lc2 = st.columns([1, 7], vertical_alignment="bottom")
    stepper("insp_layer_step", n_layers, "insp_layer", where=lc1)          # Back / Next layer
    with lc2:
        layer = st.select_slider("Layer", options=list(range(n_layers)), key="insp_layer", persist_state=KEEP,
                                 format_func=lambda i: f"{sess.num(i)} {roles[i]}")
    st.plotly_chart(built(role_strip, roles, [str(sess.num(i)) for i in range(n_layers)], layer), width="stretch",
                    key="insp_roles")
    tc1, tc2, tc3 = st.columns([1, 5, 2], vertical_alignment="bottom")
    stepper("insp_token_step", run.n, "insp_token", where=tc1)             # previous / next token
    with tc2:
        pos = st.slider("Query token (position)", 0, max(1, run.n - 1), key="insp_token", disabled=run.n == 1,
                        persist_state=KEEP)
    with tc3:
        head_opt = st.selectbox("Heads", head_names, key="insp_head", persist_state=KEEP)
head = None if head_opt.startswith("mean") else int(head_opt.split()[1])
for p, v in ((LAYER, layer), (TOKEN, pos), (HEAD, head_opt)):
    url.to_link(p, v)

kind = "generated" if pos >= run.n_prompt else "prompt"
view = layer_view(run, layer, pos, cfg, head=head, num=sess.num)
with right:
    hc1, hc2 = st.columns([5, 1], vertical_alignment="center")
    hc1.subheader(f"Layer {sess.num(layer)} · {roles[layer]} · {run.layer(layer).spec.stack}, {kind} token {pos}")
    hc2.code(show_token(run.tokens[pos]), language=None)
    if isinstance(view, str):
        st.warning(view)
    else:
        st.write(layer_sentence(view, kind == "generated"))
        # a tab's content runs only while it is open: the side-by-side of "Selected entries" costs nothing unseen
        tabs = st.tabs(["Attention", "Selected entries", "Experts", "Engram", "mHC", "Logit lens"], key="insp_tab",
                       on_change="rerun")
        with tabs[0]:
            if tabs[0].open is not False:
                a = view.attention
                # beside a recall checkpoint on the same prompt, the fact's entry outlined in both (ui/step_pair.py)
                if not attention_pair(sess, run, prompt, mode, int(n_new), layer, pos, head):
                    st.plotly_chart(built(attention_figure, a, run.tokens, pos, "Where this token's attention went"),
                                    width="stretch", key="insp_attn")
                    m1, m2, m3 = st.columns(3)
                    m1.metric("Window rows", f"{a.window_total:.1%}")
                    m2.metric("Compressed entries", f"{a.entries_total:.1%}")
                    m3.metric("Sink", f"{a.sink:.1%}")
                reproduce(snippets.inspector(sess.weights, prompt, mode, int(n_new), layer, pos, head), "inspector")
                if a.entry_ids:
                    st.caption(a.packing_caption())
                    df = pd.DataFrame({"entry": a.entry_ids, "tokens": [f"{s}-{e - 1}" for s, e in a.entry_spans],
                                       "text": ["".join(show_token(run.tokens[p]) for p in range(s, min(e, run.n)))
                                                for s, e in a.entry_spans], "share": a.entry_share})
                    st.dataframe(df.sort_values("share", ascending=False), hide_index=True, key="insp_entries_df")
                elif a.ratio == 0:
                    st.caption(SLIDING_ONLY)
        with tabs[1]:
            if tabs[1].open is not False:
                sel = view.selection
                if sel is None:
                    st.write(NO_SELECTION)
                else:
                    # the same prompt, layer and token on the checkpoint that learned to select, beside the text model
                    selection_pair(sess, "insp_sel", prompt, mode, int(n_new), layer, pos)
                    st.write(sel.note)
                    c = st.columns(3)
                    c[0].metric("Visible entries", sel.visible)
                    c[1].metric("Selected", len(sel.selected))
                    c[2].metric("Candidate pool", "none" if sel.pool is None else len(sel.pool))
                    short = too_short_to_choose(sel)
                    if short is not None:      # a sentence, not a solid block
                        st.caption(short)
                    else:
                        st.plotly_chart(built(selection_figure, sel, "Index scores of the visible entries"),
                                        width="stretch", key="insp_sel")
        with tabs[2]:
            if tabs[2].open is not False:
                r = view.router
                st.write(r.sentence())
                st.plotly_chart(built(router_figure, r, "Router scores (chosen experts in green, with their weights)"),
                                width="stretch", key="insp_router")
                st.dataframe(pd.DataFrame({"expert": ["shared"] + [str(x) for x in r.experts],
                                           "weight": [1.0] + r.weights}), hide_index=True, key="insp_router_df")
        with tabs[3]:
            if tabs[3].open is not False:
                e = view.engram
                if e is None:
                    st.write(no_engram([sess.num(i) for i in cfg.engram_layer_ids]))
                else:
                    st.write(ENGRAM_TEXT)
                    st.dataframe(pd.DataFrame({"n": [g["order"] for g in e.ngrams],
                                               "head": [g["head"] for g in e.ngrams],
                                               "table row": [g["row"] for g in e.ngrams],
                                               "n-gram": [" | ".join(show_token(t) for t in g["tokens"])
                                                          for g in e.ngrams]}),
                                 hide_index=True, key="insp_engram_df")
                    st.plotly_chart(built(small_bar, e.gate, [f"stream {i}" for i in range(len(e.gate))],
                                          "Engram gate per stream"), width="stretch", key="insp_engram_gate")
        with tabs[4]:
            if tabs[4].open is not False:
                if view.hc is None:
                    st.write("No mHC record.")
                else:
                    st.write(mhc_sentence(cfg.hc_mult, cfg.hc_sinkhorn_iters))
                    st.plotly_chart(built(comb_figure, view.hc, "mHC comb matrices"), width="stretch", key="insp_comb")
                    df = pd.DataFrame({f"{site} {k}": v[k] for site, v in view.hc.items() for k in ("pre", "post")})
                    df.index = [f"stream {i}" for i in range(len(df))]
                    df["RMS after layer"] = view.stream_norms
                    st.dataframe(df, key="insp_hc_df")
        with tabs[5]:
            if tabs[5].open is not False:
                st.write(LENS_TEXT)
                st.plotly_chart(built(lens_figure, view.lens, "Top next tokens after this layer"), width="stretch",
                                key="insp_lens")

# ---- whole-prompt overview -----------------------------------------------------------------------------------
st.subheader("Whole-prompt overview")
qnames = list(QUANTITIES)
# bounded prefill: which rows each layer ran (the decoder only the last ones; the lens would be blank elsewhere);
# exact prefill: the logit lens, where along the depth each token's final prediction forms
QUANTITY = url.choice("quantity", qnames, "processed" if mode == "bounded" else "lens prob. of final prediction",
                      "a quantity here", instead="the page's own choice is shown")
quantity = url.bound(st.selectbox, "insp_quantity", QUANTITY, "Quantity", qnames)
st.caption(QUANTITIES[quantity])
mat = overview(run, quantity)
st.plotly_chart(built(overview_figure, mat, run.tokens, [str(sess.num(i)) for i in range(n_layers)], roles,
                      f"{quantity}: layer x token", mark=(layer, pos), n_prompt=run.n_prompt,
                      categorical=quantity == "top expert"), width="stretch", key="insp_overview")
cov = covered_rows(run)
st.caption(records_caption(cov, quantity))

# ---- downloads ---------------------------------------------------------------------------------------------
st.subheader("Downloads")
d1, d2, d3 = st.columns(3)
with d1:
    heavy = url.bound(st.checkbox, "insp_heavy", url.flag("scores", run.n <= 512), "Include index scores (large)")
    st.download_button("Trace (JSON)", data=lambda: trace_to_json(run.trace, run.tokens, include_scores=heavy),
                       file_name="trace.json", mime="application/json", key="insp_dl_trace")
with d2:
    df = pd.DataFrame(mat, index=[f"layer {sess.num(i)}" for i in range(n_layers)])
    st.download_button("Overview table (CSV)", data=df.to_csv(), file_name=f"overview_{quantity}.csv",
                       mime="text/csv", key="insp_dl_overview")
with d3:
    tok_df = pd.DataFrame({"position": range(run.n), "id": run.ids, "token": [show_token(t) for t in run.tokens],
                           "generated": [i >= run.n_prompt for i in range(run.n)]})
    st.download_button("Tokens (CSV)", data=tok_df.to_csv(index=False), file_name="tokens.csv", mime="text/csv",
                       key="insp_dl_tokens")

# ---- a fact far past the window (lessons/far_fact.py) -----------------------------------------------------
far_fact_panel(sess, "insp", focus="inspector", pair=lambda: far_pair(sess, "insp_ff", "shares", url="ffpair"))
