"""The Figure 3 walkthrough: the story steps, and what each box does (the drawing: figure3_layout.py).

Follows docs/design/architecture.md §2 (layer map) and docs/design/equations.md §3-12 (CSA2, hierarchical indexer,
mHC, MoE, Engram, DSpark). The drawing is GENERATED from `layer_map(cfg)`: the same function lays
out the released 40-layer config and the running tiny model. The story follows the first seed's
path (the job, why change attention, a fresh question, the two halves, the other boxes, recurrence,
the check) in our own words. No Streamlit or Plotly here: boxes are plain coordinates.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from PIL import Image, ImageDraw

from model import V41Config, layer_map
from model.quant import LATENT_FMT

from .attention_shares import TOY_QUERIES, fmt, two_value_mix
from .dspark import block_sentence
from .figure3_layout import Box, _num
from .layers import MODES, bounded_note, stack_runs
from .sources import ONE_BASED, REPORT
from .workload import SPLIT_PRICE


# --------------------------------------------------------------------------------------------------
# The story
# --------------------------------------------------------------------------------------------------
@dataclass
class Step:
    key: str
    title: str
    body: str
    focus: frozenset = field(default_factory=frozenset)   # box tags to highlight
    box: str | None = None      # the box this step opens (an id of figure3_layout's boxes); None closes the open one
    table: list[dict] | None = None                        # an optional small table shown under the text
    read_along: str = ""                                   # where in the report this step's point is made
    links: tuple[tuple[str, str], ...] = ()                # (page file, title): the pages this step sends to
    picture: str = ""                                      # a live picture the page draws with the step ("far")
    fine_print: str = ""        # the step's caveats and finer detail, kept apart from its main text


# the app's pages a step links to, by the titles the navigation shows
PAGES = {
    "attention_shares": ("pages/attention_shares.py", "Attention shares"),
    "csa2_modes": ("pages/csa2_modes.py", "CSA2 modes"),
    "recurrence": ("pages/recurrence.py", "Is this recurrence?"),
    "layer_map": ("pages/layer_map.py", "Layer map"),
    "cache_calculator": ("pages/cache_calculator.py", "Cache calculator"),
    "compare_designs": ("pages/compare_designs.py", "Compare designs"),
    "prefill_decode": ("pages/prefill_decode.py", "Prefill vs decode"),
    "inspector": ("pages/inspector.py", "Prompt inspector"),
    "indexer_pools": ("pages/indexer_pools.py", "Indexer pools"),
    "dspark": ("pages/dspark.py", "DSpark draft & verify"),
    "ablation": ("pages/ablation.py", "Ablation lab"),
}


def _links(*names: str) -> tuple[tuple[str, str], ...]:
    return tuple(PAGES[n] for n in names)


# the steps about packing, picking and reading entries: each links to the stepped picture of that mechanism on a
# real prompt (CSA2 modes)
MECHANISM_STEPS = frozenset({"fresh", "encoder", "decoder", "pool"})
MECHANISM_LINK = "See it run on a real prompt: tokens, entries, scores, pool, top-k (CSA2 modes)"

# the single-pass form, as the engine's block runs it; one wording wherever a page explains the coefficients
MHC_SITE = (
    "In the single-pass form each site computes, from the streams it receives, its own `post` (how the sublayer's "
    "output is written into each stream) and `comb` (a doubly stochastic matrix that blends the streams), plus the "
    "`pre` weights that collapse the streams into the next site's input."
)


def facts(cfg: V41Config) -> dict:
    specs = layer_map(cfg)
    enc = [s for s in specs if s.stack == "encoder"]
    dec = [s for s in specs if s.stack == "decoder"]
    enc_ratio = next((s.compress_ratio for s in enc if s.compress_ratio), 0)
    cand = next((s for s in specs if s.candidate_source), None)
    return {
        "n": len(specs), "n_enc": len(enc), "n_dec": len(dec), "W": cfg.sliding_window,
        "n_swa": sum(s.role == "SWA" for s in specs), "enc_ratio": enc_ratio,
        "topk": cfg.index_topk, "pool": cfg.candidate_topk_blocks * cfg.candidate_block_size,
        "pool_blocks": cfg.candidate_topk_blocks, "pool_block": cfg.candidate_block_size,
        "cand": None if cand is None else cand.index,
        "experts": cfg.n_routed_experts, "per_tok": cfg.num_experts_per_tok, "shared": cfg.n_shared_experts,
        "hc": cfg.hc_mult, "engram": list(cfg.engram_layer_ids), "ngram": cfg.engram_max_ngram_size,
        "draft_block": cfg.dspark_block_size, "targets": list(cfg.dspark_target_layer_ids),
        "runs": {st: stack_runs(specs, st) for st in ("encoder", "decoder")},
    }


def levers(cfg: V41Config, earlier: int = 16, pick: int = 2) -> list[dict]:
    """The four ways to make reading cheaper, on a small example: `earlier` positions to read."""
    r = next((x for x in cfg.backbone_ratios if x > 1), 2)
    packed = earlier // r
    w = min(cfg.sliding_window, earlier)
    return [
        {"move": f"read only the last {w} of {earlier} positions" if w < earlier else
                 "read only the most recent positions (a window)",
         "name in the report": "sliding-window attention (SWA)",
         "what you give up": "direct access to anything older, in that branch"},
        {"move": f"pack every {r} positions into one entry: {earlier} become {packed}",
         "name in the report": f"compression (ratio {r})", "what you give up": "fine detail inside each packed group"},
        {"move": f"read only {pick} chosen entries of the {packed}", "name in the report": "sparse attention (top-k)",
         "what you give up": "direct access to the entries not chosen"},
        {"move": "prepare the entries once and let several layers read them", "name in the report": "KV reuse (CSA2)",
         "what you give up": "each layer preparing its own"},
    ]


def read_along(where: str | None) -> str:
    """The "Read along" line of a step: the report section our source texts name for the point, or the
    report without a section where they name none (a section number is never invented)."""
    if where:
        return f"Read along: {REPORT}, {where}."
    return f"Read along: {REPORT} (our source texts name no section for this point)."


def fp4_sentence(cfg: V41Config) -> str:
    """How one compressed entry is stored, from the engine's storage format (model.quant.LATENT_FMT)."""
    f, d = LATENT_FMT, cfg.head_dim
    vals, scales = d * f.element_bits // 8, d // f.block * f.scale_bits // 8
    return (f"Each entry is stored in FP4: {f.element_bits}-bit numbers (E2M1: one sign bit, two exponent bits, "
            f"one mantissa bit) with one shared scale per block of {f.block} numbers, itself an 8-bit E4M3 number. "
            f"An entry of {d} numbers takes {vals} B of values plus {scales} B of scales. The entry is \"K=V\": "
            "the same stored row serves as the key a query scores and as the value it mixes in.")


