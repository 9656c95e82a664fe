"""Cached computations and drawing for "Where the time goes" (the lesson itself is lessons/where_time_goes.py)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from lessons.cost import Workload, cost
from lessons.cost_check import Here
from lessons.deploy import StepBound, deployment, fewest_gpus, fit
from lessons.expert_reach import expert_rows, measured_reach, measured_rows, reach_sentence, text_ids
from lessons.roofline import (
    GPUS,
    Chip,
    Machine,
    compute_bound_batch,
    fit_sentence,
    machine,
    per_sequence,
    place,
    verdict,
)
from lessons.where_time_goes import (
    RoundBounds,
    agent_round,
    bytes_sentence,
    intensity_rows,
    kind_rows,
    op_rows,
    workload_bounds,
)
from model import V41Config
from ui.cache import built
from ui.figures_cost import roofline_figure
from ui.figures_memory import chart_config

PRESET = "v4.1-flash"


@st.cache_resource(show_spinner=False)
def flash() -> V41Config:
    return V41Config.preset(PRESET)


@st.cache_resource(show_spinner="Measuring this machine: a matmul and a memory copy ...")
def here() -> Machine:
    """This machine's roof, measured once per server process."""
    return machine("cpu")


def chips(with_here: bool = True) -> list[Chip]:
    return list(GPUS.values()) + ([here().chip()] if with_here else [])


@st.cache_data(show_spinner=False, max_entries=64)
def decode_verdict(chip_key: str, context: int, batch: int) -> tuple[str, bool]:
    """The verdict sentence for a decode step on a GPU of the table, and whether the step is memory-bound."""
    cfg, chip = flash(), GPUS[chip_key]
    p = place(cost(cfg, Workload("decode", context, batch=batch)), chip)
    per_seq = per_sequence(cost(cfg, Workload("decode", context)))
    return verdict(p, compute_bound_batch(cfg, chip, context), batch, per_seq), p.memory_bound


@st.cache_data(show_spinner=False, max_entries=64)
def bounds(chip_key: str, gpus: int, context: int, batch: int, drafts: int) -> list[StepBound]:
    return workload_bounds(flash(), deployment(chip_key, gpus), context, batch, drafts)


@st.cache_data(show_spinner=False, max_entries=64)
def fit_text(chip_key: str, gpus: int, context: int, batch: int) -> str:
    f = fit(flash(), deployment(chip_key, gpus), context, batch)
    if f.fits:
        return f.sentence()
    need = fewest_gpus(flash(), GPUS[chip_key], context, batch)
    more = f"at least {need} of them would" if need else "not even a full node would"
    return f.sentence() + f" The times below are as if it did: {more} hold this replica."


@st.cache_data(show_spinner=False, max_entries=32)
def round_bounds(chip_key: str, gpus: int, drafts: int) -> RoundBounds:
    return agent_round(flash(), deployment(chip_key, gpus), drafts)


@st.cache_data(show_spinner=False, max_entries=32)
def intensities(chip_key: str, context: int) -> pd.DataFrame:
    return pd.DataFrame(intensity_rows(flash(), GPUS[chip_key], context))


@st.cache_data(show_spinner=False, max_entries=8)
def fits(chip_key: str, batch: int) -> str:
    return fit_sentence(flash(), GPUS[chip_key], batch)


def expert_table() -> tuple[pd.DataFrame, str]:
    return pd.DataFrame(expert_rows(flash())), reach_sentence(flash())


def measured_experts(model) -> pd.DataFrame:
    return pd.DataFrame(measured_rows(measured_reach(model, text_ids(model)), model.cfg))


def roofline(chip_key: str, gpus: int, steps: list[StepBound], key: str) -> None:
    """The roofline chart: every chip's roof, the chosen deployment's interconnect roof, and the workloads placed
    at the FLOP/s per GPU their bound allows."""
    chip = GPUS[chip_key]
    points = [(b.label, b.intensity, b.flops / b.seconds, f"bound by {b.binding}, at least {b.seconds * 1e3:,.3g} ms")
              for b in steps]
    linked = [b for b in steps if b.link_s]
    ceiling = None
    if linked:   # the most exchange-heavy workload's interconnect roof: FLOP/s per GPU its link time allows
        worst = min(linked, key=lambda b: b.flops / b.link_s)
        ceiling = (f"NVLink roof ({worst.label})", worst.flops / worst.link_s)
    name = steps[0].deploy.name if steps else chip.name
    fig = built(roofline_figure, chips(), chip_key, points, f"Roofline per GPU on {name}", ceiling)
    st.plotly_chart(fig, width="stretch", key=key, config=chart_config("png", "roofline"))


@st.cache_data(show_spinner=False, max_entries=16)
def op_tables(kind: str, context: int, batch: int, drafts: int) -> tuple[pd.DataFrame, pd.DataFrame, str, str]:
    cfg = flash()
    wl = {"prefill": Workload("prefill", context, "bounded", chunk=context),
          "decode": Workload("decode", context, batch=batch),
          "verify": Workload("verify", context, drafts=drafts)}[kind]
    c = cost(cfg, wl)
    return pd.DataFrame(kind_rows(c)), pd.DataFrame(op_rows(c)), wl.describe(), bytes_sentence(c)


def here_roofline(res: Here, key: str) -> None:
    """This machine's roof with the running model's measured prefill and decode step at the FLOP/s they reached."""
    roof = res.machine.chip()
    points = [(label, x, y, f"{y / 1e9:,.2f} GFLOP/s reached") for label, x, y in res.achieved()]
    fig = built(roofline_figure, [roof], roof.key, points, title="The running model on this machine's roof")
    st.plotly_chart(fig, width="stretch", key=key, config=chart_config("png", "roofline-here"))
