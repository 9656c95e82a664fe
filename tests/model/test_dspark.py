"""DSpark: lossless verification, greedy identity, cache rollback, native names, heads, training."""

from __future__ import annotations

import math

import pytest
import torch

import model.inference.speculative as dspark
from lab.training import DraftTrainConfig, train_drafter, write_drafter
from model import Sampler, V41Config, decode_step, load, prefill
from model.accounting import _drafter_shapes
from model.arch import Drafter, attach_drafter
from model.checkpoint import save_checkpoint
from model.inference import (
    Draft,
    SpecOptions,
    expected_tokens_per_pass,
    generate,
    speculative_generate,
    speculative_start,
    verify,
    verify_step,
)
from tests.conftest import random_model


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    # these tests run many tiny forwards: OpenMP barriers on a busy 2-core machine cost far more than they give
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def pair():
    m = random_model("micro", seed=3)
    d = attach_drafter(m, seed=5)
    return m, d


def _prompt(seed: int, n: int | None = None) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    n = n or int(torch.randint(2, 30, (1,), generator=g))
    return torch.randint(5, 250, (1, n), generator=g)


def _plain(m, ids, n, mode, rollback, eos=False):
    """Plain greedy decoding, one token per forward, in a cache with the same rollback slack."""
    pf = prefill(m, ids, mode, rollback=rollback)
    out, logits = [], pf.logits
    eos_ids = {m.cfg.eos_token_id}
    for _ in range(n):
        tok = int(logits.argmax(-1)[0])
        out.append(tok)
        if (eos and tok in eos_ids) or len(out) == n:
            break
        logits = decode_step(m, pf.cache, torch.tensor([[tok]]))[:, -1]
    return out, pf.cache


def _logical(c) -> dict[str, torch.Tensor]:
    """What the next forward reads from a cache: ids, the last W-1 window rows per layer, compressed
    entries and index keys, and the projected rows of each source's incomplete group."""
    w = c.cfg.sliding_window - 1
    t = {"tokens": c.tokens, "compressed": c.compressed, "meta": torch.tensor([c.length, c.decoder_floor])}
    for layer, st in sorted(c.windows.items()):
        floor = c.decoder_floor if layer >= c.cfg.decoder_start else 0
        n = min(w, c.length - floor)
        t[f"window.{layer}"] = st.last(n) if n > 0 else torch.zeros(0)
    for layer, st in sorted(c.sources.items()):
        t[f"source.{layer}.length"] = torch.tensor([st.length])
        if len(st):
            t[f"source.{layer}.entries"], t[f"source.{layer}.keys"] = st.all_entries(), st.all_keys()
        p = st.length % st.ratio
        if st.ratio > 1 and p:
            t[f"pending.{layer}"] = torch.cat([st.rows_kv[:, -p:], st.rows_gate[:, -p:]], -1)
    return t


def _assert_same_cache(a, b, window_flips: float = 0.0):
    """The two caches hold what the next forward reads; window rows may differ in under `window_flips` of their
    numbers (0: exactly equal)."""
    la, lb = _logical(a), _logical(b)
    assert la.keys() == lb.keys()
    for k in la:
        assert la[k].shape == lb[k].shape, k
        if k.startswith("pending"):  # fp32 projections: a 4-row and a 1-row matmul differ in the last bit
            torch.testing.assert_close(la[k], lb[k], atol=1e-5, rtol=0)
        elif k.startswith("window") and window_flips:
            # many steps of batched vs single-row forwards: allow occasional one-step FP8 rounding flips (under 1% on
            # one CPU model, up to 3.8% of a window's numbers on another); a real mismatch moves most of them
            assert (la[k] != lb[k]).float().mean() < window_flips, k
        else:
            assert torch.equal(la[k], lb[k]), k


# ------------------------------------------------------------------------------------------------
# Stochastic verification is lossless (§8.3)
# ------------------------------------------------------------------------------------------------

P = torch.tensor([0.40, 0.25, 0.15, 0.10, 0.06, 0.04])
Q = torch.tensor([[0.05, 0.10, 0.15, 0.20, 0.20, 0.30],   # a deliberately different draft per position
                  [0.30, 0.30, 0.10, 0.10, 0.10, 0.10],
                  [0.02, 0.08, 0.50, 0.20, 0.10, 0.10]])


