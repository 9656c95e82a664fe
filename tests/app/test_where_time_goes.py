"""AppTest for "Where the time goes": the roofline names the GPUs on an arithmetic-intensity axis and changes with the
deployment, every workload names its binding roof, and the verdict sentence is computed from the chosen GPU and
batch."""

from __future__ import annotations

import json

from tests.conftest import run_page


def no_errors(at) -> None:
    assert not at.exception, [e.value for e in at.exception]


def verdict(at) -> str:
    texts = [m.value for m in at.markdown if "one decode step at batch" in m.value]
    assert len(texts) == 1, texts
    return texts[0]


def roofline(at) -> dict:
    charts = [c for c in at.get("plotly_chart") if "arithmetic intensity" in c.proto.spec]
    assert len(charts) == 1
    return json.loads(charts[0].proto.spec)


def test_roofline_names_the_gpus_and_the_intensity_axis():
    at = run_page("where_time_goes")
    no_errors(at)
    spec = roofline(at)
    names = {t.get("name") for t in spec["data"]}
    assert {"NVIDIA H100 SXM", "NVIDIA H200", "NVIDIA B200"} <= names
    assert spec["layout"]["xaxis"]["title"]["text"] == "arithmetic intensity (FLOP/byte)"
    assert spec["layout"]["xaxis"]["type"] == "log" and spec["layout"]["yaxis"]["type"] == "log"


def test_switching_gpu_or_batch_changes_the_verdict():
    at = run_page("where_time_goes")
    no_errors(at)
    first = verdict(at)
    assert "NVIDIA H100 SXM" in first and "batch 1 " in first and "memory-bound" in first
    at.selectbox(key="wt_gpu").set_value("b200").run()
    no_errors(at)
    second = verdict(at)
    assert "NVIDIA B200" in second and second != first
    at.select_slider(key="wt_batch").set_value(4096).run()
    no_errors(at)
    third = verdict(at)
    assert "batch 4,096" in third and third != second
    assert at.query_params["gpu"] in (["b200"], "b200") and at.query_params["batch"] in (["4096"], "4096")


def binding_sentences(at) -> list[str]:
    return [m.value for m in at.markdown if ", bound by **" in m.value]


def test_the_chart_and_the_binding_roofs_follow_the_deployment():
    at = run_page("where_time_goes")
    no_errors(at)
    node = roofline(at)
    said = binding_sentences(at)
    assert len(said) == 5 and all("8x NVIDIA H100 SXM (a full node)" in s for s in said)
    assert any(s.startswith("Decode") for s in said) and any(s.startswith("Mixed") for s in said)
    names = {t.get("name") for t in node["data"]}
    assert any(str(n).startswith("NVLink roof") for n in names)
    fits = [m.value for m in at.markdown if m.value.startswith("Weights (")]
    assert len(fits) == 1 and " fit on 8x" in fits[0] and "GB per GPU" in fits[0]
    at.select_slider(key="wt_gpus").set_value(1).run()
    no_errors(at)
    one = roofline(at)
    assert one != node
    assert not any(str(t.get("name")).startswith("NVLink roof") for t in one["data"])
    assert all("one NVIDIA H100 SXM" in s for s in binding_sentences(at))
    assert any("do not fit on one NVIDIA H100 SXM" in m.value for m in at.markdown)
    at.selectbox(key="wt_gpu").set_value("b200").run()
    no_errors(at)
    assert roofline(at) != one
    assert at.query_params["gpus"] in (["1"], "1")


def test_url_opens_a_view_and_bad_values_warn():
    at = run_page("where_time_goes", gpu="h200", batch="lots")
    no_errors(at)
    assert "NVIDIA H200" in verdict(at)
    assert any("batch" in w.value for w in at.warning)


def test_the_running_model_is_measured_and_its_count_checked():
    at = run_page("where_time_goes")
    no_errors(at)
    at.button(key="wt_measure").click().run()
    no_errors(at)
    said = [m.value for m in at.markdown if "of the measured matmul peak" in m.value]
    assert len(said) == 1 and "of the bandwidth bound" in said[0]
    titles = [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart")]
    assert "The running model on this machine's roof" in titles
    at.button(key="wt_reach").click().run()
    no_errors(at)
    reach = next(d.value for d in at.dataframe if "uniform routing" in d.value.columns)
    assert len(reach) >= 5 and (reach["distinct experts, measured"] > 0).all()
    at.button(key="wt_check").click().run()
    no_errors(at)
    rows = next(d.value for d in at.dataframe if "counted / formula" in d.value.columns)
    assert len(rows) == 6
    assert any("mixed step" in w for w in rows["workload"]) and any("extend" in w for w in rows["workload"])
    assert rows["counted / formula"].between(0.98, 1.02).all()
    assert set(rows["ops without a row"]) == {"none"}
