"""Teaching fidelity through AppTest: the corrected and added lesson texts are on the pages, with numbers computed here
independently (configs, lesson functions), and every page carries the sources footer and no internal citation."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from tests.conftest import run_page
from ui.nav import stems

ALL_PAGES = stems()
INTERNAL = ("brief §", "reference-brief", "ARCHITECTURE", "docs/design", "[3P", "[DOC", "[INF", "[REC")


def app(page: str, **params) -> AppTest:
    return run_page(page, **params)


def text(at: AppTest) -> str:
    parts = []
    for kind in ("markdown", "caption", "info", "success", "warning", "error", "subheader", "title"):
        parts += [str(x.value) for x in at.get(kind)]
    for d in at.dataframe:
        parts.append(d.value.to_string())
    for e in at.get("expander"):
        parts.append(str(e.label))
    return "\n".join(parts)


def no_errors(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


@pytest.mark.parametrize("page", ALL_PAGES)
def test_every_page_links_the_glossary_and_cites_no_internal_notes(page):
    at = app(page)
    no_errors(at)
    side = "\n".join(str(m.value) for m in at.sidebar.markdown) + "".join(str(e.label) for e in at.sidebar.expander)
    assert "Glossary" in side or at.get("page_link"), side
    assert "Sources" in side
    body = text(at)
    assert not any(x in body for x in INTERNAL), [x for x in INTERNAL if x in body]


def test_figure3_steps_read_along_and_notation():
    at = app("figure3", step=13)
    no_errors(at)
    body = text(at)
    assert "Read along: the DeepSeek-V4.1-Flash technical report, §2.4.3." in body
    assert "up to 4 drafted tokens" in body and "up to 5 tokens" not in body
    assert "CSA2(2, ...)" in body and "ratio of 1" in body and "counts as one layer" in body
    assert "still scores every visible entry" in body
    at5 = app("figure3", step=5)
    assert "approximation" in text(at5) and "cut at the start" in text(at5)


def test_figure3_running_model_shows_its_own_layer_map():
    at = app("figure3", config="running", box="attn:6")
    no_errors(at)
    assert "Layer map of the running model (tiny" in text(at)


@pytest.mark.parametrize("page", ["csa2_modes", "attention_shares", "recurrence"])
def test_live_pages_show_the_running_layer_map(page):
    at = app(page)
    no_errors(at)
    assert "Layer map of the running model (tiny, 12 layers" in text(at)


def test_csa2_modes_points_at_the_trace_columns():
    at = app("csa2_modes")
    body = text(at)
    assert "separate decisions" in body and "search work" in body and "saves storage" in body
    cols = next(d.value.columns for d in at.dataframe if "selection" in d.value.columns)
    assert "index scores" in cols and "compressed entries" in cols          # the columns the text points at


def test_recurrence_counts_reads_per_query():
    at = app("recurrence")
    body = text(at)
    import re

    from model import V41Config

    assert not re.search(r"read the \d+ entries", body)      # a query never reads the whole group
    topk = V41Config.preset("tiny").index_topk
    m = re.search(r"at most (\d+) per query", body)
    assert m and 0 < int(m.group(1)) <= topk


def test_layer_map_explains_notation_and_replay():
    body = text(app("layer_map"))
    assert "CSA2(2, ...)" in body and "approximation" in body


def test_calculator_seed_button_and_replay_net_bytes():
    at = app("cache_calculator", preset="teaching", context=4096)
    at.button(key="cc_seed4").click().run()
    no_errors(at)
    assert {m.label: m.value for m in at.metric}["HBM (accelerator)"] == "2.00 MiB"
    at = app("cache_calculator", preset="v4.1-flash")
    body = text(at)
    assert "does not save storage" in body and "replay input" in body


def test_prefill_decode_both_workloads_and_the_claim_note():
    at = app("prefill_decode")
    no_errors(at)
    body = text(at)
    assert "only the projection that publishes" in body and "approximation" in body
    assert "the workload" in body and "precision" in body
    at.radio(key="pd_workload").set_value("answer").run()
    no_errors(at)
    from lessons.workload import WORKLOADS
    _, r, w = WORKLOADS["answer"]
    assert {m.label: m.value for m in at.metric}["Read : written"] == f"1 : {w // r}"
    assert "decode is" in text(at)


def test_compare_designs_waterfall():
    from lessons.designs import v4_to_v41_waterfall

    at = app("compare_designs")
    no_errors(at)
    table = next(d.value for d in at.dataframe if "bytes per token after" in d.value.columns)
    assert list(table["step"]) == [w.step for w in v4_to_v41_waterfall()]
    assert "quarter" in text(at)


def test_dspark_page_block_simulation_and_auto_note():
    from lessons.dspark import SIM_P

    at = app("dspark")
    no_errors(at)
    body = text(at)
    assert "plus up to" in body and "drafted tokens" in body and "for free" not in body
    sim = next(d.value for d in at.dataframe if "emitted share" in d.value.columns)
    assert list(sim["target p"]) == pytest.approx(list(SIM_P), abs=1e-3)
    assert all(abs(a - b) < 0.03 for a, b in zip(sim["emitted share"], SIM_P))
    at.selectbox(key="ds_dl").set_value("auto").run()
    assert "simplification" in text(at)


def test_inspector_agreement_sentence_is_measured():
    at = app("inspector")
    no_errors(at)
    body = text(at)
    assert "(measured)" in body and "bounded equals exact" not in body


def test_ablation_page_calls_bounded_replay_approximate():
    body = text(app("ablation"))
    assert "approximation" in body and "cut at the start" in body


def test_ablation_page_names_weights_not_files_and_the_comb_configuration_honestly():
    """Under the side-by-side, the weights line says whose weights (the sidebar's text model); the pair's titles
    and the messages about missing weights name no file path; the mHC configuration is not called "never mix"
    (its own text says each sublayer still reads a mix of the streams); a near-tie is not called right."""
    from ui.pair import MISSING
    from ui.session import NO_TRAINED

    for message in (NO_TRAINED, MISSING):
        assert "weights/" not in message and "data/" not in message, message
    at = app("ablation", weights="trained")
    no_errors(at)
    body = text(at)
    assert "weights/recall" not in body and "weights/tiny" not in body
    from model.shipped import SHIPPED

    assert {f"**{s.title}**" for s in SHIPPED} <= {m.value for m in at.markdown}
    assert any(c.value.startswith("The sidebar's weights (the text model) recall") for c in at.caption)
    assert "These weights recall" not in body
    table = next(d.value for d in at.dataframe if "what changes" in d.value.columns)
    assert "mHC comb off" in set(table["configuration"])
    assert not any("never mix" in c for c in table["configuration"])


def test_calculator_parameter_total_carries_its_source_in_view():
    at = app("cache_calculator")
    no_errors(at)
    metric = next(m for m in at.metric if m.label.startswith("Parameters the cache formula does not count"))
    assert "counted from the config" in metric.label and metric.value == "763B"
    assert any(m.value.startswith("Our count from the config, not a figure the release quotes: 763,205,315,795")
               for m in at.markdown)


def test_indexer_pools_page_says_whose_pool():
    from model import V41Config

    at = app("indexer_pools")
    no_errors(at)
    tiny = V41Config.preset("tiny")
    body = text(at)
    assert f"running model's pool ({tiny.candidate_topk_blocks * tiny.candidate_block_size:,} entries" in body
    assert "not from the release's pool (16,384 entries, top-512)" in body


def test_dspark_stochastic_step_leaves_unchecked_rows_without_a_keep_chance():
    at = app("dspark", rule="stochastic")
    at.button(key="ds_start").click().run()
    seen = False
    for _ in range(4):
        at.button(key="ds_step").click().run()
        no_errors(at)
        rows = next(d.value for d in at.dataframe if "verdict" in d.value.columns).to_dict("records")
        for r in rows[:-1]:                     # shown to 4 significant digits, a dash where nothing applies
            hypo = r["hypothetical keep chance (never checked)"]
            if r["verdict"].startswith("not checked"):
                seen = True
                assert r["keep chance"] == "–"
                assert float(hypo) == pytest.approx(min(1.0, float(r["p(guess)"]) / float(r["q(guess)"])), rel=2e-3)
            else:
                assert hypo == "–"
        if rows[-1]["verdict"].startswith("correction"):
            assert "leftover" in rows[-1]["verdict"]
        if seen:
            break
    assert seen, "a random drafter should have been refused before its last guess within four steps"


# ---- honest axes on every figure the pages draw --------------------------------------------------------------
def _charts(at: AppTest) -> list[dict]:
    import json

    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


@pytest.mark.parametrize("page", ALL_PAGES)
def test_every_drawn_figure_keeps_the_axis_rules(page):
    from ui.axes import problems

    at = app(page)
    no_errors(at)
    found = [p for spec in _charts(at) for p in problems(spec)]
    assert not found, found


@pytest.mark.parametrize("page, params", [("compare_designs", {"log": "0"}), ("cache_calculator", {"log": "0"}),
                                          ("inspector", {"layer": 7})])
def test_figures_with_other_settings_keep_the_axis_rules(page, params):
    from ui.axes import problems

    at = app(page, **params)
    no_errors(at)
    found = [p for spec in _charts(at) for p in problems(spec)]
    assert not found, found


def test_figures_drawn_after_a_button_keep_the_axis_rules():
    """The figures a page draws only after a run (ablation lab, look-back sweep, DSpark, the vision panel), built
    from small hand-made inputs; and the checker itself catches each broken rule."""
    from types import SimpleNamespace

    import plotly.graph_objects as go

    from lessons import vision as lv
    from ui.axes import log_ticks, problems, share_axis
    from ui.figures import grouped_bars, stacked_bars
    from ui.figures_run import ablation_figure, acceptance_figure, calibration_figure, lens_figure, reach_figure
    from ui.vision_panel import image_attention_figure, routing_figure

    rows = [{"configuration": "full model", "loss": 4.2, "recall_far": 0.12, "prefill_s": 0.3, "cache_bytes": 1000},
            {"configuration": "window only", "loss": 4.3, "recall_far": 0.11, "prefill_s": 0.2, "cache_bytes": 1000}]
    pos = {"position": [1, 2], "rate": [0.5, 0.25], "accepted": [2, 1], "reached": [4, 4], "predicted": [0.6, 0.3],
           "survival_predicted": [0.6, 0.2], "survival_observed": [0.5, 0.1]}
    points = [SimpleNamespace(back=b, share=0.3, copied=0.5, first=0.1, gap=b, layer=1, head=0)
              for b in (3, 10, 40, 200)]
    figs = [ablation_figure(rows, [("loss", "held-out loss"), ("recall_far", "far recall")], "t", chance=1 / 11),
            acceptance_figure(pos), calibration_figure(pos), reach_figure(points, 32, "t"),
            lens_figure([(1, "a", 0.02), (2, "b", 0.015)], "lens"),
            grouped_bars(["E1", "E2"], {"a": [1e-9, 2e-9]}, yaxis_title="share"),
            stacked_bars(["q1"], {"window": [0.7], "entries": [0.3]}, axis_title="share"),
            routing_figure(lv.RoutingShare(layer=1, n_experts=4, image=[0.5, 0.5, 0, 0], text=[0.25] * 4,
                                           n_image_tokens=4, n_text_tokens=8, overlap=0.5), "layer 1"),
            image_attention_figure([lv.ImageAttention(layer=1, role="Full", per_row=[0.3], rows=[5], window=0.2,
                                                      entries=0.1)])]
    for fig in figs:
        assert not problems(fig), problems(fig)
    lens = figs[4].to_plotly_json()["layout"]["xaxis"]
    assert lens["range"][0] == 0 and lens["range"][1] >= 1 and lens["dtick"] == 0.2     # distinct ticks, full range
    recall = figs[0].to_plotly_json()["layout"]["yaxis2"]
    assert recall["range"] == [0, 1] and recall["tickformat"].endswith("%")
    assert log_ticks(3, 200) == [3, 10, 30, 100]
    # the checker: each broken rule is named
    bad_range = go.Figure(go.Bar(x=["a"], y=[0.1]), layout=dict(yaxis=dict(title="far recall", range=[0, 0.12],
                                                                            tickformat=".0%", dtick=0.02)))
    si = go.Figure(go.Bar(x=["a"], y=[1e-9]), layout=dict(yaxis=dict(title="share", range=[0, 1])))
    stacked_log = go.Figure([go.Bar(x=["a"], y=[1]), go.Bar(x=["a"], y=[2])],
                            layout=dict(barmode="stack", yaxis=dict(type="log", tickmode="array", tickvals=[1])))
    minor = go.Figure(go.Scatter(x=[1, 100], y=[0, 1]), layout=dict(xaxis=dict(type="log")))
    assert "run from 0 to 1" in " ".join(problems(bad_range))
    assert "percent ticks" in " ".join(problems(si))
    assert "stacked bars on a log axis" in " ".join(problems(stacked_log))
    assert "readable ticks" in " ".join(problems(minor))
    assert share_axis(percent_values=True)["range"] == [0, 100.0]


# ---- numbers on one screen agree; a refused input says so ------------------------------------------------------
def test_calculator_says_when_a_typed_number_is_out_of_range_and_keeps_the_last_good_one():
    from lessons.cache_calculator import LIMITS

    at = app("cache_calculator", preset="v4.1-flash", context=131072)
    hi = LIMITS["context"][1]
    at.number_input(key="cc_context").set_value(hi + 1).run()
    no_errors(at)
    said = [w.value for w in at.warning]
    assert any(f"{hi + 1:,}" in w and "not applied" in w and "131,072" in w for w in said), said
    assert at.number_input(key="cc_context").value == 131072
    at.number_input(key="cc_rollback").set_value(-3).run()
    assert any("-3" in w.value and "not applied" in w.value for w in at.warning)
    assert at.number_input(key="cc_rollback").value == 1


def test_calculator_refuses_a_number_the_design_cannot_compute_with_the_other_inputs():
    # in range on its own (1 to 512), but plain per-layer K/V has 80 layers: the page keeps computing, and its link
    # keeps the group it shows, so a fresh open of the link shows the same figures
    at = app("cache_calculator", preset="gqa")
    at.number_input(key="cc_group").set_value(82).run()
    no_errors(at)
    assert not at.error, [e.value for e in at.error]
    said = [w.value for w in at.warning]
    assert any("82" in w and "80 layers" in w and "not applied" in w for w in said), said
    assert at.number_input(key="cc_group").value == 1
    assert "group" not in at.query_params
    at.number_input(key="cc_group").set_value(8).run()
    assert at.query_params.get("group") == "8" and not at.warning


def test_sidebar_names_the_explainer_whose_numbering_it_offers():
    from lessons.sources import EXPLAINER_1

    at = app("layer_map")
    no_errors(at)
    options = [o for r in at.sidebar.radio for o in r.options]
    assert any(EXPLAINER_1 in str(o) for o in options) or any(
        EXPLAINER_1 in str(r.format_func(o)) for r in at.sidebar.radio for o in r.options), options
