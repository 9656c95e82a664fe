"""Tests for the corpus, story generator, tokenizer, dataset and committed held-out data.

Fast and offline: everything that needs the downloaded corpus cache (.cache/corpus) is
skipped when the cache is absent.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from lab.corpus import dataset, stories, texts as corpus, tokenizer as trainer
from lab.corpus.stories import CONTAINERS, OBJECTS, generate_story, measure_distance
from model import heldout, tokenizer as tk
from model.heldout import BUCKETS, COLOURS
from model.shipped import shipped_weights

ROOT = Path(__file__).resolve().parents[2]
TOK_PATH = shipped_weights("text") / "tokenizer.json"
CACHE = corpus.DEFAULT_CACHE


@pytest.fixture(scope="module")
def tok():
    return tk.load_tokenizer(TOK_PATH)


# ----------------------------------------------------------------------------- tokenizer


def test_vocab_and_special_ids(tok):
    assert tok.get_vocab_size() == 4096 == tk.VOCAB_SIZE
    expected = ["<|pad|>", "<|bos|>", "<|eos|>", "<|noise|>", "<|image|>", "<|image_start|>",
                "<|image_end|>", "<|image_newline|>"]
    assert list(tk.SPECIAL_TOKENS) == expected
    for i, s in enumerate(expected):
        assert tok.token_to_id(s) == i
        assert tok.id_to_token(i) == s
    assert (tk.PAD_ID, tk.BOS_ID, tk.EOS_ID, tk.NOISE_ID) == (0, 1, 2, 3)
    # every single byte has its own token (byte-level alphabet)
    assert all(tok.token_to_id(c) is not None for c in __import__("tokenizers").pre_tokenizers.ByteLevel.alphabet())


_tricky = st.sampled_from(["😀", "👩‍👩‍👧", "🇫🇷", "שלום", "مرحبا", "\u200b", "\u200d", "\u200f", "\u202e",
                           "\x00", "\x07", "\r\n", "\t", "\ufeff", "e\u0301", "𝔘", "\U0010ffff", " ", "  ",
                           "<|eos|>", "<|pad", "Ġ", "Ċ", "日本語"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(), st.lists(st.one_of(_tricky, st.text(max_size=5))).map("".join),
                 st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x2FF))))
def test_roundtrip_any_unicode(tok, s):
    ids = tk.encode(tok, s)
    assert all(0 <= i < 4096 for i in ids)
    assert tk.decode(tok, ids) == s


def test_encode_bos_eos(tok):
    ids = tk.encode(tok, "Hello.", add_bos=True, add_eos=True)
    assert ids[0] == tk.BOS_ID and ids[-1] == tk.EOS_ID
    assert tk.decode(tok, ids) == "<|bos|>Hello.<|eos|>"


def test_common_words_are_single_tokens(tok):
    for c in COLOURS:
        assert len(tk.encode(tok, " " + c)) == 1, c


def test_load_errors_name_the_file(tmp_path):
    missing = tmp_path / "nope.json"
    with pytest.raises(FileNotFoundError, match="nope.json"):
        tk.load_tokenizer(missing)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(tk.TokenizerFileError, match="bad.json"):
        tk.load_tokenizer(bad)


def test_train_small_tokenizer():
    texts = [stories.training_story_text(i) for i in range(300)]
    t = trainer.train_tokenizer(iter(texts), vocab_size=400)
    assert t.get_vocab_size() == 400
    assert [t.token_to_id(s) for s in tk.SPECIAL_TOKENS] == list(range(8))
    s = "Zoë's ☃ key\x00"
    assert tk.decode(t, tk.encode(t, s)) == s


# ----------------------------------------------------------------------------- stories


def test_story_determinism():
    state = random.getstate()
    a = [generate_story(s) for s in range(20)]
    b = [generate_story(s) for s in range(20)]
    assert random.getstate() == state  # never touches the global generator
    assert a == b
    assert len({s.text for s in a}) == 20
    assert generate_story(random.Random(7)) == generate_story(random.Random(7))
    assert stories.training_story_text(3) == stories.training_story_text(3)


@pytest.mark.parametrize("seed", range(60))
def test_offsets_point_at_answer(seed):
    s = generate_story(seed)
    assert s.answer in COLOURS
    assert s.text[s.answer_start:s.answer_end] == s.answer
    assert s.text[s.fact_answer_start:s.fact_answer_end] == s.answer
    assert s.text[s.fact_start:s.fact_end] == s.fact
    assert s.fact_start <= s.fact_answer_start < s.fact_end <= s.question_start < s.answer_start
    assert s.text[s.question_start:].startswith(s.question)
    assert s.prompt().endswith(" the") and s.text[len(s.prompt()):].lstrip().startswith(s.answer)
    # the right object is asked; distractors use other objects and other colours
    assert s.obj in s.question and f"{s.obj} " in s.fact
    for obj, col, con in s.distractors:
        assert obj != s.obj and col != s.answer and con in CONTAINERS
        assert re.search(rf"\bthe {obj} (is )?in the {col} {con}\.", s.text, re.I)
    # the answer colour appears exactly twice: in the fact and in the answer slot
    assert len(re.findall(rf"\b{s.answer}\b", s.text)) == 2


def test_filler_has_no_colour_object_or_container_words():
    bad = re.compile(r"\b(" + "|".join(COLOURS + OBJECTS + CONTAINERS) + r")s?\b", re.I)
    rng = random.Random(0)
    for _ in range(5000):
        assert not bad.search(stories.filler_sentence(rng, "Anna", ["Tom", "Mia", "Sam"]))
    for _ in range(200):
        assert not bad.search(stories.generate_narrative(rng, 10))


@pytest.mark.parametrize("bucket", list(BUCKETS))
def test_bucket_distances_exact(tok, bucket):
    lo, hi = BUCKETS[bucket]
    for seed in range(40):
        s = generate_story(5_000_000 + seed, bucket=bucket, tokenizer=tok)
        d, f, a = measure_distance(s, tok)
        assert lo <= d <= hi and d == s.distance_tokens
        assert tok.decode([tok.encode(s.text).ids[a]]).strip() == s.answer


def test_bucket_distances_approx_mostly_hold(tok):
    ok = 0
    for seed in range(300):
        s = generate_story(seed)
        lo, hi = BUCKETS[s.bucket]
        ok += lo <= measure_distance(s, tok)[0] <= hi
    assert ok >= 285  # training stories use the cheap estimate; nearly all stay in bucket


def test_free_target_distance(tok):
    for target in (60, 300, 900):
        s = generate_story(11, target, tokenizer=tok)
        assert abs(measure_distance(s, tok)[0] - target) <= target * 0.1 + 2
    with pytest.raises(ValueError):
        generate_story(0, bucket="nowhere")


# ----------------------------------------------------------------------------- committed data


def test_heldout_stories_file(tok):
    rows = heldout.load_heldout_stories()
    assert len(rows) == 300
    assert (ROOT / "data" / "heldout" / "stories.jsonl").stat().st_size < 1_000_000
    by = {b: [r for r in rows if r["bucket"] == b] for b in BUCKETS}
    assert all(len(v) == 100 for v in by.values())
    for r in rows:
        assert r["seed"] >= stories.HELDOUT_SEED_BASE
        assert r["text"][r["answer_start"]:r["answer_end"]] == r["answer"]
        assert r["text"][r["fact_answer_start"]:r["fact_answer_end"]] == r["answer"]
        enc = tok.encode(r["text"])
        a = heldout.token_index_at_char(enc.offsets, r["answer_start"])
        f = heldout.token_index_at_char(enc.offsets, r["fact_answer_start"])
        lo, hi = BUCKETS[r["bucket"]]
        assert a - f == r["distance_tokens"] and lo <= a - f <= hi


def test_heldout_stories_reproducible(tok):
    rows = heldout.load_heldout_stories()
    for i in (0, 1, 100, 101, 200, 299):
        r = rows[i]
        s = generate_story(r["seed"], bucket=r["bucket"], tokenizer=tok)
        assert s.text == r["text"] and s.answer == r["answer"]


def test_heldout_natural_file(tok):
    path = ROOT / "data" / "heldout" / "natural.txt"
    text = path.read_text(encoding="utf-8")
    assert 20_000 < path.stat().st_size < 150_000
    docs = [d for d in text.split(heldout.DOC_SEP) if d.strip()]
    assert len(docs) == 2
    assert docs[0].startswith("THE COMEDY OF ERRORS") and docs[1].startswith(corpus.HELDOUT_BOOK)
    assert "Gutenberg" not in text and "<" not in text and "$$$" not in text
    ids = heldout.heldout_natural_tokens(tok)
    assert ids.dtype == np.int64 and (ids == tk.EOS_ID).sum() == 2 and len(ids) > 20_000


def test_prompts_file(tok):
    prompts = json.loads((ROOT / "data" / "prompts.json").read_text(encoding="utf-8"))
    kinds = {p["kind"] for p in prompts}
    assert {"short", "shakespeare", "bible", "long"} <= kinds
    longs = [p for p in prompts if p["kind"] == "long"]
    assert len(longs) == 3
    for p in prompts:
        assert p["name"] and p["text"]
    for p in longs:
        assert p["answer"] in COLOURS
        n = len(tk.encode(tok, p["text"]))
        assert 300 <= n <= 1500
        assert p["text"].endswith(" the")
    assert stories.app_prompts(tok) == prompts  # regenerated from fixed seeds


# ----------------------------------------------------------------------------- dataset


def test_sample_batch_deterministic():
    tokens = np.arange(10_000, dtype=np.uint16)
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    x1, y1 = dataset.sample_batch(tokens, 4, 16, g1)
    x2, y2 = dataset.sample_batch(tokens, 4, 16, g2)
    assert x1.dtype == torch.int64 and x1.shape == (4, 16) and y1.shape == (4, 16)
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert torch.equal(x1[:, 1:], y1[:, :-1]) and torch.equal(y1 - x1, torch.ones_like(x1))
    x3, _ = dataset.sample_batch(torch.from_numpy(tokens.astype(np.int64)), 4, 16, torch.Generator().manual_seed(5))
    assert torch.equal(x1, x3)


def test_story_eval_batches(tok):
    rows = heldout.load_heldout_stories()[:5] + heldout.load_heldout_stories()[-3:]
    batches = list(heldout.story_eval_batches(tok, rows, batch_size=3))
    assert [len(b["answer"]) for b in batches] == [3, 3, 2]
    for b in batches:
        for i, ans in enumerate(b["answer"]):
            pos = b["answer_pos"][i]
            assert b["input_ids"][i, 0] == tk.EOS_ID
            assert tok.decode([int(b["input_ids"][i, pos + 1])]).strip() == ans
            assert int(b["answer_id"][i]) == int(b["input_ids"][i, pos + 1])
            assert tok.decode([int(b["input_ids"][i, b["fact_pos"][i]])]).strip() == ans
            assert b["attention_mask"][i].sum() == pos + 2
    gen = next(dataset.fresh_story_batches(tok, 4, batch_size=4, bucket="far"))
    assert all(129 <= d <= 480 for d in gen["distance"].tolist())


def test_heldout_natural_batches():
    t = np.arange(1000)
    bs = list(heldout.heldout_natural_batches(t, 4, 32))
    assert sum(x.shape[0] for x, _ in bs) == 999 // 32
    assert torch.equal(bs[0][1][0], torch.arange(1, 33))


# ----------------------------------------------------------------------------- corpus cleaning


def test_clean_osis_snippet():
    markup = ('<w lemma="strong:H0430">God</w><note placement="foot"><reference type="annotateRef">1:1 '
              '</reference>The Hebrew word.</note><w lemma="x">created</w> the <title type="x">Heading</title>'
              'earth &amp; sky.<note type="crossReference"><reference>Isa 1:1</reference></note> <l eID="a"/>')
    assert corpus.clean_osis(markup) == "God created the earth & sky."


def test_clean_shakespeare_snippet():
    raw = ("*** START OF THIS PROJECT GUTENBERG EBOOK X ***\r\nACT I.\r\n\r\n\r\n\r\nFIRST LORD. {Aside.]\r\n"
           "Hello.\r\n@@@@\r\nTHE END\r\n*** END OF THIS PROJECT GUTENBERG EBOOK X ***\r\nlicence text")
    assert corpus.clean_shakespeare(raw) == "ACT I.\n\nFIRST LORD. [Aside.]\nHello.\n"


# ----------------------------------------------------------------------------- downloaded cache (optional)

needs_cache = pytest.mark.skipif(not (CACHE / "manifest.json").is_file(),
                                 reason="corpus cache absent (run `python -m lab corpus build`)")


@needs_cache
def test_cached_corpus_clean():
    m = json.loads((CACHE / "manifest.json").read_text())
    sh = (CACHE / "shakespeare.txt").read_text(encoding="utf-8")
    assert m["files"]["shakespeare"]["bytes"] > 4_000_000
    assert corpus.HELDOUT_PLAY not in m["files"]["shakespeare"]["docs"]
    assert "Gutenberg" not in sh and "GUTENBERG" not in sh
    assert "THE COMEDY OF ERRORS" not in sh
    if (CACHE / "bible.txt").is_file():
        bi = (CACHE / "bible.txt").read_text(encoding="utf-8")
        assert m["files"]["bible"]["bytes"] > 4_000_000
        assert "<" not in bi and ">" not in bi and "$$$" not in bi and "strong:" not in bi
        assert "In the beginning, God created the heavens and the earth." in bi
        assert "\nRomans\n" not in bi and corpus.HELDOUT_BOOK not in m["files"]["bible"]["docs"]
    assert (CACHE / "heldout_natural.txt").read_bytes() == (ROOT / "data" / "heldout" / "natural.txt").read_bytes()


@needs_cache
def test_cached_token_stream(tok):
    path = CACHE / "tokens_train.npy"
    if not path.is_file():
        pytest.skip("token stream not built (run `python -m lab dataset build`)")
    ts = dataset.TokenStream.load(path)
    assert ts.tokens.dtype == np.uint16 and len(ts) == ts.manifest["n_tokens"]
    assert ts.manifest["tokenizer_sha256"] == tk.sha256_file(TOK_PATH)
    counts = [s["tokens"] for s in ts.manifest["sources"].values()]
    assert max(counts) < 1.2 * min(counts)
    x, y = next(ts.batches(2, 64, seed=0))
    assert x.shape == (2, 64) and int(x.max()) < 4096


def test_heldout_cast_shares_no_name_object_or_template_with_training():
    from lab.corpus import HELDOUT_CAST, TRAIN_CAST, training_story_text
    from model.heldout import load_heldout_stories

    assert not set(HELDOUT_CAST.names) & set(TRAIN_CAST.names)
    assert not set(HELDOUT_CAST.objects) & set(TRAIN_CAST.objects)
    assert not set(HELDOUT_CAST.facts) & set(TRAIN_CAST.facts)
    assert not set(HELDOUT_CAST.questions) & set(TRAIN_CAST.questions)
    held_words = set(HELDOUT_CAST.names) | set(HELDOUT_CAST.objects)
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, held_words)) + r")\b")
    for i in range(300):  # training documents never mention the held-out cast
        assert not pattern.search(training_story_text(i)), i
    rows = load_heldout_stories(ROOT / "data" / "heldout" / "stories_heldout_templates.jsonl")
    assert len(rows) == 100 and all(r["bucket"] == "far" and r["distance_tokens"] >= 129 for r in rows)
    for r in rows:  # each story is told with the held-out cast: its object and a held-out fact template
        assert r["obj"] in HELDOUT_CAST.objects
        assert any(re.fullmatch(re.escape(t).replace(r"\{who\}", r"\w+").replace(r"\{obj\}", re.escape(r["obj"]))
                                .replace(r"\{col\}", r"\w+").replace(r"\{con\}", r"\w+"), r["fact"])
                   for t in HELDOUT_CAST.facts), r["fact"]
        assert r["text"][r["answer_start"]:r["answer_end"]] == r["answer"]


def test_wide_drill_cast_is_wider_and_shares_nothing_with_the_heldout_cast():
    """The wide drills must not leak the held-out names, objects, verbs or question phrasings (else held-out
    template recall would measure memory), and each drill's answers name objects its facts placed."""
    from lab.corpus import HELDOUT_CAST, TRAIN_CAST, WIDE_CAST, recall_drill
    from model.heldout import COLOURS

    assert len(WIDE_CAST.objects) > 4 * len(TRAIN_CAST.objects) and len(WIDE_CAST.facts) > 8 * len(TRAIN_CAST.facts)
    assert not set(HELDOUT_CAST.names) & set(WIDE_CAST.names)
    assert not set(HELDOUT_CAST.objects) & set(WIDE_CAST.objects)
    held_phrases = ("tucked", "dropped", "stored", "slipped", "tell me where", "wanted to know")
    for t in WIDE_CAST.facts + WIDE_CAST.questions:
        assert not any(p in t for p in held_phrases), t
    colour = re.compile(r"\b(" + "|".join(COLOURS) + r")\b")
    assert not any(colour.search(o) for o in WIDE_CAST.objects)  # an object named by a colour would be an answer
    answer = re.compile(r"\?\"? The ([\w ]+?) is in the (\w+) (\w+)\.")
    rng = random.Random(7)
    lengths = {}
    for fillers in (4, 12):
        texts = [recall_drill(rng, cast=WIDE_CAST, max_fillers=fillers) for _ in range(40)]
        lengths[fillers] = sum(map(len, texts))
        for text in texts:
            found = answer.findall(text)
            assert 3 <= len(found) <= 6
            facts = text[:text.index("?")].split(". ")  # every fact is told before the first question
            for obj, col, con in found:
                assert any(re.search(rf"\b{obj}\b", f) and f"{col} {con}" in f for f in facts), (obj, text)
    assert lengths[12] > 1.5 * lengths[4]  # more fillers put the facts further back


