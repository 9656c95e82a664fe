"""ui.url's parameters, read without a page: a parser takes the values its link writes and refuses others with
a message saying what the value should be; the link leaves a value out at its default."""

from __future__ import annotations

import pytest

from ui.url import LINK_LAYERS, Refused, any_text, choice, decimal, either, flag, layer, several, whole


def test_a_whole_number_is_read_back_and_refused_outside_its_bounds():
    p = whole("gen", 0, 32, 4)
    assert p.parse(p.write(7)) == 7
    with pytest.raises(Refused, match="not a whole number"):
        p.parse("seven")
    with pytest.raises(Refused, match=r"outside 0\.\.32"):
        p.parse("33")
    assert p.link(4) is None and p.link(0) == "0"


def test_a_layer_travels_0_based_and_its_warning_says_so():
    p = layer(8, 3)
    assert p.name == "layer" and p.unit == LINK_LAYERS
    assert p.parse("0") == 0 and p.link(7) == "7" and p.link(3) is None
    with pytest.raises(Refused, match=r"outside 0\.\.7"):
        p.parse("8")
    shown = layer(8, 3, shown=lambda i: i + 1)
    with pytest.raises(Refused, match=r"outside 1\.\.8"):
        shown.parse("-1")


def test_a_choice_matches_its_options_as_text_and_names_what_it_wanted():
    p = choice("batch", [1, 2, 4], 1, "a batch size here")
    assert p.parse("4") == 4 and p.link(1) is None and p.link(2) == "2"
    with pytest.raises(Refused, match="is not a batch size here"):
        p.parse("3")
    assert "showing 1 instead" in p.instead


def test_flags_decimals_and_free_text():
    f = flag("compact", False)
    assert f.parse("1") is True and f.link(True) == "1" and f.link(False) is None
    with pytest.raises(Refused, match="1 or 0"):
        f.parse("yes")
    d = decimal("ratio", 0.0, 1.0, 0.5)
    assert d.parse("0.123456") == 0.1235
    with pytest.raises(Refused):
        d.parse("nan")
    assert any_text("find").parse("<b>x</b>") == "<b>x</b>"


def test_a_choice_can_be_spelled_by_a_shorter_word():
    sources = ("The held-out sample", "Your own story")
    p = choice("ff", sources, sources[0], "own or sample", spell={sources[0]: "sample", sources[1]: "own"}.get)
    assert p.parse("own") == sources[1] and p.link(sources[1]) == "own" and p.link(sources[0]) is None
    with pytest.raises(Refused, match="is not own or sample"):
        p.parse(sources[1])                      # the label is not how the link spells it
    assert either(["h100", "h200", "b200"]) == "h100, h200 or b200" and either(["x"]) == "x"


def test_several_keep_the_known_names_and_say_which_are_not():
    p = several("designs", ["a", "b", "c"], ["a", "b"], "design", "designs", "showing the default designs")
    assert p.parse("c,a") == ["c", "a"] and p.link(["c", "a"]) == "c,a" and p.link(["a", "b"]) is None
    assert p.parse("") == [] and p.link([]) == ""          # none chosen is a value of its own
    with pytest.raises(Refused, match="names an unknown design .x.") as some:
        p.parse("x,c")
    assert some.value.kept == ["c"] and some.value.instead == "showing the known ones"
    with pytest.raises(Refused, match="unknown designs .x., .y.") as none:
        p.parse("x,y")
    assert none.value.kept == ["a", "b"] and none.value.instead == "showing the default designs"


def test_a_parameter_narrowed_to_some_values_and_a_text_too_long_for_a_link():
    p = layer(8, 2).only([2, 5], "a Reindex layer")
    assert p.parse("5") == 5
    with pytest.raises(Refused, match="is not a Reindex layer"):
        p.parse("3")
    with pytest.raises(Refused, match="outside"):
        p.parse("9")
    t = any_text("prompt", link_chars=5)
    assert t.link("short") == "short" and t.link("longer") is None
