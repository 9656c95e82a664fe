"""The far-fact lesson (lessons/far_fact.py) and its figure (ui/far_fact.py): entry mapping, the sample rule,
membership on a hand-built trace, the reader's-story checks, and the live analysis on random weights. Nothing
here asserts what the shipped weights answer: they are retrained, and the lesson reports whatever they do."""

from __future__ import annotations

import pytest
import torch

from lessons import far_fact as ff, far_story as fs
from lessons.attention_shares import entry_span
from model import Ablation, LayerSpec
from model.heldout import load_heldout_stories, story_eval_batches
from model.inference import LayerRecord, Shares, Trace
from model.shipped import shipped_weights
from model.tokenizer import EOS_ID, load_tokenizer

INF = float("inf")


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(shipped_weights("text") / "tokenizer.json")


# ---- positions and entries ------------------------------------------------------------------------------------

@pytest.mark.parametrize("ratio", [1, 2, 3, 4, 8])
def test_entry_ids_match_the_spans_each_entry_packs(ratio):
    g = torch.Generator().manual_seed(ratio)
    for _ in range(20):
        positions = sorted(set(torch.randint(0, 60, (int(torch.randint(1, 6, (1,), generator=g)),),
                                             generator=g).tolist()))
        # independently: an entry is a fact entry iff the token span it packs holds a fact position
        expected = [e for e in range(60) if any(entry_span(e, ratio)[0] <= p < entry_span(e, ratio)[1]
                                                for p in positions)]
        assert ff.entry_ids(positions, ratio) == expected
    assert ff.entry_ids([5, 9], 0) == []          # a window-only layer has no entries


@pytest.mark.parametrize("ratio", [1, 2, 4])
def test_visible_entries_are_the_complete_ones(ratio):
    for q in range(40):
        assert ff.visible_entries(q, ratio) == sum(1 for e in range(40) if entry_span(e, ratio)[1] - 1 <= q)


def test_covering_positions_overlap_bytelevel_spans():
    offsets = [(0, 3), (3, 7), (7, 12), (12, 13)]      # "The| key| blue|." with the space in each span
    assert fs.covering_positions(offsets, 8, 12) == [2]
    assert fs.covering_positions(offsets, 4, 12, shift=1) == [2, 3]
    assert fs.covering_positions(offsets, 13, 20) == []


def test_heldout_positions_equal_the_evaluation_batches(tok):
    rows = [r for r in load_heldout_stories() if r["bucket"] == "far"][:5]
    for r, b in zip(rows, [next(story_eval_batches(tok, [r], batch_size=1)) for r in rows]):
        t = fs.heldout_tokens(tok, r)
        assert t.query == int(b["answer_pos"][0])
        assert t.ids == b["input_ids"][0, : t.query + 1].tolist()
        assert t.answer_id == int(b["answer_id"][0])
        assert t.colour_positions[0] == int(b["fact_pos"][0])
        assert t.distance == int(b["distance"][0])
        assert set(t.colour_positions) <= set(t.sentence_positions)
        assert tok.decode([t.ids[p] for p in t.colour_positions]).strip() == r["answer"]


# ---- the sample rule --------------------------------------------------------------------------------------------

