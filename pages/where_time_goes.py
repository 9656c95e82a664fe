"""Where the time goes: every op's FLOPs and bytes, the roofline of real GPUs and of this machine, a deployment of one
replica over 1-8 GPUs with its three roofs, the workloads a server runs, the agent round as time bounds, experts as
a batch reaches them, and the running model measured here."""

import streamlit as st

from lessons import reproduce as snippets
from lessons.cost_check import check_rows, measure_here
from lessons.deploy import GPU_COUNTS, NODE
from lessons.roofline import GPUS, chip_rows
from lessons.where_time_goes import (
    AGENT_READ,
    AGENT_WRITTEN,
    CAVEAT,
    CHECK_TEXT,
    COUNT_TEXT,
    HERE_TEXT,
    INTRO,
    NODE_TEXT,
    PEAKS_NOTE,
    PRECISION_TEXT,
    REACH_TEXT,
    ROOF_TEXT,
    ROUTER_TEXT,
    draft_choices,
    ops_caption,
    roof_caption,
)
from ui import url
from ui.memory import run_on_click
from ui.reproduce import reproduce
from ui.session import page_header, require_model
from ui.text import lead
from ui.where_time_goes import (
    bounds,
    chips,
    decode_verdict,
    expert_table,
    fit_text,
    fits,
    flash,
    here,
    here_roofline,
    intensities,
    measured_experts,
    op_tables,
    roofline,
    round_bounds,
)

P = "wt"
BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096]
CONTEXTS = [10_000, 100_000, 1_000_000]
DRAFTS = list(draft_choices(flash()))
GPUS_PER = list(GPU_COUNTS)
sess = page_header("Where the time goes")
intro, intro_rest = lead(INTRO, 1)     # the point beside the chart; the rest under "Every op"
st.markdown(intro)

GPU = url.choice("gpu", list(GPUS), "h100", f"a GPU here ({url.either(GPUS)})")
GPUS_P = url.choice("gpus", GPUS_PER, NODE, f"a number of GPUs here (1 to {NODE})")
BATCH = url.choice("batch", BATCHES, 1, "a batch size here")
CONTEXT = url.choice("context", CONTEXTS, AGENT_READ, "a context here")
DRAFTS_P = url.choice("drafts", DRAFTS, DRAFTS[-1], f"a number of drafts (1 to {DRAFTS[-1]})")
c = st.columns(5)
gpu = url.bound(c[0].selectbox, f"{P}_gpu", GPU, "GPU", list(GPUS), format_func=lambda k: GPUS[k].name)
gpus = url.bound(c[1].select_slider, f"{P}_gpus", GPUS_P, "GPUs per replica", GPUS_PER,
                 format_func=lambda n: f"{n} (a node)" if n == NODE else str(n))
batch = url.bound(c[2].select_slider, f"{P}_batch", BATCH, "Batch (sequences)", BATCHES)
context = url.bound(c[3].select_slider, f"{P}_context", CONTEXT, "Context (tokens)", CONTEXTS,
                    format_func=lambda n: f"{n:,}")
drafts = url.bound(c[4].select_slider, f"{P}_drafts", DRAFTS_P, "DSpark drafts per verify", DRAFTS)

steps = bounds(gpu, gpus, context, batch, drafts)
st.markdown(fit_text(gpu, gpus, context, batch))
roofline(gpu, gpus, steps, key=f"{P}_roof")
for b in steps:
    st.markdown(b.sentence())
st.dataframe([b.row() for b in steps], hide_index=True, key=f"{P}_steps")
with st.expander("How one replica is spread over the GPUs"):
    st.markdown(NODE_TEXT)

st.subheader("One chip's roof")
text, _ = decode_verdict(gpu, context, batch)
st.markdown(text)
with st.expander("How to read the roofline"):
    st.markdown(ROOF_TEXT)
with st.expander("The chips' figures and where they come from"):
    st.markdown(PRECISION_TEXT)
    st.caption(PEAKS_NOTE)
    st.dataframe(chip_rows(chips()), hide_index=True, key=f"{P}_chips")
st.dataframe(intensities(gpu, context), hide_index=True, key=f"{P}_intensity")

st.subheader("Experts as a batch reaches them")
experts, reach_text = expert_table()
st.markdown(reach_text)
st.markdown(REACH_TEXT)
st.dataframe(experts, hide_index=True, key=f"{P}_experts")

st.subheader(f"The agent round: {AGENT_READ:,} tokens read, {AGENT_WRITTEN} written")
rb = round_bounds(gpu, gpus, drafts)
st.dataframe(rb.rows(), hide_index=True, key=f"{P}_round")
st.markdown(rb.sentence())
st.markdown(fits(gpu, batch))

st.subheader("Every op")
st.markdown(intro_rest)
st.markdown(COUNT_TEXT)
WORKS = {"decode": f"decode (batch {batch:,})", "verify": f"verify {drafts} drafts",
         "prefill": f"prefill {context:,} tokens"}
WORK = url.choice("work", list(WORKS), "decode", f"a workload ({url.either(WORKS)})",
                  instead="the page's own choice is shown")
work = url.bound(st.radio, f"{P}_work", WORK, "Workload", list(WORKS), horizontal=True, format_func=WORKS.get)
kinds, ops, said, moved = op_tables(work, context, batch, drafts)
st.caption(ops_caption(said))
st.markdown(moved)
st.dataframe(kinds, hide_index=True, key=f"{P}_kinds")
with st.expander("Every op, layer by layer (activations: if nothing were fused)"):
    st.dataframe(ops, hide_index=True, key=f"{P}_ops")
st.info(CAVEAT)
reproduce(snippets.where_time_goes(gpu, batch, context, drafts, gpus), "where-the-time-goes")

st.subheader("The running model on this machine")
st.markdown(HERE_TEXT)
model = require_model(sess)
res = run_on_click("Measure here", f"{P}_measure", lambda progress: measure_here(model, here(), progress=progress),
                   "Timing a prefill of 512 tokens and a few decode steps ...")
m = here()
st.caption(roof_caption(m))
if res is not None:
    st.markdown(res.sentence())
    here_roofline(res, key=f"{P}_roofhere")
st.markdown(ROUTER_TEXT)
reach = run_on_click("Count the experts the router picks", f"{P}_reach", lambda progress: measured_experts(model),
                     "Tracing 512 tokens of held-out text ...")
if reach is not None:
    st.dataframe(reach, hide_index=True, key=f"{P}_reachrows")
st.markdown(CHECK_TEXT)
chk = run_on_click("Check the count against PyTorch's flop counter", f"{P}_check",
                   lambda progress: check_rows(model, progress), "Counting FLOPs in six workloads ...")
if chk is not None:
    st.dataframe(chk, hide_index=True, key=f"{P}_checkrows")