def _wrong_verify(p, q, drafts, greedy, generator=None):
    """A plausible bug: after a rejection, resample from p instead of norm(max(0, p - q))."""
    out = []
    for j, x in enumerate(drafts):
        if float(torch.rand((), generator=generator)) < min(1.0, float(p[j, x] / q[j, x])):
            out.append(x)
            continue
        out.append(int(torch.multinomial(p[j], 1, generator=generator)))
        return dspark.Verdict(j, out, [])
    out.append(int(torch.multinomial(p[-1], 1, generator=generator)))
    return dspark.Verdict(len(drafts), out, [])


def _emitted_stream(rule, n_steps: int, seed: int = 0) -> list[int]:
    """Repeated draft-and-verify steps with a context-free target P: every emitted token must be ~ P,
    independently of the others."""
    g = torch.Generator().manual_seed(seed)
    p = P.expand(Q.shape[0] + 1, -1)
    out: list[int] = []
    for _ in range(n_steps):
        drafts = [int(torch.multinomial(Q[j], 1, generator=g)) for j in range(Q.shape[0])]
        out += rule(p, Q, drafts, False, g).tokens
    return out


def _chi2_pvalue(counts: torch.Tensor, expected: torch.Tensor) -> float:
    stat = float(((counts - expected) ** 2 / expected).sum())
    dof = counts.numel() - 1
    return float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64),
                                         torch.tensor(stat / 2, dtype=torch.float64)))


def _pvalues(tokens: list[int]) -> tuple[float, float]:
    t = torch.tensor(tokens)
    uni = torch.bincount(t, minlength=6).double()
    pairs = torch.bincount(t[:-1] * 6 + t[1:], minlength=36).double()
    p = P.double()
    return _chi2_pvalue(uni, p * len(t)), _chi2_pvalue(pairs, torch.outer(p, p).flatten() * (len(t) - 1))


def test_stochastic_verification_emits_the_target_distribution():
    toks = _emitted_stream(verify, 4000)
    assert len(toks) > 6000
    p_uni, p_pairs = _pvalues(toks)
    assert p_uni > 1e-3 and p_pairs > 1e-3, (p_uni, p_pairs)


def test_negative_control_the_chi_square_catches_a_wrong_residual_rule():
    toks = _emitted_stream(_wrong_verify, 4000)
    p_uni, _ = _pvalues(toks)
    assert p_uni < 1e-9


def test_acceptance_rate_matches_sum_of_min():
    # one position: P(accept) = sum_x min(p, q) (§8.3); here 0.5
    g = torch.Generator().manual_seed(1)
    n, acc = 6000, 0
    p = P.expand(2, -1)
    for _ in range(n):
        x = int(torch.multinomial(Q[0], 1, generator=g))
        acc += verify(p, Q[:1], [x], False, g).accepted
    beta = float(torch.minimum(P, Q[0]).sum())
    assert beta == pytest.approx(0.5)
    assert abs(acc / n - beta) < 4 * math.sqrt(beta * (1 - beta) / n)


def test_greedy_rule_accepts_the_argmax_prefix_then_corrects():
    logits = torch.tensor([[0.0, 3.0, 1.0], [2.0, 0.0, 1.0], [0.0, 0.0, 5.0], [1.0, 0.0, 0.0]])
    v = verify(logits, None, [1, 0, 1], greedy=True)
    assert (v.accepted, v.tokens, v.rules, v.resampled) == (2, [1, 0, 2], ["accept", "accept", "reject"], 2)
    v = verify(logits, None, [1, 0, 2], greedy=True)
    assert (v.accepted, v.tokens, v.bonus) == (3, [1, 0, 2, 0], 0)
    v = verify(logits, None, [], greedy=True)
    assert (v.accepted, v.tokens) == (0, [1])


# ------------------------------------------------------------------------------------------------
# Greedy speculative decoding == plain greedy decoding; rollback restores the cache
# ------------------------------------------------------------------------------------------------

