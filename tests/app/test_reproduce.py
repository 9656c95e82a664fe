"""The "Reproduce in Python" snippets: each live page's snippet runs in a fresh Python process from an empty
temporary folder (PYTHONPATH = the repository under test, nothing else), and the numbers it prints equal the
numbers scraped from the page's own AppTest render, at the page's displayed precision. Timings and sampled runs
are not compared."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from streamlit.testing.v1 import AppTest

from model.shipped import shipped_weights
from tests.conftest import ROOT

TRAINED = (shipped_weights("text") / "model.safetensors").exists()
pytestmark = pytest.mark.skipif(not TRAINED, reason="the shipped tiny weights are not present")


def app(page: str, **params) -> AppTest:
    at = AppTest.from_file(str(ROOT / "pages" / f"{page}.py"), default_timeout=300)
    at.query_params["weights"] = "trained"
    for k, v in params.items():
        at.query_params[k] = str(v)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def snippet(at: AppTest) -> str:
    codes = [c.value for c in at.get("code") if getattr(c, "language", None) == "python"
             and "lessons.far_fact" not in c.value]        # the far-fact panel's own: tests/app/test_far_fact.py
    assert len(codes) == 1, f"expected one Python snippet, found {len(codes)}"
    return codes[0]


class Printed(dict):
    """A snippet's `label: value` lines (split at the first ": "), and its raw lines."""

    lines: list[str]


def run_snippet(code: str, tmp_path) -> Printed:
    """Run `code` as a file in `tmp_path` with a clean environment; return what it printed."""
    assert str(ROOT) not in code                       # the snippet never names a server path
    f = tmp_path / "snippet.py"
    f.write_text(code)
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR")}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    r = subprocess.run([sys.executable, str(f)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert str(ROOT) not in r.stdout                   # ... and never prints one
    out = Printed()
    out.lines = r.stdout.splitlines()
    for line in out.lines:
        if ": " in line:
            k, v = line.split(": ", 1)
            out[k.strip()] = v.strip()
    return out


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: str(m.value) for m in at.metric}


def frame(at: AppTest, column: str):
    for d in at.dataframe:
        if column in d.value.columns:
            return d.value
    raise AssertionError(f"no dataframe with a {column!r} column")


@pytest.mark.slow
def test_cache_calculator_snippet(tmp_path):
    at = app("cache_calculator", preset="v4.1-flash", context=65536, batch=2)
    out = run_snippet(snippet(at), tmp_path)
    m = metrics(at)
    assert out["HBM (accelerator)"].split(" (")[0] == m["HBM (accelerator)"]
    assert out["Per further token"] == m["Per further token"] and out["Average per token"] == m["Average per token"]
    assert out["Persistent, per context"].split(" (")[0] == m["Persistent, per context"]


@pytest.mark.slow
def test_compare_designs_snippet(tmp_path):
    at = app("compare_designs", ctx=8192)
    out = run_snippet(snippet(at), tmp_path)
    table = frame(at, "HBM bytes")
    for label, hbm, added in zip(table["design"], table["HBM bytes"], table["added per token (B)"]):
        printed = out[label]
        assert printed.startswith(f"{int(hbm)} bytes") and f"added per token {added:.1f} B" in printed


@pytest.mark.slow
def test_prefill_decode_snippet(tmp_path):
    at = app("prefill_decode", read=5000, written=300, rounds=2)
    out = run_snippet(snippet(at), tmp_path)
    rows = frame(at, "formula")
    for item, value in zip(rows["item"], rows["value"]):
        assert f"{item}: {value}" in out.lines, item


@pytest.mark.slow
def test_csa2_modes_snippet(tmp_path):
    at = app("csa2_modes")
    out = run_snippet(snippet(at), tmp_path)
    table = frame(at, "selection")
    printed = [line for line in out.lines if line.startswith("layer: ")]
    assert len(printed) == len(table)
    for line, row in zip(printed, table.to_dict("records")):
        assert line == "; ".join(f"{k}: {v}" for k, v in row.items())


@pytest.mark.slow
def test_attention_shares_snippet(tmp_path):
    at = app("attention_shares", layer=3, pos=30)
    out = run_snippet(snippet(at), tmp_path)
    table = frame(at, "selected entries")
    for _, row in table.iterrows():
        assert out[f"head {int(row['head'])}"] == (f"window {row['window']:.3f}; selected entries "
                                                  f"{row['selected entries']:.3f}; sink {row['sink']:.3f}; "
                                                  f"sum {row['sum']:.3f}")
    n, same, gap = re.match(r"(\d+) entries read, same as its source: (\w+), largest share difference (\S+)",
                            out["Reuse layer"]).groups()
    body = "\n".join(str(x.value) for x in at.markdown)
    assert f"{n} entries. The largest difference in the share given to one entry is {gap}." in body
    assert ("(checked)" in body) == (same == "True")


