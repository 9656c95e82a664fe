"""Ablation lab: switch one component off at a time and compare quality, time and cache bytes side by side.
Quality numbers come from lab/training/evaluation.py's `evaluate` (through lessons/ablation.py); each configuration's
result is cached, so adding one configuration only runs that one.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from lessons import reproduce as snippets
from lessons.ablation import (
    CAVEAT,
    CONFIGS,
    FALLBACK_PROMPT,
    INTRO,
    RANDOM_WEIGHTS,
    STORIES_HELP,
    ablation_table,
    bytes_and_reads,
    config_rows,
    label,
    memory_note,
    not_run_yet,
    reading,
    run_config,
    topk_help,
)
from lessons.far_compare import TITLES, learned_line
from lessons.far_fact import CHANCE
from lessons.inspector import load_samples
from lessons.layers import bounded_note, map_line
from lessons.prompts import encode_prompt
from lessons.units import counted
from ui import url, weights
from ui.cache import built, cached_with_progress
from ui.far_fact import far_fact_panel, weights_line_link
from ui.figures_run import ablation_figure
from ui.pair import far_pair
from ui.reproduce import reproduce
from ui.session import page_header, require_model
from ui.step_pair import other_kind
from ui.text import lead, plain
from ui.url import stop

INTRO_LEAD, INTRO_REST = lead(INTRO, 2)
sess = page_header("Ablation lab", INTRO_LEAD)
far_pair(sess, "abl_pair", "ablation")     # first: the far recall that the global branch carries, on both weights
model = require_model(sess)
cfg = model.cfg
if sess.weights == "random":
    st.warning(RANDOM_WEIGHTS)
else:
    weights_line_link(sess)

with st.expander("What each configuration switches off; fine print", expanded=False):
    st.dataframe(pd.DataFrame(config_rows(cfg), columns=["configuration", "prefill", "what changes"]),
                 hide_index=True)
    st.caption(INTRO_REST)
    st.caption(CAVEAT)
    st.caption(bounded_note(cfg))
    st.caption(map_line(cfg, sess.one_based))

names = list(CONFIGS)
STORIES, NATURAL = [3, 15, 30, 90, 300], [512, 2048, 8192, 0]
samples = [s for s in load_samples() if s.kind == "long"]
topk_hi = max(1, cfg.index_topk - 1)
CHOSEN = url.several("configs", names, names, "configuration", "configurations", "showing every configuration")
TOPK = url.whole("topk", 1, topk_hi, min(4, topk_hi), f"showing {min(4, topk_hi)}")
STORIES_P = url.choice("stories", STORIES, 30, "one of " + ", ".join(map(str, STORIES)))
NATURAL_P = url.choice("natural", NATURAL, 2048, "one of " + ", ".join(map(str, NATURAL)))
COST = url.whole("cost", 0, max(0, len(samples) - 1), 0, "showing the first long sample")
chosen = url.bound(st.multiselect, "abl_configs", CHOSEN, "Configurations", names)
c1, c2, c3 = st.columns(3)
topk = url.bound(c1.slider, "abl_topk", TOPK, "Smaller top-k", 1, topk_hi, fit=lambda v: min(int(v), topk_hi),
                 help=topk_help(cfg.index_topk))
stories = url.bound(c2.selectbox, "abl_stories", STORIES_P, "Stories per configuration", STORIES,
                    help=STORIES_HELP)
natural = url.bound(c3.selectbox, "abl_natural", NATURAL_P, "Natural-text tokens", NATURAL,
                    format_func=lambda n: "all" if n == 0 else f"{n:,}", help="Held-out natural text.")
cost_sample = url.bound(st.selectbox, "abl_cost", COST, "Prompt (time and cache bytes)", range(len(samples)),
                        format_func=lambda i: samples[i].name) if samples else None
cost_ids, problem = encode_prompt(model, samples[cost_sample].text if samples else FALLBACK_PROMPT)
if problem:
    st.warning(problem)
    stop()
if not chosen:
    st.info("Pick at least one configuration.")
    stop()

# the run on the sidebar's weights and, beside it, on a recall checkpoint (plain training unless the reader picks the
# guided one): what switching the global branch off costs a model that uses it, next to one that does not
other = other_kind(sess, "abl_step")
sides = [(weights.kind_of(sess), sess)] + ([] if other is None else [(other, weights.session_for(other, sess))])


def _run(side_model, side_ids, name: str, progress):
    return run_config(side_model, name, side_ids, topk=topk if name == "smaller top-k" else None,
                      max_stories=stories, max_natural_tokens=natural or None, progress=progress)


run_col, note_col = st.columns([1, 3], vertical_alignment="center")
go = run_col.button("Run the selected configurations", type="primary", key="abl_run")
tables, missing = [], []
for kind, side in sides:
    side_ids = cost_ids if side is sess else encode_prompt(side.model, samples[cost_sample].text if samples else
                                                           FALLBACK_PROMPT)[0]
    budget = (side.label, stories, natural, tuple(side_ids))
    rows = []
    for name in chosen:
        key = budget + (name, topk if name == "smaller top-k" else None)
        if go or ("abl_done" in st.session_state and key in st.session_state["abl_done"]):
            try:
                rows.append(cached_with_progress("ablation", key,
                                                 lambda p, n=name, m=side.model, i=side_ids: _run(m, i, n, p),
                                                 f"Evaluating: {label(name, topk)} ...", max_entries=64))
                st.session_state.setdefault("abl_done", set()).add(key)
            except Exception as e:  # a failing configuration becomes a message; the others still show
                st.error(f"{label(name, topk)} failed: {plain(e)}")
        elif side is sess:
            missing.append(label(name, topk))
    if rows:
        tables.append((kind, side, ablation_table(rows)))
if missing:     # beside the button: every one chosen is named only when some have run
    said = counted(len(missing), "configuration") if len(missing) == len(chosen) else ", ".join(missing)
    note_col.caption(not_run_yet(said, len(sides)))

if tables:   # the results right under the button, one column per set; the one-story panel after them
    st.subheader("Side by side")
    for col, (kind, side, table) in zip(st.columns(len(tables)), tables):
        with col:
            name = TITLES.get(kind, side.label) if kind else side.label
            st.markdown(f"**{name}**")
            if kind not in (None, "text"):      # a recall checkpoint's behaviour keeps its training clause beside it
                st.caption(learned_line(kind, weights.record(kind), side.model.cfg.sliding_window))
            df = pd.DataFrame(table)
            st.dataframe(df, hide_index=True, key=f"abl_table_{kind or 'own'}", column_config={
                "loss": st.column_config.NumberColumn("loss (nats/token)", format="%.3f"),
                "recall_inside": st.column_config.NumberColumn("recall inside window", format="%.2f"),
                "recall_just_past": st.column_config.NumberColumn("recall just past", format="%.2f"),
                "recall_far": st.column_config.NumberColumn("recall far", format="%.2f"),
                "prefill_s": st.column_config.NumberColumn("prefill s", format="%.3f"),
                "decode_ms_per_token": st.column_config.NumberColumn("decode ms/token", format="%.1f"),
                "cache_bytes": st.column_config.NumberColumn("cache bytes", format="%d"),
            })
            st.download_button("Table (CSV)", df.to_csv(index=False), file_name=f"ablation_{kind or 'weights'}.csv",
                               mime="text/csv", key=f"abl_dl_{kind or 'own'}")
            st.plotly_chart(built(ablation_figure, table, [("loss", "held-out loss"), ("recall_far", "far recall"),
                                                           ("prefill_s", "prefill seconds"),
                                                           ("cache_bytes", "cache bytes")],
                                  f"Same prompt ({len(cost_ids)} tokens), same budget", chance=CHANCE),
                            width="stretch", key=f"abl_chart_{kind or 'own'}")
            for line in reading(table):
                st.write(line)
    st.caption(bytes_and_reads(tables[0][2]))
    st.markdown(memory_note(cfg, len(cost_ids)))
# one story, global branch on and off (lessons/far_fact.py); the weights' far recall is said at the top already
far_fact_panel(sess, "abl", focus="ablation", note=False)
reproduce(snippets.ablation(sess.weights, chosen, int(topk), int(stories), int(natural),
                            samples[cost_sample].text if samples else FALLBACK_PROMPT), "ablation")