def _oracle(reference: list[int], prompt_len: int, corrupt: float, seed: int):
    """A stand-in drafter that proposes the plain run's continuation with some tokens corrupted,
    so steps see full acceptance (bonus tokens), partial acceptance and immediate rejection."""
    g = torch.Generator().manual_seed(seed)

    def fake(drafter, target, dctx, anchor, sampler, draft_length="max", threshold=0.3, limit=None):
        gmax = drafter.max_draft if not isinstance(draft_length, int) else min(drafter.max_draft, draft_length)
        if limit is not None:
            gmax = min(gmax, limit)
        i = dctx.end - prompt_len  # index of the anchor in the output
        toks = []
        for j in range(max(0, gmax)):
            t = reference[i + 1 + j] if i + 1 + j < len(reference) else 7
            if float(torch.rand((), generator=g)) < corrupt:
                t = (t + 1 + int(torch.randint(0, 200, (), generator=g))) % 256
            toks.append(t)
        q = (torch.nn.functional.one_hot(torch.tensor(toks, dtype=torch.long), 256).float() if toks
             else torch.zeros(0, 256))
        return Draft(toks, q, [0.9] * len(toks), [0.9 ** (k + 1) for k in range(len(toks))])

    return fake


SLOW = pytest.mark.slow


@pytest.mark.parametrize("mode,prompts,lengths", [("bounded", 3, (2, "auto")),
                                                  pytest.param("exact", 3, (2, "auto"), marks=SLOW),
                                                  pytest.param("bounded", 8, (1, 3, "max"), marks=SLOW)])
def test_greedy_speculative_equals_plain_greedy_with_the_real_drafter(pair, mode, prompts, lengths):
    m, d = pair
    for seed in range(prompts):
        ids = _prompt(seed)
        ref, _ = _plain(m, ids, 10, mode, d.block_size)
        for dl in lengths:
            r = generate(m, ids, 10, prefill_mode=mode, stop_at_eos=False, spec=SpecOptions(d, dl))
            assert r.tokens == ref, (seed, dl)


@pytest.mark.parametrize("mode,prompts", [("bounded", 4), pytest.param("exact", 4, marks=SLOW),
                                          pytest.param("bounded", 12, marks=SLOW)])
@pytest.mark.slow
def test_greedy_speculative_equals_plain_with_accepting_drafts(pair, mode, prompts, monkeypatch):
    m, d = pair
    accepted = bonus = 0
    for seed in range(prompts):
        ids = _prompt(100 + seed)
        ref, ref_cache = _plain(m, ids, 20, mode, d.block_size)
        for dl, corrupt in ((3, 0.15), (2, 0.4), (1, 0.0)):
            monkeypatch.setattr(dspark, "draft_block", _oracle(ref, ids.shape[1], corrupt, seed))
            r = speculative_generate(m, d, ids, 20, sampler=Sampler(), prefill_mode=mode, draft_length=dl,
                                     stop_at_eos=False, keep_cache=True)
            assert r.tokens == ref, (seed, dl)
            _assert_same_cache(r.cache, ref_cache, window_flips=0.08)
            accepted += r.stats.accepted
            bonus += sum(s.bonus is not None for s in r.stats.log)
            assert sum(s.rows_rolled_back for s in r.stats.log) == r.stats.drafted - r.stats.accepted
    assert accepted > 12 * prompts and bonus > 3 * prompts  # acceptance and bonus tokens really happened


def test_eos_inside_accepted_drafts_stops_like_plain_decoding(pair, monkeypatch):
    m, d = pair
    ids = _prompt(7, 12)
    ref, _ = _plain(m, ids, 20, "bounded", d.block_size)
    eos = ref[6]
    monkeypatch.setattr(m.cfg, "eos_token_id", eos)
    ref_eos, ref_cache = _plain(m, ids, 20, "bounded", d.block_size, eos=True)
    assert ref_eos[-1] == eos
    monkeypatch.setattr(dspark, "draft_block", _oracle(ref, ids.shape[1], 0.0, 0))
    r = speculative_generate(m, d, ids, 20, sampler=Sampler(), draft_length=3, keep_cache=True)
    assert r.tokens == ref_eos and r.stopped == "eos"
    _assert_same_cache(r.cache, ref_cache, window_flips=0.08)


