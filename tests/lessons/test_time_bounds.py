"""Golden figures of "Where the time goes", each expected value worked out here by hand from the datasheets and the
release config's numbers (not by the code under test): the floor's decode crossover, the 10,000-token prefill bound,
a 4-draft verify's bytes, expert reach; then the deployment's three roofs and the peaks per precision."""

import math

import pytest

from lessons.cost import Workload, cost
from lessons.deploy import DeployError, Deployment, deployment, fewest_gpus, fit, link_bytes, step_bound
from lessons.expert_reach import all_read_from, expert_rows, sharing_starts
from lessons.roofline import GPUS, compute_bound_batch, compute_seconds, place
from model import V41Config

# datasheets (dense, per GPU): FP8 FLOP/s, HBM bytes/s
H100_FP8, H100_HBM = 1979e12, 3.35e12
H200_FP8, H200_HBM = 1979e12, 4.8e12
B200_FP8, B200_HBM = 4.5e15, 8e12

# the release config (model/config.py preset "v4.1-flash")
D, QL, H, HD, OL, G, INTER, E, K, L = 5120, 1280, 64, 512, 1024, 8, 2304, 384, 6, 40
VOCAB, W, TOPK, HI, DI, POOL = 129280, 128, 512, 32, 128, 2048 * 8
MIX = (2 + 4) * 4                                         # mHC: (2 + n) x n mixes of n = 4 streams
ENGRAM_COLS = 24 * 256                                    # hashed columns x head dim, at layers 1 and 14
# stored precision, bytes per number
FP8, FP4, BF16, FP32 = 1 + 1 / 128 ** 2, 0.5 + 1 / 32, 2.0, 4.0
ENGRAM_ROW = 1 + 4 / 32
WINDOW_ROW, LATENT_ROW, KEY_ROW = HD + HD // 32, HD // 2 + HD // 16, DI // 2 + DI // 32   # 528, 288, 68 B

LINEAR = D * QL + QL * H * HD + D * HD + H * HD * OL + G * OL * D + 3 * D * INTER   # per layer, incl. shared expert
EXPERT = 3 * D * INTER
MHC = 2 * (MIX * 4 * D + MIX + 3)                         # per layer, fp32
ENGRAM_W = ENGRAM_COLS * D * 5                            # wkv: a key per stream and a value
INDEXER = QL * HI * DI                                    # FP8, at the 8 index sources (+ D x HI head weights, BF16)
# layer roles: 0-1 window only; 2-19 ratio 2 (KV sources 2, 8, 14); 20-39 ratio 1 (KV source 20; 21-39 scan the
# candidate pool, Reindex at 24, 28, 32, 36); index sources 2, 8, 14, 20, 24, 28, 32, 36
COMPRESSED = 38


def uniform(n: int) -> float:
    return E * (1 - (1 - K / E) ** n)


def decode_by_hand(context: int) -> tuple[float, float, float]:
    """(FLOPs per sequence, weight bytes when every expert is read, cache bytes per sequence) of one decode step."""
    p = context
    ratio2 = (p + 1) // 2                                 # entries visible at a ratio-2 layer
    ratio1 = p + 1
    weights = (L * LINEAR * FP8 + L * E * EXPERT * FP4 + L * E * D * BF16 + L * MHC * FP32 + VOCAB * D * BF16
               + 2 * ENGRAM_W * FP8 + 8 * (INDEXER * FP8 + D * HI * BF16)
               + 3 * 2 * D * HD * BF16 + D * HD * BF16 + HD * DI * FP8)   # compressors; layer 20 writes a key
    window = 4 * H * HD * min(W, p + 1) * L
    selected = 4 * H * HD * TOPK * COMPRESSED
    scanned = 3 * ratio2 + ratio1 + 4 * min(ratio1, POOL)
    flops = (2 * (L * LINEAR + L * K * EXPERT + L * E * D + VOCAB * D + 2 * ENGRAM_W + 8 * (INDEXER + D * HI))
             + L * 2 * (2 * 4 * D * MIX + 2 * 4 * 4 * D) + 3 * 4 * D * HD + 2 * D * HD + 2 * HD * DI
             + window + selected + 2 * HI * DI * scanned)
    cache = ((W - 1) * WINDOW_ROW * L + WINDOW_ROW * L + TOPK * LATENT_ROW * COMPRESSED + KEY_ROW * scanned
             + LATENT_ROW + KEY_ROW + 3 * 2 * HD * 4)    # entry + key written at layer 20, pending fp32 rows
    cache += D * BF16 + 2 * ENGRAM_COLS * ENGRAM_ROW     # the token's embedding row and Engram table rows
    return flops, weights, cache