def notation(cfg: V41Config, one_based: bool = False) -> str:
    """The report's notation next to the drawing's labels, with this config's numbers."""
    ratios = sorted({s.compress_ratio for s in layer_map(cfg) if s.compress_ratio}, reverse=True)
    pool_layer = next((s.index for s in layer_map(cfg) if s.candidate_source), None)
    r = " and ".join(f"r{x}" for x in ratios) or "none"
    return ("Notation. The report writes a layer's attention as CSA2(r, ...): r is the compress ratio, how many "
            "tokens are packed into one global entry, so CSA2(2, ...) packs pairs of tokens and a ratio of 1 means "
            f"no packing at all (one entry per token). The drawing's labels {r} are these ratios; 'window only' "
            "layers have no global entries. Each attention box with its MoE box counts as one layer. The pool's "
            "first broad scan"
            + (f", at layer {_num(pool_layer, one_based)}," if pool_layer is not None else "")
            + " still scores every visible entry; only the later Reindex layers search inside the pool.")


def steps(cfg: V41Config, one_based: bool = False, engram_params: int | None = None,
          total_params: int | None = None, engram_proj: int | None = None,
          active_decode: int | None = None) -> list[Step]:
    """The story. `engram_params` / `total_params` (from model.count_params, computed by the caller) let the
    Engram step say how much memory its tables take; without them it counts the tables from the config.
    `engram_proj` (one Engram layer's projection parameters) and `active_decode` (active parameters per
    decoded token) let it put a number on the projection's work: one multiply-add per weight per token."""
    f = facts(cfg)
    n = lambda i: _num(i, one_based)  # noqa: E731
    enc_runs = " + ".join(r.formula() for r in f["runs"]["encoder"])
    dec_runs = " + ".join(r.formula() for r in f["runs"]["decoder"])
    engram = ((("layers " if len(f["engram"]) > 1 else "layer ") + " and ".join(str(n(i)) for i in f["engram"]))
              if f["engram"] else "no layer of this config")
    cand = "-" if f["cand"] is None else n(f["cand"])
    dec_full = next((s for s in layer_map(cfg) if s.stack == "decoder" and s.role == "Full"), None)
    dec_first = "-" if dec_full is None else n(dec_full.index)
    rep = next((r for r in f["runs"]["encoder"] + f["runs"]["decoder"] if r.reuse > 1), None)
    rep_n = rep.reuse if rep else 1
    outer = next((r for r in f["runs"]["encoder"] + f["runs"]["decoder"] if r.repeats > 1 and r.head != "SWA"), None)
    mixes = [two_value_mix(round(share * 100)) for _, share in TOY_QUERIES]
    toy = " and ".join(f"{fmt(m.shares[0] * 100)}%/{fmt(m.shares[1] * 100)}% give {fmt(m.result)}" for m in mixes)
    modes = [dict(m, **{"also, in every mode": "a new query, its own window keys and values, its own attention "
                                               "output" + (" (reads only a selected subset)" if m["mode"] == "Full"
                                                           else "")}) for m in MODES]
    tables = engram_params if engram_params is not None else sum(cfg.engram_num_embeddings) * cfg.engram_head_dim
    share = (f", out of {total_params / 1e9:,.0f}B parameters in all (counted from the config; the release quotes "
             "the 552B backbone)" if total_params else "")
    big = f"{tables / 1e9:,.0f}B parameters" if tables >= 1e9 else f"{tables:,} parameters"
    eng_layers = [i for i in f["engram"] if i < cfg.num_hidden_layers]     # Engram layers of the backbone
    n_engram = len(eng_layers)
    if engram_proj and active_decode and n_engram:
        per_layer = f"{engram_proj / 1e6:,.0f}M" if engram_proj >= 1e6 else f"{engram_proj:,}"
        work = (f" (about {per_layer} multiply-adds per token at each Engram layer; at {n_engram} such layers, "
                f"about {100 * n_engram * engram_proj / active_decode:.0f}% of the weights one decoded token is "
                f"multiplied by)")
    else:
        work = ""
    return [
        Step("job", "Start with the job",
             "Read the drawing from the bottom. Text comes in as token ids; the embedding turns each id into a "
             "row of numbers. Every box above rewrites those rows, and at the very top the last row becomes a "
             "score for every possible next token. The two columns are one model cut into halves: "
             f"{f['n_enc']} layers on the left, {f['n_dec']} on the right, {f['n']} in all.",
             frozenset({"job"}), "embed", read_along=read_along("Figure 3")),
        Step("why", "Why change attention?",
             "Inside each layer box, attention lets a row pull in information from earlier positions. For a long "
             "prompt, preparing and reading every earlier position in every layer is the expensive part. This "
             "design trims it four ways at once: a window (each layer reads only its last "
             f"{f['W']} raw rows), packing ({f['enc_ratio']} tokens squeezed into one entry in the left half), "
             f"picking (a query reads at most {f['topk']} global entries), and preparing once for several "
             "layers.",
             frozenset({"layer"}), None, levers(cfg), read_along=read_along("§2.3"),
             links=_links("cache_calculator", "compare_designs"),
             fine_print="Packing means fewer entries to keep; picking means fewer entries touched by each query. "
                        "These counts do not say by themselves how much faster the whole model runs: that has to "
                        "be measured."),
        Step("fresh", "Same information, a fresh question",
             "Keys decide how relevant a stored position is; values are what gets mixed in. A layer's query "
             "turns keys into shares, and the shares weight the values. With two stored values, 10 and 30, "
             f"shares of {toy}: the values did not move, the mix did. So reused entries are not a reused answer. "
             "The three labels of the layers (table below) say which preparation a layer does itself.",
             frozenset({"Reuse"}), None, modes, read_along=read_along("Figure 4 in §2.3.1"),
             links=_links("attention_shares"),
             fine_print="Whatever the label, every layer still computes its own query, window keys and values, and "
                        "attention output, and a Full layer, although it makes everything, still reads only the "
                        "subset it selects."),
        Step("encoder", "The left half: a causal encoder",
             f"The left column is the causal encoder: {enc_runs}. \"Causal\" means a row only ever sees "
             "positions up to its own, so its work on a prompt never has to be redone when more text arrives. "
             f"The bottom {f['n_swa']} layers only look at their window. Each Full layer (dark blue) packs "
             "its input into entries and picks some to read; the pale Reuse layers above it keep both the "
             "entries and the picks.",
             frozenset({"encoder"}), None, read_along=read_along("§2.2 (the encoder-decoder) and §2.3 (CSA2)"),
             links=_links("layer_map"),
             fine_print=fp4_sentence(cfg)),
        Step("line", "The line between the halves",
             f"The red line carries the encoder's final rows across. The decoder's first layer ({dec_first}, Full, "
             "ratio 1) turns each of those rows into one global entry, and every decoder layer reads from that same "
             "set. " + SPLIT_PRICE,
             frozenset({"line"}), "line", read_along=read_along("§2.2, and §3.2.2 for bounded replay"),
             links=_links("prefill_decode"),
             fine_print="When a long prompt is read in bounded mode, most prompt positions stop at the top of the "
                        f"left column: only the last {f['W']} rows climb the decoder. Every newly generated token "
                        "still goes through both halves. " + bounded_note(cfg)),
        Step("decoder", "The right half: a decoder over shared memory",
             f"The right column: {dec_runs}. Only its first layer ({dec_first}, Full) prepares global entries, "
             "from the encoder's final rows; no layer above it prepares them again. The Reindex layers (orange) "
             "keep those entries but choose again with their own indexer, and the Reuse layers keep the latest "
             "choice. Each decoder layer still has its own window, query, output and MoE.",
             frozenset({"decoder"}), None, read_along=read_along("§2.2 and Figure 4 in §2.3.1")),
        Step("repeat", "A frame drawn once stands for many layers",
             "The report's figure draws a repeated structure once, in a dotted frame with a count such as x5: the "
             "drawn structure occurs that many times in a row. A count does not say the copies share weights. "
             "In this model every copy "
             "is a separate layer with its own tensors; the Is this recurrence? page checks that on the real "
             "weights. The compact drawing here draws the frames the same way; switch Compact off to give every "
             "layer its own row.",
             frozenset({"repeat"}), None, read_along=read_along("Figure 3"), links=_links("recurrence"),
             fine_print=f"In Compact mode the count inside a pale Reuse row (x{rep_n}) is how many Reuse layers it "
                        "stands for in each group, and the count beside a dotted frame"
                        + (f" (x{outer.repeats})" if outer else "") + " is how many times the whole group repeats."),
        Step("vision", "Images come in from the side",
             "Pictures do not go through the tokenizer. A separate network, the vision encoder, cuts an image "
             "into patches and turns them into rows of the same width as token rows; those rows take the place "
             "of image placeholder tokens and then climb the same stacks.",
             frozenset({"vision"}), "vision", read_along=read_along(None)),
        Step("moe", "MoE: pick which small networks run",
             "After attention, every layer transforms each row with a feed-forward network. Here that network "
             f"is a mixture: {f['shared']} shared expert that always runs plus {f['per_tok']} of "
             f"{f['experts']} routed experts chosen by a router for each row. The experts that are not chosen "
             "cost no arithmetic for that row but still take up memory.",
             frozenset({"moe"}), "moe:0", read_along=read_along("§4.2.1")),
        Step("engram", "Engram: look up a short pattern",
             f"At {engram}, the last few token ids (up to {f['ngram']} in a row) are hashed into addresses "
             "of large learned tables. The rows found there are gated into the state before attention runs. "
             f"The tables are large in memory: they hold {big}{share}, learned like any other weight.",
             frozenset({"engram"}), f"engram:{min(eng_layers)}" if eng_layers else None,
             read_along=read_along("§2.4.2"),
             fine_print="The lookup itself is only a few table rows per token, but projecting those rows into the "
                        f"streams is ordinary matrix work{work}."),
        Step("mhc", "mHC: several residual paths",
             f"A plain residual connection keeps one copy of each row and adds every update to it. Here each "
             f"row travels as {f['hc']} parallel streams (the thin grey lines). Before and after every "
             "attention and MoE site, mixing coefficients decide how the streams feed the sublayer and how they "
             "are blended again. The coefficients are not fixed numbers: learned projections (plus learned offsets) "
             "compute them for every token from the streams themselves.",
             frozenset({"mhc"}), "mhc:encoder", read_along=read_along("§2.4.1"), fine_print=MHC_SITE),
        Step("pool", "Narrowing the search in two steps",
             f"At layer {cand}, the indexer scores every visible entry (this broad scan still costs work), groups "
             f"them in blocks of {f['pool_block']} and keeps the {f['pool_blocks']:,} best blocks: a pool of up to "
             f"{f['pool']:,} positions. Later Reindex layers pick their {f['topk']} entries only from inside that "
             "pool. An entry left out of the pool cannot be picked by them, however useful it would have been.",
             frozenset({"pool"}), None if f["cand"] is None else f"attn:{f['cand']}",
             read_along=read_along("§2.3.2"), links=_links("indexer_pools")),
        Step("drafter", "DSpark: draft, then verify",
             f"A small drafter reads the states of layers {', '.join(str(n(i)) for i in f['targets'])} and drafts "
             "several tokens at once. The main model then checks the drafted "
             "tokens in one pass and keeps them up to the first one its acceptance rule refuses (an exact match "
             "with its own top token under greedy decoding, a min(1, p/q) draw under sampling). So the output "
             "follows what the main model alone would produce (the same tokens under greedy decoding, the same "
             "distribution under sampling), and good drafts save sequential steps.",
             frozenset({"drafter"}), "drafter", read_along=read_along("§2.4.3"), links=_links("dspark"),
             fine_print=block_sentence(f["draft_block"])),
        Step("check", "Check the idea",
             "If a Reuse layer reads the same entries at the same positions as its source, why is its output "
             "different? Try to answer before opening the Attention shares page, where the answer is one click "
             "away. Then ask what would show that these shortcuts pay off: quality, time and memory compared at "
             "equal budgets, and ablations that switch one piece off.",
             frozenset({"Reuse", "selects"}), None, read_along=read_along(None),
             links=_links("attention_shares", "ablation"),
             fine_print="Two cautions while reading the release: image input, the Engram lookup, the mixing of "
                        "residual streams and drafting are separate components, so a gain from one of them should "
                        "not be credited to cache sharing; and the encoder-decoder split moves work between reading "
                        "the prompt and writing the answer rather than making every token cheaper (each generated "
                        "token still climbs both halves)."),
        Step("far", "See it work: a fact far back",
             "A layer reads a token older than its window directly only through the compressed entries its "
             "indexer selects. The pictures are a 12-layer tiny model with the same kinds of layers and a window of "
             "a few tokens, reading one story whose fact is hundreds of tokens back, trained two ways: from the "
             "answers alone, and with losses aimed at the fact's entry. Each caption says what its decoder layers "
             "read and what is lost with that road switched off.",
             frozenset({"decoder"}), None, read_along=read_along("§2.3"),
             fine_print="The pages linked below show the same reading step by step, on the text model too.",
             links=_links("inspector", "indexer_pools", "ablation"), picture="far"),
    ]