@pytest.mark.slow
def test_recurrence_snippet(tmp_path):
    at = app("recurrence")
    out = run_snippet(snippet(at), tmp_path)
    m = metrics(at)
    assert out["tensors in both layers"] == m["tensors in both layers"]
    assert out["of them the same storage"] == m["of them the same storage"]
    only = next(v for k, v in m.items() if k.startswith("tensors only layer"))
    assert out["tensors only the source has"] == only
    body = "\n".join(str(x.value) for x in at.markdown)
    assert f"largest gap over all rows and heads is {out['largest share gap']}" in body
    assert f"at most {out['most entries one query read']} per query" in body
    assert f"made {out['entries made by the source']} entries" in body
    assert f"on {out['rows whose lens top token differs']} of" in body
    assert f"{out['parameters of this layer']} parameters of its own" in body


@pytest.mark.slow
def test_figure3_live_snippet(tmp_path):
    at = app("figure3", config="running", box="attn:2")
    out = run_snippet(snippet(at), tmp_path)
    m = metrics(at)
    assert out["window rows read"] == m["window rows read"]
    assert out["entries stored"] == m["entries stored"] and out["entries read"] == m["entries read"]
    body = "\n".join(str(x.value) for x in at.markdown)
    w, e, s = re.match(r"window (\S+), selected entries (\S+), sink (\S+)", out["shares"]).groups()
    assert f"window {w}, selected entries {e}, sink {s}." in body


@pytest.mark.slow
def test_figure3_other_boxes_snippets(tmp_path):
    from model import V41Config

    cfg = V41Config.preset("tiny")
    at = app("figure3", config="running", box="moe:7")
    out = run_snippet(snippet(at), tmp_path)
    body = "\n".join(str(x.value) for x in at.markdown)
    assert f"Experts routed for this row: **{out['experts']}**" in body and f"weights {out['weights']}, plus" in body
    eng = cfg.engram_layer_ids[0]
    at = app("figure3", config="running", box=f"engram:{eng}")
    out = run_snippet(snippet(at), tmp_path)
    assert f"1 = add all of it): {out['gate']}" in "\n".join(str(x.value) for x in at.markdown)
    at = app("figure3", config="running", box="mhc:encoder")
    out = run_snippet(snippet(at), tmp_path)
    comb = next(d.value for d in at.dataframe if "to 0" in d.value.columns)
    for k, row in enumerate(comb.to_dict("records")):
        assert out[f"from {k}"] == ", ".join(f"{v:.3f}" for v in row.values())


@pytest.mark.slow
@pytest.mark.parametrize("head", [None, 1])
def test_inspector_snippet(tmp_path, head):
    at = app("inspector", sample=0, layer=7, token=5, gen=2, beside="none")   # the session's chart alone
    if head is not None:
        at.selectbox(key="insp_head").set_value(f"head {head}").run()
    out = run_snippet(snippet(at), tmp_path)
    m = metrics(at)
    at.session_state["insp_tab"] = "Selected entries"      # a tab computes only while open
    at.run()
    m.update(metrics(at))
    for k in ("Window rows", "Compressed entries", "Sink", "Visible entries", "Selected", "Candidate pool"):
        assert out[k] == m[k], k
    at.session_state["insp_tab"] = "Experts"
    at.run()
    experts = next(d.value for d in at.dataframe if "expert" in d.value.columns)
    assert out["routed experts"] == str([int(e) for e in list(experts["expert"])[1:]])
    gen = next(t.value for t in at.text if str(t.value).startswith("Generated: "))
    assert repr(gen[len("Generated: "):]) == out["Generated"]


@pytest.mark.slow
def test_home_snippet(tmp_path):
    import json

    at = app("home")
    out = run_snippet(snippet(at), tmp_path)
    cap = next(c.value for c in at.caption if "prompt tokens read by" in c.value)
    assert cap.startswith(f"{out['prompt tokens']} prompt tokens")
    spec = json.loads(next(c for c in at.get("plotly_chart") if c.key == "home_bar").proto.spec)
    bar = spec["data"][0]
    shown = list(zip(bar["y"], bar["text"]))[::-1]           # top token first
    for label, pct in shown:
        tid = int(label.rsplit("(", 1)[1].rstrip(")"))
        assert out[str(tid)].endswith(pct), (tid, pct)