def test_decode_crossover_from_weights_and_cache_is_6166_on_the_h100():
    f, w, c = decode_by_hand(10_000)
    ridge = H100_FP8 / H100_HBM
    by_hand = ridge * w / (f - ridge * c)                 # f B / (w + c B) = ridge; every expert read at B ~ 6,000
    assert by_hand == pytest.approx(6166, rel=0.01)
    cfg = V41Config.preset("v4.1-flash")
    got = compute_bound_batch(cfg, GPUS["h100"], 10_000, per_precision=False)
    assert got == pytest.approx(by_hand, rel=0.01)
    one = cost(cfg, Workload("decode", 10_000))
    assert one.flops == pytest.approx(f, rel=0.002)
    assert one.bytes == pytest.approx(w - L * (E - K) * EXPERT * FP4 + c, rel=0.002)


def _sum_min(n: int, ratio: int, cap: int) -> int:
    return sum(min(cap, (q + 1) // ratio) for q in range(n))


def prefill_by_hand(n: int = 10_000) -> tuple[float, float]:
    """(FLOPs, floor bytes) of a bounded prefill read in one chunk: the encoder (layers 0-19) over every token, layer
    20's compressor publishing its entries, then the decoder (20-39) replaying the last 128 rows."""
    rep, enc, dec = W, 20, 20
    picks_enc = _sum_min(n, 2, TOPK)
    picks_dec = rep * TOPK
    weights = (enc * LINEAR * FP8 + enc * E * EXPERT * FP4 + dec * LINEAR * FP8 + dec * uniform(rep) * EXPERT * FP4
               + L * E * D * BF16 + L * MHC * FP32 + VOCAB * D * BF16 + n * D * BF16
               + 2 * (ENGRAM_W * FP8 + n * ENGRAM_COLS * ENGRAM_ROW) + 8 * (INDEXER * FP8 + D * HI * BF16)
               + 3 * 2 * D * HD * BF16 + D * HD * BF16 + HD * DI * FP8)
    cache_read = (18 * picks_enc + dec * picks_dec) * LATENT_ROW + KEY_ROW * (3 * (n // 2) + n + 4 * n)
    cache_write = ((n * enc + rep * dec) * WINDOW_ROW + 3 * n * 2 * HD * 4
                   + (3 * (n // 2) + n) * (LATENT_ROW + KEY_ROW))
    per_row = 2 * (LINEAR + K * EXPERT + E * D) + 2 * (2 * 4 * D * MIX + 2 * 4 * 4 * D)
    attn = 4 * H * HD * (enc * _sum_min(n, 1, W) + dec * sum(min(W, j + 1) for j in range(rep))
                         + 18 * picks_enc + dec * picks_dec)
    scans = 2 * HI * DI * (3 * _sum_min(n, 2, 10 ** 9) + sum(range(n - rep + 1, n + 1)) + 4 * rep * n)
    flops = (n * enc * per_row + rep * dec * per_row + attn + scans + 2 * D * VOCAB
             + 2 * n * 2 * ENGRAM_W + n * (enc_idx := 3) * 2 * (INDEXER + D * HI)
             + rep * 5 * 2 * (INDEXER + D * HI) + 3 * n * 4 * D * HD + n * 2 * D * HD + 2 * n * HD * DI
             + 3 * (n // 2) * 2 * HD * DI)
    assert enc_idx == 3                                   # the encoder's index sources: layers 2, 8, 14
    return flops, weights + cache_read + cache_write


def test_the_10000_token_prefill_bound_is_91_ms_on_the_h100_and_compute_bound_on_h200_and_b200():
    f, b = prefill_by_hand()
    assert b / H100_HBM == pytest.approx(0.091, rel=0.01)
    assert f / b < H100_FP8 / H100_HBM                    # memory-bound on the H100
    assert f / b > H200_FP8 / H200_HBM and f / b > B200_FP8 / B200_HBM
    cfg = V41Config.preset("v4.1-flash")
    c = cost(cfg, Workload("prefill", 10_000, "bounded", chunk=10_000))
    assert c.flops == pytest.approx(f, rel=0.01) and c.bytes == pytest.approx(b, rel=0.01)
    assert place(c, GPUS["h100"], per_precision=False).seconds == pytest.approx(b / H100_HBM, rel=0.01)
    for key, bound in (("h100", "memory-bound"), ("h200", "compute-bound"), ("b200", "compute-bound")):
        assert place(c, GPUS[key], per_precision=False).bound == bound
    # the unfused count, an upper estimate, would have called it memory-bound everywhere
    assert c.unfused_bytes > c.fused_bytes > c.bytes
    assert c.flops / c.unfused_bytes < H200_FP8 / H200_HBM


def test_a_four_draft_verify_reads_30_4_gb():
    f, w_all, c = decode_by_hand(10_000)
    rows = 5
    experts_read = L * uniform(rows) * EXPERT * FP4
    dense = w_all - L * E * EXPERT * FP4
    # five rows: the embedding and Engram rows, the window rows written and read, and their own picks and scans
    by_hand = dense + experts_read + rows * c
    assert by_hand / 1e9 == pytest.approx(30.4, abs=0.05)
    cfg = V41Config.preset("v4.1-flash")
    got = cost(cfg, Workload("verify", 10_000, drafts=4)).bytes
    assert got / 1e9 == pytest.approx(30.4, abs=0.05)
    assert got / cost(cfg, Workload("decode", 10_000)).bytes == pytest.approx(2.33, abs=0.02)


@pytest.mark.parametrize("batch", [1, 8, 64, 1024])
def test_expert_reach_follows_the_closed_form(batch):
    want = 384 * (1 - (1 - 6 / 384) ** batch)
    row = next(r for r in expert_rows(V41Config.preset("v4.1-flash"), (batch,)))
    assert row["distinct experts per layer"] == pytest.approx(want, abs=0.05)
    cfg = V41Config.preset("v4.1-flash")
    c = cost(cfg, Workload("decode", 10_000, batch=batch))
    routed = sum(r.weight_bytes for r in c.rows if r.op.startswith("experts"))
    assert routed == pytest.approx(L * want * EXPERT * FP4, rel=1e-9)


def test_where_batching_starts_and_stops_paying_for_the_experts():
    cfg = V41Config.preset("v4.1-flash")
    b = sharing_starts(cfg)
    assert uniform(b) <= 6 * b / 2 and uniform(b - 1) > 6 * (b - 1) / 2
    n = all_read_from(cfg)
    assert uniform(n) >= 0.99 * 384 > uniform(n - 1)


# ------------------------------------------------------------------------------------------------
# A node: three roofs
# ------------------------------------------------------------------------------------------------

def test_interconnect_bytes_follow_the_dispatch_and_all_reduce_by_hand():
    cfg = V41Config.preset("v4.1-flash")
    c = cost(cfg, Workload("decode", 10_000, batch=64))
    assert link_bytes(cfg, c, 1) == 0
    g, rows = 8, 64 * L
    want = rows * (3 * K * D * (g - 1) / g ** 2 + 2 * (g - 1) / g * 2 * D)
    assert link_bytes(cfg, c, g) == pytest.approx(want)


def test_a_node_divides_the_work_and_names_the_binding_roof():
    cfg = V41Config.preset("v4.1-flash")
    c = cost(cfg, Workload("decode", 10_000))
    one, node = step_bound(cfg, c, deployment("h100", 1)), step_bound(cfg, c, deployment("h100", 8))
    assert node.bytes == pytest.approx(one.bytes / 8) and node.flops == pytest.approx(one.flops / 8)
    assert one.binding == "HBM" and one.link_s == 0
    assert node.memory_s == pytest.approx(c.bytes / 8 / H100_HBM)
    assert node.link_s == pytest.approx(link_bytes(cfg, c, 8) / 900e9)
    assert "bound by **HBM**" in node.sentence()
    big = step_bound(cfg, cost(cfg, Workload("prefill", 10_000, "bounded", chunk=10_000)), deployment("b200", 8))
    times = {"compute": big.compute_s, "HBM": big.memory_s, "interconnect": big.link_s}
    assert big.seconds == max(times.values()) and times[big.binding] == big.seconds
    assert all(t > 0 for t in times.values())
    # with FP4 experts the B200's prefill waits on HBM; priced at FP8 throughout it would wait on compute
    assert step_bound(cfg, cost(cfg, big_wl := Workload("prefill", 10_000, "bounded", chunk=10_000)),
                      deployment("b200", 8), per_precision=False).binding == "compute"
    assert big_wl.kind == "prefill"


def test_fit_in_memory_in_gb():
    cfg = V41Config.preset("v4.1-flash")
    f1 = fit(cfg, deployment("h100", 1), 10_000, 1)
    assert not f1.fits and f1.weights / 1e9 == pytest.approx(298.6, abs=0.2)
    assert fewest_gpus(cfg, GPUS["h100"], 10_000) == math.ceil(298.6 / 80)      # 4
    assert fewest_gpus(cfg, GPUS["h200"], 10_000) == 3
    assert fewest_gpus(cfg, GPUS["b200"], 10_000) == 2
    assert "GB" in f1.sentence() and "GiB" not in f1.sentence()
    for bad in (0, 9, 2.5):
        with pytest.raises(DeployError):
            Deployment(GPUS["h100"], bad)
    with pytest.raises(DeployError):
        deployment("a100", 2)


def test_peaks_per_precision():
    cfg = V41Config.preset("v4.1-flash")
    c = cost(cfg, Workload("prefill", 10_000, "bounded", chunk=10_000))
    experts = sum(r.flops for r in c.rows if r.op.startswith("experts"))
    # Hopper has no FP4: the experts run at FP8, and the BF16 attention math at half of it, so it is slower
    assert compute_seconds(c, GPUS["h100"]) > c.flops / H100_FP8
    # the B200 runs the experts at 9 PFLOPS FP4: their time halves against FP8
    fp8_all, mixed = c.flops / B200_FP8, compute_seconds(c, GPUS["b200"])
    assert mixed < fp8_all
    assert fp8_all - mixed < experts / B200_FP8 - experts / 9e15 + 1e-12
    assert GPUS["b200"].rate("fp4") == 9e15 and GPUS["h100"].rate("fp4") == H100_FP8


def test_a_replay_alone_reads_the_decoders_weights():
    """The bounded replay's 128 rows reach ~333 of 384 experts in each of the 20 decoder layers: ~130 GB of weights,
    which the calculator's replay rows now show beside the FLOPs."""
    from lessons.bounded_replay import replay_tradeoff
    from lessons.cost import replay_weight_bytes
    from lessons.designs import build, with_context

    by_hand = (20 * (LINEAR * FP8 + uniform(128) * EXPERT * FP4 + E * D * BF16 + MHC * FP32) + VOCAB * D * BF16
               + 5 * (INDEXER * FP8 + D * HI * BF16))
    cfg = V41Config.preset("v4.1-flash")
    got = replay_weight_bytes(cfg, 10_000)
    assert got == pytest.approx(by_hand, rel=1e-6) and 125e9 < got < 135e9
    knobs = with_context("v4.1-flash", 10_000, 1)
    tr = replay_tradeoff(build("v4.1-flash", knobs), knobs, [0] * L, H, HD, TOPK, weights_read=got)
    row = next(r for r in tr.derivation if r[0].startswith("weights read"))
    assert row[2] == got and row[3] == f"{got / 1e9:,.1f} GB"


def test_expert_reach_is_measured_from_the_router():
    """Counted in the router choices of a traced forward: one row reaches exactly k experts, n rows at most
    min(e, n k); the closed form beside each is the uniform-routing one for the same e and k."""
    import torch

    from lessons.expert_reach import measured_reach
    from model import V41Model

    torch.manual_seed(0)
    model = V41Model(V41Config.preset("micro")).init_weights(0).eval()
    e, k = model.cfg.n_routed_experts, model.cfg.num_experts_per_tok
    ids = torch.randint(8, model.cfg.vocab_size, (1, 96), generator=torch.Generator().manual_seed(1))
    got = measured_reach(model, ids, batches=(1, 4, 16), runs=(2, 5), draws=8)
    assert [(r.rows, r.how) for r in got] == [(1, "apart"), (4, "apart"), (16, "apart"), (2, "consecutive"),
                                              (5, "consecutive")]
    for r in got:
        assert k <= r.measured <= min(e, r.rows * k)
        assert r.uniform == pytest.approx(e * (1 - (1 - k / e) ** r.rows))
    assert got[0].measured == k


def test_at_a_million_tokens_the_verdict_names_the_indexer_scan():
    """Never compute-bound at 1M context: per sequence the broad scans read 1M keys at layer 20 and 500k at each of
    layers 2, 8 and 14, 68 B each (170 MB), and the verdict says so."""
    from lessons.roofline import per_sequence, verdict

    cfg = V41Config.preset("v4.1-flash")
    one = cost(cfg, Workload("decode", 1_000_000))
    kind, top, _, _ = per_sequence(one)
    by_hand = KEY_ROW * ((1_000_001) + 3 * (1_000_001 // 2))
    assert kind == "indexer broad scan" and top == pytest.approx(by_hand, rel=1e-3)
    chip = GPUS["h100"]
    assert compute_bound_batch(cfg, chip, 1_000_000) is None
    said = verdict(place(one, chip), None, 1, per_sequence(one))
    assert "never turns compute-bound" in said and "indexer broad scan (170.0 MB)" in said


def test_the_readme_quotes_the_page():
    """The README's crossover figures are the page's: per-precision peaks, and the FP8 peak alone."""
    from pathlib import Path

    text = " ".join((Path(__file__).resolve().parents[2] / "README.md").read_text().split())
    cfg = V41Config.preset("v4.1-flash")
    mixed = [compute_bound_batch(cfg, GPUS[k], 10_000) for k in ("h100", "h200", "b200")]
    fp8 = [compute_bound_batch(cfg, GPUS[k], 10_000, per_precision=False) for k in ("h100", "h200", "b200")]
    assert f"{mixed[0]:,} (H100), {mixed[1]:,} (H200) or {mixed[2]:,} (B200)" in text
    assert f"{fp8[0]:,}, {fp8[1]:,} and {fp8[2]:,}" in text