# --------------------------------------------------------------------------------------------------
# What a box does, and what it did on a traced prompt
# --------------------------------------------------------------------------------------------------
def box_text(box: Box, cfg: V41Config, one_based: bool = False) -> str:
    f = facts(cfg)
    n = lambda i: _num(i, one_based)  # noqa: E731
    specs = layer_map(cfg)
    if box.kind == "attn":
        s = specs[box.layers[0]]
        many = len(box.layers) > 1
        head = (f"Stands for layers {', '.join(str(n(i)) for i in box.layers)}: one drawing, "
                f"{len(box.layers)} separate layers with their own weights. " if many else "")
        if s.role == "SWA":
            body = (f"Window-only attention: each row reads the last {f['W']} raw rows of this layer and nothing "
                    "packed; nothing older is read directly, only what those rows already carry from layers below.")
        elif s.role == "Full":
            pack = "one entry per token" if s.compress_ratio == 1 else f"one entry per {s.compress_ratio} tokens"
            src = (" Its input here is the encoder's final states, so the whole decoder reads memory the "
                   "encoder prepared." if s.stack == "decoder" else "")
            pool = (f" It also builds the candidate pool ({f['pool']:,} positions at most) for the Reindex layers "
                    "above." if s.candidate_source else "")
            body = (f"Full: makes its group's compressed entries ({pack}) and index keys, then its indexer picks "
                    f"up to {f['topk']} entries for each query. Plus its own {f['W']}-row window.{src}{pool}")
        elif s.role == "Reindex":
            body = (f"Reindex: keeps the entries of layer {n(s.kv_source)}, but runs its own indexer query to "
                    f"choose up to {f['topk']} of them again" + (", inside the candidate pool" if s.uses_candidates
                                                                  else "") + f". Plus its own {f['W']}-row window.")
        else:
            body = (f"Reuse: reads the entries layer {n(s.kv_source)} made, at the positions layer "
                    f"{n(s.index_source)} picked. Its query, window, output and MoE are its own, so the same "
                    "entries get new shares.")
        return head + body
    if box.kind == "moe":
        return (f"Mixture of experts: a router scores {f['experts']} routed experts for each row and runs the "
                f"best {f['per_tok']}, plus {f['shared']} shared expert that always runs. Present in every layer.")
    if box.kind == "engram":
        return (f"Engram: hashes of the last 2 to {f['ngram']} token ids address learned tables; a gate per "
                "stream decides how much of the looked-up row is added before attention. The lookup is a few rows "
                "per token; projecting them into the streams is ordinary matrix work; the tables are large in "
                "memory.")
    if box.kind == "mhc":
        return (f"{f['hc']} residual streams per row, mixed at every attention and MoE site; all the coefficients "
                "are computed for each token from the streams by learned projections. " + MHC_SITE)
    if box.kind in ("line", "states"):
        return ("The encoder's final rows, one per token, carried into the decoder. The decoder's Full layer "
                "turns them into the global entries all decoder layers share, so old prompt positions do not have "
                "to climb the decoder.")
    if box.kind == "vision":
        return ("A separate image network: it cuts the picture into patches, encodes them, and hands the language "
                "model one row per image token, in place of the image placeholder tokens.")
    if box.kind == "embed":
        return "Looks up one learned row per token id; the row is copied into every mHC stream."
    if box.kind == "head":
        return "Collapses the streams, normalises, and scores every token of the vocabulary as the next one."
    if box.kind == "drafter":
        return (f"DSpark: reads the states of layers {', '.join(str(n(i)) for i in f['targets'])} and drafts "
                f"several tokens in one go; the main model verifies them together. "
                + block_sentence(f['draft_block']))
    return ""


