"""The cache calculator: golden numbers computed here from the seed and the configs, equality with
model.accounting and with the bytes the engine holds, property tests over the inputs."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from lessons.bounded_replay import replay_tradeoff
from lessons.cache_calculator import (
    LIMITS,
    MAX_BYTES,
    SUPPORTED_BITS,
    CalcError,
    Knobs,
    calculate,
    parse_knobs,
    validate_knobs,
)
from lessons.design_inputs import digits_note, own_values, page_defaults, switch_design, what_moved
from lessons.designs import CALCULATOR_PRESETS, DESIGNS, build, defaults, v41_design
from lessons.units import counted
from lessons.workload import agent_round, check_against_engine
from model import V41Config
from model.accounting import cache_bytes
from tests.conftest import random_model


def calc(key: str, **kw):
    k = dataclasses.replace(defaults(key), **kw)
    return calculate(build(key, k), k)


# ---- golden numbers ------------------------------------------------------------------------------

def test_seed_teaching_example():
    # 16 layers x 4,096 entries x 128 numbers x 8 bits; groups of four layers share one copy
    assert calc("teaching").hbm.total == 4096 * 16 * 128 * 8 // 8 == 8_388_608
    shared = calc("teaching", group=4)
    assert shared.hbm.total == 4096 * (16 // 4) * 128 * 1 == 2_097_152
    assert shared.hbm.rows[0].copies == 4 and shared.hbm.rows[0].read_by == 16


def test_v41_flash_per_token_from_config():
    cfg = V41Config.preset("v4.1-flash")
    d, di = cfg.head_dim, cfg.index_head_dim
    latent = d * 4 // 8 + d // 16        # FP4 values + one E4M3 scale byte per 16
    key = di * 4 // 8 + di // 32         # FP4 values + one UE8M0 scale byte per 32
    ratios = [cfg.compress_ratios[i] for i in cfg.kv_source_layer_ids]
    growth = sum((latent + key) / r for r in ratios)
    c = calc("v4.1-flash")
    assert c.hbm.growth_per_token == growth == 890.0
    # at a context: growing stores + every layer's window (W - 1 + 1 rollback rows of d FP8 + d/32 scales)
    # + pending fp32 rows of the ratio-2 sources + the drafter's windows
    t = c.knobs.context
    entries = sum((t // r) * (latent + key) for r in ratios)
    window = cfg.num_hidden_layers * cfg.sliding_window * (d + d // 32)
    pending = sum(min(t, 1 + r - 1) * d * 4 * 2 for r in ratios if r > 1)
    drafter = cfg.num_nextn_predict_layers * cfg.sliding_window * (d + d // 32)
    assert c.hbm.total == entries + window + pending + drafter
    assert c.hbm.total - drafter == cache_bytes(cfg, t, mode="bounded").total


def test_v32_mla_and_indexer():
    c = calc("v3.2", context=1)
    assert c.hbm.by_kind["latents"] == (512 + 64) * 61 * 2 == 70_272
    assert c.hbm.by_kind["index_keys"] + c.hbm.by_kind["block_scales"] == (128 + 4) * 61
    assert c.hbm.growth_per_token == 70_272 + 132 * 61


def test_gqa_per_token():
    c = calc("gqa", context=1000)
    assert c.hbm.growth_per_token == 80 * 8 * 128 * 2 * 2 == 327_680
    assert c.hbm.total == 327_680 * 1000


def test_v4_flash_vllm_formats():
    t = 1 << 20
    c = calc("v4-flash", context=t)
    csa, hca = 21, 20
    expected = csa * (t // 4) * (584 + 132) + hca * (t // 128) * 584 + (43 + 1) * 128 * 584
    assert c.hbm.total == expected
    assert round(c.hbm.total / t) == 3853     # ≈ 3.85 KB per token (docs/design/equations.md §14)
    v41 = calc("v4.1-flash", context=t)
    assert 0.2 < v41.hbm.total / c.hbm.total < 0.25   # "roughly a quarter of V4-Flash"


def test_hbm_and_persistent_are_separate():
    c = calc("v4.1-flash", context=4096, batch=8)
    assert c.persistent.batch == 1 and c.hbm.batch == 8
    kept = calculate(c.design, c.knobs, keep_windows=True)
    cfg = V41Config.preset("v4.1-flash")
    dec = cfg.num_hidden_layers - cfg.decoder_start
    # bounded replay leaves the decoder's windows out of the persistent cache but keeps its input rows
    # (4 mHC streams of 5,120 fp32 numbers + 4 pre numbers per row, for the last 128 rows)
    windows, replay_input = dec * 128 * (512 + 16), 128 * (4 * 5120 + 4) * 4
    assert kept.persistent.total - c.persistent.total == windows - replay_input
    assert "total" not in json.loads(c.to_json())  # no single summed figure
    assert {r["memory"] for r in c.records()} == {"HBM", "persistent"}


# ---- equality with model.accounting and with the engine -------------------------------------------

@pytest.mark.parametrize("mode", ["exact", "bounded"])
@pytest.mark.parametrize("rollback", [0, 1, 5])
@pytest.mark.parametrize("t", [1, 127, 128, 129, 4097, 1 << 20])
def test_formula_equals_accounting(mode, rollback, t):
    cfg = V41Config.preset("v4.1-flash")
    k = Knobs(context=t, mode=mode, rollback=rollback, window=cfg.sliding_window, bits=4, layers=40)
    res = calculate(v41_design(cfg, k, drafter=False, use_knobs=False), k).hbm
    cb = cache_bytes(cfg, t, mode=mode, rollback=rollback)
    assert res.engine_by_layer == cb.by_layer
    assert res.total == cb.total


@pytest.mark.parametrize("preset,cases", [pytest.param("tiny", ((33, 1), (97, 1)), marks=pytest.mark.slow),
                                          ("micro", ((3, 1), (9, 0), (17, 4), (40, 1)))])
@pytest.mark.parametrize("mode", ["exact", "bounded"])
def test_formula_equals_measured_engine_bytes(preset, cases, mode):
    # odd lengths leave an incomplete ratio-2 group (pending rows); lengths past the window fill it;
    # rollback slack 0 / 4 changes how many window and pending rows are kept
    m = random_model(preset)
    for n, rb in cases:
        chk = check_against_engine(m, n, mode, rb)
        assert chk.equal, (n, rb, chk.formula, chk.measured)
        assert chk.difference == 0 and chk.measured["pending"] > 0 and chk.measured["latents"] > 0


# ---- property tests over the inputs --------------------------------------------------------------

def _knob_strategy():
    return st.builds(
        Knobs,
        context=st.integers(*LIMITS["context"]), batch=st.integers(*LIMITS["batch"]),
        layers=st.integers(*LIMITS["layers"]), numbers=st.integers(1, 4096).map(lambda n: 2 * n),
        bits=st.sampled_from(SUPPORTED_BITS), group=st.integers(1, 8), ratio=st.integers(*LIMITS["ratio"]),
        window=st.integers(1, 1 << 16), replay=st.integers(*LIMITS["replay"]),
        rollback=st.integers(*LIMITS["rollback"]),
        mode=st.sampled_from(["exact", "bounded"]),
    ).filter(lambda k: k.group <= k.layers)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key=st.sampled_from(list(DESIGNS)), k=_knob_strategy())
def test_any_valid_input_gives_finite_nonnegative_bytes(key, k):
    c = calculate(build(key, k), k)
    for res in (c.hbm, c.persistent):
        assert all(isinstance(r.bytes, int) and r.bytes >= 0 for r in res.rows)
        assert 0 <= res.total <= MAX_BYTES
        assert math.isfinite(res.per_token) and res.per_token >= 0
        assert math.isfinite(res.growth_per_token) and res.growth_per_token >= 0
        assert sum(sum(v.values()) for v in res.by_layer.values()) == res.total
    # one saved context never exceeds one sequence, except for bounded replay's input rows (not held on the
    # accelerator after prefill, but kept by the prefix cache)
    replay_input = sum(r.bytes for r in c.persistent.rows if r.kind == "replay_input")
    assert c.persistent.total <= c.hbm.total // c.knobs.batch + 1 + replay_input
    json.loads(c.to_json())


@settings(max_examples=40, deadline=None)
@given(k=_knob_strategy())
def test_more_context_never_means_fewer_bytes(k):
    a = calc("v4.1-flash", context=k.context, batch=k.batch, rollback=k.rollback, mode=k.mode)
    b = calc("v4.1-flash", context=min(k.context + 1, LIMITS["context"][1]), batch=k.batch, rollback=k.rollback,
             mode=k.mode)
    growing = sum(r.bytes for r in a.hbm.rows if r.store != "pending")
    assert sum(r.bytes for r in b.hbm.rows if r.store != "pending") >= growing


@pytest.mark.parametrize("field,value,words", [
    ("context", 0, "context"), ("batch", -1, "batch"), ("numbers", 0, "numbers"), ("layers", 0, "layers"),
    ("ratio", 0, "ratio"), ("window", 0, "window"), ("bits", 6, "bits per number"), ("bits", 0, "bits per number"),
    ("mode", "fast", "prefill mode"), ("group", 17, "larger than the 16 layers"), ("context", 2 ** 40, "context"),
])
def test_invalid_inputs_give_a_clear_message(field, value, words):
    k = dataclasses.replace(defaults("teaching"), **{field: value})
    with pytest.raises(CalcError, match=words):
        validate_knobs(k)
    with pytest.raises(CalcError):
        calculate(build("teaching", defaults("teaching")), k)


def test_odd_numbers_at_four_bits_is_rejected():
    k = dataclasses.replace(defaults("teaching"), numbers=3, bits=4)
    with pytest.raises(CalcError, match="whole number of bytes"):
        calculate(build("teaching", k), k)


@settings(max_examples=80, deadline=None)
@given(raw=st.dictionaries(st.sampled_from(list(LIMITS) + ["bits", "mode", "other"]),
                           st.one_of(st.text(max_size=12), st.integers(-10**12, 10**12).map(str))))
def test_url_values_never_crash_and_bad_ones_are_reported(raw):
    k, msgs = parse_knobs(raw, defaults("teaching"))
    validate_knobs(k)   # whatever the URL held, the knobs are usable
    for name, text in raw.items():
        if name == "other":
            continue
        accepted = str(getattr(k, name)) == text.strip() or _same_number(text, getattr(k, name))
        assert accepted or any(m.startswith(f"{name}=") for m in msgs)


def _same_number(text: str, v) -> bool:
    try:
        return int(text.strip().replace(",", "").replace("_", "")) == v
    except ValueError:
        return False


def test_url_non_numbers_named():
    k, msgs = parse_knobs({"context": "lots", "bits": "7", "batch": "0", "group": "3"}, defaults("teaching"))
    assert k.context == 4096 and k.bits == 8 and k.batch == 1 and k.group == 3
    assert any("context='lots' is not a whole number" in m for m in msgs)
    assert any(m.startswith("bits=7 must be one of 4, 8, 16, 32") for m in msgs)
    assert any(m.startswith("batch=0 must be between 1") for m in msgs)


# ---- bounded replay and the agent round ------------------------------------------------------------

def test_replay_tradeoff_bytes_vs_work():
    from model import count_params

    cfg = V41Config.preset("micro")
    pc = count_params(cfg)
    k = Knobs(context=1000, window=cfg.sliding_window, replay=cfg.sliding_window, bits=4, layers=16)
    d = v41_design(cfg, k)
    tr = replay_tradeoff(d, k, pc.active_per_layer, cfg.num_attention_heads, cfg.head_dim, cfg.index_topk,
                         input_numbers=cfg.hc_mult * (cfg.hidden_size + 1), reuses=(1, 10))
    dec = cfg.num_hidden_layers - cfg.decoder_start
    assert tr.stored_bytes == dec * cfg.sliding_window * (cfg.head_dim + cfg.head_dim // 32)
    mm = 2 * sum(pc.active_per_layer[cfg.decoder_start:]) * cfg.sliding_window
    att = 4 * cfg.num_attention_heads * cfg.head_dim * (cfg.sliding_window + cfg.index_topk) * dec * cfg.sliding_window
    assert tr.flops_per_reuse == mm + att
    assert tr.by_reuse[1] == (10, 10 * tr.flops_per_reuse, 10 * tr.stored_bytes)
    assert pc.active_decode == cfg.hidden_size + sum(pc.active_per_layer) + pc.by_component["head"] + \
        pc.by_component.get("final_norm", 0)
    with pytest.raises(CalcError, match="no bounded replay"):
        replay_tradeoff(build("gqa"), defaults("gqa"), pc.active_per_layer, 1, 1, 1)


def test_replay_work_counts_the_indexer_scans():
    """With the decoder's scans, the replay's work adds the broad scan of the candidate source over every entry each
    replayed row sees, and the Reindex layers' scans of at most the pool."""
    from lessons.bounded_replay import decoder_scans
    from model import count_params

    cfg = V41Config.preset("micro")          # decoder: 4 (candidate source), 5, 6 (Reindex), 7; pool 3 x 2 = 6
    pc = count_params(cfg)
    k = Knobs(context=1000, window=cfg.sliding_window, replay=cfg.sliding_window, bits=4, layers=16)
    d = v41_design(cfg, k)
    args = (d, k, pc.active_per_layer, cfg.num_attention_heads, cfg.head_dim, cfg.index_topk)
    plain, scanned = replay_tradeoff(*args), replay_tradeoff(*args, scans=decoder_scans(cfg))
    seen = sum(range(993, 1001))             # rows 992..999 see 993..1000 entries
    scan = 2 * 4 * 32 * (seen + 8 * 6)
    assert scanned.flops_per_reuse == plain.flops_per_reuse + scan
    row = next(r for r in scanned.derivation if r[0] == "indexer scan work")
    assert row[2] == scan and "all 2 selecting layers" in row[1]
    assert scanned.derivation[-1][1] == "matmul + attention + indexer scan"


