"""The home page's "what is new" points are counted from the config: change the config and the numbers and the
sentences change with it; the far-fact headline reads the decoder layers."""

from __future__ import annotations

from lessons.whats_new import cache_per_token, points
from model import V41Config


def release() -> V41Config:
    return V41Config.preset("v4.1-flash")


def by_key(cfg: V41Config) -> dict:
    return {p.key: p for p in points(cfg)}


def test_the_release_points_say_the_release_numbers():
    p = by_key(release())
    assert p["split"].numbers == {"layers": 40, "encoder": 20, "decoder": 20, "decoder_start": 20}
    assert (p["modes"].numbers["full"], p["modes"].numbers["reuse"], p["modes"].numbers["reindex"],
            p["modes"].numbers["window_only"]) == (4, 30, 4, 2)
    assert p["search"].numbers["pool"] == 2048 * 8 and p["search"].numbers["topk"] == 512
    assert round(p["cache"].numbers["bytes_per_token"]) == 890            # 356 B x (3 x 1/2 + 1)
    assert round(p["cache"].numbers["v4_flash_bytes_per_token"]) == 3850
    assert "4.3x less" in p["cache"].text and "16,384" in p["search"].text and "37, 38 and 39" in p["dspark"].text


def test_the_cache_comparison_names_its_number_formats_and_how_much_of_it_they_are():
    """890 B against 3,850 B compares FP4 with FP8 + BF16: V4.1's layout in V4-Flash's 584 B entries and 132 B
    keys grows 3 x 716 / 2 + 716 = 1,790 B per token, so 3,850 / 1,790 = 2.2x is the layout and 1,790 / 890 =
    2.0x the format. Both lines say the formats, the full text the split; the first screen's line the split too."""
    p = by_key(release())["cache"]
    assert "FP4" in p.short and "FP8 + BF16" in p.short
    assert "4.3x, 2.0x of it format" in p.short
    assert "1,790 B" in p.text and "2.2x is the layout" in p.text and "2.0x the number format" in p.text
    assert "FP8 + BF16" in p.text and "the release does not quote them" in p.text
    assert abs(p.numbers["layout_factor"] - 3850.25 / 1790) < 1e-9
    assert abs(p.numbers["format_factor"] - 1790 / 890) < 1e-9
    from lessons.tour import stops

    cache_stop = next(s for s in stops() if s.key == "cache").text
    assert "890 B (FP4)" in cache_stop and "3,850 B (FP8 + BF16)" in cache_stop and "2.0x" in cache_stop


def test_changing_the_config_changes_the_points():
    before = by_key(release())
    cfg = release().replace(index_topk=256, candidate_topk_blocks=1024, sliding_window=64,
                            dspark_block_size=7).validate()
    after = by_key(cfg)
    assert after["search"].numbers["topk"] == 256 and after["search"].numbers["pool"] == 1024 * 8
    assert "8,192" in after["search"].text and "256 entries" in after["search"].text
    assert after["modes"].numbers["window"] == 64 and "64-token window" in after["modes"].text
    assert after["dspark"].numbers["block"] == 7 and "up to 6 drafted" in after["dspark"].text
    for k in ("search", "modes", "dspark"):
        assert after[k].text != before[k].text, k


def test_a_different_layer_map_changes_the_split_modes_and_cache():
    tiny = V41Config.preset("micro")                    # 8 layers: 2 Full, 1 Reindex, a decoder from layer 4
    p = by_key(tiny)
    assert p["split"].numbers["encoder"] == tiny.decoder_start == 4 and p["split"].numbers["decoder"] == 4
    assert p["modes"].numbers["full"] == 2 and p["modes"].numbers["reindex"] == 1
    # the cache per token follows the entries the config stores: latents + index keys of each Full layer, per ratio
    assert p["cache"].numbers["bytes_per_token"] == cache_per_token(tiny) != by_key(release())["cache"].numbers[
        "bytes_per_token"]
    assert p["cache"].numbers["stored_copies"] == 2


def test_ratio_one_is_named_no_packing_not_packing_one_token():
    """Seed 000: a compress ratio of 1 means packing is absent. The decoder's entries are one per token."""
    modes = by_key(release())["modes"].text
    assert "1 token" not in modes and "packing 1" not in modes
    assert "2 tokens per entry in the encoder" in modes and "one entry per token (ratio 1: no packing)" in modes


def test_the_dspark_point_states_the_acceptance_rule_for_sampling_and_the_main_model_s_own_token():
    """Greedy only ("the first it would not have written itself") was half the rule; each pass also writes one
    token of the main model's own."""
    p = by_key(release())["dspark"]
    assert "would not have written itself" not in p.text
    assert "greedy decoding" in p.text and "min(1, p/q)" in p.text and "under sampling" in p.text
    assert "one token of the main model's own" in p.text


def test_the_points_name_what_the_release_has_beyond_attention_and_the_cache():
    """Seed 003 lists a vision encoder and projector, Engram and revised stream mixing beside DSpark, as separate
    components not to be credited to cache sharing: counted from the config (32-layer tower, Engram at 1 and 14,
    4 streams), and gone from a config without them."""
    p = by_key(release())["beyond"]
    assert p.title == "Besides"
    for part in ("vision encoder", "Engram", "mHC"):
        assert part in p.short and part in p.text, part
    assert "32 layers" in p.text and "layers 1 and 14" in p.text and "4 residual streams" in p.text
    assert "not to be credited to it" in p.text
    bare = release().replace(vision_config=None, engram_layer_ids=[], engram_num_embeddings=[]).validate()
    q = by_key(bare)["beyond"]
    assert "vision" not in q.text and "Engram" not in q.text and "mHC" in q.text