@dataclass
class LiveLayer:
    """Numbers from one layer of a trace, at one query position (plain Python, safe to cache)."""

    layer: int
    role: str
    position: int
    window_rows: int
    entries_stored: int | None
    entries_visible: int | None
    entries_selected: int | None
    selection_here: bool
    pool: int | None          # entries in the candidate pool at this row (None: the layer does not use one)
    shares: dict              # mean over heads: window / entries / sink
    experts: list[int]
    expert_weights: list[float]
    engram_gate: list[float] | None
    comb: list[list[float]] | None
    lens: list[tuple[int, float]]
    scored: int | None = None     # entries this layer's indexer scored at this row (finite scores)
    builds_pool: bool = False     # the candidate source: it scores every visible entry and keeps the pool

    def selection_sentence(self, pool_max: int) -> str:
        """Where this layer's selection comes from, and the pool in the same units the box text uses."""
        made = "made here" if self.selection_here else "kept from an earlier layer"
        if self.pool is None:
            return f"Selection {made}."
        if self.builds_pool:
            return (f"Selection {made}: its indexer scored {self.scored or 0:,} entries, and from them it kept a "
                    f"candidate pool of {self.pool:,} entries (at most {pool_max:,}) for the Reindex layers.")
        return f"Selection {made}, inside the candidate pool of {self.pool:,} entries (at most {pool_max:,})."

    def shares_sentence(self) -> str:
        sh = self.shares
        return (f"Share of attention (mean over heads): window {sh['window']:.1%}, selected entries "
                f"{sh['entries']:.1%}, sink {sh['sink']:.1%}.")

    def entries_read_help(self) -> str:
        return f"the entries this query selected, out of {self.entries_visible} it could see"

    def experts_sentence(self, n_routed: int) -> str:
        """The experts this row was routed to (of `n_routed`), with their weights."""
        return (f"Experts routed for this row: **{', '.join(map(str, self.experts))}** (of {n_routed}), weights "
                f"{', '.join(f'{w:.2f}' for w in self.expert_weights)}, plus the shared expert.")

    def gate_sentence(self) -> str:
        """The Engram gate per mHC stream, or that this layer has none."""
        if self.engram_gate is None:
            return "No Engram record for this layer."
        return ("Gate per mHC stream (0 = ignore the looked-up row, 1 = add all of it): "
                + ", ".join(f"{g:.2f}" for g in self.engram_gate))


