"""Streamlit helpers shared by the Memory pages: cached parameter counts, chart export, derivation downloads,
and knob widgets mirrored in the URL."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd
import streamlit as st

from lessons.cache_calculator import (
    KNOB_HELP,
    LIMITS,
    MODES,
    SUPPORTED_BITS,
    CalcError,
    Calculation,
    Knobs,
    parse_knobs,
)
from lessons.design_inputs import combination_note, digits_note, knob_tooltip, range_note, what_moved
from model import V41Config, count_params
from ui import url
from ui.figures_memory import chart_config
from ui.queue import heavy_run
from ui.text import plain
from ui.url import KEEP


def _numbers(pc) -> dict:
    """A ParamCount as plain numbers (what the pages read; cacheable)."""
    return {"total": pc.total, "backbone": pc.backbone, "engram": pc.engram, "drafter": pc.drafter,
            "vision": pc.vision, "active_prefill": pc.active_prefill, "active_decode": pc.active_decode,
            "active_per_layer": list(pc.active_per_layer), "engram_proj_per_layer": pc.engram_proj_per_layer}


@st.cache_data(show_spinner="Counting parameters on the meta device (once per server; ~10 s for the full config) ...")
def param_counts(preset: str) -> dict:
    """count_params of a preset, as plain numbers (the full config takes seconds: computed once)."""
    return _numbers(count_params(V41Config.preset(preset)))


def config_counts(model) -> dict:
    """count_params of the running model's own config (small: fast)."""
    return _numbers(count_params(model.cfg))


def chart(fig, key: str, fmt: str, filename: str) -> None:
    st.plotly_chart(fig, width="stretch", key=key, config=chart_config(fmt, filename))


FMT = url.choice("fmt", ["png", "svg"], "png", "png or svg", instead="showing PNG instead")


def chart_format(key: str) -> str:
    return url.bound(st.radio, key, FMT, "Chart download format (camera button above each chart)", ["png", "svg"],
                     horizontal=True, format_func=str.upper)


def derivation_table(calc: Calculation) -> pd.DataFrame:
    cols = ["memory", "item", "kind", "entries_rule", "entries", "numbers", "copies", "bits", "batch", "bytes",
            "read_by", "layers", "note"]
    return pd.DataFrame(calc.records())[cols + ["formula"]]


def downloads(calc: Calculation, stem: str, key: str) -> None:
    """The derivation as CSV and JSON, written when the reader clicks (not on every rerun of the page)."""
    c1, c2 = st.columns(2)
    c1.download_button("Derivation as CSV", lambda: derivation_table(calc).to_csv(index=False).encode(),
                       file_name=f"{stem}.csv", mime="text/csv", key=f"{key}_csv")
    c2.download_button("Derivation as JSON", lambda: calc.to_json().encode(), file_name=f"{stem}.json",
                       mime="application/json", key=f"{key}_json")


# ---- knobs mirrored in the URL -------------------------------------------------------------------
# The inputs travel as text and are read as one set by lessons.cache_calculator.parse_knobs (a group is checked
# against the layers, and each message names the design's own default), so their widgets are seeded here together.
KNOBS = {name: url.any_text(name) for name in list(LIMITS) + ["bits", "mode"]}

def init_knobs(prefix: str, defaults: Knobs, force: bool = False, fresh: bool = False) -> list[str]:
    """Seed every knob's widget value (ui.url rule: the URL's value on arrival, validated, then the session's,
    then the design's default; `force`: the defaults, after a change of design; `fresh`: a link to another design
    than the session's, whose URL leaves out the inputs at that design's defaults, so a missing one is its default,
    not the session's value for the previous design). Returns the URL's problems.
    Each knob is checked by its own key: Streamlit drops a widget's value while its page is not drawn, so a
    flag saying "already initialised" would outlive the values it speaks for."""
    raw = {name: p.read() for name, p in KNOBS.items()} if not force else {}
    k, msgs = parse_knobs(raw, defaults)
    for name, v in dataclasses.asdict(k).items():
        key = f"{prefix}_{name}"
        if force or fresh or raw.get(name) is not None or key not in st.session_state:
            st.session_state[key] = v if raw.get(name) is not None else getattr(defaults, name)
    return msgs


