"""Golden-number and invariant tests for the Figure 3 lessons (layers, figure3, shares, recurrence).

Golden numbers come from the first seed and the released config, never from the code under test:
14 and 28 from mixing 10 and 30; 20 + 20 = 40 layers; 2 window-only + 3x(1 Full + 5 Reuse);
(1 Full + 3 Reuse) + 4x(1 Reindex + 3 Reuse); Engram at 1 and 14 (0-based) = 2 and 15 (1-based).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from lessons.attention_shares import mix, reuse_comparison, share_view, two_value_mix
from lessons.figure3 import box_text, levers, live_layer, steps
from lessons.figure3_layout import box_choices, layout, picked_box
from lessons.layers import (
    computed_by_layer,
    count_table,
    engram_layers,
    full_reads_subset,
    layer_rows,
    mode_checks,
    reference_numbers,
    stack_runs,
)
from lessons.recurrence import param_comparison, reuse_facts, shares_sentence, storage_check
from model import Ablation, V41Config, layer_map
from tests.conftest import ROOT, random_model

PRESETS = ["v4.1-flash", "tiny", "micro", "small"]


@pytest.fixture(scope="module")
def full():
    return V41Config.preset("v4.1-flash")


@pytest.fixture(scope="module")
def traced():
    """A random micro model traced on 40 tokens: past its window of 8 and its top-k of 4."""
    m = random_model("micro", seed=3)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(8, m.cfg.vocab_size, (1, 40), generator=g)
    tokens = [f"t{i}" for i in ids[0].tolist()]
    return m, m.trace(ids), tokens


# ---- the toy -----------------------------------------------------------------------------------
def test_seed_toy_numbers():
    assert two_value_mix(80).result == pytest.approx(14.0)
    assert two_value_mix(10).result == pytest.approx(28.0)
    assert two_value_mix(80).derivation() == "0.80 x 10 = 8 + 0.20 x 30 = 6 = 14"
    assert two_value_mix(100).result == pytest.approx(10.0) and two_value_mix(0).result == pytest.approx(30.0)


def test_mix_rejects_bad_shares():
    with pytest.raises(ValueError):
        mix((10, 30), (0.5, 0.6))
    with pytest.raises(ValueError):
        mix((10, 30), (1.2, -0.2))
    with pytest.raises(ValueError):
        two_value_mix(101)


# ---- the layer map and the seed's reference table -----------------------------------------------------
def test_count_table_reproduces_the_seed(full):
    enc, dec, total = count_table(full)
    assert (enc.part, enc.formula, enc.count) == ("Encoder", "2 window-only + 3x(1 Full + 5 Reuse)", 20)
    assert (dec.part, dec.formula, dec.count) == ("Decoder", "(1 Full + 3 Reuse) + 4x(1 Reindex + 3 Reuse)", 20)
    assert (total.part, total.count) == ("Backbone total", 40)
    assert total.derivation == "20 + 20 = 40"


def test_engram_numbering(full):
    assert engram_layers(full) == [1, 14]
    assert engram_layers(full, one_based=True) == [2, 15]


@pytest.mark.parametrize("preset", PRESETS)
def test_runs_cover_every_layer_once(preset):
    cfg = V41Config.preset(preset)
    specs = layer_map(cfg)
    covered = []
    for stack in ("encoder", "decoder"):
        for run in stack_runs(specs, stack):
            covered += list(run.layers)
            assert run.count() == len(run.layers)
            for u in run.units:  # every unit is one selecting (or window-only) layer + Reuse layers
                assert [specs[i].role for i in u.layers[1:]] == ["Reuse"] * (len(u.layers) - 1)
    assert covered == list(range(cfg.num_hidden_layers))
    assert count_table(cfg)[-1].count == cfg.num_hidden_layers


def test_tiny_counts():
    enc, dec, total = count_table(V41Config.preset("tiny"))
    assert enc.formula == "2 window-only + (1 Full + 3 Reuse)" and enc.count == 6
    assert dec.formula == "(1 Full + 1 Reuse) + 2x(1 Reindex + 1 Reuse)" and dec.count == 6
    assert total.count == 12


def test_layer_rows_follow_the_numbering(full):
    z, o = layer_rows(full), layer_rows(full, one_based=True)
    assert len(z) == 40 and z[3]["KV source"] == "2" and o[3]["KV source"] == "3"
    assert z[14]["Engram"] == "yes" and z[14]["layer (1-based)"] == 15
    assert [r["role"] for r in z[20:25]] == ["Full", "Reuse", "Reuse", "Reuse", "Reindex"]
    assert "candidate pool" in z[20]["what it does"]


# ---- the Figure 3 drawing --------------------------------------------------------------------------------
@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("compact", [False, True])
def test_layout_shows_every_layer_exactly_once(preset, compact):
    cfg = V41Config.preset(preset)
    d = layout(cfg, compact=compact)
    shown = sorted(i for b in d.layer_boxes() for i in b.layers)
    assert shown == list(range(cfg.num_hidden_layers))
    moe = sorted(i for b in d.boxes if b.kind == "moe" for i in b.layers)
    assert moe == shown  # MoE in every layer
    eng = sorted(i for b in d.boxes if b.kind == "engram" for i in b.layers)
    assert eng == sorted(cfg.engram_layer_ids)
    ids = [b.id for b in d.boxes]
    assert len(ids) == len(set(ids))
    for needed in ("vision", "embed", "line", "head", "drafter", "mhc:encoder"):
        assert d.box(needed) is not None
    if not compact:
        assert len(d.layer_boxes()) == cfg.num_hidden_layers


def test_compact_layout_marks_the_repeats(full):
    d = layout(full, compact=True)
    texts = {lb.text for lb in d.labels}
    assert {"x5", "x3", "x4"} <= texts               # Reuse x5 inside, 3 encoder groups, 4 Reindex groups
    reuse5 = [b for b in d.layer_boxes() if b.dash and len(b.layers) == 15 and b.tags & {"encoder"}]
    assert len(reuse5) == 1                         # one dotted Reuse box stands for 3 x 5 layers
    # the decoder's Full layer takes the line from the encoder
    assert "line" in d.box("attn:20").tags


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("compact", [False, True])
def test_every_step_box_is_in_the_drawing(preset, compact):
    """Back / Next open a step's box and close the open one when the step names none: a named box must exist in
    both drawings, or the step would close the panel it talks about."""
    cfg = V41Config.preset(preset)
    choices = box_choices(layout(cfg, compact=compact))
    story = steps(cfg)
    for s in story:
        assert s.box is None or s.box in choices, (s.key, s.box)
    opened = {s.key: s.box for s in story}
    assert opened["vision"] == "vision" and opened["moe"] == "moe:0" and opened["mhc"] == "mhc:encoder"
    assert opened["engram"] == f"engram:{min(cfg.engram_layer_ids)}"
    assert opened["why"] is None and opened["check"] is None


# plot units per character, measured in Chromium at 1400 px (about 15 px a unit): 4.8 px at 11 px, 4.4 at 10 px
CHAR_W = {1: 0.32, 2: 0.29}     # by the label's number of lines (two-line labels are drawn a size smaller)


@pytest.mark.parametrize("compact", [False, True])
def test_labels_fit_their_boxes_and_boxes_do_not_overlap(full, compact):
    """Each line of a box's label fits the box's width, and two boxes never cover each other (frames aside):
    "Engram (layer 14 only)" once ran out of its box over the next one in Compact mode."""
    d = layout(full, compact=compact)
    boxes = [b for b in d.boxes if b.kind != "frame"]
    for b in boxes:
        room = (b.x1 - b.x0) - (0.55 if b.kind == "attn" else 0.0)       # an attention label starts after its dot
        lines = b.label.split("\n")
        for line in lines:
            assert len(line) * CHAR_W[len(lines)] <= room, (b.id, line)
        assert b.label.count("\n") == 0 or b.y1 - b.y0 >= 0.75, b.id     # two lines need the height
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            apart = a.x1 <= b.x0 or b.x1 <= a.x0 or a.y1 <= b.y0 or b.y1 <= a.y0
            assert apart, (a.id, b.id)
    assert box_choices(d)["embed"] == "token embedding (ids to rows)"      # the list reads the label on one line


def test_dots_sit_off_the_labels(full):
    """A box's dot sits left of an attention label, else on the box's top right corner: never on centred text."""
    from ui.figures import diagram_figure, diagram_pick_ids

    d = layout(full)
    marker = diagram_figure(d).data[-1]
    for bid, x, y in zip(diagram_pick_ids(d), marker.x, marker.y):
        b = d.box(bid)
        assert (x, y) == ((b.x0 + 0.25, (b.y0 + b.y1) / 2) if b.kind == "attn" else (b.x1, b.y1)), bid


def test_layer_map_letters_are_drawn_over_the_cells(full):
    """The strip's cells are shapes: drawn above the traces (plotly's default) they hid the role letters."""
    from ui.figures import layer_map_figure

    fig = layer_map_figure([("Released", layer_map(full))])
    cells = [sh for sh in fig.layout.shapes if sh.type == "rect"]
    assert len(cells) == 40 and all(sh.layer in ("below", "between") for sh in cells)
    letters = fig.data[0]
    assert letters.mode == "text" and list(letters.text[:3]) == ["W", "W", "F"]
    assert letters.textfont.color[2] == "#ffffff" and letters.textfont.color[0] != "#ffffff"   # white on Full only


def test_layout_numbering_changes_labels(full):
    z, o = layout(full), layout(full, one_based=True)
    assert z.box("attn:14").label.startswith("14 ") and o.box("attn:14").label.startswith("15 ")


def test_story_steps_follow_the_seed_path(full):
    st_ = steps(full)
    keys = [s.key for s in st_]
    assert keys[:5] == ["job", "why", "fresh", "encoder", "line"] and keys[-2] == "check"
    # the story ends on the mechanism at work, linking the pages that show that reading
    assert keys[-1] == "far" and st_[-1].picture == "far"
    assert {p for p, _ in st_[-1].links} >= {"pages/inspector.py", "pages/indexer_pools.py"}
    for s in st_:   # a step that names a page links it
        for path, title in s.links:
            assert (ROOT / path).is_file(), (s.key, path)
        if "Is this recurrence?" in s.body or "Attention shares" in s.body:
            assert s.links, s.key
    assert "repeat" in keys and "drafter" in keys
    d = layout(full)
    for s in st_:  # every step lights up something, and its box exists
        assert any(b.tags & s.focus for b in d.boxes), s.key
        assert s.box is None or d.box(s.box) is not None
    text = " ".join(s.body for s in st_)
    assert "20 layers on the left, 20 on the right, 40 in all" in text
    assert "2 window-only + 3x(1 Full + 5 Reuse)" in text
    one = " ".join(s.body for s in steps(full, one_based=True))
    assert "layers 2 and 15" in one and "layers 1 and 14" in text


def test_box_text_for_every_box(full):
    d = layout(full)
    for bid in box_choices(d):
        assert box_text(d.box(bid), full), bid
    assert "layer 2" in box_text(d.box("attn:5"), full)           # Reuse: entries of layer 2
    assert "layer 20" in box_text(d.box("attn:25"), full)


# ---- counted from a trace --------------------------------------------------------------------------------
def test_computed_by_layer_matches_the_map(traced):
    m, tr, _ = traced
    comp = computed_by_layer(tr)
    specs = layer_map(m.cfg)
    assert [c.entries_made > 0 for c in comp] == [s.role == "Full" for s in specs]
    assert [c.index_scores > 0 for c in comp] == [s.role in ("Full", "Reindex") for s in specs]
    assert [c.selection for c in comp] == ["none" if s.role == "SWA" else ("reused" if s.role == "Reuse" else "made")
                                           for s in specs]
    assert all(c.same_as_source for c in comp if c.selection == "reused")
    assert all(c.ok for c in mode_checks(comp))
    full_layers = [c for c in comp if c.role == "Full"]
    assert all(c.read_last == m.cfg.index_topk < c.visible_last for c in full_layers)  # Full reads a subset
    assert all("read 4" in s for s in full_reads_subset(comp))


def test_computed_by_layer_sees_an_ablation(traced):
    """The table counts what happened: when every layer re-selects, Reuse layers stop reusing."""
    m, _, _ = traced
    ids = torch.randint(8, m.cfg.vocab_size, (1, 40), generator=torch.Generator().manual_seed(0))
    comp = computed_by_layer(m.trace(ids, ablation=Ablation(reselect_all=True)))
    assert all(c.selection == "made" for c in comp if c.role == "Reuse")
    checks = {c.what: c for c in mode_checks(comp)}
    assert not checks["layers that reused a selection unchanged (Reuse)"].ok


def test_share_view_rows_add_up(traced):
    m, tr, tokens = traced
    w = m.cfg.sliding_window
    for layer in (0, 2, 3, 6):
        for pos in (0, 5, 39):
            v = share_view(tr, layer, pos, tokens)
            assert sum(k == "window" for k in v.kinds) == min(w, pos + 1)
            assert v.kinds[-1] == "sink" and len(v.labels) == len(v.shares[0])
            for row in v.shares:
                assert sum(row) == pytest.approx(1.0, abs=1e-5)
            assert len(v.entry_ids) <= m.cfg.index_topk


def test_reuse_layer_same_entries_new_shares(traced):
    m, tr, tokens = traced
    for layer in [s.index for s in layer_map(m.cfg) if s.role == "Reuse"]:
        c = reuse_comparison(tr, layer, 39, 0, tokens)
        assert c.same_entries and c.entry_ids == c.source_ids and len(c.entry_ids) > 0
        assert c.largest_gap > 1e-4        # a fresh query gives different shares
    with pytest.raises(ValueError):
        reuse_comparison(tr, 2, 39, 0, tokens)  # layer 2 is Full


def test_live_layer_numbers(traced):
    m, tr, _ = traced
    cfg = m.cfg
    ll = live_layer(tr, 3)
    assert ll.position == 39 and ll.window_rows == cfg.sliding_window
    assert ll.entries_stored == 20 and ll.entries_visible == 20 and ll.entries_selected == cfg.index_topk
    assert not ll.selection_here and live_layer(tr, 2).selection_here
    assert len(ll.experts) == cfg.num_experts_per_tok
    assert live_layer(tr, 1).engram_gate is not None and ll.engram_gate is None
    assert sum(ll.shares.values()) == pytest.approx(1.0, abs=1e-5)
    assert live_layer(tr, 6).pool is not None  # Reindex inside the candidate pool
    # the pool a box reports is the pool, never the count of entries the candidate source scored
    pool_max = cfg.candidate_topk_blocks * cfg.candidate_block_size
    src = next(s.index for s in layer_map(cfg) if s.candidate_source)
    cand = tr.layers[src]
    held = int(cand.candidates[0, cand.row(39)].sum())
    for layer in [s.index for s in layer_map(cfg) if s.candidate_source or s.uses_candidates]:
        ll = live_layer(tr, layer)
        assert ll.pool == held and ll.pool <= pool_max
        said = ll.selection_sentence(pool_max)
        assert f"{held:,} entries (at most {pool_max:,})" in said or f"pool of {held:,} entries" in said
    built = live_layer(tr, src)
    assert built.scored == built.entries_visible and f"scored {built.scored:,} entries" in \
        built.selection_sentence(pool_max)


# ---- recurrence ---------------------------------------------------------------------------------------------
def test_reuse_layer_owns_its_weights(traced):
    m, tr, _ = traced
    rows = param_comparison(m, 3, 2)
    both = [r for r in rows if r.where == "both"]
    assert both and not any(r.same_storage for r in both)
    matrices = [r for r in both if len(r.shape_layer) == 2]   # norms start at 1 in both: same values, own storage
    assert matrices and all(r.max_abs_diff > 0 for r in matrices)
    assert any(r.name.startswith("attn.compressor") for r in rows if r.where == "source only")
    sc = storage_check(m)
    assert sc.tensors == sc.distinct and not sc.shared_pairs
    rf = reuse_facts(tr, 3)
    assert rf.same_selection and rf.share_gap > 0 and rf.entries_read == 20


def test_idle_entries_are_told_apart_from_a_fresh_query(traced):
    """On weights whose Reuse layer and its source give the entries (almost) nothing, a share gap of 0 must not
    read as 'the same query': the facts say the entries are idle."""
    m, tr, tokens = traced
    rf = reuse_facts(tr, 3)
    assert not rf.entries_idle and rf.largest_share >= rf.share_gap > 0
    assert "other shares than layer 2's" in shares_sentence(rf, 2) and "weight" not in shares_sentence(rf, 2)
    c = reuse_comparison(tr, 3, 39, 0, tokens)
    assert not c.entries_idle and "largest difference" in c.sentence(2, 3)
    assert c.sentence(2, 3).startswith("Layers 2 and 3 read the same entries")
    kept = {layer: tr.layers[layer].shares.entries.clone() for layer in (2, 3)}
    try:
        for layer in kept:                     # the source and the Reuse layer put ~all weight elsewhere
            tr.layers[layer].shares.entries.mul_(1e-5)
        rf = reuse_facts(tr, 3)
        assert rf.entries_idle and rf.share_gap < 1e-3
        assert "any weight" in shares_sentence(rf, 2) and "other shares" not in shares_sentence(rf, 2)
        c = reuse_comparison(tr, 3, 39, 0, tokens)
        assert c.entries_idle and "any weight" in c.sentence(2, 3) and "largest difference" not in c.sentence(2, 3)
        assert "not compared" in shares_sentence(replace(rf, same_selection=False), 2)
    finally:                                   # the trace is shared by this module's tests
        for layer, e in kept.items():
            tr.layers[layer].shares.entries.copy_(e)


def test_storage_check_catches_tied_weights():
    m = random_model("micro", seed=4)
    m.layers[3].attn.wq_a.weight = m.layers[2].attn.wq_a.weight   # what depth recurrence would look like
    sc = storage_check(m)
    assert sc.distinct == sc.tensors - 1 and sc.shared_pairs == [("layers.2.attn.wq_a.weight",
                                                                  "layers.3.attn.wq_a.weight")]
    row = next(r for r in param_comparison(m, 3, 2) if r.name == "attn.wq_a.weight")
    assert row.same_storage and row.max_abs_diff == 0


def test_levers_example_matches_the_seed(full):
    rows = levers(full)
    assert "16 become 8" in rows[1]["move"] and "ratio 2" in rows[1]["name in the report"]
    assert rows[2]["move"] == "read only 2 chosen entries of the 8"
    assert steps(full)[1].table == rows


def test_reference_numbers(full):
    ref = {r["item"]: r for r in reference_numbers(full)}
    assert ref["candidate pool (positions, at most)"]["value"] == "16,384"
    assert ref["entries in one final selection (at most)"]["value"] == "512"
    replay = ref["prompt rows replayed through the decoder (bounded prefill)"]
    assert replay["value"] == "128" and replay["from the config"].endswith("layers 20-39")
    one = {r["item"]: r for r in reference_numbers(full, one_based=True)}
    assert one["prompt rows replayed through the decoder (bounded prefill)"]["from the config"].endswith("21-40")
    assert ref["routed experts per token"]["value"] == "6 of 384 + 1 shared"


def test_picked_box_reads_a_plotly_selection(full):
    from ui.figures import diagram_figure, diagram_pick_ids

    d = layout(full)
    ids = diagram_pick_ids(d)
    fig = diagram_figure(d)
    marker = len(fig.data) - 1
    assert list(fig.data[marker].customdata) == ids and marker == len(d.lines)
    k = ids.index("attn:14")
    assert picked_box([{"customdata": "attn:14", "curve_number": marker, "point_index": k}], ids, marker) == "attn:14"
    assert picked_box([{"curve_number": marker, "point_index": k}], ids, marker) == "attn:14"
    assert picked_box([{"curve_number": 0, "point_index": k}], ids, marker) is None      # a click on a line
    assert picked_box([], ids, marker) is None