@pytest.mark.parametrize("mode", ["bounded", "exact"])
@pytest.mark.parametrize("plen", [5, 16, 17, 30])
def test_cache_after_rejected_draft_equals_cache_that_never_drafted(pair, mode, plen):
    m, _ = pair
    ids = _prompt(plen, plen)
    g = torch.Generator().manual_seed(plen)
    for keep in (1, 2, 3):
        feed = torch.randint(5, 250, (1, 4), generator=g)
        drafted = prefill(m, ids, mode, rollback=4)
        decode_step(m, drafted.cache, feed)          # anchor + 3 drafts in one verify forward
        drafted.cache.rollback(4 - keep)             # the drafts after the first keep-1 were rejected
        never = prefill(m, ids, mode, rollback=4)
        decode_step(m, never.cache, feed[:, :keep])
        # a 4-row and a keep-row forward sum in different orders: on some CPUs (seen on AMD EPYC) a last-bit fp32
        # difference crosses an FP8 rounding boundary in a deep window row (0.2% of one layer's numbers, one step)
        _assert_same_cache(drafted.cache, never.cache, window_flips=0.01)
        nxt = torch.tensor([[9]])
        torch.testing.assert_close(decode_step(m, drafted.cache, nxt), decode_step(m, never.cache, nxt),
                                   atol=1e-4, rtol=0)


def test_step_by_step_session_matches_generate(pair):
    m, d = pair
    ids = _prompt(3)
    st = speculative_start(m, d, ids, 12, draft_length=3, stop_at_eos=False)
    logs = []
    while (log := verify_step(st)) is not None:
        logs.append(log)
        assert log.cache_length == st.cache.length == st.dctx.end
        assert log.rows_appended == len(log.drafted) + 1
        assert log.rows_rolled_back == len(log.drafted) - log.accepted
    assert st.tokens == generate(m, ids, 12, stop_at_eos=False).tokens
    assert len(st.tokens) <= 12 and st.done


# ------------------------------------------------------------------------------------------------
# Statistics, auto draft length
# ------------------------------------------------------------------------------------------------

def test_formula_values():
    assert expected_tokens_per_pass(0.5, 3) == pytest.approx(1.875)      # (1 - 1/16) / (1/2)
    assert expected_tokens_per_pass(0.0, 4) == pytest.approx(1.0)
    assert expected_tokens_per_pass(1.0, 4) == pytest.approx(5.0)


def test_stats_agree_with_the_step_log(pair, monkeypatch):
    m, d = pair
    ids = _prompt(11)
    ref, _ = _plain(m, ids, 30, "bounded", d.block_size)
    monkeypatch.setattr(dspark, "draft_block", _oracle(ref, ids.shape[1], 0.25, 4))
    r = speculative_generate(m, d, ids, 30, sampler=Sampler(), draft_length=3, stop_at_eos=False)
    s = r.stats
    assert len(r.tokens) == 30 == 1 + s.emitted
    assert s.tokens_per_pass == pytest.approx(s.emitted / s.steps)
    assert s.tokens_per_pass == pytest.approx(1 + s.mean_accepted_length)  # every step emits k + 1
    for j in range(3):
        reached = sum(len(x.rules) > j for x in s.log)
        acc = sum(x.accepted > j for x in s.log)
        assert (s.reached[j], s.accepted_at[j]) == (reached, acc)
    assert s.alpha == pytest.approx(sum(s.accepted_at) / sum(s.reached))
    assert r.target_passes == 1 + s.steps


def test_auto_draft_length_stops_when_the_running_confidence_falls_under_the_threshold(pair):
    m, d = pair  # a fresh confidence head outputs exactly 0.5: survival 0.5, 0.25, 0.125
    ids = _prompt(5)
    for thr, want in ((0.3, 1), (0.2, 2), (0.1, 3), (0.6, 0)):
        r = generate(m, ids, 8, stop_at_eos=False, spec=SpecOptions(d, "auto", thr))
        assert all(len(x.drafted) == min(want, 8 - 2 - sum(len(y.emitted) for y in r.stats.log[:i]))
                   for i, x in enumerate(r.stats.log))
        assert r.tokens == generate(m, ids, 8, stop_at_eos=False).tokens


