"""What a public visitor can and cannot do to the server (ui.checkpoints, ui.text, model.accounting).

- Checkpoint paths outside the allow-list (absolute, relative, `..`, a symlink pointing out, a sibling whose
  name starts with the root's name), and missing ones inside it, all get the one NOT_OFFERED message, in
  the model layer and in the page.
- A config that needs more memory than the budget is refused before anything is allocated, naming the
  field and the bytes.
- Markdown and HTML in every URL parameter of every page render as text (escaped, at most 200 characters).
- Under 30 distinct checkpoint URLs the server never holds more than MAX_MODELS models; spellings of one
  directory share one load; failures are remembered; concurrent asks load once.
"""

from __future__ import annotations

import gc
import json
import re
import resource
import threading
import time

import pytest
from streamlit.testing.v1 import AppTest

from model.shipped import shipped_weights
from tests.conftest import ROOT, random_model
from ui.checkpoints import (
    MAX_MODELS,
    NOT_OFFERED,
    CheckpointRefused,
    ModelStore,
    check_budget,
    find_checkpoints,
    resolve_choice,
)
from ui.nav import stems
from ui.text import MAX_CHARS, as_shown, plain

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.filterwarnings("ignore::FutureWarning")]


def _checkpoint(d):
    from model.checkpoint import save_checkpoint

    m = random_model("micro")
    save_checkpoint(m, d)
    return d


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """root/ok (a checkpoint), root/link-out (symlink to a checkpoint outside), root-evil/ok (a sibling
    whose name starts with the root's), outside/ok."""
    base = tmp_path_factory.mktemp("sec")
    root = base / "weights"
    _checkpoint(root / "ok")
    _checkpoint(base / "outside" / "ok")
    _checkpoint(base / "weights-evil" / "ok")
    (root / "link-out").symlink_to(base / "outside" / "ok", target_is_directory=True)
    (root / "empty").mkdir()
    return base


@pytest.fixture
def allow(tree, monkeypatch):
    monkeypatch.setenv("V41_CHECKPOINT_ROOTS", str(tree / "weights"))
    return tree


def outside_spellings(tree) -> list[str]:
    root = tree / "weights"
    return [
        "/root", "/etc", "/nonexistent", "/", str(tree / "outside" / "ok"),          # absolute
        "../", "data/../../", "..", "outside/ok",                                      # relative
        str(root / ".." / "outside" / "ok"), str(root / "ok" / ".." / ".." / "outside" / "ok"),  # '..'
        str(root / "link-out"), "weights/link-out",                                   # symlink pointing out
        str(tree / "weights-evil" / "ok"), str(root) + "-evil/ok",                    # sibling with the prefix
        str(root / "missing"), str(root / "empty"), str(root),                        # missing / not one inside
        "", " ", "x" * 5000, "\x00", "~", "~root",
    ]


def test_only_offered_checkpoints_are_found(allow):
    found = find_checkpoints()
    assert list(found) == ["weights/ok"]
    assert found["weights/ok"] == (allow / "weights" / "ok").resolve()


def test_every_path_outside_gets_the_same_message(allow):
    for text in outside_spellings(allow):
        with pytest.raises(CheckpointRefused) as e:
            resolve_choice(text)
        assert str(e.value) == NOT_OFFERED, text


def test_spellings_of_an_offered_directory_resolve_to_it(allow):
    root = allow / "weights"
    want = (root / "ok").resolve()
    for text in ["weights/ok", str(root / "ok"), str(root / "ok") + "/./.", str(root / "ok" / ".." / "ok"),
                 str(root / "empty" / ".." / "ok")]:
        assert resolve_choice(text) == ("weights/ok", want), text


def test_the_page_shows_the_same_message_for_every_outside_path(allow):
    seen = set()
    for text in outside_spellings(allow)[:18]:
        at = AppTest.from_file(str(ROOT / "pages" / "layer_map.py"), default_timeout=300)
        at.query_params.update(weights="checkpoint", ckpt=text)
        at.run()
        assert not at.exception
        errs = [as_shown(e.value) for e in at.sidebar.error]
        seen.add(tuple(errs))
        assert errs == [NOT_OFFERED], (text, errs)
        assert str(allow) not in "\n".join(e.value for e in at.error)
    assert len(seen) == 1


