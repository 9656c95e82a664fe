"""ui.url.link_value: a page value that no widget holds (a guided tour's stop) follows the widgets' URL rules.

A small page run by AppTest: the URL's value on arrival, a quoted plain-text warning for a bad one, the value
written back into the URL (left out at its default), and a change from a button's callback.
"""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from ui.text import as_shown

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _tour_page():
    import streamlit as st

    from ui.url import begin_run, link_value, set_link_value, url_batch

    def parse(raw: str) -> int | None:
        return int(raw) if raw.isdigit() and 1 <= int(raw) <= 5 else None

    with url_batch():
        begin_run()
        stop = link_value("stop", 1, parse, "a stop from 1 to 5")
        st.button("Next stop", key="next", on_click=set_link_value, args=("stop", min(stop + 1, 5), 1))
        st.write(f"Stop {stop}")


def _page(**params) -> AppTest:
    at = AppTest.from_function(_tour_page, default_timeout=60)
    at.query_params.update(params)
    return at.run()


def _stop(at: AppTest) -> str:
    return next(m.value for m in at.markdown if m.value.startswith("Stop "))


def _url(at: AppTest) -> dict:
    return {k: (v[-1] if isinstance(v, list) else v) for k, v in at.query_params.items()}


def test_the_default_stays_out_of_the_url_and_a_link_wins_on_arrival():
    at = _page()
    assert not at.exception and _stop(at) == "Stop 1" and "stop" not in _url(at)
    linked = _page(stop="3")
    assert _stop(linked) == "Stop 3" and _url(linked)["stop"] == "3" and not linked.warning


def test_a_change_is_kept_for_the_session_and_written_into_the_url():
    at = _page(stop="2")
    at.button(key="next").click().run()
    assert _stop(at) == "Stop 3" and _url(at)["stop"] == "3"
    at.run()                                   # a later run of the same page: the session's value
    assert _stop(at) == "Stop 3" and _url(at)["stop"] == "3"


def test_a_bad_value_gets_a_quoted_plain_warning_and_the_default():
    at = _page(stop="**9**<b>x</b>")
    assert not at.exception and _stop(at) == "Stop 1" and "stop" not in _url(at)
    (warning,) = at.warning
    assert "a stop from 1 to 5" in warning.value
    assert "**9**<b>x</b>" in as_shown(warning.value)      # drawn as typed: no bold, no HTML
    assert "**9**" not in warning.value                     # the Markdown is escaped in what is sent