def test_binding_drill_moves_the_colour_away_from_its_object_a_word_at_a_time():
    """`link_max` N: link facts and answers hold 0..N words between the object and its colour (each count
    comes up), the cast's own fact sentences still come up at the other share, and without `link_max` a
    drill is the same text as before (the same random draws)."""
    from lab.corpus import LINKS, WIDE_CAST, link_sentence, recall_drill
    from model.heldout import COLOURS

    link = re.compile(rf"The ([\w ]+?) ((?:\w+ )*?)({'|'.join(COLOURS)}) \w+\.")
    cast_verbs = re.compile(r"\b[A-Z]\w+ (?:put|hid|left|placed|packed|locked|carried) the ")
    for n in (0, 2, 4):
        counts: dict[int, int] = {}
        cast_facts = 0
        for seed in range(60):
            text = recall_drill(seed, cast=WIDE_CAST, link_max=n, link_share=1.0)
            for obj, words, _ in link.findall(text):
                k = len(words.split())
                if obj in WIDE_CAST.objects and k in LINKS and words.strip() in LINKS[k]:
                    counts[k] = counts.get(k, 0) + 1
            cast_facts += bool(cast_verbs.search(recall_drill(seed, cast=WIDE_CAST, link_max=n)))
        assert set(counts) == set(range(n + 1)), (n, counts)
        assert cast_facts > 10
    assert recall_drill(5, cast=WIDE_CAST) == recall_drill(5, cast=WIDE_CAST, link_max=-1)
    assert link_sentence(random.Random(1), "key", "blue", "box", 0) == "The key blue box."
