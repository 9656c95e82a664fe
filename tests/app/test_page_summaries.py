"""Page summaries that follow what they describe (AppTest): 1-based numbering reaches every layer number the
inspector shows, a changed calculator input changes the design's sentence, and the far-fact panel and the Ablation
lab say up front what the loaded weights do and state the direct-road rule with the running model's reach."""

from __future__ import annotations

import json
import re

from streamlit.testing.v1 import AppTest

from model import V41Config, layer_map
from model.shipped import shipped_weights
from tests.conftest import ROOT, run_page
from ui.text import as_shown

TINY = V41Config.preset("tiny")


def ok(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


def visible(at: AppTest) -> str:
    parts = []
    for kind in ("markdown", "caption", "info", "warning", "subheader", "text"):
        parts += [str(x.value) for x in at.get(kind)]
    return "\n".join(parts)


def test_inspector_one_based_numbering_reaches_description_selection_and_absence():
    specs = layer_map(TINY)
    reuse = next(s for s in specs if s.role == "Reuse" and s.stack == "decoder" and s.index_source != s.kv_source)
    at = run_page("inspector", layer=reuse.index, numbering=1)
    at.session_state["insp_tab"] = "Selected entries"      # the selection note; a closed tab computes nothing
    at.run()
    ok(at)
    body = visible(at)
    assert at.subheader[0].value.startswith(f"Layer {reuse.index + 1} · Reuse")
    assert (f"keeps layer {reuse.kv_source + 1}'s entries and layer {reuse.index_source + 1}'s selection"
            in body), body
    assert (f"Layer {reuse.index + 1} is a Reuse layer: it owns no indexer and reads the entries layer "
            f"{reuse.index_source + 1} selected") in body
    for zero in (f"layer {reuse.kv_source}'s entries", f"layer {reuse.index_source}'s selection",
                 f"Layer {reuse.index} is a Reuse layer", f"entries layer {reuse.index_source} selected"):
        assert zero not in body, zero
    dec = TINY.decoder_start
    at = run_page("inspector", sample=5, gen=2, numbering=1, layer=dec)     # a long prompt, bounded prefill
    ok(at)
    at.slider(key="insp_token").set_value(3).run()
    ok(at)
    warn = " ".join(w.value for w in at.warning)
    assert f"Layer {dec + 1} did not process token 3" in warn and f"Layer {dec} did not" not in warn


def test_calculator_summary_follows_a_changed_input():
    at = run_page("cache_calculator", preset="teaching", context=4096)
    ok(at)
    before = " ".join(c.value for c in at.caption)
    assert "16 layers, each storing 4,096 entries of 128 numbers at 8 bits" in before
    at.number_input(key="cc_layers").set_value(32).run()
    ok(at)
    after = " ".join(c.value for c in at.caption)
    assert "32 layers, each storing 4,096 entries of 128 numbers at 8 bits" in after and "16 layers," not in after
    help_ = next(b.help for b in at.button if b.key == "cc_seed4")
    assert f"{32 * 4096 * 128:,} bytes" in help_ and f"{32 * 4096 * 128 // 4:,} bytes" in help_


def test_ablation_lab_says_what_the_shipped_weights_do_and_the_direct_road():
    record = json.loads((shipped_weights("text") / "training.json").read_text())
    far = f"{100 * record['measured']['recall_far']:.0f}% of held-out far facts"   # the benchmark's figure
    at = AppTest.from_file(str(ROOT / "pages" / "ablation.py"), default_timeout=300)
    at.query_params["weights"] = "trained"
    at.run()
    ok(at)
    captions = " ".join(c.value for c in at.caption)
    assert captions.count(far) == 1, captions                # said once, at the top, before any table
    reach = f"{TINY.num_hidden_layers * (TINY.sliding_window - 1):,} positions"
    assert "direct road" in captions and reach in captions
    table = next(d.value for d in at.dataframe if "what changes" in d.value.columns)
    window_only = table.set_index("configuration").loc["window only", "what changes"]
    assert "nothing older than the window is read directly" in window_only and reach in window_only
    text = "\n".join(as_shown(m.value) for m in at.markdown)     # the far-fact summary, an escaped list
    assert re.search(r"\d+ past the \d+-token window, so no layer reads it directly", text), text
    assert "only the compressed entries can bring it back" not in text