# ------------------------------------------------------------------------------------------------
# Native names, heads
# ------------------------------------------------------------------------------------------------

def test_native_names_and_parameter_count():
    cfg = V41Config.preset("micro").replace(num_nextn_predict_layers=3).validate()
    with torch.device("meta"):
        d = Drafter(cfg)
    names = {k: tuple(v.shape) for k, v in d.state_dict().items()}
    D, V, r = cfg.hidden_size, cfg.vocab_size, cfg.dspark_markov_rank
    assert names["0.main_proj.weight"] == (D, 3 * D) and names["0.main_norm.weight"] == (D,)
    assert "1.main_proj.weight" not in names and "0.markov_head.embed.weight" not in names
    assert names["2.markov_head.embed.weight"] == (V, r) and names["2.markov_head.head.weight"] == (V, r)
    assert names["2.confidence_head.proj.weight"] == (1, D + r) and names["2.norm.weight"] == (D,)
    for i in range(3):
        for k in ("attn.wq_a.weight", "attn.wkv.weight", "attn.attn_sink", "hc_attn_fn", "hc_ffn_scale",
                  "attn_norm.weight", "ffn_norm.weight", "ffn.shared_experts.w1.weight"):
            assert f"{i}.{k}" in names
        assert f"{i}.ffn.experts.{cfg.dspark_n_routed_experts - 1}.w2.weight" in names
        assert f"{i}.ffn.experts.{cfg.dspark_n_routed_experts}.w2.weight" not in names
        assert not any(n.startswith(f"{i}.attn.compressor") or n.startswith(f"{i}.attn.indexer") for n in names)
    assert sum(p.numel() for p in d.parameters()) == _drafter_shapes(cfg)


def test_save_load_round_trip_and_write_into_a_checkpoint(pair, tmp_path):
    m, d = pair
    save_checkpoint(m, tmp_path / "a")
    loaded = load(tmp_path / "a", device="cpu")
    assert isinstance(loaded.mtp, Drafter)
    for k, v in m.state_dict().items():
        assert torch.equal(v, loaded.state_dict()[k]), k
    ids = _prompt(2)
    a = generate(m, ids, 10, spec=SpecOptions(d, 3), stop_at_eos=False)
    b = loaded.generate(ids, 10, draft=loaded.mtp, draft_length=3, stop_at_eos=False)
    assert a.tokens == b.tokens and [s.drafted for s in a.stats.log] == [s.drafted for s in b.stats.log]
    # write_drafter: a target-only checkpoint gains mtp.* (and keeps everything else)
    bare = random_model("micro", seed=3)
    save_checkpoint(bare, tmp_path / "b")
    assert load(tmp_path / "b", device="cpu").mtp is None
    bare.set_part("mtp", d)
    write_drafter(bare, tmp_path / "b")
    again = load(tmp_path / "b", device="cpu")
    assert isinstance(again.mtp, Drafter)
    for k, v in bare.state_dict().items():
        assert torch.equal(v, again.state_dict()[k]), k


def test_heads_shapes_and_block_attention(pair):
    m, d = pair
    cfg = m.cfg
    n, c, s = 3, 5, d.block_size
    anchor = torch.tensor([10, 20, 30])
    pos = torch.tensor([3, 9, 40])
    ctx_pos = pos.view(-1, 1) - c + torch.arange(c)
    mask = ctx_pos >= 0
    ctx_h = torch.randn(n, c, cfg.hidden_size)
    with torch.no_grad():
        h = d.hidden(m, anchor, pos, ctx_h, ctx_pos.clamp_min(0), mask)
        assert h.shape == (n, s, cfg.hidden_size)
        u = d.logits(m, h[:, 1:])
        assert u.shape == (n, s - 1, cfg.vocab_size)
        bias, e = d.last.markov_head(anchor)
        assert bias.shape == (n, cfg.vocab_size) and e.shape == (n, cfg.dspark_markov_rank)
        conf = torch.sigmoid(d.last.confidence_head(h[:, 1], e))
        assert conf.shape == (n,) and torch.allclose(conf, torch.full((n,), 0.5))  # zero-initialised head
        # masked context rows change nothing; visible ones do; block rows see each other (bidirectional)
        ctx2 = ctx_h.clone()
        ctx2[0, 0] += 5.0          # row 0's first context position is -2: masked
        assert torch.equal(d.hidden(m, anchor, pos, ctx2, ctx_pos.clamp_min(0), mask)[0], h[0])
        ctx2[0, -1] += 5.0         # position 2: visible
        assert not torch.allclose(d.hidden(m, anchor, pos, ctx2, ctx_pos.clamp_min(0), mask)[0], h[0])
        other = d.hidden(m, torch.tensor([11, 20, 30]), pos, ctx_h, ctx_pos.clamp_min(0), mask)
        assert not torch.allclose(other[0, -1], h[0, -1])   # the last noise row sees the anchor


