"""Teaching fidelity: every corrected claim is checked against numbers computed here independently
(from the config, the engine, or arithmetic in the test), never against the text it replaced."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import random_model


# ---- DSpark: block size, never-checked rows, the greedy correction ------------------------------------------
def _step(**kw):
    from model.inference import StepLog

    base = dict(step=0, anchor=5, anchor_pos=10, drafted=[11, 12, 13], q_draft=[0.6, 0.315, 0.5],
                p_draft=[0.3, 0.073, 0.9], target_top=[11, 12, 40, 41], confidence=[0.9, 0.8, 0.7],
                survival=[0.9, 0.72, 0.504], accepted=0, rules=["reject"], ratios=[0.5], uniforms=[0.7],
                resampled=40, bonus=None, emitted=[40], rows_appended=4, rows_rolled_back=3, cache_length=11)
    base.update(kw)
    return StepLog(**base)


def test_never_checked_rows_get_no_keep_chance_and_a_hypothetical_one_with_the_active_rule():
    from lessons.dspark import step_rows

    rows = step_rows(_step(), greedy=False)           # stochastic, refused at the first guess
    assert rows[0]["keep chance"] == pytest.approx(0.5)
    assert rows[1]["keep chance"] is None and rows[2]["keep chance"] is None
    assert rows[1]["p(guess)"] == 0.073                # the verify pass's real p is kept
    assert rows[1]["hypothetical keep chance (never checked)"] == pytest.approx(0.073 / 0.315)   # 0.23, not 1
    assert rows[2]["hypothetical keep chance (never checked)"] == pytest.approx(1.0)             # p > q
    assert "leftover" in rows[-1]["verdict"]
    g = step_rows(_step(rules=["accept", "reject"], ratios=[], uniforms=[], accepted=1, resampled=30,
                        target_top=[11, 30, 40, 41], emitted=[11, 30]), greedy=True)
    assert [r["keep chance"] for r in g[:2]] == [1.0, 0.0] and g[2]["keep chance"] is None
    assert g[2]["hypothetical keep chance (never checked)"] == 0.0   # 13 is not the target's top (40)
    assert "top token" in g[-1]["verdict"] and "leftover" not in g[-1]["verdict"]


def test_block_is_the_anchor_plus_at_most_four_drafts_everywhere():
    from lessons.dspark import block_sentence
    from lessons.figure3 import box_text, steps
    from lessons.figure3_layout import Box
    from model import V41Config

    cfg = V41Config.preset("v4.1-flash")
    drafts = cfg.dspark_block_size - 1
    text = next(s.body + " " + s.fine_print for s in steps(cfg) if s.key == "drafter")   # all the step shows
    box = box_text(Box("drafter", "drafter", "", 0, 0, 1, 1), cfg)
    for t in (text, box, block_sentence(cfg.dspark_block_size)):
        assert f"up to {drafts} drafted tokens" in t
        assert f"up to {cfg.dspark_block_size} tokens" not in t


def test_dspark_intro_prices_an_accepted_guess():
    from lessons.dspark import INTRO

    assert "for free" not in INTRO
    assert "saves one sequential pass" in INTRO and "drafter work" in INTRO


# ---- Cache calculator: the persistent figure is what the engine saves -----------------------------------------
@pytest.mark.parametrize("mode", ["bounded", "exact"])
def test_persistent_figure_equals_the_engines_saved_prefix_state(mode):
    from lessons.cache_calculator import Knobs, calculate
    from lessons.designs import v41_design
    from model import prefill
    from model.inference import PrefixCache

    m = random_model("tiny")
    cfg = m.cfg
    pc = PrefixCache(m, align=64, min_tokens=64)
    ids = torch.randint(8, cfg.vocab_size, (1, 200), generator=torch.Generator().manual_seed(0))
    prefill(m, ids, mode, prefix_cache=pc, rollback=1)
    (state,) = pc.host.values()
    saved_tokens = int(state["meta"][0])
    # everything the saved state holds except the token history and bookkeeping scalars
    held = sum(v.nbytes for k, v in state.items()
               if k not in ("tokens", "compressed", "meta") and not k.endswith(".length"))
    assert ("carry.streams" in state) == (mode == "bounded")
    k = Knobs(context=saved_tokens, rollback=1, mode=mode, window=cfg.sliding_window, bits=4, layers=16)
    calc = calculate(v41_design(cfg, k, drafter=False, use_knobs=False), k)
    assert calc.persistent.total == held


def test_replay_tab_compares_net_bytes():
    from lessons.bounded_replay import replay_tradeoff, replay_verdict
    from lessons.designs import build, defaults
    from model import V41Config

    cfg = V41Config.preset("v4.1-flash")
    k = defaults("v4.1-flash")
    tr = replay_tradeoff(build("v4.1-flash", k), k, [1] * cfg.num_hidden_layers, 1, 1, 1,
                         input_numbers=cfg.hc_mult * (cfg.hidden_size + 1))
    windows = 20 * 128 * (512 + 512 // 32)             # 20 decoder layers x 128 rows x FP8 row + UE8M0 scales
    replay_input = 128 * 4 * (5120 + 1) * 4            # fp32 streams + pre
    assert (tr.stored_bytes, tr.input_bytes, tr.net_bytes) == (windows, replay_input, replay_input - windows)
    text = replay_verdict(tr)
    assert "does not save storage" in text and f"{windows // 128:,} B per" in text


# ---- bounded replay: approximate, with the reason; the Inspector's agreement is measured -----------------------
def test_bounded_note_gives_the_reason():
    from lessons.layers import bounded_note
    from model import V41Config

    t = bounded_note(V41Config.preset("v4.1-flash"))
    assert "approximation" in t and "cut at the start" in t and "128" in t


def test_inspector_agreement_is_measured_not_typed():
    from lessons.layers import bounded_agreement
    from model import prefill

    m = random_model("micro")
    w = m.cfg.sliding_window
    for n in (w // 2, 3 * w):
        ids = torch.randint(8, m.cfg.vocab_size, (n,), generator=torch.Generator().manual_seed(n)).tolist()
        a = bounded_agreement(m, ids)
        x = torch.tensor([ids])
        diff = float((prefill(m, x, "bounded").logits - prefill(m, x, "exact").logits).abs().max())
        assert a.max_abs_diff == pytest.approx(diff)
        assert ("identical" in a.sentence()) == (diff == 0.0)
        assert "measured" in a.sentence()
    assert a.max_abs_diff > 0     # a prompt past the segment: bounded is not exact


def test_prefill_split_names_only_the_publishing_projection():
    from lessons.workload import V41_SPLIT

    assert "only the projection that publishes" in V41_SPLIT
    assert "passes only the 20-layer encoder and the decoder's first layer" not in V41_SPLIT


# ---- Figure 3's steps -------------------------------------------------------------------------------------------
def _steps(**kw):
    from lessons.figure3 import steps
    from model import V41Config

    return {s.key: s for s in steps(V41Config.preset("v4.1-flash"), **kw)}


def test_engram_lookup_is_cheap_its_projection_is_not_free_and_mhc_coefficients_are_per_token():
    from model import V41Config

    cfg = V41Config.preset("v4.1-flash")
    tables = sum(cfg.engram_num_embeddings) * cfg.engram_head_dim
    st = _steps()
    body = st["engram"].body + " " + st["engram"].fine_print       # the step's text and its fine print
    assert "large in memory" in st["engram"].body and f"{tables / 1e9:,.0f}B parameters" in body
    assert "matrix work" in body and "cheap in arithmetic" not in body.lower()
    st = _steps(engram_params=196_928_504_320, total_params=763_205_315_795)
    assert "197B parameters, out of 763B" in st["engram"].body
    assert "for every token from the streams" in st["mhc"].body and "learned mixing weights" not in st["mhc"].body


def test_engram_projection_work_is_put_in_numbers_when_the_counts_are_given():
    # the release's figures: 157,327,360 projection weights per Engram layer, 16.1B active per decoded token
    body = _steps(engram_params=196_928_504_320, total_params=763_205_315_795, engram_proj=157_327_360,
                  active_decode=16_130_606_192)["engram"].fine_print
    assert "about 157M multiply-adds per token at each Engram layer" in body
    assert "at 2 such layers, about 2% of the weights" in body       # 2 x 157.3M / 16.13B = 1.95%
    body = _steps(engram_params=196_928_504_320, total_params=763_205_315_795, engram_proj=157_327_360,
                  active_decode=3_146_547_200)["engram"].fine_print
    assert "about 10% of the weights" in body                         # the share follows the counts
    assert "multiply-adds" not in _steps()["engram"].fine_print + _steps()["engram"].body   # no counts: no number


def test_fresh_step_shows_the_modes_table_with_the_ten_and_thirty_numbers():
    from lessons.attention_shares import mix

    fresh = _steps()["fresh"]
    assert [r["mode"] for r in fresh.table] == ["Full", "Reuse", "Reindex"]
    assert all("query" in r["also, in every mode"] for r in fresh.table)
    assert "subset" in fresh.table[0]["also, in every mode"]
    a, b = mix((10, 30), (0.8, 0.2)).result, mix((10, 30), (0.1, 0.9)).result
    assert f"give {a:g}" in fresh.body and f"give {b:g}" in fresh.body


ALLOWED_SECTIONS = {"§2.2", "§2.3", "§2.3.1", "§2.3.2", "§2.4.1", "§2.4.2", "§2.4.3", "§3.2.2", "§4.2.1"}


def test_every_step_reads_along_with_only_the_sections_the_sources_name():
    import re

    for s in _steps().values():
        assert s.read_along.startswith("Read along: the DeepSeek-V4.1-Flash technical report")
        assert set(re.findall(r"§[0-9.]*[0-9]", s.read_along)) <= ALLOWED_SECTIONS, s.read_along
    st = _steps()
    assert "§2.4.3" in st["drafter"].read_along and "§3.2.2" in st["line"].read_along
    assert "Figure 4 in §2.3.1" in st["fresh"].read_along and "no section" in st["check"].read_along


def test_repeat_decoder_and_encoder_steps():
    st = _steps()
    shown = {k: s.body + " " + s.fine_print for k, s in st.items()}     # the main text and its fine print
    assert "Compact" in shown["repeat"] and "x3" in shown["repeat"] and "x5" in shown["repeat"]
    assert "Nothing here prepares" not in st["decoder"].body and "Only its first layer (20, Full)" in st["decoder"].body
    assert "FP4" in shown["encoder"] and "K=V" in shown["encoder"] and "256 B of values plus 32 B" in \
        shown["encoder"]      # 512 numbers x 4 bits; 512 / 16 scales x 1 byte


# ---- Indexer pools, Ablation lab --------------------------------------------------------------------------------
def test_pool_statistics_name_whose_pool_they_describe():
    from lessons.indexer_pools import scale_note
    from model import V41Config

    tiny, rel = V41Config.preset("tiny"), V41Config.preset("v4.1-flash")
    t = scale_note(tiny, rel)
    assert f"({tiny.candidate_topk_blocks * tiny.candidate_block_size:,} entries, top-{tiny.index_topk}" in t
    assert "(16,384 entries, top-512)" in t
    assert scale_note(tiny, rel, tiny.candidate_topk_blocks, tiny.index_topk) == t
    moved = scale_note(tiny, rel, 1, 256)                  # the sliders moved: the note says the chosen sizes
    assert f"1 block x {tiny.candidate_block_size} = {tiny.candidate_block_size:,} entries, top-256" in moved
    assert "(16,384 entries, top-512)" in moved and "chosen above" in moved
    clamped = scale_note(tiny, rel, 2, 11, chosen=False)   # a short prompt: the sliders' most, not the reader's pick
    assert "the most this prompt's entries allow" in clamped and "chosen above" not in clamped


def _abl_rows(full_far, win_far, n=30, loss_full=3.0, loss_win=3.0):
    from lessons import ablation as abl

    return abl.ablation_table([
        {"configuration": "full model", "loss": loss_full, "recall_far": full_far, "recall_far_n": n,
         "prefill_s": 1.0, "cache_bytes": 100},
        {"configuration": "window only", "loss": loss_win, "recall_far": win_far, "recall_far_n": n,
         "prefill_s": 0.5, "cache_bytes": 100}])


def test_ablation_reading_names_no_change_within_noise_and_says_when_far_context_is_unused():
    from lessons import ablation as abl

    text = " ".join(abl.reading(_abl_rows(0.30, 0.2667)))       # 9/30 vs 8/30: one story
    assert "Largest" not in text
    assert "gain nothing measurable from the compressed branch, the direct road past the window" in text
    assert "context beyond the window" not in text                 # the window chain still reaches past it
    text = " ".join(abl.reading(_abl_rows(0.9, 0.1, loss_win=3.2)))
    assert "Largest loss increase: window only" in text and "Largest drop in far recall: window only" in text
    assert "do use the compressed branch (the direct road past the window)" in text
    assert abl.recall_noise(0.5, 100, 0.5, 100) == pytest.approx(100 * 2 * (0.5 / 100) ** 0.5)


def test_ablation_memory_note_is_the_calculators_bytes():
    from lessons import ablation as abl
    from lessons.cache_calculator import Knobs, calculate
    from lessons.designs import v41_design
    from lessons.units import human_bytes
    from model import V41Config

    cfg = V41Config.preset("tiny")
    note = abl.memory_note(cfg, 300)
    for mode in ("exact", "bounded"):
        k = Knobs(context=300, mode=mode, window=cfg.sliding_window, bits=4, layers=16)
        c = calculate(v41_design(cfg, k, drafter=False, use_knobs=False), k)
        assert human_bytes(c.hbm.total) in note and human_bytes(c.persistent.total) in note


# ---- Compare designs: V4-Flash -> V4.1 ----------------------------------------------------------------------------
def test_waterfall_runs_from_v4_flash_to_v41_and_pooling_less_costs_bytes():
    from lessons.cache_calculator import calculate
    from lessons.designs import build, defaults, v4_to_v41_waterfall

    fall = v4_to_v41_waterfall()
    v4 = calculate(build("v4-flash"), defaults("v4-flash")).hbm.growth_per_token
    v41 = calculate(build("v4.1-flash"), defaults("v4.1-flash")).hbm.growth_per_token
    assert fall[0].bytes_per_token == pytest.approx(v4) and fall[-1].bytes_per_token == pytest.approx(v41)
    assert fall[0].bytes_per_token == pytest.approx(21 * (584 + 132) / 4 + 20 * 584 / 128)    # 3,850.25
    assert fall[-1].bytes_per_token == pytest.approx(3 * (288 + 68) / 2 + (288 + 68))          # 890
    assert sum(w.change for w in fall[1:]) == pytest.approx(fall[-1].bytes_per_token - fall[0].bytes_per_token)
    by = {w.step: w for w in fall}
    assert by["ratios"].change > 0 and by["stored copies"].change < 0
    assert by["FP4 entries with block scales"].change < 0 and by["smaller index keys"].change < 0


# ---- no internal citation reaches a reader ---------------------------------------------------------------------
INTERNAL = ("brief §", "reference-brief", "ARCHITECTURE", "docs/design", "[3P", "[DOC", "[INF", "[REC")


def test_reader_visible_sources_are_public_with_a_sureness_marker():
    from lessons.designs import DESIGNS, build
    from lessons.sources import SURENESS, footer_lines

    for key in DESIGNS:
        d = build(key)
        for s in d.sources + d.unknowns + [d.summary]:
            assert not any(x in s for x in INTERNAL), (key, s)
    for line in footer_lines():
        assert any(line.endswith(f"({m})") for m in SURENESS.values())


def test_glossary_has_every_term_the_issue_lists():
    from lessons.glossary import terms

    names = " ".join(t.term for t in terms())
    for word in ("CSA2(r", "window", "compressed entry", "K=V", "Full / Reuse / Reindex", "candidate pool", "top-k",
                 "FP4", "E4M3", "UE8M0", "bounded replay", "mHC", "Engram", "DSpark block", "acceptance"):
        assert word in names, word
    pool = next(t for t in terms() if t.term == "candidate pool")
    assert "16,384" in pool.meaning


def test_map_line_is_the_running_models_own():
    from lessons.layers import map_line
    from model import V41Config, layer_map

    cfg = V41Config.preset("tiny")
    line = map_line(cfg)
    for s in layer_map(cfg):
        tag = "window" if s.role == "SWA" else f"{s.role} r{s.compress_ratio}"
        assert f"{s.index} {tag}" in line
    full = next(s for s in layer_map(cfg) if s.stack == "decoder" and s.role == "Full")
    assert f"{full.index + 1} Full r1" in map_line(cfg, one_based=True) and "1-based" in map_line(cfg, True)


# ---- every sentence names the right model, the right cause and the right count ---------------------------------
def _body(cfg, key, **kw):
    from lessons.figure3 import steps

    return next(s.body + " " + s.fine_print for s in steps(cfg, **kw) if s.key == key)   # the text and its fine print


def test_bounded_replay_sentence_names_the_drawn_model_and_its_window():
    from model import V41Config

    release, tiny = V41Config.preset("v4.1-flash"), V41Config.preset("tiny")
    line = _body(release, "line")
    assert f"in the full-size DeepSeek-V4.1-Flash the decoder runs only over the last {release.sliding_window}" in line
    assert "in the running model" not in line
    small = _body(tiny, "line")
    assert f"in the running model the decoder runs only over the last {tiny.sliding_window} prompt rows" in small


def test_the_split_says_what_it_gives_up():
    from lessons.workload import SPLIT_PRICE, V41_SPLIT
    from model import V41Config

    for text in (_body(V41Config.preset("v4.1-flash"), "line"), V41_SPLIT):
        assert SPLIT_PRICE in text
    assert "causal encoder built those rows before any later text" in SPLIT_PRICE and "question" in SPLIT_PRICE


def test_recall_at_chance_at_every_distance_is_not_blamed_on_distance():
    from lessons import far_fact as ff

    flat = {"measured": {"recall_far": 0.12, "recall_inside": 0.05, "recall_just_past": 0.06}}
    note = ff.weights_note("trained", flat)
    assert "at any distance" in note and "far recall has not emerged" not in note
    assert "says nothing about the distance or the design" in note
    near_ok = {"measured": {"recall_far": 0.12, "recall_inside": 0.8, "recall_just_past": 0.6}}
    assert "far recall has not emerged" in ff.weights_note("trained", near_ok)    # then distance is the story
    assert ff.near_recall_of(flat) == [0.05, 0.06]
    offer = ff.set_line(ff.ShippedFacts("text", "Text model", flat, 32))
    assert "has not emerged in it at any distance" in offer and "5%, 6%" in offer
    assert "far recall has not emerged" in ff.set_line(ff.ShippedFacts("text", "Text model", near_ok, 32))


@pytest.mark.parametrize("replay", [64, 128, 512])
def test_replay_input_and_windows_agree_with_the_persistent_figure(replay):
    import dataclasses

    from lessons.bounded_replay import replay_tradeoff
    from lessons.cache_calculator import calculate
    from lessons.designs import build, defaults
    from model import V41Config

    cfg = V41Config.preset("v4.1-flash")
    k = dataclasses.replace(defaults("v4.1-flash"), replay=replay)
    d = build("v4.1-flash", k)
    tr = replay_tradeoff(d, k, [1] * cfg.num_hidden_layers, 1, 1, 1, input_numbers=cfg.hc_mult * (cfg.hidden_size + 1))
    # each of the 20 decoder windows holds its 128 rows whatever the replay length
    assert tr.stored_bytes == 20 * 128 * (512 + 512 // 32)
    assert tr.input_bytes == replay * cfg.hc_mult * (cfg.hidden_size + 1) * 4
    kept = sum(r.bytes for r in calculate(d, k).persistent.rows if r.kind == "replay_input")
    assert kept == tr.input_bytes                       # the persistent figure counts the input the tab shows


def test_glossary_defines_the_names_the_memory_pages_use():
    from lessons.glossary import find_terms, terms

    found = terms()
    names = " | ".join(t.term for t in found)
    for word in ("MLA", "DSA", "GQA", "CSA, HCA", "MTP", "latent", "nats", "rollback slack", "KV cache",
                 "recall checkpoint"):
        assert word in names, word
    csa = next(t for t in found if t.term.startswith("CSA, HCA"))
    assert "CSA2" in csa.meaning and "4" in csa.meaning and "128" in csa.meaning     # V4 vs V4.1
    assert find_terms("latent", found) and "DeepSeek-V2" in next(t for t in found if t.term == "MLA").meaning
    # multi-token prediction came before V3: V3 took it up in a sequential form, it did not introduce it
    mtp = next(t for t in found if t.term == "MTP").meaning
    assert "introduced" not in mtp and "Gloeckle et al., 2024" in mtp and "sequential" in mtp


def test_one_name_for_a_stored_entry_and_the_lineage_says_what_v2_brought():
    from lessons.cache_calculator import KIND_LABELS
    from lessons.designs import LINEAGE
    from lessons.layers import SEPARATE_DECISIONS, computed_rows

    assert "compressed entries" in KIND_LABELS["latents"]
    assert "**compressed entries** column" in SEPARATE_DECISIONS and "**latents** column" not in SEPARATE_DECISIONS
    assert "DeepSeek-V2, which replaced" in LINEAGE and "(MLA)" in LINEAGE
    assert computed_rows([]) == []


def test_mhc_sites_are_explained_one_way_as_the_engine_runs_them():
    from lessons.figure3 import MHC_SITE, box_text, steps
    from lessons.figure3_layout import Box
    from model import V41Config

    cfg = V41Config.preset("v4.1-flash")
    step = next(s.body + " " + s.fine_print for s in steps(cfg) if s.key == "mhc")   # the text and its fine print
    box = box_text(Box("mhc:encoder", "mhc", "", 0, 0, 1, 1), cfg)
    for text in (step, box):
        assert MHC_SITE in text and "serving that site and the next" not in text
    assert "`pre` weights that collapse the streams into the next site's input" in MHC_SITE


def test_ablation_lab_calls_bounded_prefill_the_release_way_and_streams_still_exchange():
    from lessons.ablation import CONFIGS

    assert "The release's way of reading a prompt" in CONFIGS["bounded prefill"][2]
    mix = CONFIGS["mHC comb off"][2]
    assert "keeps to itself" not in mix and "reads a mix of all of them and writes its output into each" in mix
    # the configuration's name says what is switched off, not that the streams never mix: they still do
    assert not any("never mix" in name for name in CONFIGS)


def test_total_parameters_are_marked_as_counted_from_the_config():
    from model import V41Config

    text = _body(V41Config.preset("v4.1-flash"), "engram", engram_params=197_000_000_000,
                 total_params=763_000_000_000)
    assert "763B parameters in all (counted from the config; the release quotes the 552B backbone)" in text


def test_calculator_inputs_are_explained_not_restated():
    from lessons.cache_calculator import KNOB_HELP

    assert "speculative decoding" in KNOB_HELP["rollback"] and "rollback" not in KNOB_HELP["rollback"]
    assert "exact:" in KNOB_HELP["mode"] and "bounded:" in KNOB_HELP["mode"]
    assert KNOB_HELP["replay"] != "rows recomputed by bounded replay" and "windows" in KNOB_HELP["replay"]
    from lessons.cache_calculator import LIMITS
    from lessons.design_inputs import KNOB_WHY, knob_tooltip

    # every tooltip of a number says what the input is and why it moves the bytes, then its range
    for name in LIMITS:
        tip = knob_tooltip(name)
        assert tip.endswith(f"from {LIMITS[name][0]:,} to {LIMITS[name][1]:,}, typed as digits."), tip
        assert name in ("replay", "rollback") or "Why it matters" in tip, tip
    assert "divide by r" in KNOB_WHY["ratio"] and "divide" in KNOB_WHY["group"]
    assert knob_tooltip("layers") != "Layers." and "copy" in knob_tooltip("layers")


def test_reader_text_names_no_files_and_no_jargon_for_the_checkpoints():
    from lessons import far_fact as ff

    recall = {"measured": {"recall_far": 0.9}, "train_config": {"drill_frac": 0.5, "copy_frac": 0.25}}
    offer = " ".join(ff.checkpoints_offer("text", [
        ff.ShippedFacts("text", "Text model", {"measured": {"recall_far": 0.12}}, 32),
        ff.ShippedFacts("recall", "Recall checkpoint", recall, 2)]))
    for said in (offer, ff.FAR_RULE, ff.NO_RECORD):
        assert not any(x in said for x in ("weights/", ".jsonl", "training.json", "key-value rows")), said
    assert "25% ordinary text in its last phase" in offer         # one minus the drills' and copies' shares


def test_lookback_verdict_states_its_rule():
    from lessons.lookback_heads import LOOKS, LOOKS_RULE

    assert f"at least {LOOKS:g} times what an even spread would give" in LOOKS_RULE


def test_release_and_tiny_sizes_side_by_side():
    from lessons.home import scale_rows
    from lessons.sources import SOURCES_NOTE
    from model import V41Config

    rel, tiny = V41Config.preset("v4.1-flash"), V41Config.preset("tiny")
    rows = {r[""]: (r["released V4.1-Flash"], r["tiny model here"]) for r in scale_rows(rel, tiny)}
    assert rows["window (rows)"] == (str(rel.sliding_window), str(tiny.sliding_window))
    assert rows["entries a query selects (top-k)"] == (str(rel.index_topk), str(tiny.index_topk))
    assert rows["candidate pool (positions)"][0] == f"{rel.candidate_topk_blocks * rel.candidate_block_size:,}"
    assert rows["routed experts (chosen of)"][1] == f"{tiny.num_experts_per_tok} of {tiny.n_routed_experts}"
    assert rows["layers (encoder + decoder)"][0].startswith(f"{rel.num_hidden_layers} (")
    assert "layer kinds at small widths" not in SOURCES_NOTE and "not its sizes" in SOURCES_NOTE


def test_prefill_prose_counts_index_keys_for_selecting_layers_and_attention_in_the_active_count():
    from lessons.workload import RELEASE_ACTIVE, V41_SPLIT

    assert "index keys every decoder layer reads" not in V41_SPLIT and "index keys its selecting layers" in V41_SPLIT
    assert "(in each, attention, indexer" in RELEASE_ACTIVE and "(the shared expert plus" not in RELEASE_ACTIVE


def test_an_out_of_range_number_is_refused_with_a_message():
    from lessons.cache_calculator import LIMITS
    from lessons.design_inputs import range_note

    lo, hi = LIMITS["context"]
    note = range_note("context", "Context length", hi + 1, 131_072)
    assert note and f"{hi + 1:,}" in note and "not applied" in note and "131,072" in note and f"{hi:,}" in note
    assert range_note("rollback", "Rollback slack", -1, 1)
    assert range_note("context", "Context length", hi, 131_072) is None


def test_one_based_numbering_names_its_explainer():
    from lessons.sources import EXPLAINER_1, ONE_BASED

    assert EXPLAINER_1 in ONE_BASED


def test_dspark_target_passes_and_checking_passes_count_the_same_thing():
    from lessons.dspark import passes_help, summary_rows
    from model.arch import attach_drafter
    from model.inference import Sampler, speculative_generate

    m = random_model("micro", seed=3)
    ids = torch.randint(5, 250, (1, 12), generator=torch.Generator().manual_seed(1))
    res = speculative_generate(m, attach_drafter(m, seed=5), ids, 6, sampler=Sampler(), stop_at_eos=False)
    checking = next(r for r in summary_rows(res.stats) if r.label == "checking passes")
    assert res.target_passes == 1 + checking.value                    # the prefill pass made the first token
    assert "add 1" in checking.formula and "prefill" in checking.formula
    said = passes_help(res.target_passes, checking.value)
    assert said.startswith(f"{res.target_passes} = 1 pass over the prompt") and f"+ {checking.value} checking" in said


def test_generated_text_stays_on_one_line():
    from lessons.inspector import one_line

    assert one_line(" the\n[") == " the\u21b5["                    # no stray '[' line under the text
    assert "\n" not in one_line("a\nb\r\n") and one_line("a\tb") == "a\u2192b" and one_line("\x01") == "\\x01"


def test_the_calculator_says_where_its_parameter_total_comes_from_beside_the_number():
    """The 763B total is our count from the config (the release quotes the backbone only): the metric's own label
    and the sentence under it say so, not only a hover; 4 bits per parameter is half a byte each."""
    from lessons.cache_calculator import WEIGHTS_LABEL, weights_left_out

    assert "counted from the config" in WEIGHTS_LABEL
    counts = {"total": 763_205_315_795, "backbone": 551_566_180_464, "engram": 196_928_504_320,
              "drafter": 14_225_362_531, "vision": 485_268_480}
    line = weights_left_out(counts, 2**30)
    assert line.startswith("Our count from the config, not a figure the release quotes: 763,205,315,795 parameters")
    assert "552B backbone, the one part the release quotes" in line and "197B Engram tables" in line
    assert "355.40 GiB" in line and "1.00 GiB" in line          # 763,205,315,795 / 2 B = 355.40 GiB


def test_the_time_page_s_bounds_and_peaks_are_in_the_glossary_and_its_sources_in_the_list():
    """Memory-/compute-bound and dense vs 'with sparsity' peaks are defined where a reader looks words up; the
    roofline model and the GPU datasheets are in the sources list (the chips table's own rows are not enough)."""
    from lessons.glossary import terms
    from lessons.sources import footer_lines

    names = " | ".join(t.term for t in terms())
    for word in ("memory-bound", "compute-bound", "with-sparsity", "arithmetic intensity", "ridge", "roofline",
                 "MXFP4"):
        assert word in names, word
    said = " ".join(footer_lines())
    assert "Williams, Waterman and Patterson 2009" in said and "Roofline" in said
    assert "H100" in said and "H200" in said and "B200" in said and "datasheets" in said