def test_agent_round():
    w = agent_round(10_000, 100, active_prefill=8, active_decode=16, stored=552)
    assert w.token_ratio == 100
    assert w.prefill_flops == 2 * 8 * 10_000 and w.decode_flops == 2 * 16 * 100
    assert w.work_ratio == 50
    with pytest.raises(CalcError, match="tokens written"):
        agent_round(10, 0, 1, 1, 1)


def test_derivation_follows_the_layer_numbering():
    """The derivation's layer column and its notes name layers in the reader's numbering; the bytes do not move.
    V4.1's encoder Full layers are 2, 8, 14 counted from 0 (2 window-only, then 3 x (1 Full + 5 Reuse))."""
    k = defaults("v4.1-flash")
    zero, one = (calculate(build("v4.1-flash", k), k, first_layer=f) for f in (0, 1))
    assert zero.hbm.total == one.hbm.total and zero.persistent.total == one.persistent.total
    made0 = [r for r in zero.hbm.rows if r.note.startswith("made by")]
    made1 = [r for r in one.hbm.rows if r.note.startswith("made by")]
    assert any(r.layers == "2, 8, 14" and "layers 2, 8, 14;" in r.note for r in made0)
    assert any(r.layers == "3, 9, 15" and "layers 3, 9, 15;" in r.note for r in made1)
    g = build("gemma4-like", defaults("gemma4-like"))
    notes0 = [r.note for r in calculate(g, defaults("gemma4-like")).hbm.rows]
    notes1 = [r.note for r in calculate(g, defaults("gemma4-like"), first_layer=1).hbm.rows]
    shifted = [(a, b) for a, b in zip(notes0, notes1) if a != b]
    assert shifted and all("also serves" in a for a, _ in shifted)
    for a, b in shifted:
        n0 = int(a.split("layer ")[1].split()[0])
        assert f"layer {n0 + 1} also serves" in b