# ------------------------------------------------------------------------------------------------
# Training
# ------------------------------------------------------------------------------------------------

class _Stream:
    """A repetitive token stream (period 7), so a few steps visibly teach the drafter."""

    def sample_batch(self, batch, seq_len, generator):
        starts = torch.randint(0, 7, (batch, 1), generator=generator)
        x = 20 + (starts + torch.arange(seq_len + 1)) % 7 * 11
        return x[:, :-1], x[:, 1:]


@pytest.mark.slow
def test_train_drafter_lowers_the_loss_and_leaves_the_target_frozen():
    m = random_model("micro", seed=1)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    flags = {n: p.requires_grad for n, p in m.named_parameters()}
    tc = DraftTrainConfig(batch=4, anchors=8, pool_greedy=4, pool_sampled=4, pool_corpus=4, prompt_len=8,
                          gen_len=16, lr=5e-3, warmup=2)
    import io

    info = train_drafter(m, _Stream(), steps=40, seed=0, log=io.StringIO(), tc=tc)
    assert isinstance(m.mtp, Drafter)
    for k, v in before.items():
        assert torch.equal(v, m.state_dict()[k]), k          # target untouched
    assert flags == {n: p.requires_grad for n, p in m.named_parameters() if not n.startswith("mtp.")}
    hist = info["log_every_10"]
    assert hist[-1]["loss"] < hist[0]["loss"]
    assert info["data"]["kinds"] == {"corpus": 4, "greedy": 4, "sampled": 4}


# ------------------------------------------------------------------------------------------------
# lessons/dspark.py on a real run (its formulas and simulation: tests/lessons/test_dspark.py)
# ------------------------------------------------------------------------------------------------

def test_lesson_rows_from_a_run(pair, monkeypatch):
    from lessons import dspark as L

    m, d = pair
    ids = _prompt(13)
    ref, _ = _plain(m, ids, 16, "bounded", d.block_size)
    monkeypatch.setattr(dspark, "draft_block", _oracle(ref, ids.shape[1], 0.3, 2))
    r = speculative_generate(m, d, ids, 16, sampler=Sampler(), draft_length=3, stop_at_eos=False)
    s = r.stats
    pos = L.position_rows(s)
    assert [p.reached for p in pos] == s.reached and [p.accepted for p in pos] == s.accepted_at
    summary = {row.label: row.value for row in L.summary_rows(s, plain_seconds=1.0, plain_tokens=16)}
    assert summary["tokens per pass (formula)"] == pytest.approx(expected_tokens_per_pass(s.alpha, s.mean_draft_length))
    assert summary["tokens per pass (measured)"] == pytest.approx(s.emitted / s.steps)
    for step in s.log:
        rows = L.step_rows(step)
        assert len(rows) == len(step.drafted) + 1
        assert [r["verdict"] for r in rows[:len(step.rules)]] == step.rules
        assert rows[-1]["guess"] == step.emitted[-1]
        assert rows[-1]["verdict"].startswith("bonus" if step.bonus is not None else "correction")
        cache = {c.label: c.value for c in L.cache_rows(step)}
        assert cache["rows written by the checking pass"] - cache["rows rolled back"] == step.accepted + 1
