"""Home page: V4.1 in one screen (ui.home: what is new, the far-fact picture, the tour, a Figure 3 thumbnail), then
the job itself: next-token scores for an editable prompt, beside the limits of the weights running here."""

import streamlit as st

from lessons import reproduce as snippets
from lessons.home import RANDOM_NOTE
from ui.cache import built
from ui.figures import top_tokens_bar
from ui.home import draw_limits, opening
from ui.limits import PROMPT_CHARS, URL_PROMPT_CHARS
from ui.live import next_tokens
from ui.prompt import typed_prompt
from ui.reproduce import reproduce
from ui.session import page_header
from ui.sources import page_link
from ui.text import plain
from ui.tour import shows
from ui.url import fragment, stop

sess = page_header("V4.1 Explorer")
opening(sess)
if not shows("home_live"):    # a tour stop on the home page: its part alone
    stop()

DEFAULT_PROMPT = "The key is in the blue box. The box is"


@fragment
def live_part() -> None:
    """The prompt and its next-token scores. A fragment: editing the prompt reruns only this part, so a
    classroom of visitors typing at once costs the server the chart, not the whole page, per edit."""
    text, problem = typed_prompt("home_prompt", DEFAULT_PROMPT, PROMPT_CHARS)
    if problem:
        st.warning(problem)
        return
    try:
        table = next_tokens(sess, text, 12)   # batched with the other visitors' prompts, kept for the next who asks
    except ValueError as e:
        st.warning(f"{plain(e).capitalize()}.")
        return
    if table is None:                         # the server is busy: the message says so
        return
    st.plotly_chart(built(top_tokens_bar, table), width="stretch", key="home_bar")
    st.caption(f"{table.n_tokens} prompt tokens read by {sess.label} on {sess.device.upper()}. "
               "Bars show the probability the model gives each possible next token.")
    if len(text) <= URL_PROMPT_CHARS:   # the prompt travels in the link, so it must fit one
        follow = {"prompt": text}
        c1, c2 = st.columns(2)
        with c1:
            page_link("pages/inspector.py", "Step through this prompt layer by layer", ":material/search:", follow)
        with c2:
            page_link("pages/dspark.py", "Watch DSpark draft its continuation", ":material/bolt:", follow)
    reproduce(snippets.home(sess.weights, text), "home")


st.divider()
st.subheader("Your prompt, on the model running here")
left, right = st.columns([3, 2], gap="large")
with right:
    draw_limits(sess)
with left:
    if sess.model is None:
        st.info(sess.error or "No model loaded.")
    else:
        live_part()
        if sess.weights == "random":
            st.info(RANDOM_NOTE)
