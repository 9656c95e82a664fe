"""DSpark draft & verify: step through drafting and verification for a prompt, then the statistics of a whole
run (acceptance per position, accepted length vs the formula, confidence calibration, speed-up against plain
decoding with identical output). Built on model/inference/speculative.py (`speculative_start`, `verify_step`,
`summarize`) and model/inference/generation.py (`speculative_generate`); user text is shown only through widgets,
st.text/st.code and dataframes.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from lessons import reproduce as snippets
from lessons.dspark import (
    ALL_ACCEPTED,
    AUTO_NOTE,
    DEFINITIONS,
    GREEDY_DIFFERS,
    INTRO,
    NO_DRAFTER,
    NO_DRAFTS,
    PLAIN_PASSES,
    PRESS_START,
    RANDOM_DRAFTER,
    RULE_TEXT,
    SAMPLED_DIFFERS,
    SIM_P,
    SIM_Q,
    SIM_TEXT,
    WHOLE_RUN,
    active_sentence,
    block_sentence,
    cache_rows,
    limit_why,
    measured_sentence,
    passes_help,
    position_rows,
    rejected,
    simulate,
    simulation_rows,
    state_caption,
    step_rows,
    step_sentence,
    summary_rows,
)
from lessons.inspector import load_samples
from model import Sampler
from model.arch import Drafter
from model.inference import (
    SpecStats,
    expected_tokens_per_pass,
    generate,
    speculative_generate,
    speculative_start,
    verify_step,
)
from ui import url
from ui.cache import built, cached_with_progress
from ui.figures import show_token
from ui.figures_run import acceptance_figure, calibration_figure
from ui.limits import DSPARK_TOKENS, LONG_PROMPT_CHARS
from ui.memory import param_counts
from ui.prompt import prompt_ids, sample_or_text
from ui.reproduce import reproduce
from ui.session import page_header, require_model
from ui.text import lead, plain
from ui.url import KEEP, stop

INTRO_LEAD, INTRO_REST = lead(INTRO, 2)
sess = page_header("DSpark: draft, then verify", INTRO_LEAD)
_pc = param_counts("v4.1-flash")
st.caption(active_sentence(_pc["active_decode"], _pc["backbone"]))
model = require_model(sess)
cfg = model.cfg
with st.expander("What a kept guess costs, what happens to a wrong one, and the words used here", expanded=False):
    st.write(INTRO_REST)
    st.caption(block_sentence(cfg.dspark_block_size))
    st.dataframe(pd.DataFrame(DEFINITIONS, columns=["term", "meaning"]), hide_index=True)


@st.cache_resource(show_spinner="Preparing a random drafter ...")
def _random_drafter(weights_key: str) -> Drafter:
    """A freshly initialised drafter for models shipped without one (kept apart from the shared model)."""
    return Drafter(cfg).init_weights(model, seed=0).to(model.device).eval()


drafter = model.mtp if isinstance(getattr(model, "mtp", None), Drafter) else None
if drafter is None:
    if cfg.num_nextn_predict_layers < 1:
        st.info(NO_DRAFTER)
        stop()
    drafter = _random_drafter(sess.label)
    st.warning(RANDOM_DRAFTER)

# ---- settings --------------------------------------------------------------------------------------------------
samples = load_samples()
sample_or_text("ds", samples, 0, LONG_PROMPT_CHARS, height=90)
text = st.session_state["ds_prompt"]
c1, c2, c3, c4 = st.columns(4)
RULES, MODES = ["greedy", "stochastic"], ["bounded", "exact"]
gmax = drafter.max_draft
dl_opts = ["max", "auto"] + list(range(1, gmax))    # "max" is gmax: listed once
MAX_NEW, MAX_SEED = 128, 10_000
# a link may name the longest draft by its number, and a session from before "max" stood for it may hold it
DRAFT = url.choice("draft", dl_opts + [gmax], "max", f"a draft length here (max, auto or 1..{gmax})")
rule = url.bound(c1.radio, "ds_rule", url.choice("rule", RULES, "greedy", "a verification rule (greedy or stochastic)"),
                 "Verification rule", RULES)
temperature = url.bound(c1.slider, "ds_temp", url.decimal("temp", 0.1, 2.0, 1.0), "Temperature", 0.1, 2.0, step=0.1,
                        disabled=rule == "greedy")
draft_length = url.bound(c2.selectbox, "ds_dl", DRAFT, "Draft length", dl_opts,
                         fit=lambda v: v if v in dl_opts else "max",     # gmax, or a length past this block
                         format_func=lambda v: f"{gmax} (every drafted position of the block)" if v == "max" else
                         "auto (confidence)" if v == "auto" else str(v))
threshold = url.bound(c2.slider, "ds_thr", url.decimal("thr", 0.05, 0.95, 0.3), "Confidence threshold (auto)", 0.05,
                      0.95, step=0.05, disabled=draft_length != "auto", help=AUTO_NOTE)
max_new = url.bound(c3.number_input, "ds_new", url.whole("gen", 1, MAX_NEW, 24, "showing 24"), "New tokens", 1,
                    MAX_NEW)
draw_seed = url.bound(c3.number_input, "ds_seed", url.whole("seed", 0, MAX_SEED, 0, "showing 0"), "Seed", 0,
                      MAX_SEED, disabled=rule == "greedy")
mode = url.bound(c4.radio, "ds_mode", url.PREFILL_MODE, "Prefill", url.PREFILL_MODES)
room = cfg.max_position_embeddings - int(max_new) - drafter.block_size
limit = max(1, min(DSPARK_TOKENS, room))
why = limit_why(int(max_new), drafter.block_size, cfg.max_position_embeddings, room < DSPARK_TOKENS)
ids = prompt_ids(model, "ds", text, limit, why, LONG_PROMPT_CHARS)
temp = 0.0 if rule == "greedy" else float(temperature)
settings = (sess.label, tuple(ids), rule, temp, str(draft_length), float(threshold), int(max_new), int(draw_seed), mode)


def tok(i: int | None) -> str:
    return "" if i is None else show_token(model.decode([int(i)]))


# ---- the rule is lossless: a simulation ------------------------------------------------------------------------
with st.expander("Why checking loses nothing: a simulation", expanded=False):
    st.write(SIM_TEXT)
    sim = st.cache_data(show_spinner=False)(simulate)(list(SIM_P), list(SIM_Q), n=5000, seed=0)
    st.dataframe(pd.DataFrame(simulation_rows(sim)).round(3), hide_index=True, key="ds_sim")
    st.write(sim.sentence())

# ---- step through ------------------------------------------------------------------------------------------------
st.subheader("Step through")
st.caption(RULE_TEXT[rule])
state = st.session_state.get("ds_state")
if state is not None and st.session_state.get("ds_state_key") != settings:
    state = None  # the settings changed: the old session no longer matches
b1, b2, b3 = st.columns(3)
if b1.button("Start (read the prompt)", key="ds_start"):
    try:
        state = speculative_start(model, drafter, ids, int(max_new), sampler=Sampler(temp, 1.0, int(draw_seed)),
                                  prefill_mode=mode, draft_length=draft_length, confidence_threshold=float(threshold))
    except Exception as e:
        st.error(f"Could not start: {plain(e)}")
        stop()
    st.session_state["ds_state"], st.session_state["ds_state_key"] = state, settings
if b2.button("Draft & verify one step", key="ds_step", disabled=state is None or state.done):
    verify_step(state)
if b3.button("Reset", key="ds_reset"):
    st.session_state.pop("ds_state", None)
    state = None

if state is None:
    st.info(PRESS_START)
else:
    st.text("Output so far: " + model.decode(state.tokens))
    st.caption(state_caption(state.prompt_tokens, state.cache.length, len(state.log), state.done))
    if not state.done:
        st.code(tok(state.anchor), language=None)
    if state.log:
        n = len(state.log)
        if st.session_state.get("ds_seen_steps") != n or "ds_step_view" not in st.session_state:  # a new step: show it
            st.session_state["ds_step_view"] = n
            st.session_state["ds_seen_steps"] = n
        st.session_state["ds_step_view"] = min(max(1, int(st.session_state["ds_step_view"])), n)
        si = st.slider("Step", 1, n, key="ds_step_view", persist_state=KEEP) if n > 1 else 1
        lg = state.log[si - 1]
        rows = step_rows(lg, decode=tok, greedy=rule == "greedy")
        for r in rows:  # make the verdict impossible to miss, and name the rule that produced it
            r["verdict"] = {"accept": "accepted", "reject": "REJECTED"}.get(r["verdict"], r["verdict"])
        if rule == "greedy":
            for r in rows:
                r.pop("draw", None)
        st.write(step_sentence(si, lg))
        st.code("anchor: " + tok(lg.anchor), language=None)
        if lg.drafted:   # numbers to 4 significant digits; a dash where a value does not apply (never checked)
            st.dataframe(pd.DataFrame([{k: "–" if v is None else f"{v:.4g}" if isinstance(v, float) else v
                                        for k, v in r.items()} for r in rows]), hide_index=True)
        else:
            st.caption(NO_DRAFTS)
        if lg.resampled is not None:   # token texts go to st.code, never into Markdown
            # a refusal is the rule working, not a fault: a warning's colour, not an error's
            st.warning(rejected(lg), icon=":material/close:")
            st.code(tok(lg.resampled), language=None)
        elif lg.bonus is not None:
            st.success(ALL_ACCEPTED)
            st.code(tok(lg.bonus), language=None)
        m = st.columns(4)
        for col, row in zip(m, cache_rows(lg)):
            col.metric(row.label, int(row.value), help=row.formula)
        m[3].metric("tokens emitted", len(lg.emitted))

if draft_length == "auto":
    st.caption(AUTO_NOTE)

# ---- a whole run --------------------------------------------------------------------------------------------------
st.subheader("A whole run")
st.caption(WHOLE_RUN)


def _whole(progress):
    progress(0.05, "plain decoding ...")
    base = generate(model, [ids], int(max_new), sampler=Sampler(temp, 1.0, int(draw_seed)), prefill_mode=mode,
                    stop_at_eos=True)
    progress(0.5, "speculative decoding ...")
    spec = speculative_generate(model, drafter, [ids], int(max_new), sampler=Sampler(temp, 1.0, int(draw_seed)),
                                prefill_mode=mode, draft_length=draft_length, confidence_threshold=float(threshold))
    return base, spec


ran = st.session_state.setdefault("ds_ran", set())
if not st.button("Run both to the end", key="ds_run") and settings not in ran:
    stop()
ran.add(settings)
try:
    base, spec = cached_with_progress("dspark", settings, _whole, "Decoding ...", max_entries=16)
except Exception as e:
    st.error(f"The run failed: {plain(e)}")
    stop()
stats: SpecStats = spec.stats
same = base.tokens == spec.tokens
c = st.columns(4)
c[0].metric("Target passes (plain)", base.target_passes,
            help=PLAIN_PASSES)
c[1].metric("Target passes (DSpark)", spec.target_passes, help=passes_help(spec.target_passes, stats.steps))
speed = base.decode_seconds / spec.decode_seconds if spec.decode_seconds > 0 else float("nan")
c[2].metric("Decode speed-up (wall clock)", f"{speed:.2f}x")
c[3].metric("Identical output", "yes" if same else "no")
st.caption("DSpark's target passes: " + passes_help(spec.target_passes, stats.steps) + ".")
if rule == "greedy" and drafter is getattr(model, "mtp", None):
    reproduce(snippets.dspark(sess.weights, text, int(max_new), mode, draft_length, float(threshold)), "dspark")
if rule == "greedy" and not same:
    st.error(GREEDY_DIFFERS)
elif rule == "stochastic":
    st.caption(SAMPLED_DIFFERS)
st.text("Plain:  " + model.decode(base.tokens))
st.text("DSpark: " + model.decode(spec.tokens))

g = stats.mean_draft_length
st.latex(r"\mathbb{E}[\text{tokens per pass}] = \frac{1-\alpha^{\gamma+1}}{1-\alpha} = "
         + f"{expected_tokens_per_pass(stats.alpha, g):.2f}"
         + rf"\quad(\alpha = {stats.alpha:.3f},\ \gamma = {g:.2f})")
st.write(measured_sentence(stats))
expl = pd.DataFrame([vars(r) for r in summary_rows(stats, base.decode_seconds, len(base.tokens))])
st.dataframe(expl, hide_index=True)
pos = pd.DataFrame([vars(r) for r in position_rows(stats)])
if not pos.empty:
    a1, a2 = st.columns(2)
    a1.plotly_chart(built(acceptance_figure, pos), width="stretch", key="ds_acc")
    a2.plotly_chart(built(calibration_figure, pos), width="stretch", key="ds_cal")
    st.dataframe(pos, hide_index=True)
    st.download_button("Acceptance and calibration (CSV)", pos.to_csv(index=False), file_name="dspark_positions.csv",
                       mime="text/csv", key="ds_dl_pos")