# ---- the memory budget --------------------------------------------------------------------------------------------
def _huge_vocab_checkpoint(d):
    """The shipped tiny config with vocab_size 6,000,000, and a (header-only) safetensors file beside it."""
    raw = json.loads((shipped_weights("text") / "config.json").read_text())
    (raw["text_config"] if "text_config" in raw else raw)["vocab_size"] = 6_000_000
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps(raw))
    (d / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    return d


def test_a_config_over_the_budget_is_refused_before_allocation(tmp_path, monkeypatch):
    d = _huge_vocab_checkpoint(tmp_path / "huge")
    monkeypatch.setenv("V41_MODEL_BUDGET", "2G")
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    with pytest.raises(CheckpointRefused) as e:
        check_budget(d)
    took = time.perf_counter() - t0
    grew_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024
    msg = str(e.value)
    # 6,000,000 x 128 x 4 bytes each for the embedding and the head: 3.1 GB apiece
    assert "vocab_size = 6,000,000" in msg and "GB" in msg and "2.1 GB" in msg, msg
    assert took < 30 and grew_mb < 300, (took, grew_mb)


def test_the_page_refuses_it_without_loading(tmp_path, monkeypatch):
    import model

    d = _huge_vocab_checkpoint(tmp_path / "huge")
    monkeypatch.setenv("V41_CHECKPOINT_ROOTS", str(tmp_path))
    monkeypatch.setenv("V41_MODEL_BUDGET", "1G")
    calls = []
    monkeypatch.setattr(model, "load", lambda *a, **k: calls.append(a))
    at = AppTest.from_file(str(ROOT / "pages" / "layer_map.py"), default_timeout=300)
    at.query_params.update(weights="checkpoint", ckpt=str(d))
    at.run()
    assert not at.exception and not calls
    err = as_shown("\n".join(e.value for e in at.sidebar.error))
    assert "vocab_size = 6,000,000" in err and "Nothing was loaded" in err, err


def test_footprint_counts_what_a_loaded_model_holds():
    from model import load
    from model.accounting import resident_footprint

    m = load(shipped_weights("text"), device="cpu")
    fp = resident_footprint(m.cfg)
    for name, b in fp.parts.items():
        child = getattr(m, name)
        real = sum(t.numel() * t.element_size() for t in list(child.parameters()) + list(child.buffers()))
        assert b == real, (name, b, real)
    streamed = resident_footprint(m.cfg, streamed=True)
    assert streamed.total < fp.total and streamed.parts["embed"] == fp.parts["embed"]


# ---- Markdown in URL parameters -----------------------------------------------------------------------------------
EVIL = ("[Session expired - click here](https://example.com/login) ![x](http://127.0.0.1:9/x.png) "
        ":red[red] :material/home: $x^2$ <b>bold</b> <img src=x onerror=alert(1)> www.example.com ") + "A" * 6000
PARAMS = ["weights", "ckpt", "numbering", "box", "designs", "preset", "mode", "config", "table", "prompt",
          "sample", "layer", "token", "step", "compact", "head", "pos", "reuse", "toy0", "context", "batch", "bits",
          "window", "ratio", "read", "written", "rounds", "tread", "twritten", "ctx", "gen", "pool", "k", "rule",
          "keepwin", "configs", "topk", "stories", "natural", "cost"]
PAGES = stems()
UNSAFE = [re.compile(p) for p in (r"(?<!\\)\]\(", r"(?<!\\)!\[", r"(?<!\\):red\[", r"(?<!\\):material/",
                                   r"(?<!\\)\$x", r"(?<!\\)<b>", r"(?<!\\)<img", r"(?<!\\)https?:/", r"(?<!\\)www\.")]


def _markdown_texts(at) -> list[str]:
    out = []
    for kind in ("warning", "error", "info", "success", "caption", "markdown", "exception"):
        out += [str(x.value) for x in getattr(at, kind)]
    return out


# Home reads the 6,000-character prompt through the model (slow on a CPU); its text is checked in the slow tier
@pytest.mark.parametrize("page", [pytest.param(p, marks=pytest.mark.slow) if p == "home" else p for p in PAGES])
def test_markdown_in_every_url_parameter_is_text(page):
    at = AppTest.from_file(str(ROOT / "pages" / f"{page}.py"), default_timeout=300)
    for p in PARAMS:
        at.query_params[p] = EVIL
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    texts = [t for t in _markdown_texts(at) if any(m in as_shown(t) for m in ("Session expired", "onerror", "x^2"))]
    for t in texts:                       # every text that carries the URL's value, wherever it appears
        for pat in UNSAFE:
            assert not pat.search(t), (page, pat.pattern, t[:300])
    quoted = [t for t in texts if "Session expired" in as_shown(t)]
    for t in quoted:   # every quotation of the value is cut short
        assert as_shown(t).count("A") <= MAX_CHARS + 20, (page, len(t))


def test_plain_escapes_what_streamlit_markdown_reads():
    s = "[a](https://x.y) ![i](http://h/i.png) :red[r] :material/home: $x$ <b>b</b> **s** `c` www.q.com a@b.c"
    out = plain(s)
    assert as_shown(out) == s
    for pat in UNSAFE:
        assert not pat.search(out), pat.pattern
    assert len(as_shown(plain("x" * 6000))) == MAX_CHARS
    assert "\n" not in plain("a\nb\r\n# c")


# ---- the store ------------------------------------------------------------------------------------------------------
def test_store_holds_at_most_max_models_and_frees_the_rest():
    import weakref

    class M:
        pass

    store = ModelStore(max_models=MAX_MODELS)
    refs = []
    for i in range(30):
        m = store.get(("checkpoint", str(i)), M)
        refs.append(weakref.ref(m))
        del m                                   # freed at once by reference counting when the store drops it
        assert len(store.held()) <= MAX_MODELS
        assert sum(r() is not None for r in refs) <= MAX_MODELS
    assert store.loads == 30


def test_store_remembers_failures_for_a_while():
    now = [0.0]
    store = ModelStore(failure_ttl=60, clock=lambda: now[0])
    calls = []

    def bad():
        calls.append(1)
        raise ValueError("broken shard")

    for _ in range(5):
        with pytest.raises(ValueError, match="broken shard"):
            store.get(("checkpoint", "x"), bad)
    assert len(calls) == 1
    now[0] = 61.0
    with pytest.raises(ValueError):
        store.get(("checkpoint", "x"), bad)
    assert len(calls) == 2


def test_store_loads_once_when_many_sessions_ask_at_once():
    store = ModelStore()
    calls = []

    def slow():
        calls.append(1)
        time.sleep(0.3)
        return object()

    got = []
    threads = [threading.Thread(target=lambda: got.append(store.get(("trained", ""), slow))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len({id(g) for g in got}) == 1


@pytest.mark.slow
def test_thirty_checkpoint_urls_hold_at_most_max_models(tmp_path, monkeypatch):
    """30 URLs: 6 checkpoint directories, each spelled 5 ways. One load per directory while it is held,
    and never more than MAX_MODELS models alive in the process (counted by the garbage collector)."""
    from model import V41Model
    from ui.session import model_store

    monkeypatch.setenv("V41_CHECKPOINT_ROOTS", str(tmp_path))
    for i in range(6):
        _checkpoint(tmp_path / f"c{i}")
    model_store().clear()
    gc.collect()

    def alive() -> int:
        return sum(1 for o in gc.get_objects() if isinstance(o, V41Model)
                   and str(getattr(o, "source_path", "")).startswith(str(tmp_path)))

    loads0 = model_store().loads
    urls = []
    for i in range(6):
        d = tmp_path / f"c{i}"
        urls += [f"{tmp_path.name}/c{i}", str(d), str(d) + "/./.", str(d / ".." / f"c{i}"), str(d) + "/"]
    assert len(set(urls)) == 30
    for u in urls:
        at = AppTest.from_file(str(ROOT / "pages" / "layer_map.py"), default_timeout=300)
        at.query_params.update(weights="checkpoint", ckpt=u)
        at.run()
        assert not at.exception and not at.sidebar.error, u
        del at
        gc.collect()
        assert len([k for k in model_store().held() if k[0] == "checkpoint"]) <= MAX_MODELS
        assert alive() <= MAX_MODELS, u
    assert model_store().loads - loads0 == 6   # five spellings, one load each time the directory is asked first
