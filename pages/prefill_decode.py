"""Prefill vs decode: the agent-loop round, active parameters per token, work per round, and measured time."""

import dataclasses

import pandas as pd
import streamlit as st

from lessons import reproduce as snippets
from lessons.cache_calculator import CalcError, calculate
from lessons.designs import build, defaults
from lessons.layers import bounded_note
from lessons.units import counted, human_flops
from lessons.workload import (
    CLAIM_NOTE,
    MEASURE_TEXT,
    RELEASE_ACTIVE,
    V41_SPLIT,
    WORK_NOT_TIME,
    WORKLOAD_INTRO,
    WORKLOADS,
    active_counts,
    agent_round,
    cache_growth,
    measure_round,
)
from model import V41Config
from ui import url
from ui.cache import built
from ui.figures_memory import pair_bar
from ui.memory import config_counts, param_counts, run_on_click
from ui.reproduce import reproduce
from ui.session import page_header, require_model
from ui.text import plain
from ui.tour import shows
from ui.url import stop

P = "pd"
sess = page_header("Prefill vs decode")
if shows("pd_intro"):       # folded on the tour's stop, which is about the bars below
    st.markdown(WORKLOAD_INTRO)
    st.subheader("One round of work")


def _apply_workload() -> None:
    """Choosing a workload starts from its own counts."""
    _, r, w = WORKLOADS[st.session_state[f"{P}_workload"]]
    st.session_state[f"{P}_read"], st.session_state[f"{P}_written"] = r, w


WORKLOAD = url.choice("workload", list(WORKLOADS), "agent", "a workload here",
                      instead=f"showing {WORKLOADS['agent'][0]} instead")
workload = url.bound(st.radio, f"{P}_workload", WORKLOAD, "Workload", list(WORKLOADS),
                     format_func=lambda k: WORKLOADS[k][0], horizontal=True, on_change=_apply_workload)
_, w_read, w_written = WORKLOADS[workload]
c = st.columns(3)
MAX_ROUND_TOKENS, MAX_ROUNDS = 10_000_000, 100_000
read = url.bound(c[0].number_input, f"{P}_read", url.whole("read", 1, MAX_ROUND_TOKENS, w_read, f"showing {w_read:,}"),
                 "Tokens read per round", 1, MAX_ROUND_TOKENS)
written = url.bound(c[1].number_input, f"{P}_written",
                    url.whole("written", 1, MAX_ROUND_TOKENS, w_written, f"showing {w_written:,}"),
                    "Tokens written per round", 1, MAX_ROUND_TOKENS)
rounds = url.bound(c[2].number_input, f"{P}_rounds", url.whole("rounds", 1, MAX_ROUNDS, 1, "showing 1"), "Rounds", 1,
                   MAX_ROUNDS)

pc = param_counts("v4.1-flash")
try:
    work = agent_round(int(read), int(written), pc["active_prefill"], pc["active_decode"], pc["backbone"], int(rounds))
except CalcError as e:
    st.error(plain(e))
    stop()

m = st.columns(4)
ratio = f"{work.token_ratio:,.0f} : 1" if work.token_ratio >= 1 else f"1 : {1 / work.token_ratio:,.0f}"
m[0].metric("Read : written", ratio)
m[1].metric("Active / prompt token", f"{pc['active_prefill'] / 1e9:.1f}B", help=f"{pc['active_prefill']:,}")
m[2].metric("Active / generated token", f"{pc['active_decode'] / 1e9:.1f}B", help=f"{pc['active_decode']:,}")
m[3].metric("Stored in the backbone", f"{pc['backbone'] / 1e9:,.0f}B", help=f"{pc['backbone']:,}")
a, b = st.columns(2)
with a:
    st.plotly_chart(built(pair_bar, ["read (prefill)", "written (decode)"], [work.read * rounds, work.written * rounds],
                          "Tokens", [f"{work.read * rounds:,}", f"{work.written * rounds:,}"]),
                    width="stretch", key=f"{P}_tokens")
with b:
    st.plotly_chart(built(pair_bar, ["prefill", "decode"], [work.prefill_flops, work.decode_flops],
                          "Weight-multiply work (FLOPs)", [human_flops(work.prefill_flops),
                                                           human_flops(work.decode_flops)]),
                    width="stretch", key=f"{P}_work")
if not shows("pd_rest"):
    stop()
st.markdown(V41_SPLIT)
with st.expander("Fine print: what the active counts include, and bounded replay"):
    st.caption(active_counts(pc))
    st.caption(RELEASE_ACTIVE)
    st.caption(bounded_note(V41Config.preset("v4.1-flash"), "the full-size DeepSeek-V4.1-Flash"))
st.dataframe(pd.DataFrame([{"item": i, "formula": f, "value": shown} for i, f, _, shown in work.rows]),
             hide_index=True, key=f"{P}_rows")
st.markdown(work.split_sentence())
reproduce(snippets.prefill_decode(int(read), int(written), int(rounds)), "prefill-decode-round")
st.info(WORK_NOT_TIME)
st.markdown(CLAIM_NOTE)

k = dataclasses.replace(defaults("v4.1-flash"), context=min(work.read + work.written, 1 << 24))
try:
    grow = calculate(build("v4.1-flash", k), k).hbm.growth_per_token
    st.caption(cache_growth(grow, work.read + work.written))
except CalcError:
    pass

st.subheader("Measured on the running model")
st.markdown(MEASURE_TEXT)
model = require_model(sess)
c = st.columns(3)
MEASURE_READ, MEASURE_WRITTEN = 8192, 512     # the measured round's limits (seconds on CPU)
t_read = url.bound(c[0].number_input, f"{P}_tread", url.whole("tread", 1, MEASURE_READ, 500, "showing 500"),
                   "Tokens read", 1, MEASURE_READ)
t_written = url.bound(c[1].number_input, f"{P}_twritten", url.whole("twritten", 1, MEASURE_WRITTEN, 5, "showing 5"),
                      "Tokens written", 1, MEASURE_WRITTEN)
mode = url.bound(c[2].radio, f"{P}_mode", url.PREFILL_MODE, "Prefill mode", url.PREFILL_MODES, horizontal=True)
res = run_on_click("Measure one round", f"{P}_measure",
                   lambda progress: measure_round(model, int(t_read), int(t_written), mode, progress),
                   f"Prefill {counted(int(t_read), 'token')}, then decode {int(t_written):,} ...")
if res is not None:
    tiny = config_counts(model)
    rows = [
        {"phase": f"prefill ({res.mode})", "tokens": res.read, "seconds": round(res.prefill_s, 3),
         "ms per token": round(res.prefill_ms_per_token, 2), "active params per token": tiny["active_prefill"]},
        {"phase": "decode", "tokens": res.written, "seconds": round(res.decode_s, 3),
         "ms per token": round(res.decode_ms_per_token, 2), "active params per token": tiny["active_decode"]},
    ]
    st.dataframe(pd.DataFrame(rows), hide_index=True, key=f"{P}_measured")
    st.markdown(res.sentence(tiny["active_prefill"], tiny["active_decode"]))
