"""Training: a few steps lower the loss; a resumed run equals an uninterrupted one; shipped data checks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lab.corpus import sample_batch
from lab.training import TrainConfig, batch_generator, load_state, make_optimizer, save_state, train_step
from model import CheckpointError, V41Config, V41Model, load
from model.shipped import shipped_weights


def _stream(n: int = 20000, vocab: int = 256, seed: int = 0) -> np.ndarray:
    """A learnable stream: each token mostly follows from the previous one."""
    rng = np.random.default_rng(seed)
    nxt = rng.integers(3, vocab, size=vocab)
    out = np.empty(n, dtype=np.uint16)
    out[0] = 5
    for i in range(1, n):
        out[i] = nxt[out[i - 1]] if rng.random() < 0.9 else rng.integers(3, vocab)
    return out


def _setup(seed=0, steps=8):
    tc = TrainConfig(preset="micro", steps=steps, batch=4, seq_len=48, lr=3e-3, warmup_steps=2, seed=seed,
                     dense_warmup_frac=0.25)
    torch.manual_seed(seed)
    m = V41Model(V41Config.preset("micro")).init_weights(seed)
    return tc, m, make_optimizer(m, tc)


def _run(tc, m, opt, stream, start, stop):
    losses = []
    for step in range(start, stop):
        x, y = sample_batch(stream, tc.batch, tc.seq_len, batch_generator(tc, step))
        losses.append(train_step(m, opt, x, y, tc, step)["loss"])
    return losses


@pytest.mark.slow
def test_a_few_steps_lower_the_loss_and_train_the_indexer():
    stream = _stream()
    tc, m, opt = _setup(steps=30)
    wq = m.layers[2].attn.indexer.wq_b.weight.detach().clone()
    losses = _run(tc, m, opt, stream, 0, 30)
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.3
    assert not torch.equal(wq, m.layers[2].attn.indexer.wq_b.weight)  # the KL signal reached the indexer
    assert float(m.layers[0].ffn.gate.bias.abs().sum()) > 0            # load balancing moved the bias


def test_pool_kl_trains_the_candidate_source_on_the_summed_attention_of_the_layers_it_serves(monkeypatch):
    """`pool_kl` (`PoolKLRecorder`): the forward is unchanged; in dense mode the candidate source's KL target is the
    attention of every layer reading its entries (row sums above one layer's head count), which changes the loss
    and still reaches the source's indexer; in sparse mode it changes nothing."""
    import lab.training.lookup as lookup
    from lab.training.lookup import PoolKLRecorder
    from model import Ablation, random_tiny

    m = random_tiny()
    cfg = m.cfg
    src = cfg.candidate_source_layer_id
    x = torch.randint(5, 4000, (2, 48))
    dense = Ablation(dense_compressed=True)
    seen = []
    real = lookup.indexer_kl
    monkeypatch.setattr(lookup, "indexer_kl", lambda a, s, sup: seen.append(a) or real(a, s, sup))
    plain = m(x, indexer_loss=True, ablation=dense)
    assert not seen                                          # off: no aggregated term
    pool = PoolKLRecorder()
    pooled = m(x, indexer_loss=True, ablation=dense, trace=pool)
    pooled_loss = pool.indexer_loss(pooled)
    assert len(seen) == 1 and pool.source == src
    assert torch.equal(plain.logits, pooled.logits)
    assert float(seen[0].sum(-1).max()) > cfg.num_attention_heads + 0.5   # more than one layer's attention
    assert abs(float(plain.indexer_loss.detach()) - float(pooled_loss.detach())) > 1e-6
    pooled_loss.backward()
    assert float(m.layers[src].attn.indexer.wq_b.weight.grad.abs().sum()) > 0
    sparse_a = m(x, indexer_loss=True)
    sparse_pool = PoolKLRecorder()
    sparse_b = m(x, indexer_loss=True, trace=sparse_pool)
    assert len(seen) == 1 and torch.equal(sparse_a.indexer_loss, sparse_pool.indexer_loss(sparse_b))


@pytest.mark.slow
def test_resumed_run_equals_uninterrupted(tmp_path):
    stream = _stream()
    tc, a, opt_a = _setup(steps=6)
    _run(tc, a, opt_a, stream, 0, 6)
    tc, b, opt_b = _setup(steps=6)
    _run(tc, b, opt_b, stream, 0, 3)
    save_state(tmp_path, b, opt_b, 3, tc, [])
    tc, c, opt_c = _setup(seed=0, steps=6)  # a fresh process: new model and optimizer, then resume
    step, _ = load_state(tmp_path, c, opt_c)
    assert step == 3
    _run(tc, c, opt_c, stream, step, 6)
    sa, sc = a.state_dict(), c.state_dict()
    for k in sa:
        assert torch.equal(sa[k], sc[k]), k


def test_checkpoints_are_safetensors_not_pickle(tmp_path):
    tc, m, opt = _setup()
    save_state(tmp_path, m, opt, 0, tc, [])
    head = (tmp_path / "ckpt.safetensors").read_bytes()[:8]
    assert int.from_bytes(head, "little") > 0  # safetensors starts with its header length
    assert not (tmp_path / "ckpt.safetensors").read_bytes().startswith(b"\x80")  # no pickle protocol byte


def test_loader_rejects_a_tokenizer_that_does_not_match(tmp_path):
    from model.checkpoint import save_checkpoint
    m = V41Model(V41Config.preset("micro")).init_weights(0)
    save_checkpoint(m, tmp_path)
    import shutil
    shutil.copy(shipped_weights("text") / "tokenizer.json", tmp_path / "tokenizer.json")
    with pytest.raises(CheckpointError, match="vocab_size"):
        load(tmp_path, device="cpu")


def test_shipped_weights_load_with_tokenizer_and_record_training():
    d = shipped_weights("text")
    if not (d / "model.safetensors").exists():
        pytest.skip("trained tiny weights not shipped yet")
    import json
    m = load(d, device="cpu")
    assert m.tokenizer is not None and m.cfg.vocab_size == m.tokenizer.get_vocab_size()
    info = json.loads((d / "training.json").read_text())
    for key in ("command", "seed", "steps", "tokens", "wall_seconds", "machine", "final"):
        assert key in info


def test_training_window_is_a_curriculum_knob_that_restores():
    from lab.training import set_window

    torch.manual_seed(0)
    m = V41Model(V41Config.preset("micro")).init_weights(0).eval()
    x = torch.randint(5, 250, (1, 40))
    with torch.no_grad():
        base = m(x).logits
        set_window(m, 4)
        narrow = m(x).logits
        set_window(m, 0)
        back = m(x).logits
    assert torch.allclose(base[:, :4], narrow[:, :4], atol=1e-5)  # the first rows see fewer than 4 keys either way
    assert (base[:, 8:] - narrow[:, 8:]).abs().max() > 1e-4
    assert torch.equal(base, back)


def test_a_narrowed_training_window_is_the_same_model_as_a_config_with_that_window():
    """Weights trained with `set_window(w)` ship with `sliding_window: w` in their config: same logits."""
    from lab.training import set_window

    torch.manual_seed(0)
    wide = V41Model(V41Config.preset("micro")).init_weights(0).eval()
    narrow = V41Model(wide.cfg.replace(sliding_window=4).validate()).eval()
    narrow.load_state_dict(wide.state_dict())
    x = torch.randint(5, 250, (1, 40))
    with torch.no_grad():
        set_window(wide, 4)
        a = wide(x).logits
        b = narrow(x).logits
    assert (a - b).abs().max() <= 1e-4 * a.abs().max()
    set_window(wide, 0)
    with torch.no_grad():
        assert (wide(x).logits - b).abs().max() > 1e-3       # the config's own window differs


def test_config_window_builds_the_model_with_that_window_and_the_checkpoint_carries_it(tmp_path):
    import json

    from lab.training import build_model, save_weights_bf16
    from model.tokenizer import load_tokenizer

    tok = load_tokenizer("data/weights/tiny/tokenizer.json")
    plain = build_model(TrainConfig(preset="tiny"), tok)
    narrow = build_model(TrainConfig(preset="tiny", config_window=2), tok)
    assert plain.cfg.sliding_window == V41Config.preset("tiny").sliding_window != 2
    assert narrow.cfg.sliding_window == 2
    out = save_weights_bf16(narrow, tmp_path / "w", {"stage": 0})
    assert json.loads((out / "config.json").read_text())["text_config"]["sliding_window"] == 2


class _Out:
    def __init__(self, logits):
        self.logits = logits


class _CopyOracle:
    """Predicts the token `lag - 1` places back: exactly right on the repeat when lag = span + gap."""

    device = torch.device("cpu")

    def __init__(self, lag: int, vocab: int = 300):
        self.lag, self.vocab = lag, vocab

    def __call__(self, x):
        lg = torch.zeros(*x.shape, self.vocab)
        src = torch.arange(x.shape[1]) + 1 - self.lag
        ok = src >= 0
        lg[:, ok] = torch.nn.functional.one_hot(x[:, src[ok]], self.vocab).float()
        return _Out(lg)


def test_copy_accuracy_scores_a_copier_high_and_a_non_copier_low():
    from lab.training import copy_accuracy

    tokens = np.random.default_rng(0).integers(5, 300, size=5000)
    assert copy_accuracy(_CopyOracle(16 + 4), tokens, gap=4) == 1.0
    assert copy_accuracy(_CopyOracle(16 + 5), tokens, gap=4) < 0.05   # looks one place off
    assert copy_accuracy(_CopyOracle(1), tokens, gap=4) < 0.05        # repeats the current token


def test_copy_accuracy_first_time_is_the_no_copy_baseline():
    from lab.training import copy_accuracy

    tokens = np.random.default_rng(0).integers(5, 300, size=5000)
    assert copy_accuracy(_CopyOracle(16 + 4), tokens, gap=4, first=True) < 0.05  # nothing to copy yet


@pytest.mark.slow
def test_fast_step_is_the_same_function_as_the_eager_step(monkeypatch):
    """model/fusion.py's compiled kernels change speed, not maths: on one batch, the loss, every
    parameter's gradient and every discrete choice (experts, top-k picks, candidate pools) agree.

    Compared with the fake quantisation off: FP4 has 16 levels, so a rounding-level difference upstream
    (a compiled reduction summing in another order) can move a value across a rounding boundary and change
    an index score by a whole FP4 step, then a top-k pick, then the gradients; seen on an Intel Xeon host
    (index scores 3% apart, one pick swapped), never on the AMD hosts. The quantisers themselves are
    checked compiled against eager, bit for bit, and with quantisation on the loss still agrees."""
    import model.arch.attention as attention
    from lab.training import forward_backward
    from model import quant
    from model.fusion import compile_error, configure, fused

    configure()
    chosen: dict[str, list] = {}

    def recording(name, fn):
        def wrapper(*a, **k):
            out = fn(*a, **k)
            chosen[name].append(out[0].clone())
            return out
        return wrapper

    monkeypatch.setattr(attention, "select_topk", recording("topk", attention.select_topk))
    monkeypatch.setattr(attention, "candidate_pool", recording("pool", attention.candidate_pool))
    x, y = sample_batch(_stream(), 4, 48, torch.Generator().manual_seed(3))
    runs, losses = {}, {}
    for fast in (False, True):
        for dense in (True, False):
            tc, m, _ = _setup()
            tc.fast = fast
            chosen.update(topk=[], pool=[])
            with quant.fake_quant_disabled():
                got = forward_backward(m, x, y, tc, dense)
                lm, il, out = got.plain.detach(), got.indexer_kl.detach(), got.out
            runs[fast, dense] = (float(lm), float(il), {n: p.grad.clone() for n, p in m.named_parameters()
                                                        if p.grad is not None},
                                 [r for _, r in out.routings], list(chosen["topk"]), list(chosen["pool"]))
            tc, m, _ = _setup()
            tc.fast = fast
            losses[fast, dense] = float(forward_backward(m, x, y, tc, dense).plain.detach())
    assert compile_error() is None
    for dense in (True, False):
        (le, ie, ge, re_, te, pe), (lf, if_, gf, rf, tf, pf) = runs[False, dense], runs[True, dense]
        assert abs(lf - le) <= 1e-5 * abs(le) and abs(if_ - ie) <= 1e-5 * max(abs(ie), 1e-3)
        assert ge.keys() == gf.keys() and len(ge) > 50
        for name in ge:
            err = float((gf[name] - ge[name]).norm()) / max(float(ge[name].norm()), 1e-12)
            assert err <= 1e-4, (name, err)
        assert len(re_) == len(rf) and all(torch.equal(a, b) for a, b in zip(re_, rf))
        assert te and len(te) == len(tf) and all(torch.equal(a, b) for a, b in zip(te, tf))
        assert pe and len(pe) == len(pf) and all(torch.equal(a, b) for a, b in zip(pe, pf))
        assert abs(losses[True, dense] - losses[False, dense]) <= 1e-5 * abs(losses[False, dense])
    g = torch.Generator().manual_seed(0)
    for shape in ((4, 48, 64), (4, 24, 32)):
        v = torch.randn(*shape, generator=g) * 0.1
        for fn, args in ((quant._fake_fp4_values, (16, True)), (quant._fake_fp4_values, (32, False)),
                         (quant._fake_fp8_values, (32,))):
            eager = fn(v, *args)
            with fused():
                assert torch.equal(fn(v, *args), eager), (fn.__name__, args, shape)


def test_stages_pick_the_last_started_value_and_reject_garbage():
    from lab.training import staged

    assert staged("", 10, 7) == 7
    assert [staged("0:8,300:16,600:0", s, 32) for s in (0, 299, 300, 599, 600, 10_000)] == [8, 8, 16, 16, 0, 0]
    assert staged("100:40", 50, 5) == 5
    with pytest.raises(ValueError):
        staged("0:8,x:16", 1, 0)


@pytest.mark.slow
def test_a_stage_of_key_value_rows_without_copies_is_gated_on_lookups(tmp_path, monkeypatch):
    """A stage that drills key-value rows and no copies probes lookups (kv_probe); a copy stage the copies."""
    import lab.training.run as run_mod
    from lab.training import start_run, train_steps

    calls: list[tuple[int, bool]] = []

    def spy(m, ts, stream, broad=False, step=0, tok=None):
        calls.append((step, broad))
        return {"probe_broad" if broad else "probe": 1.0}

    monkeypatch.setattr(run_mod, "kv_probe", spy)
    tok = shipped_weights("text") / "tokenizer.json"
    np.save(tmp_path / "stream.npy", _stream(30000, vocab=4096).astype(np.uint16))
    tc = TrainConfig(preset="tiny8", steps=40, batch=2, seq_len=64, warmup_steps=1, stream=str(tmp_path / "stream.npy"),
                     tokenizer=str(tok), eval_every=0, ckpt_every=100, drafter_steps=0, gate_every=2,
                     gate_min_steps=2, curriculum="kv_frac=1 kv_gap=8 gate=0.9; kv_frac=0 copy_frac=1 gate=0")
    run = start_run(tc, torch.device("cpu"), tmp_path / "ckpt", resume=False)
    train_steps(run)
    assert calls == [(1, False), (1, True)]          # stage 0's one probe (step index 1), both id sets
    assert [p["passed_at_step"] for p in run.passed] == [2, 4] and run.passed[0]["probe"] == 1.0
    assert 0 <= run.passed[1]["probe"] <= 1 and "probe_sparse" in run.passed[1]   # the real copy probe


def test_fusion_falls_back_to_the_same_eager_function_when_compiling_fails(monkeypatch):
    import model.fusion as fusion

    def broken_compile(fn, **kw):
        def run(*a, **k):
            raise RuntimeError("no C compiler")
        return run

    monkeypatch.setattr(fusion, "_broken", [])
    monkeypatch.setattr(torch, "compile", broken_compile)

    @fusion.fusable
    def double(x):
        return x * 2

    x = torch.arange(4.0)
    assert torch.equal(double(x), x * 2) and fusion.compile_error() is None  # outside fused(): eager, no compile
    with fusion.fused():
        assert torch.equal(double(x), x * 2)       # compile failed: the eager function answered
        assert "no C compiler" in fusion.compile_error()
        assert not fusion.fusing()                  # and nothing is compiled again


@pytest.mark.slow
def test_a_window_change_reuses_the_compiled_kernels():
    """A curriculum narrows the window in stages: that must not compile anything new."""
    from torch._dynamo.utils import counters

    from lab.training import forward_backward, set_window
    from model.fusion import configure

    configure()
    x, y = sample_batch(_stream(), 4, 48, torch.Generator().manual_seed(5))
    tc, m, _ = _setup()
    tc.fast = True
    forward_backward(m, x, y, tc, dense=False)
    graphs = counters["stats"]["unique_graphs"]
    for window in (4, 6, 0):
        set_window(m, window)
        forward_backward(m, x, y, tc, dense=False)
    assert counters["stats"]["unique_graphs"] == graphs


def test_curriculum_stages_parse_typed_and_refuse_unknown_fields():
    from lab.training import parse_curriculum
    st = parse_curriculum("seq_len=32 train_window=2 copy_gap=2; seq_len=64 copy_spread=1 copy_temper=0.5")
    assert [s.settings for s in st] == [{"seq_len": 32, "train_window": 2, "copy_gap": 2},
                                        {"seq_len": 64, "copy_spread": True, "copy_temper": 0.5}]
    tc = st[1].apply(TrainConfig(seq_len=512, train_window=4))
    assert (tc.seq_len, tc.train_window, tc.copy_spread) == (64, 4, True)   # a stage changes only what it says
    for bad in ("weight_decay=0", "seq_len=abc", "seq_len"):
        with pytest.raises(ValueError):
            parse_curriculum(bad)


def test_train_only_freezes_every_other_parameter():
    from lab.training import freeze_except
    stream = _stream()
    tc, m, _ = _setup(steps=3)
    tc.train_only = r"indexer\."
    n = freeze_except(m, tc.train_only)
    assert 0 < n < len(list(m.parameters()))
    opt = make_optimizer(m, tc)
    before = {k: v.detach().clone() for k, v in m.named_parameters()}
    _run(tc, m, opt, stream, 0, 3)
    for k, v in m.named_parameters():
        changed = not torch.equal(before[k], v)
        assert not changed or "indexer." in k, k            # the MoE balancing bias is frozen too
    assert any(not torch.equal(before[k], v) for k, v in m.named_parameters() if "indexer." in k)
    with pytest.raises(ValueError, match="no parameter"):
        freeze_except(m, "no-such-name")


@pytest.mark.slow
def test_a_gated_curriculum_passes_stages_writes_bf16_weights_and_resumes_from_them(tmp_path):
    """A stage whose gate is 0 passes at its first probe; each passed stage leaves bf16 weights a new run
    loads strictly; after the last stage the run ends early and training.json records the stages."""
    import json

    from lab.training import finish, start_run, train_steps
    tok = shipped_weights("text") / "tokenizer.json"
    np.save(tmp_path / "stream.npy", _stream(30000, vocab=4096).astype(np.uint16))
    tc = TrainConfig(preset="tiny8", steps=40, batch=2, seq_len=32, copy_frac=1.0, warmup_steps=1,
                     stream=str(tmp_path / "stream.npy"), tokenizer=str(tok), eval_every=0, ckpt_every=100,
                     drafter_steps=0, gate_every=2, gate_min_steps=2, stage_dir=str(tmp_path / "stages"),
                     curriculum="train_window=2 copy_gap=2 gate=0 gate_min_steps=4; "
                                "train_window=2 copy_spread=1 gate=0")
    run = start_run(tc, torch.device("cpu"), tmp_path / "ckpt", resume=False)
    train_steps(run)
    # stage 0 holds its own 4 steps before its first probe, stage 1 the run's 2
    assert [p["passed_at_step"] for p in run.passed] == [4, 6] and run.finished and run.end == 6
    assert all(0 <= p["probe"] <= 1 and "probe_broad_sparse" in p for p in run.passed)
    from safetensors import safe_open
    with safe_open(str(tmp_path / "stages" / "stage1" / "model.safetensors"), "pt") as f:
        assert f.get_tensor("embed.weight").dtype == torch.bfloat16
    assert load(tmp_path / "stages" / "stage1", device="cpu").tokenizer is not None   # a loadable checkpoint
    finish(run, tmp_path / "out", "test", 1.0)
    rec = json.loads((tmp_path / "out" / "training.json").read_text())
    assert [p["stage"] for p in rec["curriculum"]["passed"]] == [0, 1]
    assert rec["tokens"] == 6 * 2 * 32           # the stages' rows (2 x 32), not the run's default 16 x 512
    # a later run, elsewhere: a fresh run from stage 1's weights, at stage 1
    tc2 = TrainConfig(**{**tc.__dict__, "init_from": str(tmp_path / "stages" / "stage1"), "start_stage": 1})
    run2 = start_run(tc2, torch.device("cpu"), tmp_path / "ckpt2", resume=False)
    assert run2.stage == 1 and run2.stage_config().copy_spread
    w = run.model.state_dict()["embed.weight"].to(torch.bfloat16).float()
    assert torch.equal(run2.model.state_dict()["embed.weight"], w)


class _StoryStub:
    """A stand-in model for the binding measure: at the answer row it names either the true answer (read from
    the next input token) or the first colour word of the prompt (some fact's colour, often a distractor's)."""

    device = torch.device("cpu")

    def __init__(self, tok, oracle: bool):
        from model.heldout import COLOURS

        self.tokenizer, self.oracle = tok, oracle
        self.colour_ids = {tok.encode(" " + c, add_special_tokens=False).ids[0] for c in COLOURS}

    def __call__(self, ids):
        from types import SimpleNamespace

        logits = torch.zeros(*ids.shape, self.tokenizer.get_vocab_size())
        for r, row in enumerate(ids.tolist()):
            first = next(i for i, t in enumerate(row) if t in self.colour_ids)
            for q in range(len(row) - 1):
                logits[r, q, row[q + 1] if self.oracle else row[first]] = 1.0
        return SimpleNamespace(logits=logits)


def test_fact_binding_tells_the_asked_fact_from_any_fact():
    from model.heldout import fact_binding
    from model.tokenizer import load_tokenizer

    tok = load_tokenizer("data/weights/tiny/tokenizer.json")
    exact = fact_binding(_StoryStub(tok, oracle=True))
    assert exact.stories > 50 and exact.right == 1.0 and exact.other_fact == 0.0 and exact.alone_right == 1.0
    any_fact = fact_binding(_StoryStub(tok, oracle=False))
    # always some fact's colour: each story with distractors is either right or another fact's colour
    assert any_fact.right + any_fact.other_fact == pytest.approx(1.0)
    assert 0.1 < any_fact.right < 0.7 and any_fact.alone_right == 1.0
    assert 0.25 < any_fact.random_fact < 0.5   # 1 to 3 distractors: a random fact is right 1/4 to 1/2 of the time


def test_link_binding_scores_the_asked_objects_colour_at_each_link_length():
    """Drills with exactly k link words: a model that names the asked object's colour scores 1 at every k; one
    that names the drill's first colour scores near a random pick among the drill's colours, never 1."""
    from lab.probes.evaluation import link_binding
    from model.tokenizer import load_tokenizer

    tok = load_tokenizer("data/weights/tiny/tokenizer.json")
    exact = link_binding(_StoryStub(tok, oracle=True), links=(0, 4), drills=8)
    assert set(exact) == {0, 4} and all(r == 1.0 and 0.15 < g < 0.5 for r, g in exact.values())
    first = link_binding(_StoryStub(tok, oracle=False), links=(0, 4), drills=8)
    for right, guess in first.values():
        assert 0.0 < right < 0.6 and abs(right - guess) < 0.25


def test_pair_formats_score_the_asked_objects_colour_in_every_layout():
    """A model that names the asked object's colour scores 1 in every format; one that names the text's first
    colour stays near a random pick among the text's colours."""
    from lab.probes.evaluation import PAIR_FORMATS, pair_formats
    from model.tokenizer import load_tokenizer

    tok = load_tokenizer("data/weights/tiny/tokenizer.json")
    exact = pair_formats(_StoryStub(tok, oracle=True), rows=6)
    assert set(exact) == set(PAIR_FORMATS) and all(r == 1.0 and 0.15 < g < 0.6 for r, g in exact.values())
    for right, guess in pair_formats(_StoryStub(tok, oracle=False), rows=6).values():
        assert right < 0.6 and abs(right - guess) < 0.3


def test_attention_on_reads_a_positions_window_slot_or_its_selected_entry():
    """Inside the window a position is read through its slot; outside, through the selected entry that packs it
    (summed over heads); a position whose entry was not selected gets nothing."""
    from lab.probes.evaluation import attention_on
    from model.inference.trace import Shares

    window = torch.zeros(1, 1, 2, 3)             # one row, 2 heads, window 3: slots are positions 8, 9, 10
    window[0, 0, :, 2] = torch.tensor([0.25, 0.5])
    entries = torch.zeros(1, 1, 2, 2)
    entries[0, 0, :, 1] = torch.tensor([0.5, 0.25])
    shares = Shares(window=window, entries=entries, entry_ids=torch.tensor([[[7, 2]]]),
                    sink=torch.zeros(1, 1, 2), ratio=2)   # entry 2 packs positions 4-5
    got = attention_on(shares, row=0, at=10, positions=[10, 5, 4, 14, 9, 0])
    assert got.tolist() == pytest.approx([0.75, 0.75, 0.75, 0.0, 0.0, 0.0])


@pytest.mark.slow
def test_pair_reads_scores_the_attended_fact_colour_and_the_answer_apart():
    """On a random tiny model: every format is read, both shares lie in [0, 1], and the texts are those of
    pair_formats (the same answers scored the same way)."""
    from lab.probes.evaluation import PAIR_FORMATS, pair_formats, pair_reads
    from model import random_tiny

    m = random_tiny()
    reads = pair_reads(m, rows=2)
    assert set(reads) == set(PAIR_FORMATS) and all(0 <= r <= 1 and 0 <= s <= 1 for r, s in reads.values())
    said = pair_formats(m, rows=2)
    assert all(reads[k][1] == pytest.approx(said[k][0]) for k in PAIR_FORMATS)


def test_max_minutes_ends_the_run_after_the_step_that_runs_out_of_time_and_saves_it(tmp_path, monkeypatch):
    """A time-boxed run (`max_minutes`) stops after the step that passes the limit, with that step
    evaluated and checkpointed like a planned last step."""
    import lab.training.run as run_mod
    from lab.training import start_run, train_steps
    from lab.training.state import read_meta

    clock = iter(range(0, 10_000, 25))               # every call to time.time() moves the clock 25 s on
    monkeypatch.setattr(run_mod.time, "time", lambda: float(next(clock)))
    monkeypatch.setattr(run_mod, "quick_eval", lambda *a, **k: {"heldout_loss": 1.0})
    tok = shipped_weights("text") / "tokenizer.json"
    np.save(tmp_path / "stream.npy", _stream(30000, vocab=4096).astype(np.uint16))
    tc = TrainConfig(preset="tiny8", steps=40, batch=2, seq_len=32, warmup_steps=1, stream=str(tmp_path / "stream.npy"),
                     tokenizer=str(tok), eval_every=100, ckpt_every=100, drafter_steps=0, max_minutes=1.0)
    run = start_run(tc, torch.device("cpu"), tmp_path / "ckpt", resume=False)
    train_steps(run)
    done = run.log[-1]["step"]
    assert 1 < done < 40 and run.end == done                    # cut short by the clock, not the schedule
    assert run.log[-1]["heldout_loss"] == 1.0                   # the last step was evaluated ...
    assert read_meta(tmp_path / "ckpt")["step"] == done         # ... and checkpointed
