"""Issue 17, teaching fidelity: every corrected claim is checked against numbers computed here independently
(from the config, the engine, or arithmetic in the test), never against the text it replaced."""

from __future__ import annotations

import pytest
import torch

from conftest import random_model


# ---- DSpark: block size, never-checked rows, the greedy correction ------------------------------------------
def _step(**kw):
    from model.dspark import StepLog

    base = dict(step=0, anchor=5, anchor_pos=10, drafted=[11, 12, 13], q_draft=[0.6, 0.315, 0.5],
                p_draft=[0.3, 0.073, 0.9], target_top=[11, 12, 40, 41], confidence=[0.9, 0.8, 0.7],
                survival=[0.9, 0.72, 0.504], accepted=0, rules=["reject"], ratios=[0.5], uniforms=[0.7],
                resampled=40, bonus=None, emitted=[40], rows_appended=4, rows_rolled_back=3, cache_length=11)
    base.update(kw)
    return StepLog(**base)


def test_never_checked_rows_get_no_keep_chance_and_a_hypothetical_one_with_the_active_rule():
    from lessons.dspark import step_rows

    rows = step_rows(_step(), greedy=False)           # stochastic, refused at the first guess
    assert rows[0]["keep chance"] == pytest.approx(0.5)
    assert rows[1]["keep chance"] is None and rows[2]["keep chance"] is None
    assert rows[1]["p(guess)"] == 0.073                # the verify pass's real p is kept
    assert rows[1]["hypothetical keep chance (never checked)"] == pytest.approx(0.073 / 0.315)   # 0.23, not 1
    assert rows[2]["hypothetical keep chance (never checked)"] == pytest.approx(1.0)             # p > q
    assert "leftover" in rows[-1]["verdict"]
    g = step_rows(_step(rules=["accept", "reject"], ratios=[], uniforms=[], accepted=1, resampled=30,
                        target_top=[11, 30, 40, 41], emitted=[11, 30]), greedy=True)
    assert [r["keep chance"] for r in g[:2]] == [1.0, 0.0] and g[2]["keep chance"] is None
    assert g[2]["hypothetical keep chance (never checked)"] == 0.0   # 13 is not the target's top (40)
    assert "top token" in g[-1]["verdict"] and "leftover" not in g[-1]["verdict"]


def test_block_is_the_anchor_plus_at_most_four_drafts_everywhere():
    from lessons.dspark import block_sentence
    from lessons.figure3 import Box, box_text, steps
    from model import V41Config

    cfg = V41Config.preset("v4.1-flash")
    drafts = cfg.dspark_block_size - 1
    text = next(s.body for s in steps(cfg) if s.key == "drafter")
    box = box_text(Box("drafter", "drafter", "", 0, 0, 1, 1), cfg)
    for t in (text, box, block_sentence(cfg.dspark_block_size)):
        assert f"up to {drafts} drafted tokens" in t
        assert f"up to {cfg.dspark_block_size} tokens" not in t


def test_dspark_intro_prices_an_accepted_guess():
    from lessons.dspark import INTRO

    assert "for free" not in INTRO
    assert "saves one sequential pass" in INTRO and "drafter work" in INTRO


# ---- Cache calculator: the persistent figure is what the engine saves -----------------------------------------
@pytest.mark.parametrize("mode", ["bounded", "exact"])
def test_persistent_figure_equals_the_engines_saved_prefix_state(mode):
    from lessons.calculator import Knobs, calculate
    from lessons.designs import v41_design
    from model.engine import prefill
    from model.prefix_cache import PrefixCache

    m = random_model("tiny")
    cfg = m.cfg
    pc = PrefixCache(m, align=64, min_tokens=64)
    ids = torch.randint(8, cfg.vocab_size, (1, 200), generator=torch.Generator().manual_seed(0))
    prefill(m, ids, mode, prefix_cache=pc, rollback=1)
    (state,) = pc.host.values()
    saved_tokens = int(state["meta"][0])
    # everything the saved state holds except the token history and bookkeeping scalars
    held = sum(v.nbytes for k, v in state.items()
               if k not in ("tokens", "compressed", "meta") and not k.endswith(".length"))
    assert ("carry.streams" in state) == (mode == "bounded")
    k = Knobs(context=saved_tokens, rollback=1, mode=mode, window=cfg.sliding_window, bits=4, layers=16)
    calc = calculate(v41_design(cfg, k, drafter=False, use_knobs=False), k)
    assert calc.persistent.total == held


def test_replay_tab_compares_net_bytes():
    from lessons.calculator import replay_tradeoff, replay_verdict
    from lessons.designs import build, defaults
    from model import V41Config

    cfg = V41Config.preset("v4.1-flash")
    k = defaults("v4.1-flash")
    tr = replay_tradeoff(build("v4.1-flash", k), k, [1] * cfg.num_hidden_layers, 1, 1, 1,
                         input_numbers=cfg.hc_mult * (cfg.hidden_size + 1))
    windows = 20 * 128 * (512 + 512 // 32)             # 20 decoder layers x 128 rows x FP8 row + UE8M0 scales
    replay_input = 128 * 4 * (5120 + 1) * 4            # fp32 streams + pre
    assert (tr.stored_bytes, tr.input_bytes, tr.net_bytes) == (windows, replay_input, replay_input - windows)
    text = replay_verdict(tr)
    assert "does not save storage" in text and f"{windows // 128:,} B per" in text