# ---- the page's other texts ------------------------------------------------------------------------------------------
HOW_TO_READ = "Step through the story, or click a box's dot to open it."
COMPACT_HELP = "Each repeated group drawn once, with its count; off, every layer has its own row."
NO_BOX = "No box open: click a dot in the drawing."
LIVE_NEEDS_RUNNING = ("Live numbers come from a trace of the running model: switch **Draw** to *The running "
                      "model* to see them.")
VISION_BELOW = "The steps for a small sample picture are drawn below the figure."
NO_VISION_PANEL = "The step-by-step vision panel is not available in this build."
ENTRIES_STORED_HELP = "compressed entries in this layer's group (made by its KV source)"
COMB_CAPTION = ("`comb` at the attention site (row: from stream, column: to stream); rows and columns "
                "each add up to about 1:")


def drawing_caption(cfg: V41Config, one_based: bool) -> str:
    """Which config the drawing shows and how its layers are numbered."""
    return (f"{cfg.num_hidden_layers} layers of {cfg.name}, drawn from its layer map, numbered from "
            + (f"1 ({ONE_BASED})." if one_based else "0."))


def live_caption(n_tokens: int, weights: str, last_token: str) -> str:
    """Where the live numbers come from (`last_token`: the last token as the page shows it, quoted)."""
    return (f"Live, from a trace of {n_tokens} tokens on {weights}; numbers for the query at the last "
            f"position ({n_tokens - 1}: {last_token}).")


