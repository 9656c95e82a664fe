"""Compare designs: the same cache calculator and a layer-role picture for designs that share different things."""

import json

import pandas as pd
import streamlit as st

from lessons import reproduce as snippets
from lessons.cache_calculator import LIMITS, CalcError, calculate
from lessons.designs import (
    COMPARE_DEFAULT,
    COMPARE_INTRO,
    DESIGNS,
    LINEAGE,
    UNKNOWN_NOTE,
    WATERFALL_NOTE,
    build,
    v4_to_v41_waterfall,
    with_context,
)
from lessons.units import counted, human_bytes
from ui import url
from ui.cache import built
from ui.figures_memory import compare_bar, role_strip, waterfall_figure
from ui.memory import chart, chart_format
from ui.reproduce import reproduce
from ui.session import page_header
from ui.text import plain
from ui.tour import shows
from ui.url import stop

P = "cd"


def _waterfall(fmt: str) -> None:
    """From V4-Flash to V4.1, one change at a time: the chart, then (off the tour) its story and table."""
    st.subheader("From V4-Flash to V4.1: one change at a time")
    if shows("cd_waterfall_text"):
        st.write(LINEAGE)
        st.markdown(WATERFALL_NOTE)
    fall = v4_to_v41_waterfall()
    chart(built(waterfall_figure, fall, "Bytes per token, V4-Flash to V4.1-Flash"), f"{P}_waterfall", fmt,
          "v4-to-v41")
    if shows("cd_waterfall_text"):
        st.dataframe(pd.DataFrame([{"step": w.step, "bytes per token after": round(w.bytes_per_token, 2),
                                    "change": round(w.change, 2), "what changes": w.why} for w in fall]),
                     hide_index=True, key=f"{P}_waterfall_table")
    st.caption(f"{fall[0].bytes_per_token:,.2f} / {fall[-1].bytes_per_token:,.2f} = "
               f"{fall[0].bytes_per_token / fall[-1].bytes_per_token:.2f}x smaller per token.")


sess = page_header("Compare designs")
if not shows("cd_compare"):     # the tour's cache stop: the waterfall alone, the rest of the page folded away
    _waterfall("png")
    stop()
st.markdown(COMPARE_INTRO)

keys = [k for k in DESIGNS if k != "teaching"]
CTX = 1 << 20
c = st.columns([1, 1, 3])
lo, hi = LIMITS["context"]
ctx = url.bound(c[0].number_input, f"{P}_ctx", url.whole("ctx", lo, hi, CTX, f"showing {CTX:,}"),
                "Context length (tokens)", lo, hi)
lo, hi = LIMITS["batch"]
batch = url.bound(c[1].number_input, f"{P}_batch", url.whole("batch", lo, hi, 1, "showing 1"), "Batch (sequences)",
                  lo, hi)
CHOSEN = url.several("designs", keys, COMPARE_DEFAULT, "design", "designs", "showing the default designs")
sel = url.bound(c[2].multiselect, f"{P}_designs", CHOSEN, "Designs", keys, format_func=lambda k: DESIGNS[k][0])
if not sel:
    st.info("Choose at least one design.")
    stop()

calcs = []
for key in sel:
    try:
        k = with_context(key, int(ctx), int(batch))
        calcs.append(calculate(build(key, k), k))
    except CalcError as e:
        st.error(f"{DESIGNS[key][0]}: {plain(e)}")
if not calcs:
    stop()
ref = next((c.hbm for c in calcs if c.design.key == "v4.1-flash"), None)

rows = []
for c in calcs:
    h = c.hbm
    fixed = h.total - round(h.growth_per_token * h.context)
    rows.append({"design": c.design.label, "facts": c.design.status,
                 "added per token (B)": round(h.growth_per_token, 1), "fixed part": human_bytes(max(0, fixed)),
                 f"HBM at {counted(int(ctx), 'token')}": human_bytes(h.total), "HBM bytes": h.total,
                 "vs V4.1-Flash": f"{h.total / ref.total:,.2f}x" if ref else "n/a",
                 "persistent per saved context": human_bytes(c.persistent.total)})
st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch", key=f"{P}_table")
reproduce(snippets.compare_designs(list(sel), int(ctx), int(batch)), "compare-designs")
st.caption("'Added per token' is what the growing stores take per further token; the fixed part (windows, recurrent "
           "states) does not grow. The persistent column is a separate budget (host memory or SSD), never added "
           "to the accelerator's.")

fmt = chart_format(f"{P}_fmt")
log = url.bound(st.toggle, f"{P}_log", url.flag("log", True), "Log scale")
chart(built(compare_bar, [(c.design.short or c.design.label, c.hbm) for c in calcs],
            f"Cache on the accelerator at {counted(int(ctx), 'token')}", log),
      f"{P}_bar", fmt, "compare-designs")
chart(built(role_strip, [c.design for c in calcs], sess.one_based), f"{P}_roles", fmt, "layer-roles")

_waterfall(fmt)

st.subheader("What is shared")
aspects = ["prepared data", "selection", "update rule (weights)", "per-token state"]
st.table(pd.DataFrame([{"design": c.design.label, **{a: c.design.shares.get(a, "") for a in aspects}}
                       for c in calcs]).set_index("design"))
st.markdown("Sharing **prepared data** saves storage: fewer copies of the same entries. Sharing **the update rule** "
            "saves weights, not cache: a looped block still keeps K/V for every application. A **fixed-size state** "
            "changes how memory grows with the context, at the price of keeping only what the state can hold.")

st.subheader("Sources and what is not known")
st.warning(UNKNOWN_NOTE)
for c in calcs:
    with st.expander(f"{c.design.label} ({c.design.status})"):
        st.markdown(c.design.summary)
        st.markdown("**Sources:**\n" + "\n".join(f"- {s}" for s in c.design.sources))
        if c.design.unknowns:
            st.markdown("**Not known / not counted:**\n" + "\n".join(f"- {u}" for u in c.design.unknowns))

d1, d2 = st.columns(2)       # the files are written when the reader clicks, not on every rerun
d1.download_button("Comparison as CSV", lambda: pd.DataFrame(rows).to_csv(index=False).encode(),
                   file_name=f"compare-{int(ctx)}.csv", mime="text/csv", key=f"{P}_csv")
d2.download_button("Derivations as JSON",
                   lambda: json.dumps({c.design.key: json.loads(c.to_json()) for c in calcs}, indent=2).encode(),
                   file_name=f"compare-{int(ctx)}.json", mime="application/json", key=f"{P}_json")
