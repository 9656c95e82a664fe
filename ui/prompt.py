"""A typed prompt on its way to the model: the sample picker and its text area, the checks, the encoding, the
offer to keep an overlong prompt's first tokens, and the offer of the reader's own text from another page.

A page that takes a prompt calls `sample_or_text` (a sample or the reader's text, kept in the link as `sample`
or `prompt`) or `typed_prompt` (a text area only), then `prompt_ids` (the checks and the encoding; the page
stops with the message and, for an overlong prompt, the offer to cut). `prompt_problem` is the same checks
without stopping, for a view that must still draw the rest of the page (the side-by-side). The texts of the
checks are lessons.prompts'; the URL rules are ui.url's.
"""

from __future__ import annotations

from typing import Callable

import streamlit as st

from lessons.prompts import encode_prompt, first_tokens_text, text_problem
from ui import url
from ui.limits import URL_PROMPT_CHARS
from ui.text import quoted
from ui.url import KEEP, PAGE_TITLE, stop

# the reader's own text, in the link of every page that takes one (left out when longer than a link keeps)
PROMPT = url.any_text("prompt", link_chars=URL_PROMPT_CHARS)
_OWN = "_state_own_text"    # (text, page title): the reader's latest own prompt, offered by the other prompt pages
_SEEN = "_state_own_seen"   # {page prompt key: the text that page showed last}: notes only what changed


def sample_param(n: int, default: int | None = None) -> url.Param[int]:
    """`sample`: one of the page's `n` sample prompts by its 0-based index, left out of the link at `default`
    (written always when `default` is None)."""
    return url.whole("sample", 0, n - 1, default, "showing the session's prompt")


def prompt_to_url(text: str | None) -> None:
    """Put a typed prompt into the URL (also an empty or rejected one, so the link shows what the page
    shows); a prompt longer than URL_PROMPT_CHARS is left out, and the page says so."""
    url.to_link(PROMPT, text or "")
    left_out_note(text)


def left_out_note(text: str | None) -> None:
    """Under a prompt longer than a link keeps (URL_PROMPT_CHARS), a caption saying the link leaves it out."""
    if len(text or "") > URL_PROMPT_CHARS:
        st.caption(f"This prompt ({len(text):,} characters) is longer than the links this page writes keep "
                   f"({URL_PROMPT_CHARS:,} characters): the address bar leaves it out, so a link copied from it opens "
                   "the default prompt instead.")


OWN_TEXT = -1   # the sample index of "your own text"
OFFER_PREVIEW = 90   # characters of the offered text shown beside its button


def note_own_text(text: str | None, where: str, samples: tuple[str, ...] = ()) -> None:
    """Remember a prompt the reader gave a page (`where`: the page's prompt key), typed, pasted, or brought by a
    link, so that the other prompt pages can offer it. Noted only when it changed on that page (a return visit
    to an older text does not make it the latest), never a sample's text (choosing "your own text" without
    typing), and a text brought over from another page keeps the page it was typed on."""
    seen = st.session_state.setdefault(_SEEN, {})
    changed = seen.get(where) != text
    seen[where] = text
    if not changed or not text or not text.strip() or text in samples:
        return
    kept = st.session_state.get(_OWN)
    if kept and kept[0] == text:
        return
    st.session_state[_OWN] = (text, st.session_state.get(PAGE_TITLE) or "another page")


def offer_own_text(current: str | None, max_chars: int, use: Callable[[str], None], key: str) -> bool:
    """A button that puts the reader's latest own prompt into this page's prompt (`use` gets the text), shown
    when there is one, it differs from what the page shows, and it fits the page's limit. True when drawn."""
    kept = st.session_state.get(_OWN)
    if not kept:
        return False
    text, where = kept
    if text == current or len(text) > max_chars:
        return False
    here = st.session_state.get(PAGE_TITLE)
    label = "Back to your text" if where == here else f"Use your text from {where}"
    st.button(label, key=key, on_click=use, args=(text,), icon=":material/input:",
              help="Put the text you typed last into this page's prompt.")
    st.caption(quoted(text, OFFER_PREVIEW))
    return True


def offer_cut(prefix: str, cut: str | None, max_tokens: int) -> None:
    """Under an overlong prompt's message, a button that keeps its first `max_tokens` tokens (`cut`, computed by
    the lesson) as the reader's own text in `{prefix}_prompt`; nothing when there is no cut to offer."""
    if cut is None:
        return

    def _keep() -> None:
        st.session_state[f"{prefix}_sample"], st.session_state[f"{prefix}_prompt"] = OWN_TEXT, cut

    st.button(f"Keep the first {max_tokens:,} tokens", key=f"{prefix}_cut", on_click=_keep,
              icon=":material/content_cut:", help="Cut the prompt to what this page can run, and run it.")


