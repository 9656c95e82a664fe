"""The cost model against the running model: FLOPs as PyTorch's flop counter counts them, cache bytes as the engine's
packed stores read and write them, weights as the module tree holds them; and the roofline's arithmetic."""

import functools
import math

import pytest
import torch

from lessons.cost import FP32, KINDS, RELEASE, CostError, Workload, cost, routed_touched, sum_min
from lessons.cost_check import check_flops, engine_cache_bytes, formula_cache_bytes
from lessons.roofline import (
    GPUS,
    Chip,
    compute_bound_batch,
    largest_context,
    measure_machine,
    place,
    resident_weights,
    verdict,
    weight_numbers,
)
from model import V41Config, V41Model, count_params
from model.accounting import cache_bytes


@functools.lru_cache(maxsize=2)
def _model(preset: str) -> V41Model:
    torch.manual_seed(0)
    return V41Model(V41Config.preset(preset)).init_weights(0).eval()


FAST = [Workload("prefill", 64, "exact"), Workload("prefill", 64, "bounded"), Workload("prefill", 256, "exact"),
        Workload("prefill", 256, "bounded"), Workload("decode", 5), Workload("decode", 40), Workload("decode", 300),
        Workload("decode", 100, batch=2), Workload("verify", 100, drafts=4), Workload("extend", 100, chunk=40),
        Workload("mixed", 100, batch=2, chunk=40)]
LONG = [Workload("prefill", 1024, "exact"), Workload("prefill", 1024, "bounded")]


def _assert_counted(preset: str, wl: Workload) -> None:
    chk = check_flops(_model(preset), wl)
    assert chk.counted > 0
    assert abs(chk.ratio - 1) <= 0.02, (wl, chk.counted, chk.formula)
    assert chk.unmatched == [], f"the counter saw work where the formula has no row: {chk.unmatched}"
    for m in chk.modules:
        assert abs(m.ratio - 1) <= 0.02, (wl, m)
    assert set(chk.ops) <= {"aten.mm", "aten.bmm", "aten.addmm", "aten.baddbmm"}


@pytest.mark.parametrize("wl", FAST, ids=lambda w: w.describe())
def test_formula_equals_the_counter_on_micro(wl):
    _assert_counted("micro", wl)


@pytest.mark.parametrize("wl", [FAST[0], FAST[3], FAST[5], FAST[8], FAST[10]], ids=lambda w: w.describe())
def test_formula_equals_the_counter_on_tiny(wl):
    _assert_counted("tiny", wl)


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["micro", "tiny"])
@pytest.mark.parametrize("wl", LONG + [Workload("decode", 700)], ids=lambda w: w.describe())
def test_formula_equals_the_counter_long(preset, wl):
    _assert_counted(preset, wl)


@pytest.mark.parametrize("wl", [Workload("prefill", 100, "exact"), Workload("prefill", 100, "bounded"),
                                Workload("decode", 57), Workload("decode", 30, batch=2),
                                Workload("verify", 41, drafts=3), Workload("extend", 57, chunk=20),
                                Workload("mixed", 41, batch=2, chunk=12)], ids=lambda w: w.describe())
def test_cache_traffic_equals_the_engines(wl):
    """Bytes the engine's packed stores read (window rows, selected entries, index keys) and write, byte for byte."""
    got = engine_cache_bytes(_model("micro"), wl)
    want = formula_cache_bytes(cost(_model("micro").cfg, wl, FP32, as_run=True))
    assert got == want
    assert got["window written"] > 0


