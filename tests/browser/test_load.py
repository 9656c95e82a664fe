"""A smaller run of `python -m bench.load`: 5 concurrent sessions over Streamlit's browser protocol, each running a
prompt on the tiny model; zero errors and one model load for all of them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.browser]


def test_five_concurrent_sessions_share_one_model():
    out = subprocess.run([sys.executable, "-m", "bench.load", "--sessions", "5", "--timeout", "900"], cwd=ROOT,
                         capture_output=True, text=True, timeout=1200)
    last = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""
    assert last.startswith("load: sessions=5 "), out.stdout[-2000:] + out.stderr[-2000:]
    fields = dict(kv.split("=") for kv in last.split()[1:])
    assert fields["errors"] == "0", out.stdout[-3000:]
    assert fields["model_loads"] == "1", out.stdout[-3000:]
    assert float(fields["p95_s"]) >= float(fields["p50_s"]) > 0
    assert float(fields["peak_mb"]) > 100          # a server holding torch and a model
    assert out.returncode == 0
