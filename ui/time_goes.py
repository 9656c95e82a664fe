"""Cached computations and drawing for "Where the time goes" (the lesson itself is lessons/time_goes.py)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from lessons.cost import Workload, cost
from lessons.cost_check import Here
from lessons.roofline import (
    GPUS,
    Chip,
    Machine,
    compute_bound_batch,
    fit_sentence,
    machine,
    place,
    release_workloads,
    verdict,
)
from lessons.time_goes import RoundBounds, agent_round, intensity_rows, kind_rows, op_rows
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
    return verdict(p, compute_bound_batch(cfg, chip, context), batch), p.memory_bound


@st.cache_data(show_spinner=False, max_entries=32)
def round_bounds(chip_key: str, drafts: int) -> RoundBounds:
    return agent_round(flash(), GPUS[chip_key], drafts)


@st.cache_data(show_spinner=False, max_entries=32)
def intensities(chip_key: str, context: int) -> pd.DataFrame:
    return pd.DataFrame(intensity_rows(flash(), GPUS[chip_key], context))


@st.cache_data(show_spinner=False, max_entries=8)
def fits(chip_key: str, batch: int) -> str:
    return fit_sentence(flash(), GPUS[chip_key], batch)


def roofline(chip_key: str, context: int, batch: int, drafts: int, key: str) -> None:
    """The roofline chart: every chip's roof, the release's workloads placed under the chosen GPU."""
    cfg, chip = flash(), GPUS[chip_key]
    ws = release_workloads(cfg, context, batch, drafts, prompt=context)
    labels = {"prefill": f"prefill {context:,} tokens", "decode": "decode, batch 1",
              "decode_batch": f"decode, batch {batch:,}", "verify": f"verify {drafts} drafts"}
    points = [(p.label, p.intensity, p.attainable, p.bound) for p in (place(c, chip, labels[k]) for k, c in ws.items())]
    fig = built(roofline_figure, chips(), chip_key, points)
    st.plotly_chart(fig, width="stretch", key=key, config=chart_config("png", "roofline"))


@st.cache_data(show_spinner=False, max_entries=16)
def op_tables(kind: str, context: int, batch: int, drafts: int) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    cfg = flash()
    wl = {"prefill": Workload("prefill", context, "bounded", chunk=context),
          "decode": Workload("decode", context, batch=batch),
          "verify": Workload("verify", context, drafts=drafts)}[kind]
    c = cost(cfg, wl)
    return pd.DataFrame(kind_rows(c)), pd.DataFrame(op_rows(c)), wl.describe()


def here_roofline(res: Here, key: str) -> None:
    """This machine's roof with the running model's measured prefill and decode step at the FLOP/s they reached."""
    roof = res.machine.chip()
    points = [(label, x, y, f"{y / 1e9:,.2f} GFLOP/s reached") for label, x, y in res.achieved()]
    fig = built(roofline_figure, [roof], roof.key, points, title="The running model on this machine's roof")
    st.plotly_chart(fig, width="stretch", key=key, config=chart_config("png", "roofline-here"))
