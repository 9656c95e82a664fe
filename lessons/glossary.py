"""The glossary page's terms, in our own words, each with how sure it is (lessons.sources.SURENESS).

Numbers in the definitions are read from the released config through `V41Config.preset("v4.1-flash")` and
the engine's storage formats, so a definition cannot drift from the model it describes.
"""

from __future__ import annotations

from dataclasses import dataclass

from model import V41Config
from model.quant import INDEX_FMT, LATENT_FMT, WINDOW_FMT

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
    pool = c.candidate_topk_blocks * c.candidate_block_size
    return [
        Term("CSA2(r, ...)", "The report's name for a layer's attention: Compressed Sparse Attention 2 with compress "
             "ratio r. r tokens are packed into one global entry; CSA2(2, ...) packs pairs, and a ratio of 1 means no "
             "packing (one entry per token). The drawings label these r2 and r1.", "report"),
        Term("window", f"The last {c.sliding_window} raw key/value rows every layer keeps for itself, read "
             "directly, nothing packed. A window-only layer reads nothing else.", "code"),
        Term("compressed entry", "One stored row of global information, made by a Full layer by pooling r tokens "
             "(or one token at ratio 1). Later layers of its group read it instead of making their own.", "code"),
        Term("K=V", "The same stored row serves as the key (what a query scores) and as the value (what gets mixed "
             "in), so it is stored once.", "code"),
        Term("Full / Reuse / Reindex", "The three CSA2 modes. Full makes its group's entries and chooses which to "
             "read; Reuse keeps both the entries and the last choice; Reindex keeps the entries but chooses again. "
             "Every mode still computes its own query, window and attention output.", "report"),
        Term("candidate pool", f"At the first decoder layer the indexer scores every visible entry, groups them in "
             f"blocks of {c.candidate_block_size} and keeps the best {c.candidate_topk_blocks:,} blocks (up to "
             f"{pool:,} positions); later Reindex layers choose only inside it.", "code"),
        Term("top-k", f"The number of entries one query reads after selection: at most {c.index_topk} in the "
             "release.", "code"),
        Term("far fact, fact entries", "Our recall test (the far-fact panel): a story states a fact (an object in "
             "a coloured container) far more tokens back than the window reaches, then asks for it. The fact entries "
             "are the compressed entries that pack the fact's tokens (position p is in entry p // r at ratio r); "
             "only through them can the answer token reach the fact.", "measured"),
        Term("FP4, E4M3, UE8M0 block scales", f"FP4 (E2M1) stores a number in 4 bits; a block of numbers shares one "
             f"scale. Compressed entries use blocks of {LATENT_FMT.block} with an 8-bit E4M3 scale; index keys use "
             f"blocks of {INDEX_FMT.block} with a UE8M0 scale (a power of two); window rows are 8-bit FP8 with a "
             f"UE8M0 scale per {WINDOW_FMT.block}.", "code"),
        Term("bounded replay", f"Bounded prefill reads a long prompt through the encoder, publishes the decoder's "
             f"global entries for every row, and runs the decoder only over the last {c.sliding_window} rows. It is "
             "an approximation: the windows of the first replayed rows are cut at the start of that segment.",
             "report"),
        Term("mHC", f"Manifold-constrained hyper-connections: each row travels as {c.hc_mult} residual streams. "
             "Per-token coefficients, computed from the streams by learned projections, say how the streams feed "
             "each sublayer, take its output back, and mix (the mixing matrix is doubly stochastic).", "code"),
        Term("Engram", "A lookup of learned tables addressed by hashes of the last few token ids, gated into the "
             "streams before attention at two encoder layers: little arithmetic, a lot of memory.", "code"),
        Term("DSpark block", f"{c.dspark_block_size} positions: the anchor (the last token the main model produced) "
             f"plus up to {c.dspark_block_size - 1} tokens the drafter guesses in one pass.", "code"),
        Term("acceptance", "The share of drafted tokens the main model keeps. Greedy: a guess is kept when it is the "
             "main model's top token. Sampling: kept with chance min(1, p/q); on a refusal the replacement is drawn "
             "from norm(max(0, p - q)), so the output keeps the main model's distribution.", "code"),
    ]


INTRO = ("The words the pages use, each in a sentence or two, with how sure the statement is. Numbers are those "
         "of the released DeepSeek-V4.1-Flash config.")
