"""A prompt a reader typed, checked before a page runs it: why its text cannot run (`text_problem`), its tokens
against the page's limit (`encode_prompt`), and the start of an overlong one, cut to what the page takes
(`first_tokens_text`). It knows a model's tokenizer only through `model.encode` / `model.decode`; the limits are
the pages' own.
"""

from __future__ import annotations

from .inspector import MAX_PROMPT_TOKENS


def text_problem(text: str | None, max_chars: int | None = None, samples: bool = True) -> str | None:
    """Why a typed prompt cannot run (empty, or longer than `max_chars` characters), or None. The one place
    the app checks prompt text before tokenising it. `samples`: the page offers samples to pick instead."""
    if text is None or not text.strip():
        return "The prompt is empty: type some text" + (" or pick a sample." if samples else " to see its scores.")
    if max_chars is not None and len(text) > max_chars:
        return f"The prompt has {len(text):,} characters; the limit here is {max_chars:,}."
    return None


def encode_prompt(model, text: str | None, max_tokens: int = MAX_PROMPT_TOKENS,
                  why: str = "this page") -> tuple[list[int] | None, str | None]:
    """(ids, problem). Empty, untokenisable and overlong prompts get a message instead of an error; `why`
    names what sets the limit on the page that asks ("the inspector records every layer for every token")."""
    if (problem := text_problem(text)) is not None:
        return None, problem
    ids = model.encode(text)
    if not ids:
        return None, "The prompt produced no tokens."
    if len(ids) > max_tokens:
        return None, f"The prompt is {len(ids):,} tokens long; {why} stops at {max_tokens:,}. Shorten it."
    return ids, None


def first_tokens_text(model, text: str | None, max_tokens: int) -> str | None:
    """The start of an overlong prompt cut to at most `max_tokens` tokens, as text (what a reader who wants to run
    it anyway can keep); None when the prompt fits or is empty. Cut at a token, then checked by encoding again:
    the text of n tokens can read back as n + 1 where a cut falls inside a word."""
    if not text or not text.strip():
        return None
    ids = model.encode(text)
    if len(ids) <= max_tokens:
        return None
    n = max_tokens
    while n > 0:
        cut = model.decode(ids[:n])
        if cut.strip() and len(model.encode(cut)) <= max_tokens:
            return cut
        n -= 1
    return None
