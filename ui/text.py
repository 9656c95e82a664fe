"""Outside text shown as plain text: the one helper for every value that comes from a URL, a visitor, a file
path or an exception message.

Streamlit draws the body of st.warning / st.error / st.info / st.caption / st.markdown as Markdown, and its
Markdown does more than CommonMark: links and images (`[..](..)`, `![..](..)`, bare `https://..` and
`www.` autolinks), HTML, colour and badge directives (`:red[..]`, `:red-badge[..]`), icons and emoji
(`:material/..:`, `:smile:`) and maths (`$..$`). Escaping brackets alone leaves most of that working. So
`plain` backslash-escapes every ASCII punctuation character (CommonMark lets any of them be escaped, and the
escaped character is then drawn as itself), breaks the autolink patterns that GFM finds in plain text
even when escaped (`https://`, `www.`, `name@host`) with an invisible word joiner, folds line breaks and
other control characters into spaces (no headings, lists or code blocks can start), and shortens the
result to `MAX_CHARS` characters of the
original text, so a 6,000-character URL value costs one line.

Also our own text cut into sentences (`sentences`, `lead`: the lead a page shows, the rest its fine print).
"""

from __future__ import annotations

import re
import string
import unicodedata

MAX_CHARS = 200          # the longest piece of outside text any message quotes
ELLIPSIS = "\u2026"
_PUNCT = frozenset(string.punctuation)
JOINER = "\u2060"        # invisible; splits "https:" from "//", "www" from ".", "@" from the host
_AUTOLINK = re.compile(r"(?<=:)(?=/)|(?<=\bwww)(?=\.)|(?<=@)", re.IGNORECASE)


def shorten(value: object, limit: int = MAX_CHARS) -> str:
    """`str(value)` with control characters folded to spaces, cut to `limit` characters (an ellipsis
    marks the cut). For text drawn by st.text / st.code / dataframes, which never read Markdown."""
    text = "".join(" " if unicodedata.category(ch) in ("Cc", "Zl", "Zp") else ch for ch in str(value))
    return text if len(text) <= limit else text[: max(0, limit - 1)] + ELLIPSIS


def plain(value: object, limit: int = MAX_CHARS) -> str:
    """Outside text made safe to put inside a Markdown message: drawn exactly as written (after `shorten`)."""
    text = _AUTOLINK.sub(JOINER, shorten(value, limit))
    return "".join("\\" + ch if ch in _PUNCT else ch for ch in text)


def quoted(value: object, limit: int = MAX_CHARS) -> str:
    """`plain` between quotation marks, for naming a value in a sentence ("URL parameter box = 'x' ...")."""
    return "\u2018" + plain(value, limit) + "\u2019"


def as_shown(markdown: str) -> str:
    """What a reader sees of a message built with `plain`: escapes and joiners removed (for tests and logs)."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", markdown).replace(JOINER, "")


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"*(])")


def sentences(text: str) -> list[str]:
    """A paragraph's sentences (it is our own text: a sentence ends at . ! or ? before a capital)."""
    return _SENTENCE_END.split(text.strip())


def lead(text: str, n: int = 1) -> tuple[str, str]:
    """A paragraph cut after its first `n` sentences: (the lead a page shows beside its view, the rest it puts in
    its fine print). A reader takes in the first sentence of a block, so the lead is written to carry the point;
    the rest is kept word for word, only moved."""
    parts = sentences(text)
    return " ".join(parts[:n]), " ".join(parts[n:])
