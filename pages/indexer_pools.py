"""Indexer pools: the candidate source's broad scan, the pool it keeps, the Reindex layers' choices inside it,
and what an exhaustive search would have chosen instead. Numbers from lessons/indexer_pools.py; figures from
ui/figures_run.py. User text is shown only through widgets, st.code and dataframes.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from lessons import reproduce as snippets
from lessons.indexer_pools import (
    DEFINITIONS,
    DROPPED_INTRO,
    HOW_COMPUTED,
    INTRO,
    LIMIT_WHY,
    NO_POOL,
    NOTHING_DROPPED,
    matches_model,
    mode_help,
    reindex_inputs,
    reselect,
    row_detail,
    run_caption,
    scale_note,
    short_prompt,
    strip_caption,
    summary_rows,
    trace_for_pools,
)
from lessons.inspector import load_samples
from lessons.layers import map_line
from model import V41Config, layer_map
from ui import url
from ui.cache import built, cached_with_progress
from ui.far_fact import far_fact_panel
from ui.figures import show_token
from ui.figures_run import block_scores_figure, recall_rows_figure
from ui.limits import LONG_PROMPT_CHARS, POOL_TOKENS
from ui.pair import far_pair
from ui.prompt import OWN_TEXT, prompt_ids, sample_or_text
from ui.reproduce import reproduce
from ui.session import page_header, require_model
from ui.step_pair import pool_pair
from ui.text import lead, plain
from ui.url import stop

MAX_TOKENS = POOL_TOKENS  # the re-run keeps [rows, heads, entries] logits per Reindex layer

INTRO_LEAD, INTRO_REST = lead(INTRO, 2)
sess = page_header("Indexer pools", INTRO_LEAD)
model = require_model(sess)
cfg = model.cfg
if not any(s.uses_candidates for s in layer_map(cfg)):
    st.info(NO_POOL)
    stop()
far_pair(sess, "pool_pair", "pools")
with st.expander("Definitions", expanded=False):
    st.table(pd.DataFrame(DEFINITIONS, columns=["term", "meaning"]), hide_index=True)   # meanings in full

samples = load_samples()
long_first = sorted(range(len(samples)), key=lambda i: samples[i].kind != "long")
options = [i for i in long_first] + [OWN_TEXT]
c1, c2 = st.columns([4, 1])
MODE = url.choice("mode", ["exact", "bounded"], "exact", "a prefill mode (exact or bounded)")
mode = url.bound(c2.radio, "pool_mode", MODE, "Prefill", ["exact", "bounded"],
                 help=mode_help(cfg.sliding_window))
sample_i, text = sample_or_text("pool", samples, long_first[1] if len(long_first) > 1 else 0, LONG_PROMPT_CHARS,
                                options=options, label="Prompt", text_label="Prompt text", columns=[c1])
ids = prompt_ids(model, "pool", text, MAX_TOKENS, LIMIT_WHY, LONG_PROMPT_CHARS)
prompt = text


def _compute_for(m, token_ids, prefill, progress):
    """One set's full-detail trace and Reindex re-run (this page's recipe, used for the side-by-side too)."""
    tr = trace_for_pools(m, token_ids, prefill, progress=lambda f, msg: progress(0.9 * f, msg))
    progress(0.9, "re-running the Reindex layers' queries on the recorded states")
    inp = reindex_inputs(m, tr)
    progress(0.97, "selecting at the configured pool size and k")
    reselect(inp)
    return inp


def _compute(progress):
    return _compute_for(model, ids, mode, progress)


try:
    inp = cached_with_progress("pools", (sess.label, tuple(ids), mode), _compute,
                               f"Tracing {len(ids):,} tokens with full detail ...", max_entries=4)
except Exception as e:  # a model-side rejection becomes a message
    st.error(f"The model could not run this prompt: {plain(e)}")
    stop()

blocks_total = (inp.width + inp.block_size - 1) // inp.block_size
pool_positions = cfg.candidate_topk_blocks * cfg.candidate_block_size
st.caption(run_caption(len(ids), inp, mode, cfg))
if inp.width <= pool_positions:
    st.info(short_prompt(inp.width))

# ---- live re-selection ---------------------------------------------------------------------------------------
s1, s2 = st.columns(2)
nb_hi, k_hi = max(2, blocks_total), max(2, min(256, inp.width))
nb_default, k_default = min(cfg.candidate_topk_blocks, blocks_total), min(cfg.index_topk, k_hi)
POOL = url.whole("pool", 1, nb_hi, nb_default, f"showing {nb_default}")
K = url.whole("k", 1, k_hi, k_default, f"showing {k_default}")
nb = url.bound(s1.slider, "pool_nb", POOL, "Pool size (blocks kept)", 1, nb_hi,
               fit=lambda v: min(max(1, int(v)), nb_hi),       # a shorter prompt than before
               help=f"Each block holds {inp.block_size} consecutive entries.")
k = url.bound(s2.slider, "pool_k", K, "Top-k per query", 1, k_hi, fit=lambda v: min(max(1, int(v)), k_hi))
results = reselect(inp, nb, k)
if nb == cfg.candidate_topk_blocks and k == cfg.index_topk:
    st.caption(matches_model(all(r.matches_model for r in results.values())))
with st.expander("Fine print: whose pool these statistics describe, and how they are computed"):
    st.caption(INTRO_REST)
    st.caption(scale_note(cfg, V41Config.preset("v4.1-flash"), int(nb), int(k),
                          chosen=(nb, k) != (nb_default, k_default)))
    st.caption(HOW_COMPUTED)
    st.caption(map_line(cfg, sess.one_based))

rows = summary_rows(inp, results, sess.one_based)
st.subheader("Per Reindex layer")
table = pd.DataFrame(rows)
st.dataframe(table, hide_index=True, key="pool_table")
st.download_button("Table (CSV)", table.to_csv(index=False), file_name="indexer_pools.csv", mime="text/csv",
                   key="pool_dl")
reproduce(snippets.indexer_pools(sess.weights, prompt, mode, int(nb), int(k), sess.one_based), "indexer-pools")

layers = list(results)
default_layer = layers[0]
LAYER = url.layer(cfg.num_hidden_layers, default_layer, f"showing layer {sess.num(default_layer)}").only(
    layers, "a Reindex layer")
layer = url.bound(st.radio, "pool_layer", LAYER, "Reindex layer", layers, horizontal=True,
                  fit=lambda v: v if v in layers else default_layer, format_func=lambda i: f"layer {sess.num(i)}")
res = results[layer]
pos_list = inp.positions.tolist()
st.plotly_chart(built(recall_rows_figure, pos_list, {"recall": res.recall.tolist(),
                                                     "attention mass dropped": res.attention_mass.tolist(),
                                                     "indexer mass dropped": res.indexer_mass.tolist()},
                      f"Layer {sess.num(layer)}: every query row"), width="stretch", key="pool_rows")

# ---- one query row ---------------------------------------------------------------------------------------------
TOKEN = url.whole("token", pos_list[0], pos_list[-1], pos_list[-1], f"showing the last query row, {pos_list[-1]}").only(
    pos_list, "a query row of the decoder in this run")
pos = url.bound(st.select_slider, "pool_token", TOKEN, "Query token (position)", options=pos_list,
                fit=lambda v: v if v in pos_list else pos_list[-1])
row = pos_list.index(pos)
tokens = [model.decode([i]) for i in ids]
st.code(show_token(tokens[pos]), language=None)
d = row_detail(inp, res, row)
m = st.columns(4)
m[0].metric("Recall", f"{d.recall:.0%}" if d.recall == d.recall else "n/a")
m[1].metric("Dropped entries", len(d.dropped))
m[2].metric("Indexer mass dropped", f"{d.indexer_mass:.1%}")
m[3].metric("Attention mass dropped", f"{d.attention_mass:.1%}")
st.plotly_chart(built(block_scores_figure, d, inp.block_size, f"Broad scan at layer {sess.num(inp.candidate_layer)}: "
                      "block scores"), width="stretch", key="pool_blocks")
# the strip beside a recall checkpoint's for the same prompt, layer and row, the fact's entry outlined in both
st.caption(strip_caption(sess.num(layer)))
pool_pair(sess, ids, prompt, mode, int(nb), int(k), layer, pos, inp, d,
          lambda m, i, progress: _compute_for(m, i, mode, progress))
if d.dropped:
    li = inp.layers[layer]
    share = li.would_share[row].mean(0)
    order = li.scores[row].argsort(descending=True).tolist()
    rank = {e: i + 1 for i, e in enumerate(order)}
    r = max(1, inp.ratio)
    df = pd.DataFrame({"entry": d.dropped, "tokens": [f"{e * r}-{(e + 1) * r - 1}" for e in d.dropped],
                       "text": ["".join(show_token(tokens[p]) for p in range(e * r, min((e + 1) * r, len(tokens))))
                                for e in d.dropped],
                       "index score": [float(li.scores[row, e]) for e in d.dropped],
                       "rank (exhaustive)": [rank[e] for e in d.dropped],
                       "would-be share (vs actual denominator)": [float(share[e]) for e in d.dropped]})
    st.write(DROPPED_INTRO)
    st.dataframe(df, hide_index=True, key="pool_dropped")
    st.download_button("Dropped entries (CSV)", df.to_csv(index=False), file_name="dropped_entries.csv",
                       mime="text/csv", key="pool_dl_dropped")
else:
    st.success(NOTHING_DROPPED)

# ---- a fact far past the window: is it in the pool and the top-k? (lessons/far_fact.py) ----------------------
far_fact_panel(sess, "pool", focus="pools")