def test_cache_read_by_a_decode_step_follows_the_formats():
    """A decode step at context C past the window reads W-1 window rows per layer, k entries per compressed layer,
    every visible key at a broad scan and the candidate pool's keys at a pool scan, each at its stored format
    (FP8 + scales, FP4 + scales)."""
    cfg = V41Config.preset("micro")
    c = 200
    got = formula_cache_bytes(cost(cfg, Workload("decode", c), RELEASE))
    hd, di = cfg.head_dim, cfg.index_head_dim
    assert got["window read"] == cfg.num_hidden_layers * (cfg.sliding_window - 1) * (hd + hd // 32)
    compressed = [r for r in cfg.backbone_ratios if r]
    assert got["latents read"] == len(compressed) * cfg.index_topk * (hd // 2 + hd // 16)
    pool = cfg.candidate_topk_blocks * cfg.candidate_block_size
    keys = (c + 1) // 2 + (c + 1) + pool           # micro: layer 2 (ratio 2), 4 (ratio 1, broad), 6 (Reindex, pool)
    assert got["index keys read"] == keys * (di // 2 + di // 32)


@pytest.mark.parametrize("preset", ["micro", "tiny", "small"])
def test_weight_numbers_equal_the_module_tree(preset):
    cfg = V41Config.preset(preset)
    pc = count_params(cfg)
    assert sum(weight_numbers(cfg).values()) == pc.backbone + pc.engram


def test_sum_min_matches_a_loop():
    for p, s, r, cap, off in [(0, 64, 1, 8, 0), (5, 30, 2, 4, 0), (37, 1, 2, None, 0), (100, 64, 1, 16, 90),
                              (0, 300, 2, 7, 0), (1000, 5, 1, None, 0)]:
        want = sum(min(cap if cap is not None else 10 ** 9, (t + 1 - off) // r) for t in range(p, p + s))
        assert sum_min(p, s, r, cap, off) == want


def test_the_kernel_count_is_below_this_engines():
    """Counting only what each query can see never exceeds what this engine computes; the matmuls of the weights
    are the same either way."""
    cfg = V41Config.preset("tiny")
    for wl in FAST:
        ideal, run = cost(cfg, wl), cost(cfg, wl, as_run=True)
        assert ideal.flops <= run.flops
        for kind in ("projections", "routed experts", "shared expert", "mHC"):
            assert ideal.by_kind()[kind][0] == run.by_kind()[kind][0]
    assert set(cost(cfg, FAST[1]).by_kind()) == set(KINDS)


def test_a_mixed_step_shares_its_weight_reads():
    """A mixed step's FLOPs and cache traffic are its parts' sums; its dense weights are read once, and its routed
    experts once for the distinct experts all its rows reach."""
    cfg = V41Config.preset("v4.1-flash")
    chunk, dec = cost(cfg, Workload("extend", 10_000, chunk=64)), cost(cfg, Workload("decode", 10_000, batch=8))
    mixed = cost(cfg, Workload("mixed", 10_000, batch=8, chunk=64))
    assert mixed.flops == pytest.approx(chunk.flops + dec.flops)
    for what in ("cache_read", "cache_write", "act_bytes"):
        assert mixed.total(what) == pytest.approx(chunk.total(what) + dec.total(what))
    e, k = cfg.n_routed_experts, cfg.num_experts_per_tok
    per_expert = 3 * cfg.hidden_size * cfg.moe_intermediate_size * RELEASE.expert
    routed = sum(r.weight_bytes for r in mixed.rows if r.op.startswith("experts"))
    assert routed == pytest.approx(cfg.num_hidden_layers * e * (1 - (1 - k / e) ** 72) * per_expert)
    wq = [r.weight_bytes for r in mixed.rows if r.op == "wq_a"]
    assert wq == [r.weight_bytes for r in dec.rows if r.op == "wq_a"]
    assert max(chunk.bytes, dec.bytes) < mixed.bytes < chunk.bytes + dec.bytes


def test_routed_weights_grow_with_the_batch_until_every_expert_is_read():
    cfg = V41Config.preset("v4.1-flash")
    e, k = cfg.n_routed_experts, cfg.num_experts_per_tok
    assert routed_touched(1, e, k) == pytest.approx(k)
    assert routed_touched(100_000, e, k) == pytest.approx(e)
    one = cost(cfg, Workload("decode", 10_000))
    many = cost(cfg, Workload("decode", 10_000, batch=64))
    assert many.flops == pytest.approx(64 * one.flops, rel=0.01)
    assert one.total("weight_bytes") < many.total("weight_bytes") < 64 * one.total("weight_bytes")
    assert many.intensity > one.intensity


def test_bad_workloads_are_refused():
    cfg = V41Config.preset("micro")
    for wl in (Workload("train", 10), Workload("prefill", 0), Workload("decode", 10, batch=0),
               Workload("extend", 10, chunk=0), Workload("mixed", cfg.max_position_embeddings - 2, chunk=8),
               Workload("prefill", 10, "fast"), Workload("verify", 10, drafts=-1)):
        with pytest.raises(CostError):
            cost(cfg, wl)


# ------------------------------------------------------------------------------------------------
# The roofline
# ------------------------------------------------------------------------------------------------

def test_a_placement_is_bounded_by_the_slower_roof():
    chip = Chip("x", "x", peak=100.0, bandwidth=10.0, memory=1.0, source="", sure="")
    c = cost(V41Config.preset("micro"), Workload("decode", 50))
    p = place(c, chip)
    assert p.seconds == max(c.flops / 100.0, c.bytes / 10.0)
    assert p.memory_bound == (c.flops / c.bytes < 10.0)


def test_decode_turns_compute_bound_at_the_batch_found():
    cfg = V41Config.preset("v4.1-flash")
    chip = GPUS["h100"]
    assert place(cost(cfg, Workload("decode", 10_000)), chip).memory_bound
    b = compute_bound_batch(cfg, chip, 10_000)
    assert b is not None and b > 1
    assert not place(cost(cfg, Workload("decode", 10_000, batch=b)), chip).memory_bound
    assert place(cost(cfg, Workload("decode", 10_000, batch=b - 1)), chip).memory_bound
    # the H200 has more bandwidth for the same compute: its ridge is lower, so it turns compute-bound sooner
    assert compute_bound_batch(cfg, GPUS["h200"], 10_000) < b


def test_largest_context_is_the_last_that_fits():
    cfg = V41Config.preset("v4.1-flash")
    w = resident_weights(cfg)
    chip = Chip("x", "x", peak=1e15, bandwidth=1e12, memory=w + 1e8, source="", sure="")
    n = largest_context(cfg, chip, 1)
    assert 0 < n < cfg.max_position_embeddings
    assert w + cache_bytes(cfg, n, mode="bounded").total <= chip.memory
    assert w + cache_bytes(cfg, n + 1, mode="bounded").total > chip.memory
    assert largest_context(cfg, GPUS["h100"], 1) == 0            # the weights alone exceed 80 GB
    assert largest_context(cfg, GPUS["h100"], 8) > 0


def test_the_verdict_follows_the_chip_and_the_batch():
    cfg = V41Config.preset("v4.1-flash")
    texts = set()
    for key in ("h100", "b200"):
        for batch in (1, 256):
            p = place(cost(cfg, Workload("decode", 10_000, batch=batch)), GPUS[key])
            texts.add(verdict(p, compute_bound_batch(cfg, GPUS[key], 10_000), batch))
    assert len(texts) == 4


def test_the_machine_is_measured():
    m = measure_machine(n=256, copy_mib=8, repeats=2)
    assert m.gflops > 0 and m.gbs > 0 and math.isfinite(m.gflops)
    assert m.chip().ridge == pytest.approx(m.gflops / m.gbs)
