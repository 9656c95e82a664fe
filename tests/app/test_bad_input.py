"""Bad input across the app (AppTest, random tiny weights; a few model-level checks where no page is involved).

Every case: the page shows a clear message (st.warning / st.error / st.info), never a traceback; the
session stays usable (a valid interaction right after it works); and what was computed or chosen
before is still there. Covers prompts (empty, whitespace, 1 MB, RTL, emoji, zero-width, control
characters, HTML and script tags), every URL parameter and calculator field with non-numbers and
out-of-range numbers, checkpoint directories that are missing, not checkpoints or corrupt, a
persistent prefix cache overwritten with garbage, and uploads that are not images or are too large.
The browser half (text shown as text, never as markup) is in tests/browser/test_bad_input_browser.py.
"""

from __future__ import annotations

import io
import json

import pytest
import torch
from streamlit.testing.v1 import AppTest

from tests.conftest import ROOT, random_model
from ui.text import as_shown

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def app(page: str, weights: str | None = "random", **params) -> AppTest:
    at = AppTest.from_file(str(ROOT / "pages" / f"{page}.py"), default_timeout=300)
    if weights:
        at.query_params["weights"] = weights
    for k, v in params.items():
        at.query_params[k] = str(v)
    return at.run()


def ok(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


def messages(at: AppTest) -> str:
    """The message boxes' texts as a reader sees them (outside text is escaped by ui.text.plain)."""
    return as_shown("\n".join(x.value for kind in (at.warning, at.error, at.info) for x in kind))


def charts(at: AppTest) -> int:
    """The charts a page draws for its inputs: the home page's opening pictures (`home_*`, all but the prompt's
    bars) are the same whatever the prompt, so they are not counted."""
    return len([c for c in at.get("plotly_chart") if not (c.key or "").startswith("home_") or c.key == "home_bar"])


def captions(at: AppTest) -> str:
    return "\n".join(c.value for c in at.caption)


def step(at: AppTest, key: str, delta: int) -> AppTest:
    """One click on a stepper's Back (-1) or Next (+1) arrow (ui.url.stepper, a pagination widget)."""
    p = next(w for w in at.get("pagination") if w.key == key)
    return p.set_value(p.value + delta).run()


# ---- prompts ---------------------------------------------------------------------------------------------------
VALID = "The key is in the red box. The box is"
ODD = {
    "rtl": "\u0627\u0644\u0645\u0641\u062a\u0627\u062d \u0641\u064a \u0627\u0644\u0635\u0646\u062f\u0648\u0642 "
           "\u05d4\u05de\u05e4\u05ea\u05d7 \u202eevil\u202c done",
    "emoji": "\U0001f511 in the \U0001f4e6 \U0001f469\u200d\U0001f469\u200d\U0001f467 "
             "\U0001f1fa\U0001f1f3 \u2764\ufe0f",
    "zero_width": "\u200b\u200c\u200d\u2060\ufeff",
    "control": "\x00\x01\x07\x08\x1b[31mred\x1b[0m\r\n\x7f end",
    "markup": "<script>alert(1)</script><img src=x onerror=alert(2)> **bold** [link](javascript:alert(3)) $x^2$",
    "combining": "Z\u0351\u0352\u0353a\u0300\u0301\u0302\u0303l\u0304\u0305g\u0306o\u0307",
}


@pytest.mark.slow
def test_start_empty_whitespace_and_huge_prompts_keep_the_session():
    at = app("home")
    ok(at)
    box = at.text_area(key="home_prompt")
    box.set_value(VALID).run()
    first = captions(at)
    assert "prompt tokens read" in first and charts(at) == 1
    for bad, expect in (("", "empty"), (" \n\t\u3000 ", "empty"), ("x" * (1 << 20), "1,048,576 characters")):
        at.text_area(key="home_prompt").set_value(bad).run()
        ok(at)
        assert expect in messages(at), (bad[:20], messages(at))
        assert charts(at) == 0
    # the same session, a valid prompt again: the chart is back, with the same numbers as before
    at.text_area(key="home_prompt").set_value(VALID).run()
    ok(at)
    assert charts(at) == 1 and captions(at) == first


@pytest.mark.parametrize("kind", list(ODD))
def test_start_odd_unicode_prompts(kind):
    at = app("home")
    at.text_area(key="home_prompt").set_value(ODD[kind]).run()
    ok(at)
    # scored like any text, or (nothing tokenisable) a message; never a traceback
    assert "prompt tokens read" in captions(at) or messages(at)
    # the prompt goes back into the box unchanged and is never handed to Markdown
    assert at.text_area(key="home_prompt").value == ODD[kind]
    assert not any(ODD[kind] in m.value for m in at.markdown)
    at.text_area(key="home_prompt").set_value(VALID).run()
    ok(at)
    assert charts(at) == 1


def test_start_url_prompt_with_markup_is_shown_as_text():
    at = app("home", prompt=ODD["markup"])
    ok(at)
    assert at.text_area(key="home_prompt").value == ODD["markup"]


@pytest.mark.slow
def test_inspector_bad_prompts_keep_the_chosen_layer():
    at = app("inspector", gen=0)
    ok(at)
    step(at, "insp_layer_step", 1)
    layer = at.select_slider(key="insp_layer").value
    for bad, expect in (("   ", "empty"), ("y" * (1 << 20), "limit here is 40,000")):
        at.text_area(key="insp_prompt").set_value(bad).run()
        ok(at)
        assert expect in messages(at)
    at.text_area(key="insp_prompt").set_value(VALID).run()
    ok(at)
    # the layer the reader stepped to survives the bad input (it is mirrored in the URL)
    assert at.select_slider(key="insp_layer").value == layer


def test_inspector_markup_and_control_prompt_is_shown_as_tokens():
    at = app("inspector", gen=0)
    at.text_area(key="insp_prompt").set_value(ODD["markup"] + ODD["control"]).run()
    ok(at)
    # tokens appear only in code blocks (literal text); no markdown element carries the raw markup
    assert at.code and not any("<script>" in m.value for m in at.markdown)


# DSpark's run takes a while on a CPU: the same rule (prompt_ids) is checked fast on Indexer pools
@pytest.mark.parametrize("page,key", [pytest.param("dspark", "ds_prompt", marks=pytest.mark.slow),
                                      ("indexer_pools", "pool_prompt")])
def test_run_pages_reject_whitespace_prompts(page, key):
    at = app(page)
    ok(at)
    at.text_area(key=key).set_value("\n \t ").run()
    ok(at)
    assert "empty" in messages(at)
    at.text_area(key=key).set_value(VALID).run()
    ok(at)
    assert "empty" not in messages(at)


def test_live_prompt_picker_rejects_empty_own_text():
    at = app("attention_shares")
    ok(at)
    before = at.slider(key="toy_0").value
    n = len(at.selectbox(key="live_sample").options)
    at.selectbox(key="live_sample").set_value(n - 1).run()      # "Your own text"
    at.text_area(key="live_text").set_value("").run()
    ok(at)
    assert "empty" in messages(at)
    at.text_area(key="live_text").set_value(VALID).run()
    ok(at)
    assert at.slider(key="toy_0").value == before and charts(at) >= 2


# ---- URL parameters: non-numbers and out of range on every page ----------------------------------------------
URL_CASES = [
    ("home", {"weights": "bogus"}, "is not a weights choice"),
    ("home", {"numbering": "abc"}, "is not 0 or 1"),
    ("figure3", {"step": "abc"}, "not a whole number"),
    ("figure3", {"step": "999"}, "outside"),
    ("figure3", {"box": "<b>x</b>"}, "names no box"),
    ("figure3", {"config": "huge"}, "is not a drawing here"),
    ("layer_map", {"layer": "1e3"}, "not a whole number"),
    ("layer_map", {"layer": "-7"}, "outside"),
    ("layer_map", {"table": "nope"}, "not one of"),
    ("attention_shares", {"toy0": "150"}, "outside"),
    ("attention_shares", {"head": "NaN", "pos": "99999"}, "not a whole number"),
    ("attention_shares", {"reuse": "0"}, "not a Reuse layer"),
    ("recurrence", {"layer": "0"}, "not a Reuse layer"),
    ("recurrence", {"layer": "\u0662\u0662\u0662"}, "outside"),            # Arabic-Indic digits: 222
    ("csa2_modes", {"sample": "-1"}, "outside"),
    ("cache_calculator", {"preset": "<script>"}, "not a design"),
    ("cache_calculator", {"context": "abc"}, "context='abc' is not a whole number"),
    ("cache_calculator", {"context": "0"}, "context=0 must be between"),
    ("cache_calculator", {"context": "1" + "0" * 40}, "must be between"),
    ("cache_calculator", {"batch": "1.5"}, "not a whole number"),
    ("cache_calculator", {"preset": "v4.1-flash", "window": "-1", "ratio": "x", "replay": "0"}, "window=-1"),
    ("cache_calculator", {"preset": "gqa", "layers": "0", "numbers": "99999999"}, "layers=0"),
    ("cache_calculator", {"preset": "v4.1-flash", "rollback": "65", "bits": "7", "mode": "sideways"}, "bits=7"),
    ("cache_calculator", {"preset": "v3.2", "group": "600"}, "group=600"),
    ("prefill_decode", {"read": "abc", "written": "-1"}, "not a whole number"),
    ("prefill_decode", {"rounds": "1e9", "tread": "99999", "twritten": "0"}, "outside"),
    ("where_time_goes", {"gpu": "<b>a100</b>", "batch": "3", "drafts": "99"}, "is not a GPU here"),
    ("compare_designs", {"designs": "foo,<i>bar</i>"}, "unknown design"),
    ("compare_designs", {"ctx": "abc", "batch": "0"}, "not a whole number"),
    ("inspector", {"sample": "99", "gen": "999"}, "outside"),
    ("inspector", {"layer": "abc", "token": "-1"}, "not a whole number"),
    ("indexer_pools", {"pool": "abc", "k": "0"}, "not a whole number"),
    ("indexer_pools", {"layer": "0", "token": "abc"}, "not a Reindex layer"),
    ("dspark", {"sample": "abc", "gen": "0"}, "not a whole number"),
    ("lookback_heads", {"gap": "-5", "passage": "0"}, "outside"),
    ("lookback_heads", {"span": "x", "source": "<b>own</b>", "layer": "99"}, "not a whole number"),
]


@pytest.mark.parametrize("page,params,expect", URL_CASES,
                         ids=[f"{p}-{'-'.join(q)}" for p, q, _ in URL_CASES])
def test_bad_url_parameters_give_a_message_and_a_working_page(page, params, expect):
    at = app(page, **params)
    ok(at)
    assert at.title, "the page did not render"
    if expect:
        assert expect in messages(at), messages(at)
    # the page is usable: a rerun (what any widget change does) still renders without an error
    at.run()
    ok(at)


def test_calculator_bad_url_falls_back_and_keeps_good_values():
    at = app("cache_calculator", preset="v4.1-flash", context="4096", batch="oops")
    ok(at)
    assert at.number_input(key="cc_context").value == 4096     # the good value is kept
    from lessons.designs import defaults

    assert at.number_input(key="cc_batch").value == defaults("v4.1-flash").batch   # the bad one: the default
    hbm = at.metric[0].value
    # a widget change in the same session still computes
    at.number_input(key="cc_context").set_value(8192).run()
    ok(at)
    assert at.metric[0].value != hbm


@pytest.mark.parametrize("field", ["context", "batch", "window", "replay", "rollback"])
def test_calculator_fields_out_of_range_never_crash(field):
    """A value outside a field's range (what a stale session or a hand-made request can send; the browser's own
    input refuses it) is held to the field's range, and the page keeps computing."""
    from lessons.cache_calculator import LIMITS

    at = app("cache_calculator", preset="v4.1-flash")
    ok(at)
    lo, hi = LIMITS[field]
    for bad in (hi + 1, lo - 1, 10 ** 15):
        at.number_input(key=f"cc_{field}").set_value(bad).run()
        ok(at)
        assert lo <= at.number_input(key=f"cc_{field}").value <= hi
        assert at.metric[0].value
    at.number_input(key="cc_context").set_value(1024).run()
    ok(at)
    assert "1,024 tokens" in at.metric[0].proto.help


def test_prefill_decode_measurement_survives_bad_input():
    at = app("prefill_decode", tread="40", twritten="2")
    ok(at)
    at.button(key="pd_measure").click().run()
    ok(at)
    n_tables = len(at.dataframe)
    measured = at.dataframe[-1].value.copy()
    assert list(measured["tokens"]) == [40, 2]
    ratio = at.metric[0].value
    for bad in (0, -5, 10 ** 9):                  # out of range: held to the field's range
        at.number_input(key="pd_read").set_value(bad).run()
        ok(at)
        assert 1 <= at.number_input(key="pd_read").value <= 10_000_000
    at.number_input(key="pd_read").set_value(7).run()
    ok(at)
    assert at.metric[0].value != ratio
    # the measurement made before the bad input is still on the page, unchanged
    assert len(at.dataframe) == n_tables and at.dataframe[-1].value.equals(measured)


# ---- checkpoints -----------------------------------------------------------------------------------------------
def _micro_checkpoint(d, corrupt: str | None = None):
    from model.checkpoint import save_checkpoint as save

    m = random_model("micro")
    save(m, d)
    st = d / "model.safetensors"
    if corrupt == "garbage":
        st.write_bytes(b"\x89PNG not a safetensors file" * 100)
    elif corrupt == "truncated":
        st.write_bytes(st.read_bytes()[: st.stat().st_size // 2])
    elif corrupt == "config":
        (d / "config.json").write_text("{ this is not json")
    return d


@pytest.fixture
def allowed(tmp_path, monkeypatch):
    """tmp_path is the server's only allowed checkpoint root (ui.checkpoints reads the variable at each call)."""
    monkeypatch.setenv("V41_CHECKPOINT_ROOTS", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("case", ["missing", "not_a_checkpoint", "garbage", "truncated", "config", "a_file"])
def test_bad_checkpoint_directory_gives_a_message_then_random_works(allowed, case):
    from ui.checkpoints import NOT_OFFERED

    tmp_path = allowed
    if case == "missing":
        path = tmp_path / "does-not-exist"
    elif case == "not_a_checkpoint":
        (tmp_path / "notes.txt").write_text("hello")
        path = tmp_path
    elif case == "a_file":
        path = tmp_path / "model.safetensors"
        path.write_bytes(b"0" * 64)
    else:
        path = _micro_checkpoint(tmp_path / "ckpt", corrupt=case)
    at = app("home", weights="checkpoint", ckpt=str(path))
    ok(at)
    err = messages(at)
    if case in ("missing", "not_a_checkpoint", "a_file"):   # not offered: one message, naming no path
        assert NOT_OFFERED in err and str(tmp_path) not in err, err
    else:                                                  # offered but broken: the file is named, the root is not
        assert "Could not load the weights" in err and "ckpt" in err and str(tmp_path) not in err, err
    assert charts(at) == 0
    at.radio(key="weights_choice").set_value("random").run()
    ok(at)
    assert not at.error and charts(at) == 1


def test_no_offered_checkpoint_says_so(tmp_path, monkeypatch):
    from ui.session import NO_CHECKPOINTS

    monkeypatch.setenv("V41_CHECKPOINT_ROOTS", str(tmp_path))
    at = app("home", weights="checkpoint")
    ok(at)
    assert NO_CHECKPOINTS in messages(at)


def test_valid_checkpoint_directory_loads(allowed):
    path = _micro_checkpoint(allowed / "ok")
    for ckpt in (str(path), f"{allowed.name}/ok"):         # a path naming it, or the sidebar's label
        at = app("layer_map", weights="checkpoint", ckpt=ckpt)
        ok(at)
        assert not at.error
        assert any("8 layers" in c.value for c in at.sidebar.caption)
        assert at.selectbox(key="ckpt_choice").value == f"{allowed.name}/ok"
        assert at.query_params["ckpt"] == [f"{allowed.name}/ok"] or at.query_params["ckpt"] == f"{allowed.name}/ok"


# ---- persistent prefix cache overwritten with garbage (model.inference.prefix_cache; no page uses it yet) ----
@pytest.mark.parametrize("what", ["state_file", "index"])
def test_prefix_cache_garbage_is_dropped_and_recomputed(tmp_path, what):
    from model import prefill
    from model.inference import PrefixCache

    m = random_model("micro")
    ids = torch.randint(8, m.cfg.vocab_size, (1, 40), generator=torch.Generator().manual_seed(3))
    ref = prefill(m, ids).logits
    pc = PrefixCache(m, tmp_path, align=16, min_tokens=16)
    prefill(m, ids, prefix_cache=pc)
    assert pc.stats().disk_entries >= 1
    if what == "state_file":
        for f in tmp_path.glob("*.safetensors"):
            f.write_bytes(b"garbage" * 500)
    else:
        (tmp_path / "index.json").write_text("\x00\xff not json")
    pc2 = PrefixCache(m, tmp_path, align=16, min_tokens=16)
    out = prefill(m, ids, prefix_cache=pc2)
    warn = " ".join(pc2.stats().warnings)
    assert ("dropped it" in warn) if what == "state_file" else ("unreadable" in warn)
    assert out.reused == 0
    assert torch.allclose(out.logits, ref, atol=1e-5)


# ---- images ----------------------------------------------------------------------------------------------------
def _image_page():
    import streamlit as st

    from ui.vision_panel import image_input

    img = image_input("bad")
    st.write("image size: " + ("none" if img is None else f"{img.size[0]}x{img.size[1]}"))


def _png(w: int, h: int) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (w, h), (200, 30, 30)).save(buf, format="PNG")
    return buf.getvalue()


def _png_header_claiming(w: int, h: int) -> bytes:
    """A PNG whose IHDR claims w x h pixels (a decompression bomb's header) with a tiny body."""
    import struct
    import zlib

    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))  # noqa: E731
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


@pytest.mark.parametrize("name,data,expect", [
    ("notes.png", b"this is text, not a picture\n" * 10, "notes.png"),
    ("empty.jpg", b"", "empty.jpg"),
    ("huge.png", b"\x89PNG\r\n\x1a\n" + b"\0" * (8 * 1024 * 1024 + 10), "limit"),
    ("bomb.png", _png_header_claiming(30000, 30000), "pixels"),
])
def test_upload_that_is_not_an_image_or_too_large(name, data, expect):
    at = AppTest.from_function(_image_page, default_timeout=120).run()
    ok(at)
    at.radio(key="bad_source").set_value("upload").run()
    at.file_uploader(key="bad_file").upload(name, data, "image/png").run()
    ok(at)
    err = as_shown("\n".join(e.value for e in at.error))
    assert expect in err, err
    assert "image size: none" in "\n".join(m.value for m in at.markdown)
    # a valid picture in the same session works
    at.file_uploader(key="bad_file").clear().upload("ok.png", _png(40, 30), "image/png").run()
    ok(at)
    assert not at.error
    assert "image size: 40x30" in "\n".join(m.value for m in at.markdown)


def test_config_json_garbage_is_named(tmp_path):
    """Not a page, but what the sidebar shows: the loader's message names the broken file."""
    from model import CheckpointError, load

    d = _micro_checkpoint(tmp_path / "c", corrupt="config")
    with pytest.raises(CheckpointError, match="config.json"):
        load(d)
    (d / "config.json").write_text(json.dumps({"num_hidden_layers": -3}))
    with pytest.raises(CheckpointError, match="config.json"):
        load(d)
