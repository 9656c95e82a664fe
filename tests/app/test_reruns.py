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
