"""Vision tower, aligner, image tokens in the sequence, upload checks, scenes, lessons and the panel
(model/arch/vision.py, model/inference/images.py, model/inference/vision_inputs.py, model/scenes.py,
lessons/vision.py, ui/vision_panel.py)."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

import pytest
import torch
from PIL import Image

from model import ImageError, V41Config, load
from model.arch import (
    MARKERS,
    Aligner,
    VisionModel,
    attach_vision,
    encode_image,
    has_vision,
    image_span_embeds,
    pixel_unshuffle,
    rope_2d,
    vision_param_count,
    vision_state_dict,
)
from model.config import VisionConfig
from model.inference import (
    build_inputs,
    load_image,
    marker_ids,
    plan_grid,
    resize_to_grid,
    span_ids,
    to_pixels,
    trace_with_image,
)
from model.scenes import draw_scene, make_scene, sample_scenes
from model.shipped import shipped_weights
from tests.conftest import random_model, random_tiny

FLASH_VC = VisionConfig()  # the release's vision_config: patch 14, ratio 3, 1024 tokens, min_pixels 544^2


def png_bytes(im: Image.Image, fmt: str = "PNG") -> bytes:
    buf = io.BytesIO()
    im.save(buf, format=fmt)
    return buf.getvalue()


def png_header(width: int, height: int) -> bytes:
    """A PNG whose header declares width x height RGB pixels, with no image data."""
    import struct
    import zlib

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IEND", b""))


@pytest.fixture(scope="module")
def micro_v():
    m = random_model("micro")
    return attach_vision(m, seed=0).eval()


@pytest.fixture(scope="module")
def tiny_v():
    return attach_vision(random_tiny(), seed=0).eval()


def micro_inputs(m, text_before: list[int], text_after: list[int], image: Image.Image):
    """Ids, mask and embeddings built by hand for the micro preset (it has no tokenizer)."""
    grid = plan_grid(m.cfg.vision_config, *image.size)
    emb = image_span_embeds(m, encode_image(m, to_pixels(image, grid)[None]))
    span = span_ids(m, grid)
    ids = torch.tensor([text_before + span + text_after])
    mask = torch.zeros_like(ids, dtype=torch.bool)
    mask[0, len(text_before):len(text_before) + len(span)] = True
    return ids, mask, emb


# ------------------------------------------------------------------------------------------------
# Names and counts
# ------------------------------------------------------------------------------------------------

def test_state_dict_names_and_counts(micro_v):
    base = set(random_model("micro").state_dict())
    new = set(micro_v.state_dict()) - base
    assert new == set(vision_state_dict(micro_v))
    assert {k for k in new if "." not in k} == set(MARKERS)
    assert all(k.startswith(("vision.", "aligner.")) for k in new - set(MARKERS))
    assert any(k.startswith("vision.blocks.1.attn.qkv") for k in new) and "aligner.fc2.weight" in new
    n = sum(micro_v.state_dict()[k].numel() for k in new)
    assert n == vision_param_count(micro_v.cfg)
    from model.accounting import _vision_shapes, count_params

    pc = count_params(micro_v.cfg)
    assert pc.vision_from == "modules" and pc.vision == n == _vision_shapes(micro_v.cfg)


def test_flash_vision_size_on_meta():
    cfg = V41Config.preset("v4.1-flash")
    with torch.device("meta"):
        n = sum(p.numel() for p in VisionModel(cfg).parameters()) + sum(p.numel() for p in Aligner(cfg).parameters())
    n += 3 * cfg.hidden_size
    assert n == vision_param_count(cfg)
    assert 0.4e9 < n < 0.5e9  # DeepSeek-ViT (1024 wide, 32 layers) + projector: ~0.4-0.5B


# ------------------------------------------------------------------------------------------------
# Shapes and the pieces of the tower
# ------------------------------------------------------------------------------------------------

def test_tower_and_aligner_shapes(micro_v):
    vc = micro_v.cfg.vision_config  # image 32, patch 4, ratio 2
    px = torch.randn(3, 3, 32, 32)
    out = micro_v.vision(px, want_attn=True)
    assert out.features.shape == (3, 8, 8, vc.hidden_size)
    assert len(out.attn) == vc.num_hidden_layers and out.attn[0].shape == (3, vc.num_attention_heads, 64, 64)
    tok = encode_image(micro_v, px)
    assert tok.shape == (3, 4, 4, micro_v.cfg.hidden_size)
    span = image_span_embeds(micro_v, tok)
    assert span.shape == (3, 4 * 5 + 2, micro_v.cfg.hidden_size)
    assert torch.equal(span[0, 0], micro_v.image_start) and torch.equal(span[0, -1], micro_v.image_end)
    assert torch.equal(span[1, 5], micro_v.image_newline) and torch.equal(span[1, 6], tok[1, 1, 0])
    with pytest.raises(ImageError, match="patch_size"):
        micro_v.vision(torch.randn(1, 3, 30, 32))


def test_pixel_unshuffle_order():
    f = torch.arange(4 * 4, dtype=torch.float32).view(1, 4, 4, 1)  # patch (r, c) holds 4r + c
    u = pixel_unshuffle(f, 2)
    assert u.shape == (1, 2, 2, 4)
    assert u[0, 0, 0].tolist() == [0, 1, 4, 5] and u[0, 1, 1].tolist() == [10, 11, 14, 15]


def test_rope_2d_is_relative():
    """Scores depend on the offset between two patches, not on where the pair sits."""
    from model.arch.vision import _rotate

    cos, sin = rope_2d(6, 6, 16, 100.0)
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(16, generator=g), torch.randn(16, generator=g)

    def score(a, b):
        return float((_rotate(q, cos[a], sin[a]) * _rotate(k, cos[b], sin[b])).sum())

    def at(r, c):
        return r * 6 + c

    assert score(at(1, 2), at(3, 1)) == pytest.approx(score(at(2, 4), at(4, 3)), abs=1e-5)
    assert score(at(1, 2), at(3, 1)) != pytest.approx(score(at(1, 2), at(1, 3)), abs=1e-3)


# ------------------------------------------------------------------------------------------------
# Token counts and the resize policy
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("size, tokens, span", [
    ((1344, 1344), 32 * 32, 32 * 33 + 2),   # exactly the budget: 1024 squares of 42 px
    ((672, 672), 16 * 16, 16 * 17 + 2),      # inside the budget and above min_pixels: kept as is
    ((100, 100), 13 * 13, 13 * 14 + 2),      # scaled up to min_pixels = 544^2, 544/42 -> 13
    ((3000, 200), 5 * 71, 5 * 72 + 2),       # 600k pixels: kept, 200/42 -> 5 rows, 3000/42 -> 71 columns
    ((8000, 6000), 27 * 37, 27 * 38 + 2),    # scaled down into the budget
])
def test_token_counts_dynamic(size, tokens, span):
    g = plan_grid(FLASH_VC, *size)
    assert (g.n_image_tokens, g.n_span_tokens) == (tokens, span)
    assert g.width % 42 == 0 and g.height % 42 == 0 and g.n_image_tokens <= FLASH_VC.max_image_tokens
    assert g.n_patches == g.n_image_tokens * 9


def test_aspect_limit_and_fixed_size():
    vc = VisionConfig(max_wh_ratio=4)
    g = plan_grid(vc, 3000, 200)  # padded to 3000 x 750, then scaled into the budget
    assert g.width / g.height == pytest.approx(4, rel=0.05) and g.n_image_tokens == 1024
    x0, y0, x1, y1 = g.content
    assert x0 == 0 and y0 > 0 and (x1 - x0) / (y1 - y0) == pytest.approx(15, rel=0.05)
    tiny = V41Config.preset("tiny").vision_config
    for w, h in ((64, 64), (640, 480), (10, 300)):
        g = plan_grid(tiny, w, h)
        assert (g.width, g.height, g.n_image_tokens, g.n_span_tokens) == (64, 64, 16, 22)


def test_build_inputs_layout(tiny_v):
    im = draw_scene(make_scene(7), 200)
    ids, mask, emb = build_inputs(tiny_v, "Where is the key?", im)
    ids = ids[0].tolist()
    assert ids[0] == tiny_v.cfg.eos_token_id  # a document starts after <|eos|>, as in training
    assert ids[1:23] == [5] + ([4, 4, 4, 4, 7] * 4) + [6]
    assert mask[0].nonzero().flatten().tolist() == list(range(1, 23))
    assert emb.shape == (1, 22, tiny_v.cfg.hidden_size)
    assert tiny_v.decode(ids[23:]) == "Where is the key?"
    ids2, mask2, _ = build_inputs(tiny_v, "A picture: <image> Where is it?", im)
    start = ids2[0].tolist().index(5)
    assert tiny_v.decode(ids2[0, 1:start].tolist()) == "A picture: " and int(mask2.sum()) == 22
    no_img = build_inputs(tiny_v, "Where is the key?", None)
    assert not no_img.image_mask.any() and no_img.input_ids.shape[1] == len(ids) - 22
    from model import InputError

    with pytest.raises(InputError, match="one image"):
        build_inputs(tiny_v, "<image> and <image>", im)


# ------------------------------------------------------------------------------------------------
# Image tokens inside the language model: scatter, bias_vl routing, Engram
# ------------------------------------------------------------------------------------------------

def test_image_embeddings_reach_later_text_only(micro_v):
    a, b = draw_scene(make_scene(1), 32), draw_scene(make_scene(2), 32)
    before, after = [10, 11, 12], [13, 14, 15, 16]
    ids, mask, ea = micro_inputs(micro_v, before, after, a)
    _, _, eb = micro_inputs(micro_v, before, after, b)
    with torch.no_grad():
        la = micro_v(ids, image_embeds=ea, image_mask=mask).logits
        lb = micro_v(ids, image_embeds=eb, image_mask=mask).logits
    n = len(before)
    assert torch.allclose(la[0, :n], lb[0, :n], atol=1e-5)       # causal: text before the picture is unchanged
    assert not torch.allclose(la[0, -1], lb[0, -1], atol=1e-4)   # the picture changes what follows


def test_bias_vl_steers_image_tokens_only(micro_v):
    im = draw_scene(make_scene(3), 32)
    ids, mask, emb = micro_inputs(micro_v, [10, 11, 12, 13], [14, 15], im)
    layer = 3
    gate = micro_v.layers[layer].ffn.gate

    def routes():
        with torch.no_grad():
            out = micro_v(ids, image_embeds=emb, image_mask=mask, collect_routing=True)
        return dict(out.routings)[layer]

    base = routes()
    target = int(torch.bincount(base.flatten(), minlength=gate.bias_vl.numel()).argmin())  # the least used expert
    saved_vl, saved = gate.bias_vl.detach().clone(), gate.bias.detach().clone()
    try:
        with torch.no_grad():
            gate.bias_vl[target] += 100.0
        steered = routes()
        img = mask[0]
        assert all(target in row for row in steered[img].tolist())       # every image-span token picks it
        assert torch.equal(steered[:4], base[:4])                         # text before the span: unchanged
        assert not torch.equal(steered[img], base[img])
        with torch.no_grad():  # the text bias does not reach image tokens
            gate.bias_vl.copy_(saved_vl)
            gate.bias[target] += 100.0
        moved = routes()
        assert all(target in row for row in moved[:4].tolist())
        assert torch.equal(moved[img], base[img])
    finally:
        with torch.no_grad():
            gate.bias_vl.copy_(saved_vl)
            gate.bias.copy_(saved)


def test_engram_does_not_hash_across_image_spans(tiny_v):
    m = tiny_v
    im = draw_scene(make_scene(4), 64)
    text = "Where is the key? The key is in the"
    ids, mask, emb = build_inputs(m, text, im, prefix_ids=[])
    alone = torch.tensor([m.encode(text)])
    n_span = int(mask.sum())
    tr = trace_with_image(m, (ids, mask, emb))
    tr_alone = trace_with_image(m, (alone, torch.zeros_like(alone, dtype=torch.bool), emb[:, :0]))
    lid = m.cfg.engram_layer_ids[0]
    h_img, h_alone = tr.layers[lid].engram_hash[0], tr_alone.layers[lid].engram_hash[0]
    # every text position after the picture hashes exactly as if the text started there
    assert torch.equal(h_img[n_span:], h_alone)
    assert (tr.layers[lid].engram_gate[0, :n_span] == 0).all()
    assert (tr.layers[lid].engram_gate[0, n_span:] != 0).any()
    # without the mask, the first text n-grams would reach back into the span's ids
    comp = m.hasher.compress(ids.to(m.device))
    assert not torch.equal(m.hasher(comp)[0, n_span:, 0], h_alone)
    # ids inside the span do not matter
    ids2 = ids.clone()
    ids2[mask] = 99
    h2 = m.hasher(m.hasher.compress(ids2, ~mask))[0, :, 0]
    assert torch.equal(h2[n_span:], h_alone)


# ------------------------------------------------------------------------------------------------
# Uploads
# ------------------------------------------------------------------------------------------------

def test_upload_accepts_png_and_jpeg_by_content():
    im = Image.new("RGBA", (20, 10), (255, 0, 0, 0))  # fully transparent red -> white
    out = load_image(png_bytes(im))
    assert out.mode == "RGB" and out.size == (20, 10) and out.getpixel((3, 3)) == (255, 255, 255)
    jpg = png_bytes(Image.new("RGB", (16, 16), (0, 0, 200)), "JPEG")
    assert load_image(jpg).size == (16, 16)
    grey = png_bytes(Image.new("L", (8, 8), 100))
    assert load_image(grey).getpixel((0, 0)) == (100, 100, 100)


@pytest.mark.parametrize("data, kw, message", [
    (b"", {}, "empty"),
    (b"hello, this is text and not a picture", {}, "not a PNG or JPEG"),
    (b"GIF89a" + b"\0" * 40, {}, "GIF image; only PNG and JPEG"),
    (b"%PDF-1.4 ....", {}, "PDF document"),
    (b"RIFF\0\0\0\0WEBPVP8 ", {}, "WebP"),
])
def test_upload_rejects_other_types(data, kw, message):
    with pytest.raises(ImageError, match=message):
        load_image(data, **kw)


def test_upload_rejects_corrupt_large_and_odd_images():
    good = png_bytes(draw_scene(make_scene(0), 128))
    with pytest.raises(ImageError, match="corrupt or truncated"):
        load_image(good[: len(good) // 2])
    with pytest.raises(ImageError, match="corrupt"):
        load_image(b"\x89PNG\r\n\x1a\n" + b"\x00" * 50)
    with pytest.raises(ImageError, match="the limit is"):
        load_image(good, max_bytes=1000)
    with pytest.raises(ImageError, match="million pixels"):
        load_image(good, max_pixels=10_000)
    for side in (6000, 20000):  # a header-only PNG declaring 36 / 400 million pixels: refused before decoding
        with pytest.raises(ImageError, match="million pixels"):
            load_image(png_header(side, side))
    with pytest.raises(ImageError, match="at least"):
        load_image(png_bytes(Image.new("RGB", (2, 50))))
    deep = png_bytes(Image.new("I;16", (8, 8)))
    with pytest.raises(ImageError, match="mode"):
        load_image(deep)
    jpeg_named_png = png_bytes(Image.new("RGB", (8, 8)), "JPEG")  # the name never matters, only the bytes
    assert load_image(jpeg_named_png).size == (8, 8)


# ------------------------------------------------------------------------------------------------
# Scenes
# ------------------------------------------------------------------------------------------------

def test_scenes_are_deterministic_and_consistent():
    a, b = make_scene(123), make_scene(123)
    assert a == b and png_bytes(draw_scene(a)) == png_bytes(draw_scene(b))
    for seed in range(50):
        sc = make_scene(seed)
        colours = [bx.colour for bx in sc.boxes]
        assert len(set(colours)) == len(colours) and 2 <= len(colours) <= 4
        assert sc.placed == {bx.content: bx.colour for bx in sc.boxes if bx.content}
        for q, a_, c in sc.questions():
            obj = q.split()[-1].rstrip("?")
            assert a_ == f"The {obj} is in the {c} box." and sc.placed[obj] == c
    # each box is drawn in its colour just inside its outline
    sc = make_scene(5)
    im = draw_scene(sc, 256)
    from model.scenes import PALETTE

    for bx in sc.boxes:
        x0, y0, x1, y1 = (v * 256 for v in bx.xyxy)
        assert im.getpixel((int(x0 + 8), int(y0 + 8))) == PALETTE[bx.colour]


# ------------------------------------------------------------------------------------------------
# Saving and loading
# ------------------------------------------------------------------------------------------------

def test_write_tensors_round_trip(tmp_path, micro_v):
    from lab.training import write_json_entry
    from lab.training.vision_tower import write_tensors
    from model.checkpoint import save_checkpoint

    text_only = random_model("micro", seed=3)
    save_checkpoint(text_only, tmp_path)
    assert not has_vision(load(tmp_path, device="cpu"))
    write_json_entry(tmp_path / "training.json", "text", {"steps": 1})
    m = random_model("micro", seed=3)
    attach_vision(m, seed=5)
    with torch.no_grad():
        m.layers[2].ffn.gate.bias_vl.fill_(0.25)
    names = write_tensors(tmp_path, m, {"vision_trained_by": "test"})
    assert "image_newline" in names and "layers.2.ffn.gate.bias_vl" in names
    write_json_entry(tmp_path / "training.json", "vision", {"ok": True})
    back = load(tmp_path, device="cpu")
    assert has_vision(back)
    sd, want = back.state_dict(), m.state_dict()
    assert set(sd) == set(want)
    assert all(torch.equal(sd[k], want[k]) for k in sd)
    assert json.loads((tmp_path / "training.json").read_text()) == {"text": {"steps": 1}, "vision": {"ok": True}}
    assert not list(tmp_path.glob("*.tmp"))


# ------------------------------------------------------------------------------------------------
# Lessons (golden numbers by hand)
# ------------------------------------------------------------------------------------------------

def test_lesson_patch_grid_rows():
    from lessons.vision import patch_grid, token_counts

    pg = patch_grid(FLASH_VC, 672, 672)
    assert [r.value for r in pg.rows] == [672 * 672, 672 * 672, 48 * 48, 256, 16, 2, 274]
    assert len(pg.patch_boxes) == 2304 and len(pg.token_boxes) == 256 and pg.token_boxes[17] == (42, 42, 84, 84)
    table = token_counts(V41Config.preset("tiny").vision_config, [(64, 64), (300, 200)])
    assert [t["image tokens"] for t in table] == [16, 16] and table[1]["positions"] == 22


def test_lesson_image_positions(tiny_v):
    from lessons.vision import image_positions

    ids, mask, _ = build_inputs(tiny_v, "Hi", Image.new("RGB", (64, 64)))
    pos = image_positions(ids, mask, marker_ids(tiny_v))
    kinds = [p.kind for p in pos]
    assert kinds[0] == "text" and kinds[1] == "image_start" and kinds[22] == "image_end" and kinds[-1] == "text"
    assert kinds.count("image") == 16 and kinds.count("image_newline") == 4
    assert [(p.row, p.col) for p in pos if p.kind == "image"][5] == (1, 1)


def _fake_trace(window, entries, entry_ids, positions, ratio, experts, n_experts):
    from model.inference import Shares

    sh = Shares(window=torch.tensor(window), entries=torch.tensor(entries), entry_ids=torch.tensor(entry_ids),
                sink=torch.zeros(1, len(positions), 1), ratio=ratio)
    spec = SimpleNamespace(index=2, role="Full")
    rec = SimpleNamespace(spec=spec, shares=sh, positions=torch.tensor(positions),
                          router_experts=torch.tensor(experts), router_scores=torch.zeros(1, len(experts[0]),
                                                                                          n_experts))
    return SimpleNamespace(layers=[rec])


def test_lesson_attention_onto_image_by_hand():
    from lessons.vision import attention_to_image

    # positions 0..6, image span 1..3; one head; window W=4: row at 6 sees positions 3,4,5,6
    mask = torch.tensor([0, 1, 1, 1, 0, 0, 0], dtype=torch.bool)
    tr = _fake_trace(window=[[[[0.1, 0.2, 0.3, 0.2]]]], entries=[[[[0.1, 0.05]]]], entry_ids=[[[0, 1]]],
                     positions=[6], ratio=2, experts=[[[0]]], n_experts=2)
    (a,) = attention_to_image(tr, mask)
    assert a.window == pytest.approx(0.1)              # only position 3 is an image position
    assert a.entries == pytest.approx(0.05 + 0.05)     # entry 0 packs 0,1 (half image), entry 1 packs 2,3 (all)
    assert a.rows == [6] and a.total == pytest.approx(0.2)


def test_lesson_routing_shares_by_hand():
    from lessons.vision import routing_shares

    mask = torch.tensor([0, 1, 1, 0], dtype=torch.bool)
    experts = [[[0, 1], [2, 3], [2, 1], [0, 3]]]   # text rows pick 0,1,0,3; image rows pick 2,3,2,1
    tr = _fake_trace([[[[1.0]]] * 4], [[[[]]] * 4], [[[]] * 4], [0, 1, 2, 3], 0, experts, 4)
    (rs,) = routing_shares(tr, mask)
    assert rs.image == [0.0, 0.25, 0.5, 0.25] and rs.text == [0.5, 0.25, 0.0, 0.25]
    assert rs.overlap == pytest.approx(0.5) and (rs.n_image_tokens, rs.n_text_tokens) == (2, 2)


def test_lessons_on_a_real_trace(tiny_v):
    from lessons.vision import attention_to_image, routing_shares

    text = "Where is the key? The key is in the"
    inputs = build_inputs(tiny_v, text, draw_scene(make_scene(9), 64))
    tr = trace_with_image(tiny_v, inputs)
    att = attention_to_image(tr, inputs.image_mask)
    assert len(att) == tiny_v.cfg.num_hidden_layers
    for a in att:
        assert len(a.per_row) == len(tiny_v.encode(text)) and all(0 <= v <= 1 + 1e-5 for v in a.per_row) and a.total > 0
    rs = routing_shares(tr, inputs.image_mask)
    assert all(sum(r.image) == pytest.approx(1) and sum(r.text) == pytest.approx(1) for r in rs)


# ------------------------------------------------------------------------------------------------
# The panel
# ------------------------------------------------------------------------------------------------

def _panel_app():
    import streamlit as st
    import torch

    from model import V41Config, V41Model
    from model.arch import attach_vision
    from ui.vision_panel import draw_vision_steps, image_input

    torch.manual_seed(0)
    m = attach_vision(V41Model(V41Config.preset("micro")).init_weights(0), seed=0)
    image = image_input("t")
    if image is not None:
        draw_vision_steps(m, image)
    else:
        st.write("no picture")


def test_panel_upload_errors_and_samples():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(_panel_app, default_timeout=60).run()
    assert not at.exception and at.markdown[-1].value == "no picture"
    at.radio(key="t_source").set_value("upload").run()
    at.file_uploader(key="t_file").set_value(("box.png", b"definitely not a png", "image/png")).run()
    assert not at.exception
    assert any("not a PNG or JPEG" in e.value for e in at.error)
    good = png_bytes(draw_scene(make_scene(2), 128))
    at.file_uploader(key="t_file").set_value(("box.png", good[:300], "image/png")).run()
    assert any("corrupt" in e.value for e in at.error)
    at.file_uploader(key="t_file").set_value(("box.png", good, "image/png")).run()
    assert not at.exception and not at.error
    assert any("sequence positions" in str(t.value) for t in at.table) or len(at.table) == 1
    at.radio(key="t_source").set_value("sample").run()
    assert not at.exception and not at.error and len(at.table) == 1


def test_panel_figures(micro_v):
    from lessons.vision import patch_grid
    from ui.vision_panel import patches_figure, tokens_figure

    im = draw_scene(sample_scenes(1)[0], 100)
    pg = patch_grid(micro_v.cfg.vision_config, *im.size)
    fig = patches_figure(resize_to_grid(im, pg.grid), pg)
    assert len(fig.layout.shapes) == 2 * (32 // 4 + 1)
    assert sum(s.line.width > 2 for s in fig.layout.shapes) == 2 * (32 // 8 + 1)
    tf = tokens_figure(pg)
    assert len(tf.data[0].z) == 4 and tf.data[0].text[1][2] == "6"


# ------------------------------------------------------------------------------------------------
# Trained weights (slow; skipped until python -m lab train-vision has run)
# ------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_trained_vision_answers_above_chance():
    tiny = shipped_weights("text")
    if not (tiny / "model.safetensors").exists():
        pytest.skip("no trained tiny weights")
    from model.checkpoint import shard_map

    if not any(k.startswith("vision.") for k in shard_map(tiny)):
        pytest.skip("the trained tiny weights carry no vision tensors yet (run python -m lab train-vision)")
    from lab.training import evaluate_vision

    torch.set_num_threads(2)
    m = load(tiny, device="cpu")
    r = evaluate_vision(m, n=100)
    assert r["accuracy_text_only"] < r["chance_boxes_in_picture"]      # the text alone cannot know the colour
    # the picture tells which box: far above guessing among the boxes drawn (4 binomial standard errors at n=100)
    chance = r["chance_boxes_in_picture"]
    assert r["accuracy_with_image"] > chance + 4 * (chance * (1 - chance) / 100) ** 0.5


def _prompt_app():
    import sys

    import streamlit as st

    sys.path.insert(0, ".")   # the repository root, so that tests.conftest imports
    from model.arch import attach_vision
    from model.scenes import draw_scene, make_scene
    from tests.conftest import random_tiny
    from ui.vision_panel import draw_image_prompt

    m = random_tiny()
    no_vision = st.checkbox("plain", key="plain")
    if not no_vision:
        attach_vision(m, seed=0)
    draw_image_prompt(m.eval(), "Where is the key? The key is in the", draw_scene(make_scene(1), 96), key="p")


def test_panel_image_prompt():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(_prompt_app, default_timeout=120).run()
    assert not at.exception and not at.error
    assert any("Which positions are image tokens" in md.value and "16 image tokens" in md.value for md in at.markdown)
    assert len(at.selectbox(key="p_layer").options) == 12
    at.selectbox(key="p_layer").set_value(6).run()
    assert not at.exception
    at.checkbox(key="plain").check().run()
    assert not at.exception and any("no vision tower" in i.value for i in at.info)
