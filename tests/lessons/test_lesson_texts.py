"""Lesson texts: the direct-road rule with the stacked-window reach from the
config (far fact, ablation, glossary), typed summaries that follow their inputs, honest source markers, the
colour-share yardstick, the shipped weights' far recall said up front, numbering in the inspector's sentences,
and the glossary terms the pages use. Expected numbers are computed here from the configs, never by the code
under test."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from lessons import far_fact as ff, far_story as fs
from model import V41Config

RELEASE = V41Config.preset("v4.1-flash")
TINY = V41Config.preset("tiny")


def _reach(cfg) -> int:
    return cfg.num_hidden_layers * (cfg.sliding_window - 1)


# ---- the direct road and the stacked-window reach -----------------------------------------------------------
def test_reach_is_layers_times_window_minus_one_on_both_configs():
    assert _reach(TINY) == 12 * 31 == 372
    assert _reach(RELEASE) == 40 * 127 == 5080
    for cfg in (TINY, RELEASE):
        text = ff.reach_sentence(cfg.num_hidden_layers, cfg.sliding_window)
        assert f"{_reach(cfg):,} positions" in text and "directly" in text and "direct road" in text


def test_far_fact_intro_says_direct_road_not_only_road():
    assert "direct road" in ff.INTRO and "only road back" not in ff.INTRO
    assert "hop by hop" in ff.INTRO


def _far(n_layers: int, distance: int, window: int = 32) -> ff.FarFact:
    q = distance + 20
    story = fs.FactStory("s", "text", 0, 4, 0, 4, "red")
    toks = fs.FactTokens(ids=list(range(q + 1)), query=q, colour_positions=[q + 1 - distance],
                         sentence_positions=[q + 1 - distance], answer_id=9)
    answers = [ff.Answer("everything on", " x", 7, 0.5, 0.05, "blue", False, 0.2),
               ff.Answer("global branch off", " x", 7, 0.5, 0.04, "red", False, 0.5)]
    return ff.FarFact(story=story, tokens=toks, window=window, layers=[], answers=answers,
                      token_texts=["t"] * (q + 1), n_layers=n_layers)


def test_far_fact_summary_states_the_rule_and_the_reach_from_the_layer_count():
    inside = "\n".join(ff.summary(_far(12, 293)))                # a fact 293 tokens back, 12 x 31 = 372
    assert "no layer reads it directly" in inside and "direct road" in inside
    assert "372 positions" in inside and "only the compressed entries" not in inside
    assert "can also arrive indirectly" in inside
    beyond = "\n".join(ff.summary(_far(4, 293)))                 # 4 x 31 = 124 < 293
    assert "124 positions" in beyond and "farther back than the 4 stacked windows" in beyond
    changed = "\n".join(ff.summary(_far(12, 293, window=16)))   # another window: 12 x 15 = 180 < 293
    assert "180 positions" in changed and "372" not in changed


def test_colour_yardstick_compares_like_with_like():
    colours = ff.colour_ids(_FakeTok())
    logits = torch.full((20,), -30.0)
    logits[colours["red"]] = 0.0
    logits[colours["blue"]] = 0.0
    logits[0] = 2.0                                              # a non-colour token takes most of the mass
    a = ff.read_answer(logits, colours["red"], lambda ids: "t", colours, "everything on")
    p = torch.softmax(logits, -1)
    colour_mass = sum(float(p[i]) for i in colours.values())
    assert a.colour_share == pytest.approx(float(p[colours["red"]]) / colour_mass)
    assert a.colour_share == pytest.approx(0.5, abs=1e-6) and a.p_right < 0.2
    text = "\n".join(ff.summary(_far(12, 293)))
    assert "20.0% of the probability on the 11 colours" in text
    assert "the most likely colour, 'blue', is wrong" in text and "'red', is right" in text
    assert "chance: 1 in 11 colours, 9.1%" in text


class _FakeTok:
    """One id per colour word (ids 1..11)."""

    def encode(self, text, add_special_tokens=False):
        from model.heldout import COLOURS

        word = text.strip()

        class E:
            ids = [1 + COLOURS.index(word)] if word in COLOURS else [0, 0]
        return E()


def test_weights_note_reports_the_recorded_far_recall_up_front():
    rec = json.loads(open("data/weights/tiny/training.json").read())
    far = rec["measured"]["recall_far"]                     # the benchmark's figure, not the run's quick one
    note = ff.weights_note("trained", rec)
    assert f"{100 * far:.0f}% of held-out far facts" in note and "9.1%" in note
    assert note.startswith("What these weights do: measured on the shipped file")
    assert ff.far_recall_of(rec) == far                      # the same figure as the panel's other lines
    assert "has not emerged" in note                         # 12% against 9.1%: within twice chance
    good = ff.weights_note("trained", {"final": {"recall_far": 0.6}})
    assert "60%" in good and "clearly above a guess" in good and "not emerged" not in good
    assert ff.weights_note("checkpoint", None) == ff.NO_RECORD            # said, not left out
    assert ff.weights_note("checkpoint", {"final": {"recall_far": 0.75}}).count("75%") == 1
    # a run that did not evaluate at its end: the benchmark's measured figure is what the note states
    measured = ff.weights_note("checkpoint", {"final": {"recall_far": 0.5}, "measured": {"recall_far": 0.87,
                                                                                       "recall_inside": 0.9}})
    assert measured.startswith("What these weights do: measured on the shipped file, they recall 87% of held-out")
    assert "nearer ones: 90% of facts 1-32 tokens back" in measured and "clearly above a guess" in measured
    assert "50%" not in measured
    assert "Random weights" in ff.weights_note("random", None)
    # where the last phase ran is read from its record, not assumed
    gpu = ff.weights_note("trained", {"final": {"recall_far": 0.1}, "tokens": 2_457_600, "machine": {"device": "cuda"}})
    assert "training phase: 2,457,600 tokens on a GPU" in gpu
    cpu = ff.weights_note("trained", {"final": {"recall_far": 0.1}, "tokens": 1000, "machine": {"device": "cpu"}})
    assert "training phase: 1,000 tokens on a CPU" in cpu


def test_the_pages_one_line_about_the_weights_agrees_with_the_full_note():
    from lessons.far_weights import weights_line

    rec = json.loads(open("data/weights/tiny/training.json").read())
    far = rec["measured"]["recall_far"]
    line = weights_line("trained", rec)
    assert f"{100 * far:.0f}% of held-out far facts" in line and "no better than a guess" in line
    assert f"{100 * far:.0f}% of held-out far facts" in ff.weights_note("trained", rec)     # the same figure
    assert "clearly above a guess" in weights_line("checkpoint", {"measured": {"recall_far": 0.94}})
    assert "94%" in weights_line("checkpoint", {"final": {"recall_far": 0.5}, "measured": {"recall_far": 0.94}})
    assert "without a record" in weights_line("checkpoint", None)
    assert weights_line("random", None).startswith("Random weights")
    assert len(line.split()) <= 25                      # one sentence beside the view; the glossary holds the rest
    # it says which weights: under the side-by-side of both shipped sets "these weights" named neither
    assert line.startswith("The sidebar's weights (the text model) recall") and "These weights" not in line
    assert weights_line("checkpoint", rec, "Recall checkpoint, shown where to look").startswith(
        "The sidebar's weights (the recall checkpoint, shown where to look) recall")
    assert weights_line("checkpoint", None).startswith("The sidebar's weights (a chosen checkpoint)")


def test_far_definition_places_the_far_bucket_against_the_stacked_reach():
    lo, hi = ff.FAR_BUCKET
    wide = ff.far_definition(12, 32)                   # 12 x 31 = 372: inside the far bucket
    assert f"{lo}-{hi} tokens" in wide and "12 x 31 = 372" in wide and "up to 372 tokens can still be relayed" in wide
    narrow = ff.far_definition(12, 2)                  # 12 x 1 = 12 < 129: every far story is out of reach
    assert "12 x 1 = 12" in narrow and "every far story lies beyond that reach" in narrow


def test_checkpoints_offer_names_what_each_learned_with_its_own_far_recall():
    text_rec = {"final": {"recall_far": 0.06}, "measured": {"recall_far": 0.04}}
    recall_rec = {"final": {"recall_far": 0.5}}
    assert ff.far_recall_of(text_rec) == 0.04                      # the benchmark's figure wins over the last eval
    assert ff.far_recall_of(recall_rec) == 0.5 and ff.far_recall_of(None) is None
    sets = [ff.ShippedFacts("text", "Text model", text_rec, 32), ff.ShippedFacts("recall", "Recall", recall_rec, 2)]
    text, recall = ff.checkpoints_offer("text", sets)
    assert text.startswith("Text model") and "has not emerged" in text and "(4% of far" in text
    assert "narrowed to 2 tokens" in recall and "(50% of far" in recall
    first, _ = ff.checkpoints_offer("recall", [sets[0], ff.ShippedFacts("recall", "Recall", None, 4)])
    assert first.startswith("Recall") and "not emerged" not in first and "not measured" in first
    assert "without a training record" in first                   # no record: how it was trained is not known


# ---- ablation lab ---------------------------------------------------------------------------------------------
def test_ablation_window_only_states_the_direct_road_and_the_reach_of_the_running_config():
    from lessons import ablation as abl

    for cfg in (TINY, TINY.replace(sliding_window=8)):
        rows = {name: what for name, _, what in abl.config_rows(cfg)}
        text = rows["window only"]
        assert "nothing older than the window is read directly" in text
        assert f"up to {_reach(cfg):,} positions back" in text
        assert "out of reach" not in text
    assert "earn its place?" not in abl.INTRO.split(".")[0]           # no longer the framing question
    assert "does not reproduce the report's benchmarks" in abl.INTRO


# ---- glossary --------------------------------------------------------------------------------------------------
def test_glossary_window_and_far_fact_state_the_direct_road_with_the_release_reach():
    from lessons.glossary import terms

    t = {x.term: x for x in terms()}
    window = t["window"].meaning
    assert "nothing older than the window is read directly" in window and f"{_reach(RELEASE):,} positions" in window
    far = t["far fact, fact entries"].meaning
    assert "direct road" in far and "only through them" not in far
    small = {x.term: x for x in terms(TINY)}["window"].meaning
    assert f"{_reach(TINY):,} positions" in small


@pytest.mark.parametrize("word", ["SWA", "sink", "indexer", "index scores", "candidate source", "logit lens", "prefill",
                                  "decode", "HBM", "persistent cache", "router", "shared expert", "anchor"])
def test_glossary_holds_the_terms_the_pages_use(word):
    from lessons.glossary import terms

    assert any(word in t.term for t in terms()), word


def test_glossary_search_keeps_the_terms_holding_every_word():
    from lessons.glossary import FIND_MAX, find_terms, terms

    every = terms()
    assert find_terms("", every) == every and find_terms("   ", every) == every
    sink = find_terms("SINK", every)
    assert sink and all("sink" in f"{t.term} {t.meaning}".lower() for t in sink) and len(sink) < len(every)
    both = find_terms("window only", every)
    assert both and all("window" in (t.term + t.meaning).lower() and "only" in (t.term + t.meaning).lower()
                        for t in both)
    assert find_terms("zzzz-no-such-word", every) == []
    assert find_terms("x" * FIND_MAX + " sink", every) == find_terms("x" * FIND_MAX, every)   # cut, not refused
    swa = next(t for t in every if t.term.startswith("SWA"))
    assert "first 2 encoder layers" in swa.meaning                  # the release's map: 2 window-only layers


# ---- sources and their sureness ---------------------------------------------------------------------------------
def test_sources_are_labelled_with_the_right_sureness():
    from lessons.designs import DESIGNS, build
    from lessons.glossary import terms
    from lessons.sources import SOURCES, SURENESS

    by_name = {s.name: s.marker for s in SOURCES}
    report = SURENESS["report"]
    assert by_name["DeepSeek-V4.1-Flash release announcement"] != report
    assert by_name["DeepSeek-V4.1-Flash model card"] != report
    hf = next(m for n, m in by_name.items() if n.startswith("Hugging Face"))
    assert "port" in hf
    dspark = next(m for n, m in by_name.items() if "DSpark" in n)
    assert "code and papers" in dspark
    vllm = {m for n, m in by_name.items() if "vLLM" in n}
    for key in DESIGNS:
        for line in build(key).sources:
            if "vLLM" in line:
                vllm.add(line[line.rindex("(") + 1:-1])
    assert len(vllm) == 1, vllm                                   # one marker for vLLM everywhere
    far = next(t for t in terms() if t.term.startswith("far fact"))
    assert far.sureness != "measured"                             # a definition of our test, not a measurement


def test_no_reader_visible_seed():
    from lessons.designs import DESIGNS, build
    from lessons.glossary import terms
    from lessons.layers import engram_sentence
    from lessons.sources import SOURCES_NOTE, footer_lines
    from ui.session import NUMBERING

    texts = [SOURCES_NOTE, engram_sentence(RELEASE), *footer_lines(), *NUMBERING.values()]
    texts += [t.meaning for t in terms()] + [label for label, _, _ in DESIGNS.values()]
    for key in DESIGNS:
        d = build(key)
        texts += [d.label, d.summary, *d.sources, *d.unknowns]
    from lessons.designs import UNKNOWN_NOTE

    texts.append(UNKNOWN_NOTE)
    assert not [t for t in texts if "seed" in t.lower()]
    assert "Parameter Golf" in UNKNOWN_NOTE and "An Alien Mind" in UNKNOWN_NOTE


# ---- typed summaries follow their inputs --------------------------------------------------------------------------
def test_teaching_summary_and_sharing_help_follow_the_knobs():
    from lessons.designs import build, defaults, sharing_help

    k = defaults("teaching")
    base = build("teaching", k).summary
    assert "16 layers" in base and "4,096 entries" in base and "8 bits" in base
    k2 = dataclasses.replace(k, layers=32, bits=16, context=1024)
    changed = build("teaching", k2).summary
    assert "32 layers" in changed and "16 bits" in changed and "1,024 entries" in changed
    assert "16 layers" not in changed
    assert "groups of 4 layers share one copy" in build("teaching", dataclasses.replace(k, group=4)).summary
    help_ = sharing_help(k2)
    expect = 32 * 1024 * 128 * 2                                   # layers x entries x numbers x 2 bytes
    assert f"{expect:,} bytes" in help_ and f"{expect // 4:,} bytes" in help_


def test_v41_summary_and_shares_follow_the_window_and_the_layer_map():
    from lessons.designs import build, defaults

    k = dataclasses.replace(defaults("v4.1-flash"), window=64)
    d = build("v4.1-flash", k)
    assert "64-row" in d.summary and "128-row" not in d.summary
    assert "64-row window" in d.shares["per-token state"]
    from model import layer_map

    specs = layer_map(RELEASE)
    full = sum(s.role == "Full" for s in specs)
    readers = sum(s.compress_ratio > 0 for s in specs)
    assert f"{full} stored copies serve {readers} compressed layers" in d.shares["prepared data"]
    v4 = build("v4-flash", dataclasses.replace(defaults("v4-flash"), window=256))
    assert "256-row window" in v4.summary


def test_check_answer_follows_the_sliders():
    from lessons.attention_shares import check_answer, two_value_mix

    assert "gave 14 for query A, 28 for query B" in check_answer()
    a, b = two_value_mix(50).result, two_value_mix(25).result       # 20 and 25
    text = check_answer([a, b])
    assert "gave 20 for query A, 25 for query B" in text and "14" not in text


# ---- numbering in the inspector's sentences ----------------------------------------------------------------------
def test_layer_descriptions_follow_the_numbering():
    from lessons.layers import describe_layer
    from model import layer_map

    specs = layer_map(TINY)
    reindex = next(s for s in specs if s.role == "Reindex")
    reuse = next(s for s in specs if s.role == "Reuse" and s.index_source != s.kv_source)
    one = lambda i: i + 1  # noqa: E731
    assert f"keeps layer {reindex.kv_source + 1}'s entries" in describe_layer(reindex, one)
    assert (f"keeps layer {reuse.kv_source + 1}'s entries and layer {reuse.index_source + 1}'s selection"
            in describe_layer(reuse, one))
    assert f"keeps layer {reindex.kv_source}'s entries" in describe_layer(reindex)


# ---- what the CSA2 table counts ----------------------------------------------------------------------------------
def test_index_cell_says_scores_computed_and_kept_inside_the_pool():
    from lessons.layers import Computed, index_cell

    base = dict(layer=8, role="Reindex", stack="decoder", queries=10, window_rows=10, entries_made=0,
                entries_in_group=50, selection="made", same_as_source=None, read_last=4, visible_last=50,
                pool_last=16)
    pooled = Computed(index_scores=160, index_visible=455, pooled=True, **base)
    assert index_cell(pooled) == "455 computed, 160 kept inside the pool"
    plain = Computed(index_scores=455, index_visible=455, pooled=False, **base)
    assert index_cell(plain) == "455 computed"
    none = Computed(index_scores=0, **base)
    assert index_cell(none) == "not computed"


def test_pools_and_dspark_intros_do_not_overstate():
    from lessons.dspark import INTRO as DSPARK
    from lessons.indexer_pools import INTRO as POOLS

    assert "That saves scoring work" not in POOLS and "scans every entry once" not in POOLS
    assert "masks to the pool" in POOLS and "no saving is measured here" in POOLS
    assert "reads every weight" not in DSPARK and "active ones" in DSPARK
