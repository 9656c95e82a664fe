"""bench.load.Client keeps messages as the web client does: a cacheable message is kept and its hash sent with the
next rerun, a reference reads as the kept message, and a message unused for more runs than Streamlit keeps them
is dropped."""

from __future__ import annotations

from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

from bench.load import MAX_CACHED_AGE, Client


def _chart(h: str, spec: str, fragment: str = "") -> ForwardMsg:
    fm = ForwardMsg()
    fm.hash = h
    fm.metadata.cacheable = True
    fm.delta.new_element.plotly_chart.spec = spec
    fm.delta.fragment_id = fragment
    return fm


def _ref(h: str) -> ForwardMsg:
    fm = ForwardMsg()
    fm.ref_hash = h
    fm.metadata.delta_path.extend([0, 3])
    return fm


def test_a_reference_reads_as_the_message_it_names():
    c = Client(0, "")
    c._resolved(_chart("a", '{"data": []}'))
    c._finished("")
    assert list(c.cache) == ["a"]
    got = c._resolved(_ref("a"))
    assert got.WhichOneof("type") == "delta" and got.delta.new_element.plotly_chart.spec == '{"data": []}'
    assert list(got.metadata.delta_path) == [0, 3]                 # where the reference puts it


def test_an_uncacheable_message_is_not_kept_and_an_unknown_reference_is_an_error():
    c = Client(0, "")
    plain = _chart("b", "{}")
    plain.metadata.cacheable = False
    c._resolved(plain)
    assert c.cache == {}
    try:
        c._resolved(_ref("b"))
    except LookupError:
        pass
    else:
        raise AssertionError("a reference to a message never kept must fail")


def test_kept_messages_age_out_after_unused_runs_and_a_fragment_run_ages_only_its_own():
    c = Client(0, "")
    c._resolved(_chart("page", "{}"))
    c._resolved(_chart("frag", "{}", fragment="f1"))
    for _ in range(MAX_CACHED_AGE + 1):
        c._finished("f1")                                          # fragment runs: the page's message keeps
    assert list(c.cache) == ["page"]
    for _ in range(MAX_CACHED_AGE + 1):
        c._resolved(_ref("page"))                                  # used on every run: kept
        c._finished("")
    assert list(c.cache) == ["page"]
    for _ in range(MAX_CACHED_AGE + 1):
        c._finished("")
    assert c.cache == {}