# ---- what the calculator page says: counts, a change of design, a number the browser cut short --------

def test_counts_are_said_in_the_right_number():
    assert counted(1, "token") == "1 token" and counted(4096, "token") == "4,096 tokens"
    assert counted(1, "entry", "entries") == "1 entry" and counted(2, "entry", "entries") == "2 entries"
    one = calc("teaching", context=1, layers=1, numbers=2, bits=4)
    assert one.hbm.rows[0].formula == "1 entry x 2 numbers x 1 stored copy x 4 bits / 8 = 1 B"
    assert "1 layer, each storing 1 entry of 2 numbers" in build("teaching", one.knobs).summary


def test_a_change_of_design_keeps_the_context_the_reader_typed():
    typed = dataclasses.replace(defaults("teaching"), context=131_072, layers=32)
    k, note = switch_design("teaching", "v4.1-flash", typed)
    assert k == dataclasses.replace(defaults("v4.1-flash"), context=131_072)   # the rest: V4.1's own values
    assert "kept your context (131,072 tokens)" in note
    # the context is the reader's: a change of design never moves it, even from the page's own 131,072
    k, note = switch_design("v4-flash", "v4.1-flash", page_defaults("v4-flash"))
    assert k.context == 131_072 and "kept your context (131,072 tokens)" in note
    assert page_defaults("v4.1-flash").context == page_defaults("teaching").context == 131_072
    # the window means the same in both V4 designs; the teaching example takes none
    k, note = switch_design("v4.1-flash", "v4-flash", dataclasses.replace(defaults("v4.1-flash"), window=256, batch=2))
    assert (k.window, k.batch, k.context) == (256, 2, defaults("v4-flash").context) and "window (256 rows)" in note
    assert switch_design("v4-flash", "teaching", dataclasses.replace(defaults("v4-flash"), window=256))[0].window == \
        defaults("teaching").window