def knob_widget(prefix: str, name: str, label: str | None = None, col=None, design: str | None = None) -> None:
    """One input of a design; the page draws only those the design takes (a greyed input would show a value the
    design ignores). With `design`, a typed number that leaves that design uncomputable is refused too."""
    where = col or st
    key = f"{prefix}_{name}"
    help_ = knob_tooltip(name)
    text = label or KNOB_HELP[name].capitalize()
    if name == "bits":
        where.selectbox(text, SUPPORTED_BITS, key=key, help=help_, persist_state=KEEP)
    elif name == "mode":
        where.radio(text, MODES, key=key, help=help_, horizontal=True, persist_state=KEEP)
    else:
        # no min/max on the box: a browser clamps or drops an out-of-range number without a word; the change
        # callback refuses it with a message instead (lessons.design_inputs.range_note)
        where.number_input(text, step=1, key=key, help=help_, on_change=_typed, args=(prefix, name, text, design),
                           persist_state=KEEP)
        st.session_state[f"{key}_was"] = st.session_state[key]     # what the next change is compared with


def _typed(prefix: str, name: str, label: str, design: str | None = None) -> None:
    """Check a changed number: one outside the input's range, or one the design cannot compute with the other
    inputs, puts the previous value back and keeps a note saying so (lessons.design_inputs.range_note,
    lessons.design_inputs.combination_note), so the page and its link always hold a design that computes. One that fell
    to a few units keeps a note too, since the browser's number box turns 1e9 into 1 and the app sees only the 1
    (lessons.design_inputs.digits_note)."""
    key = f"{prefix}_{name}"
    was, now = st.session_state.get(f"{key}_was"), st.session_state[key]
    short = label.split(" (")[0]
    if isinstance(was, int) and isinstance(now, (int, float)) and not isinstance(now, bool):
        refused = range_note(name, short, int(now), was)
        if not refused and design is not None:
            refused = combination_note(design, read_knobs(prefix), short, int(now), was)
        if refused:
            st.session_state[key] = was           # the last good value stays; the note says why
            st.session_state[f"{prefix}_typed"] = (key, was, refused)
            return
    note = digits_note(name, short, was, now) if isinstance(was, int) else None
    st.session_state[f"{prefix}_typed"] = (key, now, note) if note else None


@dataclass
class Change:
    """The calculator's results now and before the reader's last change of input (None before any change)."""
    now: dict[str, float]
    before: dict[str, float] | None
    said: str                       # which inputs moved ("" when none did)

    def delta(self, name: str, fmt: Callable[[float], str] | str) -> str | None:
        """A metric's delta text ("+114 MiB", "-2.0 B"; st.metric reads the leading "-" as a fall), or None."""
        if self.before is None or self.now[name] == self.before[name]:
            return None
        d = self.now[name] - self.before[name]
        shown = fmt(abs(d)) if callable(fmt) else fmt.format(abs(d))
        return ("+" if d > 0 else "-") + shown


def change_since_last(prefix: str, state: tuple, values: dict[str, float]) -> Change:
    """Compare this run's results with those of the inputs shown before the last change. A rerun that changes no
    input (a tab, a download) keeps the comparison, so the arrows stay until the next change."""
    key = f"{prefix}_change"
    kept = st.session_state.get(key)
    if kept is None:
        st.session_state[key] = {"state": state, "values": values, "before": None}
    elif kept["state"] != state:
        st.session_state[key] = {"state": state, "values": values, "before": (kept["state"], kept["values"])}
    else:
        st.session_state[key]["values"] = values
    before = st.session_state[key]["before"]
    if before is None:
        return Change(values, None, "")
    return Change(values, before[1], what_moved(before[0], state))


def typed_warning(prefix: str) -> None:
    """The note `_typed` kept, while its input still holds the value the note speaks of."""
    note = st.session_state.get(f"{prefix}_typed")
    if note and st.session_state.get(note[0]) == note[1]:
        st.warning(note[2])


def read_knobs(prefix: str) -> Knobs:
    return Knobs(**{f.name: st.session_state[f"{prefix}_{f.name}"] for f in dataclasses.fields(Knobs)})


def mirror_knobs(k: Knobs, used: tuple[str, ...], defaults: Knobs) -> None:
    """Write the knobs a design uses into the URL (defaults left out to keep links short)."""
    for name, p in KNOBS.items():
        url.to_link(p.but(default=str(getattr(defaults, name))), str(getattr(k, name)) if name in used else None)


def run_on_click(label: str, key: str, compute, text: str):
    """A button that runs `compute(progress)` with a progress bar; the result stays in session state across
    reruns (a new click replaces it). Errors become a message, never a traceback."""
    if st.button(label, key=key):
        with heavy_run(label):                 # one server-wide queue for long runs (ui.queue)
            bar = st.progress(0.0, text=text)
            try:
                with st.spinner(text):
                    st.session_state[f"{key}_result"] = compute(
                        lambda f, msg: bar.progress(min(1.0, max(0.0, float(f))), text=msg))
            except (CalcError, RuntimeError, ValueError) as e:
                st.error(f"This could not run: {plain(e)}")
            finally:
                bar.empty()
    return st.session_state.get(f"{key}_result")
