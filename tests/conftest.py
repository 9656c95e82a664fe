"""Shared fixtures: the golden parity fixture and small random models (CPU, milliseconds)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from model.shipped import shipped_weights

# One thread: the tests are small, and on a busy 2-core machine a second OpenMP thread that cannot
# get a core makes every parallel op wait for it (a 40-token forward went from 0.1 s to 10 s).
torch.set_num_threads(1)
# Tests are written for the CPU: a model loaded without a device stays there on a GPU machine too
# (model.default_device reads V41_DEVICE; `V41_DEVICE=cuda pytest` runs them on the GPU on purpose).
os.environ.setdefault("V41_DEVICE", "cpu")

ROOT = Path(__file__).resolve().parents[1]
# A copy of the shared fixture v41-parity-a (docs/design/sources.md §5; golden data from an independent
# implementation) travels with the repo so a clean clone tests parity too; the shared original wins when present.
SHARED_FIXTURE = ROOT.parent / "shared" / "fixtures" / "v41-parity-a"
FIXTURE = SHARED_FIXTURE if SHARED_FIXTURE.exists() else ROOT / "tests" / "fixtures" / "v41-parity-a"


@pytest.fixture(scope="session")
def fixture_dir() -> Path:
    if not FIXTURE.exists():
        pytest.skip("golden fixture v41-parity-a not present")
    return FIXTURE


@pytest.fixture(scope="session")
def golden(fixture_dir):
    from safetensors.torch import load_file

    from model import load

    m = load(fixture_dir, device="cpu")
    return m, load_file(str(fixture_dir / "inputs.safetensors"))["input_ids"], load_file(
        str(fixture_dir / "expected.safetensors"))


def random_model(preset: str = "micro", seed: int = 0, **changes):
    from model import V41Config, V41Model

    cfg = V41Config.preset(preset)
    if changes:
        cfg = cfg.replace(**changes).validate()
    torch.manual_seed(seed)
    m = V41Model(cfg).init_weights(seed)
    # make routing, sinks and mHC non-trivial so tests exercise every path
    with torch.no_grad():
        g = torch.Generator().manual_seed(seed + 1)
        for name, p in m.named_parameters():
            if name.endswith(("hc_attn_fn", "hc_ffn_fn")):
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
            elif name.endswith(("attn_sink", "gate.bias")):
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
            elif p.ndim == 2 and "embed" not in name:
                p.copy_(torch.randn(p.shape, generator=g) * p.shape[1] ** -0.5)
            elif name == "embed.weight":
                p.copy_(torch.randn(p.shape, generator=g))
    return m.eval()


@pytest.fixture(scope="session")
def fx(golden):
    """The fixture's model: real margins around every FP4 rounding and top-k decision, so two ways of
    computing the same logits agree to 1e-4 (random weights can sit on a rounding boundary, where
    ulp-level differences between matmul shapes flip an FP4 code)."""
    return golden[0]


@pytest.fixture(scope="session")
def micro():
    return random_model("micro")


def random_tiny(seed: int = 0):
    """The tiny preset with random weights and the shipped tokenizer bound (Engram map from it)."""
    from model.tokenizer import compressed_token_map, load_tokenizer

    tok = load_tokenizer(shipped_weights("text") / "tokenizer.json")
    _, n = compressed_token_map(tok)
    m = random_model("tiny", seed, engram_compressed_vocab_size=n)
    return m.bind_tokenizer(tok)


@pytest.fixture(scope="session")
def tiny_random():
    """random_tiny(0), built once for the whole run: tests read it and never change it."""
    return random_tiny(0)


@pytest.fixture(scope="session")
def tiny_trained():
    """The shipped trained tiny weights on the CPU, loaded once for the whole run; tests never change them."""
    from model import load

    return load(shipped_weights("text"), device="cpu")


def run_page(page: str, timeout: int = 240, **params):
    """AppTest of pages/<page>.py on random tiny weights with these URL parameters, run once."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "pages" / f"{page}.py"), default_timeout=timeout)
    at.query_params["weights"] = "random"
    for k, v in params.items():
        at.query_params[k] = str(v)
    return at.run()