def test_the_line_for_inputs_a_design_sets_itself():
    """The page hides the inputs a design ignores and names the design's own values instead (they said the
    teaching example's 16 layers and 128 numbers while V4.1 was shown)."""
    cfg = V41Config.preset("v4.1-flash")
    v41 = own_values(build("v4.1-flash"))
    assert f"{cfg.num_hidden_layers} layers (+ {cfg.num_nextn_predict_layers} drafter layers)" in v41
    assert f"{cfg.head_dim} numbers per entry (index keys {cfg.index_head_dim})" in v41
    assert "1 or 2 tokens per entry" in v41 and "4 stored copies of the compressed entries (latents)" in v41
    assert "16 layers" not in v41 and "128 numbers per entry" not in v41
    assert "no window" in own_values(build("teaching")) and "every layer stores its own" in own_values(build("v3.2"))
    assert "4 or 128 tokens per entry" in own_values(build("v4-flash"))


def test_a_number_cut_to_its_first_digits_is_explained():
    """A number box reads 1e9 as 1: the app sees only the 1, and says what may have happened."""
    note = digits_note("context", "Context length", 131_072, 1)
    assert note and "now 1 (it was 131,072)" in note and "1e9" in note and "16,777,216" in note
    assert digits_note("context", "Context length", 4096, 8192) is None      # a larger value: nothing to say
    assert digits_note("context", "Context length", 100, 50) is None         # a small step down
    assert digits_note("context", "Context length", 64, 2) is None           # from a small context: a choice
    for name, was, now in (("batch", 64, 4), ("rollback", 1, 0), ("window", 128, 8), ("ratio", 128, 4),
                           ("replay", 128, 8)):
        assert digits_note(name, name, was, now) is None, name               # ordinary small values elsewhere


