"""Training: a few steps lower the loss; a resumed run equals an uninterrupted one; shipped data checks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from model import CheckpointError, V41Config, V41Model, load
from model.dataset import sample_batch
from model.train import TrainConfig, batch_generator, load_state, make_optimizer, save_state, train_step


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


def test_a_few_steps_lower_the_loss_and_train_the_indexer():
    stream = _stream()
    tc, m, opt = _setup(steps=30)
    wq = m.layers[2].attn.indexer.wq_b.weight.detach().clone()
    losses = _run(tc, m, opt, stream, 0, 30)
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.3
    assert not torch.equal(wq, m.layers[2].attn.indexer.wq_b.weight)  # the KL signal reached the indexer
    assert float(m.layers[0].ffn.gate.bias.abs().sum()) > 0            # load balancing moved the bias


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
    from model.weights import save_checkpoint
    from conftest import ROOT
    m = V41Model(V41Config.preset("micro")).init_weights(0)
    save_checkpoint(m, tmp_path)
    import shutil
    shutil.copy(ROOT / "data" / "weights" / "tiny" / "tokenizer.json", tmp_path / "tokenizer.json")
    with pytest.raises(CheckpointError, match="vocab_size"):
        load(tmp_path, device="cpu")


def test_shipped_weights_load_with_tokenizer_and_record_training():
    from conftest import ROOT
    d = ROOT / "data" / "weights" / "tiny"
    if not (d / "model.safetensors").exists():
        pytest.skip("trained tiny weights not shipped yet")
    import json
    m = load(d, device="cpu")
    assert m.tokenizer is not None and m.cfg.vocab_size == m.tokenizer.get_vocab_size()
    info = json.loads((d / "training.json").read_text())
    for key in ("command", "seed", "steps", "tokens", "wall_seconds", "machine", "final"):
        assert key in info
