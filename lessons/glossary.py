"""The glossary page's terms, in our own words, each with how sure it is (lessons.sources.SURENESS).

Numbers in the definitions are read from the released config through `V41Config.preset("v4.1-flash")` and
the engine's storage formats, so a definition cannot drift from the model it describes.
"""

from __future__ import annotations

from dataclasses import dataclass

from model import V41Config, layer_map
from model.quant import INDEX_FMT, LATENT_FMT, WINDOW_FMT

from .far_fact import reach_sentence
from .sources import marker


@dataclass(frozen=True)
class Term:
    term: str
    meaning: str
    sureness: str          # a key of lessons.sources.SURENESS

    def row(self) -> dict:
        return {"term": self.term, "meaning": self.meaning, "how sure": marker(self.sureness)}


def terms(cfg: V41Config | None = None) -> list[Term]:
    c = cfg or V41Config.preset("v4.1-flash")
    cand = next(s.index for s in layer_map(c) if s.candidate_source)   # roles come from the layer map
    pool = c.candidate_topk_blocks * c.candidate_block_size
    engram = [i for i in c.engram_layer_ids if i < c.num_hidden_layers]
    return [
        Term("CSA2(r, ...)", "The report's name for a layer's attention: Compressed Sparse Attention 2 with compress "
             "ratio r. r tokens are packed into one global entry; CSA2(2, ...) packs pairs, and a ratio of 1 means no "
             "packing (one entry per token). The drawings label these r2 and r1.", "report"),
        Term("window", f"The last {c.sliding_window} raw key/value rows every layer keeps for itself, read "
             "directly, nothing packed. 'Window only' means that nothing older than the window is read directly. "
             + reach_sentence(c.num_hidden_layers, c.sliding_window), "port"),
        Term("SWA (window-only layer)", "Sliding-window attention: a layer that reads only its window and keeps "
             f"no compressed entries. The first {sum(sp.role == 'SWA' for sp in layer_map(c))} encoder layers are "
             "of this kind; the drawings mark them W or 'window only'. DSpark's drafter layers also read only a "
             "window.", "report"),
        Term("sink", "A learned number per attention head that joins the softmax as one extra place to put weight; "
             "it is not a token and carries no value, so the weight it takes is weight the head does not spend on "
             "any row.", "port"),
        Term("compressed entry", "One stored row of global information, made by a Full layer as a learned, gated "
             "weighted sum of r tokens' rows (at ratio 1, one token's projected row, with no gate). Later layers "
             "of its group read it instead of making their own.", "port"),
        Term("latent", "What the cache calculator and the CSA2 table call a stored compressed entry (here a K=V row "
             "of numbers); in MLA, one low-rank row per token from which keys and values are rebuilt.", "port"),
        Term("KV cache", "The keys and values a layer keeps for earlier tokens so that later tokens can attend to "
             "them without recomputing them; in V4.1 it is the windows plus the shared compressed entries and "
             "their index keys.", "port"),
        Term("K=V", "The same stored row serves as the key (what a query scores) and as the value (what gets mixed "
             "in), so it is stored once.", "port"),
        Term("Full / Reuse / Reindex", "The three CSA2 modes. Full makes its group's entries and chooses which to "
             "read; Reuse keeps both the entries and the last choice; Reindex keeps the entries but chooses again. "
             "Every mode still computes its own query, window and attention output.", "report"),
        Term("indexer, index scores", "The indexer is a small scorer beside attention: from the query row it scores "
             "every visible compressed entry against that entry's index key (a short key stored for this purpose). "
             "Those numbers are the index scores; the highest ones decide which entries attention reads.", "port"),
        Term("candidate source", f"The layer whose index scores build the candidate pool: in the release the first "
             f"decoder layer, {cand} counting from 0 ({cand + 1} "
             "counting from 1).", "port"),
        Term("candidate pool", f"At the first decoder layer the indexer scores every visible entry, groups them in "
             f"blocks of {c.candidate_block_size} and keeps the best {c.candidate_topk_blocks:,} blocks (up to "
             f"{pool:,} positions), always including the block that holds the query's newest entry; later Reindex "
             "layers choose only inside it. In our engine, as in the port, they still score every visible entry and "
             "then mask to the pool.", "port"),
        Term("top-k", f"The number of entries one query reads after selection: at most {c.index_topk} in the "
             "release.", "port"),
        Term("far fact, fact entries", "Our recall test (the far-fact panel): a story states a fact (an object in "
             "a coloured container) more tokens back than the window covers, then asks for it. The fact entries "
             "are the compressed entries that pack the fact's tokens (position p is in entry p // r at ratio r); "
             "they are the direct road from the answer token to the fact. Indirect roads remain: stacked windows "
             "relay it hop by hop, and entries of later tokens can carry it.", "ours"),
        Term("FP4, E4M3, UE8M0 block scales", f"FP4 (E2M1) stores a number in 4 bits; a block of numbers shares one "
             f"scale. Compressed entries use blocks of {LATENT_FMT.block} with an 8-bit E4M3 scale; index keys use "
             f"blocks of {INDEX_FMT.block} with a UE8M0 scale (a power of two); window rows are 8-bit FP8 with a "
             f"UE8M0 scale per {WINDOW_FMT.block}.", "port"),
        Term("bounded replay", f"Bounded prefill reads a long prompt through the encoder, publishes the decoder's "
             f"global entries for every row, and runs the decoder only over the last {c.sliding_window} rows. It is "
             "an approximation: the windows of the first replayed rows are cut at the start of that segment. That it "
             "exists and is approximate is the report's; the mechanism described is our implementation's.",
             "report"),
        Term("prefill, decode", "Prefill reads the tokens already in the input and prepares the cache; many tokens "
             "go through together. Decode then makes new tokens one at a time, each a full pass through the model "
             "that must wait for the previous one.", "explainer"),
        Term("HBM, persistent cache", "HBM is the fast memory on the accelerator that holds the cache while a "
             "request runs. A persistent cache is a copy kept in the host's memory or on SSD so a later request can "
             "reuse the work; the release reports its savings against V4-Flash for the two separately.", "release"),
        Term("router, shared expert", f"In each MoE layer a router scores the {c.n_routed_experts} routed experts "
             f"for a token and runs the best {c.num_experts_per_tok}, weighted by their scores; {c.n_shared_experts} "
             "shared expert runs for every token. Experts that are not chosen still take storage.", "port"),
        Term("previous-token head, induction head", "Two kinds of attention head that interpretability studies found "
             "in small transformers, together a way to continue a phrase seen before: a previous-token head puts its "
             "weight on the token just before its own; an induction head, at a repeated token, puts its weight on the "
             "token that followed that token's earlier appearance. The Look-back heads page measures both on the "
             "loaded weights.", "literature"),
        Term("logit lens", "Our inspection device: a layer's hidden state is sent through the model's final norm "
             "and output head as if it were the last layer, to see which tokens it already points to. The model "
             "itself never does this.", "ours"),
        Term("mHC", f"Manifold-constrained hyper-connections: each row travels as {c.hc_mult} residual streams. "
             "Per-token coefficients, computed from the streams by learned projections, say how the streams feed "
             "each sublayer, take its output back, and mix (the mixing matrix is made doubly stochastic by "
             f"{c.hc_sinkhorn_iters} normalisation rounds, so its rows and columns sum to about 1).", "port"),
        Term("Engram", f"A lookup of learned tables addressed by hashes of the last few token ids, gated into the "
             f"streams before attention at {len(engram)} encoder layers. The lookup itself is a few table rows; "
             "projecting them into the streams is ordinary matrix work, and the tables are large in memory.", "port"),
        Term("MLA", "Multi-head latent attention, introduced in DeepSeek-V2: instead of every head's key and value, "
             "a layer caches one compressed latent per token and rebuilds keys and values from it.", "deepseek"),
        Term("DSA", "DeepSeek Sparse Attention, from DeepSeek-V3.2: a small 'lightning' indexer scores every earlier "
             "token and attention reads only the best-scoring ones (2,048 there).", "deepseek"),
        Term("CSA, HCA (V4)", "DeepSeek-V4's two compressed layer kinds, each storing its own entries: CSA packs 4 "
             "tokens per entry and selects the best entries with an indexer; HCA packs 128 and reads them all. "
             "V4.1's CSA2 adds sharing one layer's entries (and choices) with other layers.", "third-party"),
        Term("GQA", "Grouped-query attention: several query heads share one key/value head, so a dense layer caches "
             "fewer key and value rows per token (8 groups in the calculator's Llama-3-70B-like example).",
             "third-party"),
        Term("MTP", "Multi-token prediction: training a model to predict tokens beyond the next one. DeepSeek-V3 "
             "took it from earlier work (Gloeckle et al., 2024, predicted several tokens with parallel heads) in a "
             "sequential form: an extra small layer, trained with the model, predicts a further token from the main "
             "model's state, and can draft tokens for speculative decoding. V4-Flash keeps one (the calculator's "
             "'MTP window rows'); in V4.1 the DSpark drafter does that job.", "deepseek"),
        Term("nats", "The unit of a loss taken with the natural logarithm: a loss of L nats per token means the "
             "right token got probability e^-L in the geometric mean (2.3 nats: 1 in 10); lower is better.", "ours"),
        Term("rollback slack", "Extra rows a window keeps beyond its size, so that when speculative decoding "
             "refuses drafted tokens the cache can drop them and still hold a full window.", "port"),
        Term("recall checkpoint", "Two more sets of tiny weights shipped with the app: the text model's layer map "
             "with every window narrowed to a few tokens, trained mostly on fact-lookup and copying drills, so a far "
             "fact can only come back through the compressed entries. One learned that road from the answers alone. "
             "The other was trained with extra losses aimed at the fact's entry (its attention, index scores and "
             "readout), so its pictures show the road can carry a fact, not that training finds it unaided. Their "
             "everyday English is poor.", "ours"),
        Term("anchor", "The first position of a DSpark block: the last token the main model itself produced. The "
             "drafter guesses the tokens that follow it.", "deepseek"),
        Term("DSpark block", f"{c.dspark_block_size} positions: the anchor (the last token the main model produced) "
             f"plus up to {c.dspark_block_size - 1} tokens the drafter guesses in one pass.", "deepseek"),
        Term("acceptance", "The share of checked guesses the main model keeps (the guesses after a refusal are "
             "never checked, so they count neither way). Greedy: a guess is kept when it is the main model's top "
             "token. Sampling: kept with chance min(1, p/q); on a refusal the replacement is drawn "
             "from norm(max(0, p - q)), so the output keeps the main model's distribution.", "deepseek"),
        Term("arithmetic intensity", "FLOPs a step does per byte it moves through memory. Where the time goes counts "
             "the bytes no kernel can avoid: weights at stored precision and cache rows.", "hardware"),
        Term("ridge", "A chip's peak FLOP/s over its memory bandwidth, in FLOP per byte: a step whose arithmetic "
             "intensity is below it waits on memory, above it on arithmetic.", "hardware"),
        Term("roofline", "A chart of the FLOP/s a chip can reach against arithmetic intensity: a slope (bandwidth) "
             "up to the ridge, then flat (peak compute). Williams, Waterman and Patterson, 2009.", "hardware"),
        Term("memory-bound / compute-bound", "Whether a step's lower bound on time is set by the bytes it must move "
             "or by its arithmetic; the bound takes the larger of the two, as if they overlapped perfectly.",
             "hardware"),
        Term("dense vs with-sparsity TFLOPS", "GPU sheets print tensor-core peaks 'with sparsity' (2:4 structured "
             "zeros); a dense matmul reaches half of that figure, the one used here.", "hardware"),
        Term("MXFP4", "A 4-bit float format (E2M1) with one shared 8-bit power-of-two scale per 32 numbers: 4.25 bits "
             "a number. The release stores its routed experts this way.", "port"),
    ]


INTRO = ("The words the pages use, each in a sentence or two, with how sure the statement is. Numbers are those "
         "of the released DeepSeek-V4.1-Flash config.")


FIND_MAX = 100   # characters of a search; longer input is cut, not refused


def find_terms(query: str, found: list[Term]) -> list[Term]:
    """The terms whose name or meaning holds every word of `query` (case-insensitive); all of them for an empty
    query."""
    words = (query or "")[:FIND_MAX].lower().split()
    return [t for t in found if all(w in f"{t.term} {t.meaning}".lower() for w in words)]
