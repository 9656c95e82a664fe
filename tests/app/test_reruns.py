"""Warm reruns: a page run again with nothing changed reuses its figures instead of building them again
(ui.cache.built: pure builders memoised server-wide by the value of their arguments)."""

from __future__ import annotations

import threading
from pathlib import Path

import plotly.graph_objects as go
import pytest
from streamlit.testing.v1 import AppTest

from ui import cache
from ui.cache import built
from ui.nav import stems
from ui.session import Session

ROOT = Path(__file__).resolve().parents[2]


def _bar(values, title="t"):
    return go.Figure(go.Bar(y=list(values)), layout=dict(title=title))


def test_built_returns_the_same_result_for_the_same_argument_values():
    a = built(_bar, [1, 2, 3], title="x")
    assert built(_bar, [1, 2, 3], title="x") is a           # equal values, another list object: the same figure
    assert built(_bar, [1, 2, 4], title="x") is not a
    assert built(_bar, [1, 2, 3], title="y") is not a
    assert built(_bar, [1, 2, 3], title="x").to_dict() == _bar([1, 2, 3], title="x").to_dict()


def test_built_names_frames_arrays_tensors_and_dataclasses_by_value():
    import numpy as np
    import pandas as pd
    import torch

    from lessons.home import NextTokens

    frame = pd.DataFrame({"position": [1, 2], "rate": [0.5, 0.25]})
    values = [frame, frame["rate"], np.arange(3.0), torch.arange(3), NextTokens(["a"], [1], [0.5], 2)]
    for v in values:
        assert cache._fingerprint(v) is not None, type(v)
    assert cache._fingerprint(frame) == cache._fingerprint(frame.copy())
    assert cache._fingerprint(frame) != cache._fingerprint(frame.assign(rate=[0.5, 0.3]))
    assert cache._fingerprint(torch.arange(3)) != cache._fingerprint(torch.arange(4))
    a, b = NextTokens(["a"], [1], [0.5], 2), NextTokens(["b"], [1], [0.5], 2)
    assert cache._fingerprint(a) != cache._fingerprint(b)


def test_built_names_a_session_by_its_choices_and_builds_unpicklable_arguments_every_time():
    def numbered(num, n):
        return [num(i) for i in range(n)]

    s0 = Session(model=object(), weights="trained", label="Trained", device="cpu", one_based=False)
    s1 = Session(model=object(), weights="trained", label="Trained", device="cpu", one_based=True)
    assert built(numbered, s0.num, 3) == [0, 1, 2]
    assert built(numbered, s1.num, 3) == [1, 2, 3]          # the numbering is part of the key
    lock = threading.Lock()                                  # not picklable: no key, built each time
    calls = []
    built(lambda _: calls.append(1), lock)
    built(lambda _: calls.append(1), lock)
    assert len(calls) == 2


def test_built_keeps_a_bounded_number_of_results(monkeypatch):
    monkeypatch.setattr(cache, "BUILT_KEPT", 3)
    first = built(_bar, [0], title="bounded")
    for i in range(1, 5):
        built(_bar, [i], title="bounded")
    assert built(_bar, [0], title="bounded") is not first  # the oldest was dropped


def test_a_built_figure_keeps_its_dict_until_it_changes():
    fig = built(_bar, [5, 6], title="kept")
    assert isinstance(fig, cache.KeptFigure) and isinstance(fig, go.Figure)
    plain = _bar([5, 6], title="kept")
    d = fig.to_dict()
    assert fig.to_dict() is d and d == plain.to_dict()
    assert go.Figure(fig).to_dict() == plain.to_dict()                    # a copy is made from the figure itself
    changed = _bar([5, 6], title="kept")
    kept = cache._kept(changed)
    for change in (lambda f: f.update_layout(title="other"), lambda f: f.add_scatter(y=[1]),
                   lambda f: f.update_traces(marker_color="red"), lambda f: setattr(f.layout, "height", 300),
                   lambda f: setattr(f, "data", f.data[:1])):
        before = kept.to_dict()
        change(kept)
        change(plain := go.Figure(plain))
        assert kept.to_dict() is not before and kept.to_dict() == plain.to_dict()


def test_held_names_its_objects_by_identity_and_the_rest_by_value():
    from ui.cache import held

    calls = []

    def view(record, *, title):
        calls.append(1)
        return _bar(record["y"], title=title)

    record = {"y": [1, 2]}
    a = held(view, (record,), title="a")
    assert held(view, (record,), title="a") is a and len(calls) == 1       # the same object: not made again
    assert isinstance(a, cache.KeptFigure)
    assert held(view, (record,), title="b") is not a                        # another value: made
    assert held(view, ({"y": [1, 2]},), title="a") is not a                 # an equal but other object: made
    assert len(calls) == 3


def test_st_plotly_chart_sends_a_kept_figure_as_it_sends_the_figure():
    import plotly.io as pio

    fig = _bar([1, 2], title="sent")
    assert pio.to_json(cache._kept(_bar([1, 2], title="sent")), validate=False) == pio.to_json(fig, validate=False)


def test_a_warm_rerun_of_home_makes_no_figure_dict(monkeypatch):
    """The home page's pictures (the far-fact pair, the Figure 3 thumbnail, the prompt's bars) are built once; a
    warm rerun hands st.plotly_chart the dict each keeps instead of Plotly copying the figure again."""
    from plotly.basedatatypes import BaseFigure

    at = AppTest.from_file(str(ROOT / "pages" / "home.py"), default_timeout=300)
    at.query_params["weights"] = "random"
    at.run()
    assert not at.exception and not at.error and at.get("plotly_chart")
    made = []
    to_dict = BaseFigure.to_dict
    monkeypatch.setattr(BaseFigure, "to_dict", lambda self: made.append(type(self)) or to_dict(self))
    at.run()
    assert not at.exception and not at.error and at.get("plotly_chart")
    assert made == []


@pytest.mark.parametrize("page", stems(charts=True))
def test_a_warm_rerun_builds_no_figure(page, monkeypatch):
    from plotly.basedatatypes import BaseFigure

    at = AppTest.from_file(str(ROOT / "pages" / f"{page}.py"), default_timeout=300)
    at.query_params["weights"] = "random"
    at.run()
    assert not at.exception and not at.error
    made = []
    init = BaseFigure.__init__
    monkeypatch.setattr(BaseFigure, "__init__", lambda self, *a, **k: made.append(type(self)) or init(self, *a, **k))
    at.run()
    assert not at.exception and not at.error
    assert made == []


def test_dspark_whole_run_figures_are_reused_on_a_rerun(monkeypatch):
    from plotly.basedatatypes import BaseFigure

    at = AppTest.from_file(str(ROOT / "pages" / "dspark.py"), default_timeout=300)
    at.query_params["weights"] = "random"
    at.query_params["gen"] = "6"
    at.run()
    at.button(key="ds_run").click().run()
    assert not at.exception and not at.error and len(at.get("plotly_chart")) == 2
    made = []
    init = BaseFigure.__init__
    monkeypatch.setattr(BaseFigure, "__init__", lambda self, *a, **k: made.append(type(self)) or init(self, *a, **k))
    at.run()
    assert not at.exception and len(at.get("plotly_chart")) == 2 and made == []