def lens_guesses(guesses: str) -> str:
    return f"Had the model stopped after this layer, its top guesses: {guesses}"


def live_layer(trace, layer: int, position: int | None = None) -> LiveLayer:
    rec = trace.layers[layer]
    s = rec.spec
    pos = int(rec.positions[-1]) if position is None else position
    row = rec.row(pos)
    if row is None:
        raise ValueError(f"layer {layer} did not process position {pos}")
    sh = rec.shares
    w = sh.window.shape[-1]
    stored = visible = selected = pool = scored = None
    if s.compress_ratio:
        stored = trace.layers[s.kv_source].source_len
        visible = min((pos + 1) // s.compress_ratio, stored)
        selected = int((sh.entry_ids[0, row] >= 0).sum())
        if rec.index_scores is not None:
            scored = int(torch.isfinite(rec.index_scores[0, row]).sum())
        # the pool is the candidate source's record at this row: the source scores every visible entry, so its
        # own count of scores is not the pool
        cand = next((r for r in trace.layers if r.spec.candidate_source and r.candidates is not None), None)
        crow = None if cand is None else cand.row(pos)
        if crow is not None and (s.candidate_source or s.uses_candidates):
            pool = int(cand.candidates[0, crow].sum())
    shares = {"window": float(sh.window[0, row].sum(-1).mean()), "entries": float(sh.entries[0, row].sum(-1).mean()),
              "sink": float(sh.sink[0, row].mean())}
    lens = rec.lens_at(row)
    return LiveLayer(
        layer=layer, role=s.role, position=pos, window_rows=min(w, pos + 1), entries_stored=stored,
        entries_visible=visible, entries_selected=selected, selection_here=rec.topk is not None, pool=pool,
        shares=shares, experts=[int(e) for e in rec.router_experts[0, row].tolist()],
        expert_weights=[float(x) for x in rec.router_weights[0, row].tolist()],
        engram_gate=None if rec.engram_gate is None else [float(g) for g in rec.engram_gate[0, row].tolist()],
        comb=None if rec.hc_attn is None else [[float(v) for v in r] for r in rec.hc_attn.comb[0, row].tolist()],
        lens=lens, scored=scored, builds_pool=bool(s.candidate_source))


def sample_image(size: int = 64):
    """A small synthetic picture (four coloured quadrants and a diagonal) for the vision box."""
    img = Image.new("RGB", (size, size), (240, 240, 240))
    d = ImageDraw.Draw(img)
    h = size // 2
    for (x, y), c in zip([(0, 0), (h, 0), (0, h), (h, h)], [(200, 60, 60), (60, 140, 200), (70, 170, 90),
                                                             (230, 190, 60)]):
        d.rectangle([x, y, x + h - 1, y + h - 1], fill=c)
    d.line([0, 0, size - 1, size - 1], fill=(20, 20, 20), width=max(1, size // 16))
    return img