def test_why_this_size_sums_the_growing_stores_per_token():
    """The calculator's one-line sum: V4.1 keeps 3 ratio-2 copies and 1 ratio-1 copy of a 356-byte entry (512 FP4
    latents = 256 B + 32 E4M3 scales, a 128-number FP4 index key = 64 B + 4 scales): 356 x 3 / 2 + 356 = 890 B."""
    from lessons.cache_growth import growth_sum, growth_terms

    terms = growth_terms(build("v4.1-flash"))
    assert [(t.entry_bytes, t.copies, t.ratio) for t in terms] == [(356, 3, 2), (356, 1, 1)]
    assert growth_sum(terms) == "356 B x 3 copies / 2 tokens + 356 B x 1 copy / 1 token = 890 B per further token."
    assert growth_sum(growth_terms(build("teaching"), batch=2)).endswith("x 2 sequences = 4,096 B per further token.")
    # the sum agrees with the calculator's own per-token growth for every design it offers
    for key in CALCULATOR_PRESETS:
        c = calculate(build(key), defaults(key))
        assert math.isclose(sum(t.per_token for t in growth_terms(c.design)), c.hbm.growth_per_token), key


def test_what_moved_names_the_inputs_that_changed():
    k = defaults("v4.1-flash")
    assert what_moved(("v4.1-flash", k, False), ("v4.1-flash", k, False)) == ""
    moved = ("v4.1-flash", dataclasses.replace(k, context=8, mode="exact"), True)
    assert what_moved(("v4.1-flash", k, False), moved) == ("the context (1,048,576 to 8), the prefill mode (bounded "
                                                           "to exact), the persist-windows switch")
    assert what_moved(("teaching", defaults("teaching"), False), ("gqa", defaults("gqa"), False)).startswith(
        "the design (Teaching example (uniform sizes) to Plain per-layer K/V (GQA))")