@pytest.mark.slow
def test_indexer_pools_snippet(tmp_path):
    at = app("indexer_pools", pool=3, k=4)
    out = run_snippet(snippet(at), tmp_path)
    table = frame(at, "mean recall")
    printed = [line for line in out.lines if line.startswith("layer: ")]
    assert len(printed) == len(table)
    for line, row in zip(printed, table.to_dict("records")):   # records keep each column's type
        assert line == "; ".join(f"{k}: {v:.4f}" if isinstance(v, float) else f"{k}: {v}" for k, v in row.items())


@pytest.mark.slow
def test_dspark_snippet(tmp_path):
    at = app("dspark", gen=8)
    at.button(key="ds_run").click().run()
    out = run_snippet(snippet(at), tmp_path)
    m = metrics(at)
    assert out["Target passes (plain)"] == m["Target passes (plain)"]
    assert out["Target passes (DSpark)"] == m["Target passes (DSpark)"]
    assert out["Identical output"] == m["Identical output"]


@pytest.mark.slow
def test_ablation_snippet(tmp_path):
    at = AppTest.from_file(str(ROOT / "pages" / "ablation.py"), default_timeout=600)
    at.query_params["weights"] = "trained"
    at.run()
    at.multiselect(key="abl_configs").set_value(["full model", "window only"]).run()
    at.selectbox(key="abl_stories").set_value(3).run()
    at.selectbox(key="abl_natural").set_value(512).run()
    at.button(key="abl_run").click().run()
    assert not at.exception, [e.value for e in at.exception]
    out = run_snippet(snippet(at), tmp_path)
    table = frame(at, "cache_bytes")
    for row in table.to_dict("records"):
        assert out[row["configuration"]] == (f"loss {row['loss']:.3f}; recall far {row['recall_far']:.2f}; "
                                             f"recall inside {row['recall_inside']:.2f}; "
                                             f"cache bytes {row['cache_bytes']}")


@pytest.mark.parametrize("params", [dict(gap=20, passage=2, layer=4, head=1),
                                    dict(source="own", prompt="The red fox ran past the old mill and over the hill.",
                                         span=8, gap=6)])
@pytest.mark.slow
def test_lookback_heads_snippet(tmp_path, params):
    at = app("lookback_heads", **params)
    out = run_snippet(snippet(at), tmp_path)
    m = metrics(at)
    assert out["Strongest look-back share"].split(" (")[0] == m["Strongest look-back share"]
    assert out["Copied, second time"] == m["Copied, second time"] and out["Right, first time"] == m["Right, first time"]
    shown = next(x.value for x in at.markdown if x.value.startswith("Mean share on the token after the match"))
    assert shown.split(": ", 1)[1].startswith(out["Mean share on the token after the match"] + " (")
    said = next(x.value for x in at.markdown if x.value.startswith("At the output"))
    assert f"{out['Second time against first, at the output'].split()[0]} nats" in said


def test_random_weights_snippet_reproduces_the_page(tmp_path):
    at = AppTest.from_file(str(ROOT / "pages" / "csa2_modes.py"), default_timeout=300)
    at.query_params["weights"] = "random"
    at.run()
    out = run_snippet(snippet(at), tmp_path)
    printed = [line for line in out.lines if line.startswith("layer: ")]
    assert printed == ["; ".join(f"{k}: {v}" for k, v in row.items())
                       for row in frame(at, "selection").to_dict("records")]


def test_checkpoint_snippets_name_no_path():
    from lessons import reproduce as snippets

    code = snippets.home("checkpoint", "Hello")
    assert snippets.CHECKPOINT_PLACEHOLDER in code and str(ROOT) not in code


@pytest.mark.slow
def test_where_time_goes_snippet(tmp_path):
    at = app("where_time_goes", gpu="h200", batch=64, context=100000, drafts=3)
    out = run_snippet(snippet(at), tmp_path)
    shown = [m.value for m in at.markdown]
    assert out["verdict"] in shown and out["round"] in shown
    kinds = frame(at, "op kind")
    for kind, flops, b in zip(kinds["op kind"], kinds["FLOPs"], kinds["bytes"]):
        assert out[kind] == f"{flops} FLOPs, {b}", kind