def test_far_sample_rule_picks_the_median_far_story_past_the_window(tok):
    window = 32
    s = fs.far_sample(tok, window)
    assert s.story.bucket == "far"
    assert s.tokens.distance > window
    # independently: the lower median of the far stories' distances (answer index - fact colour index)
    rows = [r for r in load_heldout_stories() if r["bucket"] == "far"]
    dists = []
    for r in rows:
        enc = tok.encode(r["text"], add_special_tokens=False)
        at = lambda c: next(i for i, (a, e) in enumerate(enc.offsets) if a <= c < e)  # noqa: E731
        dists.append(at(r["answer_start"]) - at(r["fact_answer_start"]))
    dists = sorted(d for d in dists if d > window)
    assert s.distances == dists
    assert s.tokens.distance == dists[(len(dists) - 1) // 2]
    assert fs.far_sample(tok, window).story.seed == s.story.seed            # fixed: the same story every time
    top = fs.far_sample(tok, dists[-1] - 1)                                # relative to the window given:
    assert top.candidates == 1 and top.tokens.distance == dists[-1]        # only the farthest story is past it
    with pytest.raises(ValueError):
        fs.far_sample(tok, 10_000)
    assert s.rank == s.median == (len(dists) - 1) // 2
    near, far = fs.far_sample(tok, window, rank=0), fs.far_sample(tok, window, rank=10_000)   # clamped
    assert (near.rank, near.tokens.distance) == (0, dists[0])
    assert (far.rank, far.tokens.distance) == (len(dists) - 1, dists[-1]) and far.median == s.median
    assert fs.far_sample(tok, window, rank=s.median).story.seed == s.story.seed


# ---- the reader's story ---------------------------------------------------------------------------------------

STORY = "Tom put the coin in the red bag. Anna walked to the park. Where is the coin? The coin is in the"


def test_own_story_messages_never_quote_the_text(tok):
    for text, fact in [("", "red"), ("   ", "red"), (STORY, ""), (STORY, "the rde bag"), ("x" * 20001, "x"),
                       (STORY, "y" * 1001)]:
        story, toks, problem = fs.own_story(text, fact, None, tok)
        assert story is None and toks is None and problem
        assert "rde" not in problem and "<" not in problem
    assert "not found" in fs.own_story(STORY, "the rde bag", None, tok)[2]
    long = " ".join(["Tom put the coin in the red bag."] * 400)
    assert "tokens long" in fs.own_story(long, "red bag", None, tok, max_tokens=512)[2]


def test_own_story_finds_the_fact_and_its_colour(tok):
    story, toks, problem = fs.own_story(STORY, "tom PUT the coin in the red bag.", None, tok)
    assert problem is None
    assert STORY[story.fact_start:story.fact_end] == "Tom put the coin in the red bag."
    assert STORY[story.colour_start:story.colour_end] == "red"
    assert story.answer == "red" and toks.answer_id == tok.encode(" red", add_special_tokens=False).ids[0]
    assert toks.ids[0] == EOS_ID and toks.query == len(toks.ids) - 1          # <|eos|> first, the last token asks
    assert tok.decode([toks.ids[p] for p in toks.colour_positions]).strip() == "red"
    # a word as the fact, and an explicit answer that wins over the colour
    story, toks, _ = fs.own_story(STORY, "park", "blue", tok)
    assert story.answer == "blue" and tok.decode([toks.ids[p] for p in toks.colour_positions]).strip() == "park"


# ---- membership on a hand-built trace ---------------------------------------------------------------------------

def _spec(i, role, ratio, index_source, cand=False, uses=False):
    return LayerSpec(index=i, stack="decoder" if ratio == 1 else "encoder", role=role, compress_ratio=ratio,
                     kv_source=None if not ratio else (1 if ratio == 2 else 2), index_source=index_source, engram=False,
                     candidate_source=cand, searches_pool=uses)


def _rec(spec, ids, head_shares, topk=None, scores=None, candidates=None, s=10, w=4, heads=2):
    k = len(ids)
    entries = torch.zeros(1, s, heads, k)
    entries[0, -1] = torch.tensor(head_shares)
    window = torch.zeros(1, s, heads, w)
    window[0, -1] = torch.tensor([[0.0, 0.1, 0.2, 0.1], [0.0, 0.0, 0.3, 0.0]])
    rec = LayerRecord(spec=spec, positions=torch.arange(s),
                      shares=Shares(window=window, entries=entries, entry_ids=torch.tensor([ids] * s).unsqueeze(0),
                                    sink=torch.zeros(1, s, heads), ratio=spec.compress_ratio))
    if topk is not None:
        rec.topk = torch.tensor([topk] * s).unsqueeze(0)
    if scores is not None:
        rec.index_scores = torch.tensor([scores] * s).unsqueeze(0)
    if candidates is not None:
        rec.candidates = torch.tensor([candidates] * s).unsqueeze(0)
    return rec


def _hand_trace() -> Trace:
    pool = [True, True, True, False, False, True, True, True, True, True]       # 8 of 10 entries
    recs = [
        LayerRecord(spec=_spec(0, "SWA", 0, None), positions=torch.arange(10),
                    shares=Shares(window=torch.zeros(1, 10, 2, 4), entries=torch.zeros(1, 10, 2, 0),
                                  entry_ids=torch.zeros(1, 10, 0, dtype=torch.long), sink=torch.ones(1, 10, 2),
                                  ratio=0)),
        _rec(_spec(1, "Full", 2, 1), [1, 3, -1], [[0.25, 0.05, 0.0], [0.10, 0.30, 0.0]], topk=[1, 3, -1],
             scores=[0.1, 0.9, 0.5, 0.7, 0.2]),
        _rec(_spec(2, "Full", 1, 2, cand=True), [5, 6], [[0.1, 0.2], [0.3, 0.1]], topk=[5, 6],
             scores=[0.5, 0.1, 0.3, 0.9, 0.8, 0.7, 0.6, 0.4, 0.2, 0.0], candidates=pool),
        _rec(_spec(3, "Reindex", 1, 3, uses=True), [2, 7], [[0.4, 0.1], [0.2, 0.2]], topk=[2, 7],
             scores=[0.5, 0.1, 0.3, -INF, -INF, 0.7, 0.6, 0.4, 0.2, 0.0]),
        _rec(_spec(4, "Reuse", 1, 3), [2, 7], [[0.05, 0.5], [0.0, 0.6]]),
    ]
    return Trace(ids=torch.arange(10).unsqueeze(0), positions=torch.arange(10), layers=recs, logits=None, mode="exact")


def test_layer_facts_on_a_hand_built_trace():
    lf = {x.layer: x for x in ff.layer_facts(_hand_trace(), 9, [2], [1, 2, 3])}
    assert list(lf) == [1, 2, 3, 4]                                       # the window-only layer is skipped
    a = lf[1]                                                             # ratio 2: position 2 is in entry 1
    assert a.fact_entries == [1] and a.sentence_entries == [0, 1] and a.visible == 5
    assert a.head_shares == pytest.approx([0.25, 0.10]) and a.share == pytest.approx(0.175)
    assert a.read == [1] and a.selected == [1] and a.k == 2
    assert a.pool is None and (a.rank, a.ranked) == (1, 5)
    assert a.window_shares == [0.0, 0.0]                                  # the fact is not in the window
    assert a.entry_shares == pytest.approx({1: 0.175, 3: 0.175})
    b = lf[2]                                                             # candidate source: builds the pool
    assert b.fact_entries == [2] and b.head_shares == [0.0, 0.0] and b.read == [] and b.selected == []
    assert b.pool == [2] and b.pool_size == 8 and (b.rank, b.ranked) == (7, 10)
    c = lf[3]                                                             # Reindex inside the pool
    assert c.head_shares == pytest.approx([0.4, 0.2]) and c.selected == [2] and c.pool == [2]
    assert (c.rank, c.ranked) == (5, 8)                                   # 0.5, 0.7, 0.6, 0.4 higher; -inf unranked
    d = lf[4]                                                             # Reuse: layer 3's selection and ranks
    assert d.selected == [2] and d.k == 2 and d.pool is None and (d.rank, d.ranked) == (5, 8)
    assert d.head_shares == pytest.approx([0.05, 0.0]) and d.best_head == (0, pytest.approx(0.05))


def test_layer_facts_window_share_and_missing_pool_entry():
    tr = _hand_trace()
    lf = {x.layer: x for x in ff.layer_facts(tr, 9, [8], [7, 8])}
    # window slot j of row 9 holds position 9 - 3 + j: position 8 is slot 2
    assert lf[1].window_shares == pytest.approx([0.2, 0.3])
    lf = {x.layer: x for x in ff.layer_facts(tr, 9, [3], [3])}
    assert lf[2].pool == [] and lf[3].rank is None                        # entry 3 is outside the pool


def _far(layers, on_id=7, off_id=7, answer="red"):
    story = fs.FactStory("s", "text", 0, 4, 0, 4, answer)
    toks = fs.FactTokens(ids=list(range(101)), query=100, colour_positions=[10], sentence_positions=[8, 9, 10],
                         answer_id=None if answer is None else 9)
    answers = [ff.Answer("everything on", " red" if on_id == 9 else " x", on_id, 0.5, 0.25, "red", on_id == 9),
               ff.Answer("global branch off", " red" if off_id == 9 else " y", off_id, 0.4, 0.07, "blue",
                         off_id == 9)]
    return ff.FarFact(story=story, tokens=toks, window=32, layers=layers, answers=answers,
                      token_texts=["t"] * 10 + [" red"] + ["t"] * 90)


def test_summary_states_the_computed_numbers():
    lf = {x.layer: x for x in ff.layer_facts(_hand_trace(), 9, [2], [1, 2, 3])}
    out = ff.summary(_far(list(lf.values()), off_id=8), num=lambda i: i + 1)
    text = "\n".join(out)
    assert "91 tokens before the answer: 59 past the 32-token window" in text
    assert "at most 40.0% of one head's weight (layer 4, head 0)" in text    # 1-based numbering
    assert "contains the fact entry E2" in text
    assert "a fact entry in 3 of the 4 compressed layers" in text
    assert "'x' (the right colour 'red' gets 25.0%" in text
    assert "switched off: 'y' (different; 'red' gets 7.0%)" in text
    zero = ff.summary(_far([]))
    assert any("no compressed layers" in s for s in zero)
    assert "(same; 'red' gets 7.0%)" in "\n".join(ff.summary(_far(list(lf.values()))))
    same = "\n".join(ff.summary(_far(list(lf.values()), off_id=8, answer=None)))
    assert "Answer with everything on: 'x' (50.0%); with the global branch switched off: 'y' (40.0%)" in same
    rows = ff.table_rows(_far(list(lf.values())))
    outside = ff.table_rows(_far(ff.layer_facts(_hand_trace(), 9, [3], [3])))
    assert outside[2]["index rank"] == "masked (outside the pool)"
    assert outside[0]["index rank"] == "1 of 5"                           # position 3 is in entry 1 at ratio 2
    assert rows[2]["in candidate pool"] == "1/1" and rows[0]["in candidate pool"] == "no pool"
    assert rows[0]["index rank"] == "1 of 5" and rows[2]["index rank"] == "5 of 8"


def test_the_panel_view_holds_each_pages_table_in_percent():
    lf = {x.layer: x for x in ff.layer_facts(_hand_trace(), 9, [2], [1, 2, 3])}
    far = _far(list(lf.values()))
    raw = ff.table_rows(far, num=lambda i: i + 1)
    pools = ff.view(far, "pools", num=lambda i: i + 1)
    assert list(pools.rows[0]) == [c + (" (%)" if "share" in c else "") for c in ff.FOCUS_TABLE["pools"]]
    key = "share on fact entries (mean over heads)"
    assert [r[f"{key} (%)"] for r in pools.rows] == pytest.approx([100 * r[key] for r in raw])
    assert [r["layer"] for r in pools.rows] == [r["layer"] for r in raw] and not pools.answers
    shares = ff.view(far, "shares")
    assert shares.rows == ff.head_rows(far) and "head 0 (%)" in shares.rows[0]
    abl = ff.view(far, "ablation")
    assert [a["configuration"] for a in abl.answers] == ["everything on", "global branch off"]
    assert abl.lines == ff.summary(far) and [m.label for m in abl.metrics] == [m.label for m in ff.metrics(far)]
    assert ff.about(12, 32)[1] == ff.far_definition(12, 32) and ff.about(12, 32)[0] == ff.INTRO


# ---- the live analysis ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny(tiny_random):
    return tiny_random


def test_analyse_matches_the_model_on_and_off(tiny):
    s = fs.far_sample(tiny.tokenizer, tiny.cfg.sliding_window)
    res = ff.analyse(tiny, s.story, s.tokens)
    ids = torch.tensor([s.tokens.ids])
    with torch.no_grad():
        on = torch.softmax(tiny(ids).logits[0, -1].float(), -1)
        off = torch.softmax(tiny(ids, ablation=Ablation(window_only=True)).logits[0, -1].float(), -1)
    a_on, a_off = res.answers
    assert a_on.token_id == int(on.argmax()) and a_off.token_id == int(off.argmax())
    assert a_on.p_right == pytest.approx(float(on[s.tokens.answer_id]), rel=1e-4)
    assert a_off.p_right == pytest.approx(float(off[s.tokens.answer_id]), rel=1e-4)
    assert res.far and res.past_window == s.tokens.distance - tiny.cfg.sliding_window
    compressed = [i for i, r in enumerate(tiny.cfg.compress_ratios) if r]
    assert [lf.layer for lf in res.layers] == compressed
    for lf in res.layers:
        assert all(0.0 <= x <= 1.0 + 1e-6 for x in lf.head_shares)
        assert lf.window_shares == [0.0] * len(lf.window_shares)      # far: nothing through the window
        assert set(lf.read) <= set(lf.fact_entries)
        assert len(lf.entry_shares) <= tiny.cfg.index_topk
    assert ff.summary(res) and ff.table_rows(res) and ff.head_rows(res)
    assert "⟦" in ff.marked_text(res) and "‖" in ff.marked_text(res)


def test_far_fact_figure_marks_the_fact_and_the_window():
    from ui.far_fact import far_fact_figure

    lf = ff.layer_facts(_hand_trace(), 9, [2], [1, 2, 3])
    res = _far(lf)
    fig = far_fact_figure(res)
    heat = fig.data[0]
    assert len(heat.z) == len(lf) and len(heat.z[0]) == res.tokens.query + 1
    # layer 1 (ratio 2) read entry 1 = tokens 2-3 with a mean share of 0.175; entry 3 = tokens 6-7
    assert heat.z[0][2] == pytest.approx(0.175) and heat.z[0][3] == pytest.approx(0.175)
    assert heat.z[0][6] == pytest.approx(0.175) and heat.z[0][4] is None            # not read: blank
    marks = fig.data[1]                                                   # one marker per layer at the fact
    assert list(marks.x) == [10] * len(lf) and list(marks.marker.color) == ["#2ca02c", "#d62728", "#2ca02c",
                                                                            "#2ca02c"]
    rects = {(s.x0, s.x1): s for s in fig.layout.shapes}
    fact = rects[(9.5, 10.5)]                                             # the fact colour at position 10
    assert fact.line.dash == "dash" and fact.line.color == "#000000"      # not a colour of the attention scale
    assert (100 - 32 + 1 - 0.5, 100.5) in rects                           # the window of the query at 100
    keys = [t.name or "" for t in fig.data if t.type == "scatter" and t.showlegend is not False]
    assert any("top-k holds" in k for k in keys) and any("misses" in k for k in keys)
    assert any("fact" in k for k in keys) and any("window" in k and "32" in k for k in keys)


def test_summary_names_a_non_colour_answer_plainly():
    res = _far(ff.layer_facts(_hand_trace(), 9, [2], [1, 2, 3]), answer="park")
    text = "\n".join(ff.summary(res))
    assert "(the right answer 'park' gets 25.0%)" in text and "chance" not in text


def test_weights_note_adds_the_measured_window_only_recall_and_fact_in_pool_rate():
    from lessons.far_fact import weights_note
    rec = {"final": {"recall_far": 0.04}, "tokens": 1000}
    plain = weights_note("trained", rec)
    assert "candidate pool" not in plain
    rec["measured"] = {"recall_far": 0.62, "recall_far_window_only": 0.07, "fact_in_pool": 0.83, "date": "2026-12-02"}
    note = weights_note("trained", rec)
    assert "4%" in plain and "4%" not in note                # one figure: the benchmark's, where it was run
    assert "recall 62% of held-out far facts" in note and "62% with everything on" in note
    assert "7% with nothing older than the window" in note
    assert "candidate pool at the answer row for 83%" in note and "2026-12-02" in note


def test_weights_note_says_when_the_answer_is_another_facts_colour():
    from lessons.far_fact import weights_note
    rec = {"final": {"recall_far": 0.42}, "measured": {"recall_far": 0.42, "recall_far_window_only": 0.12,
                                                       "recall_far_heldout_templates": 0.13,
                                                       "distractors_right": 0.31, "distractors_other_fact": 0.68,
                                                       "distractors_random_fact": 0.36}}
    note = weights_note("trained", rec)
    assert "13% on far stories told with names, objects and sentences never trained on" in note
    assert "31% of the answers are the asked fact's colour and 68% another fact's" in note
    assert "at random among the story's facts would be right 36%" in note
    del rec["measured"]["distractors_other_fact"]
    assert "another fact" not in weights_note("trained", rec)


# ---- a near-tie among colours is a guess; the mean names the layers it covers ---------------------------------

def _colour_answers(on_share: float, off_id: int = 8, on_right: bool = True):
    on = ff.Answer("everything on", " red", 7 if on_right else 6, on_share, on_share, "red", on_right,
                   colour_share=on_share)
    off = ff.Answer("global branch off", " blue", off_id, 0.1, 0.093, "blue", False, colour_share=0.093)
    return [on, off]


def test_a_near_tie_among_colours_is_called_a_guess_and_the_flip_noise_when_no_entry_was_read():
    unread = ff.layer_facts(_hand_trace(), 9, [8], [8])                  # entry 4/8: no layer read it
    assert not any(lf.read for lf in unread)
    res = _far(unread)
    res.answers = _colour_answers(0.108)                                 # 10.8% of the colour mass, chance 9.1%
    text = "\n".join(ff.summary(res))
    assert "nearly tied" in text and "10.8% of the colour probability against 9.1%" in text
    assert "a guess, not recall" in text and "noise" in text
    read = _far(ff.layer_facts(_hand_trace(), 9, [2], [1, 2, 3]))        # layers did read the fact entry
    read.answers = _colour_answers(0.108)
    said = "\n".join(ff.summary(read))
    assert "a guess, not recall" in said and "noise" not in said
    clear = _far(unread)
    clear.answers = _colour_answers(2.5 * ff.CHANCE)                     # well above twice chance: no such line
    assert "nearly tied" not in "\n".join(ff.summary(clear))
    assert ff.near_tie(1.99 * ff.CHANCE) and not ff.near_tie(2 * ff.CHANCE)


def test_the_attention_mean_is_given_per_stack_and_names_its_layers():
    res = _far(ff.layer_facts(_hand_trace(), 9, [2], [1, 2, 3]))
    text = "\n".join(ff.summary(res, num=lambda i: i + 1))
    # layer 1 (encoder, ratio 2): 0.175; decoder layers 2-4: (0 + 0.3 + 0.025) / 3
    assert "17.5% in encoder layer 2" in text
    assert f"{100 * (0.0 + 0.3 + 0.025) / 3:.1f}% in the 3 decoder layers 3-5" in text
    assert "on average over the heads of the 4 compressed layers" not in text


@pytest.mark.skipif(not (shipped_weights("text") / "model.safetensors").exists(),
                    reason="the shipped tiny weights are not present")
def test_shipped_text_model_far_sample_is_not_presented_as_recall(tiny_trained):
    """On the shipped text weights the default far story's colours are close to even: whatever colour comes out
    on top, the panel must not read as the global branch recalling the fact."""
    m = tiny_trained
    s = fs.far_sample(m.tokenizer, m.cfg.sliding_window)
    res = ff.analyse(m, s.story, s.tokens)
    on = res.answers[0]
    text = "\n".join(ff.summary(res))
    if on.colour_share is not None and on.colour_share < 2 * ff.CHANCE:
        assert "nearly tied" in text and "a guess, not recall" in text
        if not any(lf.read for lf in res.layers):
            assert "noise" in text