def sample_or_text(prefix: str, samples: list, default: int, max_chars: int, options: list[int] | None = None,
                   label: str = "Sample prompt", text_label: str = "Prompt", height: int = 100,
                   columns=None, help: str | None = None) -> tuple[int, str]:
    """A sample picker (`{prefix}_sample`, OWN_TEXT for the reader's own text) and its text area
    (`{prefix}_prompt`), seeded by the URL's `prompt` or `sample` on arrival, kept for the session, and written
    back to the URL before the text is checked (a rejected prompt is still what the link shows).
    Returns (sample index or OWN_TEXT, text)."""
    skey, tkey = f"{prefix}_sample", f"{prefix}_prompt"
    n = len(samples)
    sample_p = sample_param(n, default if default >= 0 else None)
    url_prompt = PROMPT.read()
    url_sample = sample_p.read()
    if url_prompt is not None and len(url_prompt) > max_chars:
        st.warning(f"The prompt in the URL has {len(url_prompt):,} characters; the limit here is {max_chars:,}. "
                   "Showing a sample instead.")
        url_prompt = None
    if url_prompt is not None:
        st.session_state[skey], st.session_state[tkey] = OWN_TEXT, url_prompt
    elif url_sample is not None:
        st.session_state[skey], st.session_state[tkey] = url_sample, samples[url_sample].text
    elif skey not in st.session_state or tkey not in st.session_state or url.url_moved():
        # nothing kept yet, or Back to a link that leaves both out: the page's default (left out of the link)
        st.session_state[skey], st.session_state[tkey] = default, samples[default].text if default >= 0 else ""

    def _pick() -> None:
        i = st.session_state[skey]
        if i != OWN_TEXT:
            st.session_state[tkey] = samples[i].text

    opts = options if options is not None else list(range(n)) + [OWN_TEXT]
    where = columns[0] if columns else st
    where.selectbox(label, opts, key=skey, on_change=_pick, persist_state=KEEP, help=help,
                    format_func=lambda i: "(your own text)" if i == OWN_TEXT else samples[i].name)
    def _edited() -> None:          # a sample edited by hand is the reader's own text (as a link would say)
        i = st.session_state[skey]
        if i != OWN_TEXT and samples[i].text != st.session_state[tkey]:
            st.session_state[skey] = OWN_TEXT

    text = st.text_area(text_label, key=tkey, height=height, persist_state=KEEP, on_change=_edited)

    def _use(own: str) -> None:
        st.session_state[skey], st.session_state[tkey] = OWN_TEXT, own

    i = st.session_state[skey]
    own = not (i != OWN_TEXT and samples[i].text == text)
    note_own_text(text if own else None, prefix, tuple(s.text for s in samples))
    offer_own_text(text, max_chars, _use, f"{prefix}_use_own")
    if not own:
        url.to_link(sample_p, i)
        url.leave_out(PROMPT)
    else:
        url.leave_out(sample_p)
        prompt_to_url(text)
    return i, text


def clean_prompt(text: str, max_chars: int = 20000, samples: bool = True) -> tuple[str | None, str | None]:
    """(prompt, problem): reject empty or oversized prompts with a message instead of an error (`samples`: the
    page has samples to pick, and the message may say so)."""
    problem = text_problem(text, max_chars, samples)
    return (None, problem) if problem else (text, None)


def prompt_problem(model, text: str | None, limit: int, why: str = "this page", max_chars: int = 20000,
                   samples: bool = True) -> tuple[list[int] | None, str | None]:
    """(ids, problem) without stopping: the text's checks (length, emptiness; `samples`: the message may point
    at the page's samples) and then the encoding (no tokens, more than `limit`). For a view that draws beside
    others (the side-by-side), where one side's problem must not stop the page."""
    _, problem = clean_prompt(text or "", max_chars, samples)
    if problem:
        return None, problem
    return encode_prompt(model, text, limit, why)


def prompt_ids(model, prefix: str, text: str | None, limit: int, why: str = "this page", max_chars: int = 20000,
               samples: bool = True) -> list[int]:
    """The prompt's token ids, or the page stopped with the message (`prompt_problem`) and, for an overlong
    prompt, the offer to keep its first `limit` tokens as the reader's text in `{prefix}_prompt`."""
    ids, problem = prompt_problem(model, text, limit, why, max_chars, samples)
    if problem:
        st.warning(problem)
        offer_cut(prefix, first_tokens_text(model, text, limit), limit)
        stop()
    return ids


def typed_prompt(key: str, default: str, max_chars: int, label: str = "Prompt", height: int = 80,
                 samples: bool = False, **kwargs) -> tuple[str, str | None]:
    """A prompt the reader types (no samples): its text area (`key`), seeded by the URL's `prompt` on arrival,
    kept for the session and written back into the link (left out at `default`); the reader's text is noted
    for the other prompt pages, and theirs offered here. Returns (text, problem or None), without stopping
    (`samples`: the page offers something else to pick, and the message for an empty text may say so)."""
    text = url.bound(st.text_area, key, PROMPT.but(default=default), label, height=height, **kwargs)
    note_own_text(text if text != default else None, key)
    offer_own_text(text, max_chars, lambda own: st.session_state.update({key: own}), f"{key}_use_own")
    left_out_note(text)
    _, problem = clean_prompt(text, max_chars, samples)
    return text, problem
