"""Cache layouts of the designs the Memory pages compare, as `lessons.cache_calculator.Design`s.

- DeepSeek-V4.1-Flash and any V41Config (the running tiny model): derived from the config through
  `model.layer_map` and the storage formats of `model.quant` (docs/design/architecture.md §2-3,
  docs/design/equations.md §7), so the bytes per layer equal `model.accounting.cache_bytes` and the engine's
  measured `Cache.nbytes()`;
- DeepSeek-V4-Flash with vLLM's cache formats (docs/design/equations.md §14);
- DeepSeek-V3.2 (MLA latent + FP8 indexer keys, docs/design/equations.md §14);
- plain per-layer K/V (GQA; and V4.1's own sizes without compression or sharing);
- the second seed's uniform teaching example;
- a Gemma-4-like local/global design with cross-layer KV sharing, a Qwen3.8-Flash-Next-like hybrid and
  shared-depth recurrence (§10; sizes there are placeholders, and each design lists what is not known).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from model import V41Config, layer_map
from model.quant import INDEX_FMT, LATENT_FMT, WINDOW_FMT, Format

from .cache_calculator import CalcError, Design, Knobs, Part, Store, calculate, validate_knobs
from .sources import EXPLAINER_1, EXPLAINER_2, marker
from .units import counted, human_bytes

MIB = 1 << 20

# ------------------------------------------------------------------------------------------------
# Helpers
# ------------------------------------------------------------------------------------------------


def _parts(fmt: Format, dim: int, label: str, kind: str) -> tuple[Part, ...]:
    """Values plus block scales in one of the engine's formats (fp32 when the row cannot be blocked)."""
    if not fmt.quantizes(dim):
        return (Part(f"{label} (fp32, unblockable width)", dim, 32, kind),)
    scales = Part(f"block scales (1 per {fmt.block})", dim // fmt.block, fmt.scale_bits,
                  "block_scales" if kind != "drafter" else kind)
    return Part(f"{label} ({fmt.element_bits}-bit)", dim, fmt.element_bits, kind), scales


def latent_format(bits: int) -> Format:
    """The compressed-latent format at a chosen precision: FP4 as released; the others are what-ifs."""
    return {4: LATENT_FMT, 8: Format("fp8/ue8m0x32", 8, 32, 8), 16: Format("bf16", 16, 1, 0),
            32: Format("fp32", 32, 1, 0)}[bits]


def _plain_parts(dim: int, bits: int, label: str, kind: str) -> tuple[Part, ...]:
    fmt = latent_format(bits)
    if fmt.scale_bits == 0:
        return (Part(f"{label} ({bits}-bit)", dim, bits, kind),)
    return _parts(fmt, dim, label, kind)


def _owners(n_layers: int, group: int) -> tuple[int, ...]:
    """Layers holding a stored copy when each run of `group` layers shares one."""
    return tuple(range(0, n_layers, group))


# ------------------------------------------------------------------------------------------------
# DeepSeek-V4.1 from a config
# ------------------------------------------------------------------------------------------------

def v41_shares(specs, window: int) -> dict[str, str]:
    """What a V4.1 layout shares, counted from its layer map and the window in use."""
    full = sum(1 for s in specs if s.role == "Full")
    readers = sum(1 for s in specs if s.kv_source is not None)
    return {
        "prepared data": f"Yes: Reuse and Reindex layers read the compressed latents and index keys made by their "
                         f"group's Full layer ({full} stored cop{'y' if full == 1 else 'ies'} serve {readers} "
                         "compressed layers).",
        "selection": "Partly: Reuse layers keep the last selection; Reindex layers choose again inside the pool.",
        "update rule (weights)": "No: every layer has its own weights.",
        "per-token state": f"Compressed latents + index keys (grow with the context); every layer's own {window}-row "
                           "window (fixed).",
    }


V41_SHARES = v41_shares(layer_map(V41Config.preset("v4.1-flash")), V41Config.preset("v4.1-flash").sliding_window)


def v41_design(cfg: V41Config, knobs: Knobs, *, key: str = "v4.1-flash", label: str = "DeepSeek-V4.1-Flash",
               drafter: bool = True, use_knobs: bool = True) -> Design:
    """The cache a V41Config's engine holds. With `use_knobs` the window and latent bits come from the knobs
    (what-ifs); without, the config's own window and the released FP4 latents (for the engine check)."""
    window = knobs.window if use_knobs else cfg.sliding_window
    bits = knobs.bits if use_knobs else 4
    if window != cfg.sliding_window:
        cfg = cfg.replace(sliding_window=window)
    n, d, di, rb = cfg.num_hidden_layers, cfg.head_dim, cfg.index_head_dim, knobs.rollback
    dec = cfg.decoder_start
    bounded = knobs.mode == "bounded" and dec < n
    specs = layer_map(cfg)
    cap = window - 1 + rb
    stores: list[Store] = []
    wparts = _parts(WINDOW_FMT, d, "K=V values", "window")
    for lo, hi, c, stack in ((0, dec, cap, "encoder"), (dec, n, min(cap, window) if bounded else cap, "decoder")):
        if hi > lo:
            stores.append(Store(
                name=f"{stack} window rows", kind="window", layers=tuple(range(lo, hi)), parts=wparts, cap=c,
                in_engine=True,
                read_by=hi - lo, persist="window" if (stack == "decoder" and dec < n) else "always",
                note=f"each layer keeps its own last {counted(window - 1, 'row')} + {rb} rollback slack"
                     + (" (bounded prefill: the replayed decoder rows only)"
                        if bounded and stack == "decoder" else "")))
    if dec < n:
        hc, dim = cfg.hc_mult, cfg.hidden_size
        replay = knobs.replay if use_knobs else window   # the engine replays its window; the knob asks what if
        stores.append(Store(
            name="replay input", kind="replay_input", layers=(dec,), cap=replay, hbm=False, persist="replay",
            parts=(Part("decoder-input streams (fp32)", hc * dim, 32, "replay_input"),
                   Part("pre mix (fp32)", hc, 32, "replay_input")),
            note=f"the last {replay} rows' {hc} mHC streams and pre mix at the decoder's input: what our engine's "
                 "prefix cache keeps so that bounded replay can rebuild the decoder's windows; not held on the "
                 "accelerator after prefill"))
    lfmt = latent_format(bits)
    for r in sorted({s.compress_ratio for s in specs if s.role == "Full"}, reverse=True):
        src = tuple(s.index for s in specs if s.role == "Full" and s.compress_ratio == r)
        readers = sum(1 for s in specs if s.kv_source in src)
        selectors = sum(1 for s in specs if s.kv_source in src and s.selects)
        stores.append(Store(name=f"latents, ratio {r}", kind="latents", layers=src, ratio=r, read_by=readers,
                            in_engine=True,
                            parts=_parts(lfmt, d, "latent values", "latents") if lfmt.scale_bits
                            else (Part(f"latent values ({bits}-bit)", d, bits, "latents"),),
                            note_refs=(src,), note=f"made by layer{'s' if len(src) > 1 else ''} {{}}; "
                                 f"read by {counted(readers, 'layer')}"))
        stores.append(Store(name=f"index keys, ratio {r}", kind="index_keys", layers=src, ratio=r, read_by=selectors,
                            in_engine=True,
                            parts=_parts(INDEX_FMT, di, "key values", "index_keys"),
                            note=f"scored by {counted(selectors, 'selecting layer')} (Full + Reindex)"))
        if r > 1:
            stores.append(Store(name=f"pending rows, ratio {r}", kind="pending", layers=src, ratio=r, growth="pending",
                                slack=rb, in_engine=True, parts=(Part("projected kv (fp32)", d, 32, "pending"),
                                                 Part("gate logits (fp32)", d, 32, "pending")),
                                note="rows of the incomplete group (+ rollback slack), not yet pooled"))
    names: dict[int, str] = {}
    roles = [s.role for s in specs]
    if drafter and cfg.num_nextn_predict_layers:
        k = cfg.num_nextn_predict_layers
        ids = tuple(range(n, n + k))
        names = {i: f"D{j}" for j, i in enumerate(ids)}
        roles += ["Drafter"] * k
        stores.append(Store(name="drafter window rows", kind="drafter", layers=ids, cap=window, read_by=k,
                            parts=_parts(WINDOW_FMT, d, "K=V values", "drafter"), persist="never",
                            note="DSpark's sliding-window layers; format assumed equal to the backbone window; "
                                 "not held by our engine's Cache; rebuilt from the target layers' states the drafter "
                                 "reads"))
    full = cfg.name in ("v4.1-flash",)
    n_full = sum(1 for s in specs if s.role == "Full")
    enc_r = sorted({s.compress_ratio for s in specs if s.role == "Full" and s.stack == "encoder"})
    dec_r = sorted({s.compress_ratio for s in specs if s.role == "Full" and s.stack == "decoder"})

    def pooled(rs: list[int]) -> str:
        return " and ".join("keeps one latent per token" if r == 1 else f"pools {r} tokens per latent" for r in rs)

    latent_name = "FP4" if bits == 4 else f"{bits}-bit"
    return Design(
        key=key, label=label, stores=stores, n_layers=n, roles=roles, layer_names=names,
        short=label.replace("DeepSeek-", ""),
        summary=(f"CSA2: every layer keeps a {window}-row FP8 window; {n_full} Full layer{'s' if n_full != 1 else ''} "
                 f"make {latent_name} latents + index keys that Reuse/Reindex layers share"
                 + (f"; the encoder {pooled(enc_r)}" if enc_r else "")
                 + (f", the decoder {pooled(dec_r)}, made once from the encoder's output" if dec_r else "") + "."),
        status="config" if full else "config (our preset)",
        sources=[f"Hugging Face transformers' DeepSeek-V4.1 config and modeling code: layer schedule, sharing, FP4 "
                 f"and FP8 storage formats ({marker('port')})",
                 f"this explorer's engine: the bytes its cache holds, packed as those formats ({marker('measured')})"],
        unknowns=["The deployed system's exact cache layout (paging, padding, alignment) is not public; these are the "
                  "bytes of our faithful engine.", "The drafter's cache format is assumed."] if full else [],
        shares=v41_shares(specs, window),
        knobs_used=("context", "batch", "bits", "window", "replay", "rollback", "mode"),
        has_replay=dec < n, decoder_layers=tuple(range(dec, n)))


def flash_v41(k: Knobs) -> Design:
    return v41_design(V41Config.preset("v4.1-flash"), k)


# ------------------------------------------------------------------------------------------------
# Other DeepSeek designs
# ------------------------------------------------------------------------------------------------

_V4_ENTRY = (Part("NoPE values (FP8)", 448, 8, "latents"), Part("RoPE values (BF16)", 64, 16, "latents"),
             Part("UE8M0 scales (7) + 1 pad byte", 8, 8, "block_scales"))


def _v4_parts(kind: str) -> tuple[Part, ...]:
    return tuple(dataclasses.replace(p, kind=kind if p.kind == "latents" else p.kind) for p in _V4_ENTRY)


def v4_flash(k: Knobs) -> Design:
    """V4-Flash: 43 layers [0,0] + [4,128]*20 + [4]; vLLM's 584 B entries and 132 B indexer keys (§4.6-4.7)."""
    ratios = [0, 0] + [4, 128] * 20 + [4]
    csa = tuple(i for i, r in enumerate(ratios) if r == 4)
    hca = tuple(i for i, r in enumerate(ratios) if r == 128)
    n = len(ratios)
    stores = [
        Store(name="window rows", kind="window", layers=tuple(range(n)), cap=k.window, parts=_v4_parts("window"),
              read_by=n, note="584 B per row in vLLM's SWA cache"),
        Store(name="CSA latents, ratio 4", kind="latents", layers=csa, ratio=4, parts=_v4_parts("latents"),
              read_by=len(csa), note="one stored copy per CSA layer: no cross-layer sharing in V4"),
        Store(name="CSA indexer keys, ratio 4", kind="index_keys", layers=csa, ratio=4, read_by=len(csa),
              parts=(Part("key values (FP8)", 128, 8, "index_keys"), Part("fp32 scale", 1, 32, "block_scales")),
              note="132 B per key (vLLM default; MXFP4 optional)"),
        Store(name="HCA latents, ratio 128", kind="latents", layers=hca, ratio=128, parts=_v4_parts("latents"),
              read_by=len(hca), note="dense attention over all visible entries; no indexer"),
        Store(name="MTP window rows", kind="drafter", layers=(n,), cap=k.window, parts=_v4_parts("drafter"),
              persist="never", note="the MTP layer is sliding-window only"),
    ]
    roles = ["SWA"] + ["SWA"] + ["CSA (ratio 4)" if r == 4 else "HCA (ratio 128)" for r in ratios[2:]] + ["Drafter"]
    return Design(
        key="v4-flash", label="DeepSeek-V4-Flash", short="V4-Flash", stores=stores, n_layers=n, roles=roles,
        layer_names={n: "MTP"},
        summary=f"Hybrid attention: {len(csa)} CSA layers (pool 4 tokens, select top-512) and {len(hca)} HCA layers "
                f"(pool 128, read all), each storing its own compressed entries; a {k.window}-row window on every "
                "layer.",
        status="published formats",
        sources=[f"published DeepSeek-V4-Flash configs: the layer schedule ({marker('third-party')})",
                 f"vLLM's DeepSeek-V4 serving code: 584 B cache entries, 132 B indexer keys ({marker('third-party')})",
                 f"about 3.85 KB per token at 1M tokens, from those formats ({marker('inference')})"],
        unknowns=["Compressor state of incomplete groups is not counted (small).",
                  "Whether V4 itself stores entries in FP4 is open; vLLM uses FP8 + BF16 RoPE."],
        shares={"prepared data": "No: each CSA/HCA layer stores its own compressed entries.",
                "selection": "No: each CSA layer runs its own indexer.",
                "update rule (weights)": "No.",
                "per-token state": "Compressed entries in 41 layers (ratio 4 or 128) + indexer keys in 21."},
        knobs_used=("context", "batch", "window"))


def v32(k: Knobs) -> Design:
    """V3.2: 61 MLA layers, latent 512 + RoPE 64 per token (BF16 by default) and FP8 indexer keys (128 + 4 B)."""
    n = 61
    lat = (Part("c_kv latent", 512, k.bits, "latents"), Part("k_pe RoPE key", 64, k.bits, "latents"))
    stores = [
        Store(name="MLA latents", kind="latents", layers=tuple(range(n)), parts=lat, read_by=n,
              note="one latent per token per layer, shared by all 128 heads (MQA mode of MLA)"),
        Store(name="indexer keys", kind="index_keys", layers=tuple(range(n)), read_by=n,
              parts=(Part("key values (FP8)", 128, 8, "index_keys"), Part("fp32 scale", 1, 32, "block_scales")),
              note="DSA lightning indexer: FP8 key + one fp32 scale per 128"),
    ]
    return Design(
        key="v3.2", label="DeepSeek-V3.2 (MLA + DSA)", short="V3.2", stores=stores, n_layers=n,
        roles=["MLA + indexer"] * n,
        summary="Every layer stores one MLA latent (512 + 64 numbers) per token and an FP8 indexer key; sparse "
                "attention reads the top-2048 tokens.",
        status="published formats",
        sources=[f"DeepSeek-V3.2-Exp's released config and inference code ({marker('deepseek')})"],
        unknowns=["The MTP layer's cache is not counted.", "Serving engines may store the latent in FP8."],
        shares={"prepared data": "No: each layer stores its own latent.", "selection": "No: each layer selects.",
                "update rule (weights)": "No.", "per-token state": "MLA latent + indexer key in every layer."},
        knobs_used=("context", "batch", "bits"))


# ------------------------------------------------------------------------------------------------
# Uniform designs: the explainer's teaching example and plain per-layer K/V
# ------------------------------------------------------------------------------------------------

def _uniform(key: str, label: str, n: int, parts: tuple[Part, ...], k: Knobs, summary: str, status: str,
             sources: list[str], per_layer_note: str) -> Design:
    if k.group > n:
        raise CalcError(f"a sharing group of {k.group} layers is larger than the {n} layers")
    owners = _owners(n, k.group)
    roles = ["Own copy" if i in owners else "Shares copy" for i in range(n)]
    stores = [Store(name="global entries" if key == "teaching" else "K/V rows", kind="kv", layers=owners,
                    ratio=k.ratio, parts=parts, read_by=n,
                    note=per_layer_note + (f"; groups of {k.group} layers share one copy" if k.group > 1 else ""))]
    short = {"teaching": "Teaching", "gqa": "GQA", "plain-v41": "Plain V4.1 sizes"}[key]
    return Design(key=key, label=label, short=short,
                  stores=stores, n_layers=n, roles=roles, summary=summary, status=status,
                  sources=sources, knobs_used=("context", "batch", "bits", "group", "ratio")
                  + (("layers", "numbers") if key == "teaching" else ()),
                  shares={"prepared data": f"{'Yes, ' + str(k.group) + ' layers per copy' if k.group > 1 else 'No'}",
                          "selection": "n/a: dense attention", "update rule (weights)": "No.",
                          "per-token state": "K/V entries in every stored copy."})


def teaching_summary(k: Knobs) -> str:
    """The teaching example's sentence, formatted from the knobs in use (it follows every change)."""
    entries = k.context // k.ratio
    share = (f"groups of {k.group} layers share one copy" if k.group > 1 else
             "every layer keeps its own copy")
    per = f" (one entry per {k.ratio} tokens)" if k.ratio > 1 else ""
    return (f"{counted(k.layers, 'layer')}, each storing {counted(entries, 'entry', 'entries')}{per} of "
            f"{counted(k.numbers, 'number')} at {k.bits} bits; {share}.")


SHARING_BUTTON = "Share as the explainer does: each group of four layers keeps one copy"


def sharing_help(k: Knobs) -> str:
    """The sharing button's help, with the bytes of the sizes in use before and after groups of four."""
    if k.layers < 4:
        return f"Groups of four layers need at least four layers; there are {k.layers} now."
    now = calculate(teaching(k), k).hbm.total
    k4 = dataclasses.replace(k, group=4)
    four = calculate(teaching(k4), k4).hbm.total
    return (f"Sets 'Layers sharing one copy' to 4. With the sizes above that turns {human_bytes(now)} "
            f"({now:,} bytes, at {k.group} layer{'s' if k.group != 1 else ''} per copy) into {human_bytes(four)} "
            f"({four:,} bytes). The explainer's own example, 16 layers of 4,096 entries of 128 numbers at 8 bits, "
            "goes from 8 MiB to 2 MiB.")


def teaching(k: Knobs) -> Design:
    return _uniform("teaching", "Teaching example (uniform)", k.layers,
                    (Part("numbers", k.numbers, k.bits, "kv"),), k,
                    teaching_summary(k), "illustrative",
                    [f"{EXPLAINER_2}, with made-up uniform sizes: as it states it, 16 layers of 4,096 entries of 128 "
                     f"numbers at 8 bits take 8,388,608 bytes, and 2 MiB with groups of four ({marker('explainer')})"],
                    "made-up uniform sizes")


def gqa(k: Knobs) -> Design:
    return _uniform("gqa", "Plain per-layer K/V (GQA, 80 layers)", 80,
                    (Part("K (8 heads x 128)", 1024, k.bits, "kv"), Part("V (8 heads x 128)", 1024, k.bits, "kv")), k,
                    "A dense transformer with grouped-query attention: every layer stores its own K and V for every "
                    f"token (80 layers, 8 KV heads of 128 dims, {k.bits}-bit numbers: Llama-3-70B-like sizes, which "
                    "store BF16).", "illustrative",
                    ["GQA arithmetic: 80 x 8 x 128 x 2 (K and V) x 2 bytes = 327,680 B/token"],
                    "8 KV heads x 128 dims, K and V")


def plain_v41(k: Knobs) -> Design:
    return _uniform("plain-v41", "V4.1's sizes with plain per-layer K/V", 40,
                    (Part("K=V row (512)", 512, k.bits, "kv"),), k,
                    "V4.1's 40 layers and 512-number K=V rows, but every layer stores every token itself: no window, "
                    "no compression, no sharing, no FP4.", "illustrative",
                    ["counterfactual built from the V4.1 config sizes"], "one K=V head of 512 numbers")


# ------------------------------------------------------------------------------------------------
# Comparison designs (docs/design/equations.md §15): public pattern, placeholder sizes
# ------------------------------------------------------------------------------------------------

def gemma4_like(k: Knobs) -> Design:
    """35 layers, 5 local : 1 global (last forced global), window k.window, K=V on global layers, and the last
    15 layers reuse the K/V of the last earlier layer of the same type (docs/design/equations.md §15)."""
    n, shared_n = 35, 15
    glob = [(i + 1) % 6 == 0 or i == n - 1 for i in range(n)]
    first = n - shared_n
    src_local = max(i for i in range(first) if not glob[i])
    src_global = max(i for i in range(first) if glob[i])
    own = [i for i in range(first)]
    local = tuple(i for i in own if not glob[i])
    glob_own = tuple(i for i in own if glob[i])
    reads_local = sum(1 for i in range(first, n) if not glob[i])
    reads_global = sum(1 for i in range(first, n) if glob[i])
    stores = [
        Store(name="local window K/V", kind="window", layers=local, cap=k.window, read_by=len(local) + reads_local,
              parts=(Part("K (2 heads x 256)", 512, k.bits, "window"),
                     Part("V (2 heads x 256)", 512, k.bits, "window")),
              note=f"layer {{}} also serves the {reads_local} shared local layers", note_refs=((src_local,),)),
        Store(name="global K=V", kind="kv", layers=glob_own, read_by=len(glob_own) + reads_global,
              parts=(Part("K=V (1 head x 512)", 512, k.bits, "kv"),),
              note=f"K reused as V on full layers; layer {{}} also serves {reads_global} shared global layers",
              note_refs=((src_global,),)),
    ]
    roles = [("Global" if glob[i] else "Local") + (" (shared K/V)" if i >= first else "") for i in range(n)]
    return Design(
        key="gemma4-like", label="Gemma-4-like (local/global + KV sharing)", short="Gemma-4-like", stores=stores,
        n_layers=n, roles=roles,
        summary="Five sliding-window layers per global layer; only global layers keep the whole context; the last "
                "15 layers compute no K/V and reuse an earlier layer's (cross-layer KV sharing).",
        status="illustrative",
        sources=["Hugging Face transformers' Gemma 3, 3n and 4 configs: 5:1 pattern, window 512/1024, global head "
                 f"dim 512 with K=V, num_kv_shared_layers in E2B/E4B ({marker('third-party')})"],
        unknowns=["Layer count (35), KV head counts (2 local, 1 global) and sharing count (15) are placeholders "
                  "taken from the small variants; larger Gemma 4 models differ.",
                  "Gemma's per-layer embeddings and other memory are not counted."],
        shares={"prepared data": "Yes in the last 15 layers: they read another layer's K/V (no k/v projections).",
                "selection": "n/a: dense attention inside the window / over the whole context.",
                "update rule (weights)": "No.",
                "per-token state": "K/V of the global layers grows; local layers keep a fixed window."},
        knobs_used=("context", "batch", "bits", "window"))


def qwen_next_like(k: Knobs) -> Design:
    """48 layers: three Gated DeltaNet layers per attention layer (docs/design/equations.md §15, Qwen3-Next)."""
    n = 48
    attn = tuple(i for i in range(n) if (i + 1) % 4 == 0)
    gdn = tuple(i for i in range(n) if (i + 1) % 4)
    stores = [
        Store(name="attention K/V", kind="kv", layers=attn, read_by=len(attn),
              parts=(Part("K (2 heads x 256)", 512, k.bits, "kv"), Part("V (2 heads x 256)", 512, k.bits, "kv")),
              note="grows with the context; selection does not shrink what is stored"),
        Store(name="DeltaNet state", kind="recurrent_state", layers=gdn, growth="fixed", fixed=1, read_by=len(gdn),
              parts=(Part("S: 32 value heads x 128 x 128 (fp32)", 32 * 128 * 128, 32, "recurrent_state"),
                     Part("conv state: 3 rows x 8,192 channels", 3 * 8192, k.bits, "recurrent_state")),
              note="fixed size, whatever the context length: updated, never appended"),
    ]
    roles = ["Sparse attention (K/V)" if i in attn else "Gated DeltaNet (state)" for i in range(n)]
    return Design(
        key="qwen-next-like", label="Qwen3.8-Flash-Next-like hybrid", short="Qwen-Next-like", stores=stores,
        n_layers=n, roles=roles,
        summary="Three Gated DeltaNet layers per attention layer: those three keep a fixed-size recurrent state "
                "updated token by token instead of a growing K/V cache.",
        status="illustrative",
        sources=["Hugging Face transformers' Qwen3-Next config: 48 layers, 3:1, 2 KV heads x 256, 16 key / 32 value "
                 f"heads of 128, conv kernel 4 ({marker('third-party')})",
                 "the published description of Qwen3.8-Flash-Next: three Gated DeltaNet layers per sparse-attention "
                 f"layer ({marker('explainer')})"],
        unknowns=["Qwen3.8-Flash-Next's own sizes and its sparse-attention indexer (and any keys it stores) are not "
                  "established here; the sizes are Qwen3-Next's.", "State precision (fp32 here) varies by engine."],
        shares={"prepared data": "No.", "selection": "Attention layers select what to read (sizes unknown).",
                "update rule (weights)": "No (recurrence runs across tokens, not across depth).",
                "per-token state": "K/V in 12 attention layers grows; 36 DeltaNet layers hold a fixed state."},
        knobs_used=("context", "batch", "bits"))


def looped(k: Knobs) -> Design:
    """Shared-depth recurrence: one block of 4 layers applied 8 times (32 applications)."""
    block, passes = 4, 8
    n = block * passes
    stores = [Store(name="K/V per application", kind="kv", layers=tuple(range(n)), read_by=n,
                    parts=(Part("K (8 heads x 128)", 1024, k.bits, "kv"),
                           Part("V (8 heads x 128)", 1024, k.bits, "kv")),
                    note="the same weights see different states in each pass, so each application keeps its own K/V")]
    roles = [f"Block layer {i % block}" for i in range(n)]
    names = {i: f"application {i} (pass {i // block + 1}, block layer {i % block})" for i in range(n)}
    return Design(
        key="looped", label="Shared-depth recurrence (looped block)", short="Looped block", stores=stores,
        n_layers=n, roles=roles,
        layer_names=names,
        summary="One block of 4 layers applied 8 times: 32 layers of computation from 4 layers of weights. The "
                "weights are shared; the prepared data is not.",
        status="illustrative",
        sources=["the distinction between sharing an update rule and sharing prepared data, with placeholder "
                 f"sizes ({marker('inference')})"],
        unknowns=["Sizes are placeholders (GQA, 8 KV heads x 128, BF16).",
                  "Some looped designs reuse one pass's K/V for later passes; that is a separate choice."],
        shares={"prepared data": "No: each application computes its own K/V.", "selection": "n/a.",
                "update rule (weights)": "Yes: the same 4 layers of weights run 8 times.",
                "per-token state": "K/V for all 32 applications."},
        knobs_used=("context", "batch", "bits"))


# ------------------------------------------------------------------------------------------------
# Registry
# ------------------------------------------------------------------------------------------------

FULL_CONTEXT = 1 << 20
DESIGNS: dict[str, tuple[str, Callable[[Knobs], Design], Knobs]] = {
    "teaching": ("Teaching example (uniform sizes)", teaching, Knobs(context=4096, layers=16, numbers=128, bits=8)),
    "v4.1-flash": ("DeepSeek-V4.1-Flash", flash_v41, Knobs(context=FULL_CONTEXT, bits=4, window=128, replay=128)),
    "v4-flash": ("DeepSeek-V4-Flash", v4_flash, Knobs(context=FULL_CONTEXT, window=128)),
    "v3.2": ("DeepSeek-V3.2 (MLA + indexer)", v32, Knobs(context=FULL_CONTEXT, bits=16)),
    "gqa": ("Plain per-layer K/V (GQA)", gqa, Knobs(context=FULL_CONTEXT, bits=16, layers=80)),
    "plain-v41": ("V4.1 sizes, plain per-layer K/V", plain_v41, Knobs(context=FULL_CONTEXT, bits=16, layers=40)),
    "gemma4-like": ("Gemma-4-like local/global + KV sharing", gemma4_like,
                    Knobs(context=FULL_CONTEXT, bits=16, window=512)),
    "qwen-next-like": ("Qwen3.8-Flash-Next-like hybrid", qwen_next_like, Knobs(context=FULL_CONTEXT, bits=16)),
    "looped": ("Shared-depth recurrence", looped, Knobs(context=FULL_CONTEXT, bits=16)),
}
CALCULATOR_PRESETS = ("teaching", "v4.1-flash", "v4-flash", "v3.2", "gqa", "plain-v41")
COMPARE_DEFAULT = ("v4.1-flash", "v4-flash", "gemma4-like", "qwen-next-like", "looped")


def build(key: str, knobs: Knobs | None = None) -> Design:
    if key not in DESIGNS:
        raise CalcError(f"unknown design {key!r}; choose one of {', '.join(DESIGNS)}")
    _, fn, default = DESIGNS[key]
    return fn(validate_knobs(knobs or default))


def defaults(key: str) -> Knobs:
    return DESIGNS[key][2]


def with_context(key: str, context: int, batch: int = 1) -> Knobs:
    """A design's own defaults at a shared context length and batch (the comparison page)."""
    return dataclasses.replace(defaults(key), context=context, batch=batch)


# ------------------------------------------------------------------------------------------------
# Lesson texts (the compare designs page)
# ------------------------------------------------------------------------------------------------

COMPARE_INTRO = (
    "Designs that save cache memory differ in what they share and what they give up. The same calculator runs "
    "on each below, at one context length. Two different things can be shared: **prepared data** (one layer's "
    "stored entries read by others) and **the update rule** (the same weights applied again); and a design keeps "
    "its state either **per token** or as a **fixed-size state** updated as tokens arrive."
)

LINEAGE = (
    "Where V4.1 comes from, in the order " + EXPLAINER_2 + " suggests following it: DeepSeek-V2, which replaced "
    "every head's keys and values with one compressed latent per token (MLA); DeepSeek-V3.2, whose layers each "
    "keep one MLA latent per token and whose indexer picks the top 2,048 tokens a query reads; "
    "DeepSeek-V4, which packs several tokens into each cache entry along the sequence (each layer keeping its "
    "own); and V4.1, which also shares those entries between layers."
)

UNKNOWN_NOTE = (
    "Only the DeepSeek layouts here come from released configs and serving code. The Gemma-4-like, "
    "Qwen3.8-Flash-Next-like and looped designs follow published patterns with placeholder sizes, and each says "
    "what is not known. Public remarks about OpenAI's deployed models, such as the Parameter Golf discussion and "
    "the essay 'An Alien Mind' that " + EXPLAINER_1 + " points to, do not establish those models' architectures, "
    "and a model's behaviour, such as a long pause or a long explanation, cannot reveal which mechanism it uses."
)


# ------------------------------------------------------------------------------------------------
# V4-Flash -> V4.1-Flash: why the cache is about 4x smaller although V4.1 pools less
# ------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class WaterfallStep:
    step: str
    bytes_per_token: float     # after this step
    change: float              # vs the step before (0 for the start)
    why: str


def _per_token(stores: list[tuple[int, int, int]]) -> float:
    """Growing bytes per token of (stored copies, bytes per entry incl. index key, ratio) groups."""
    return sum(copies * entry / ratio for copies, entry, ratio in stores)


def v4_to_v41_waterfall(cfg: V41Config | None = None) -> list[WaterfallStep]:
    """The growing part of the cache per token, changed one factor at a time from V4-Flash's layout to V4.1's
    (`cfg`'s layout; the release's when None). Entry sizes come from the designs' own parts (V4-Flash: vLLM's
    formats; V4.1: the engine's FP4 formats)."""
    v4 = v4_flash(defaults("v4-flash"))
    v41 = flash_v41(defaults("v4.1-flash")) if cfg is None else v41_design(cfg, defaults("v4.1-flash"))
    entry_v4 = next(s for s in v4.stores if s.name.startswith("CSA latents")).entry_bytes()
    key_v4 = next(s for s in v4.stores if s.name.startswith("CSA indexer")).entry_bytes()
    csa = next(s for s in v4.stores if s.name.startswith("CSA latents"))
    hca = next(s for s in v4.stores if s.name.startswith("HCA latents"))
    lat41 = [s for s in v41.stores if s.kind == "latents"]
    entry_41 = lat41[0].entry_bytes()
    key_41 = next(s for s in v41.stores if s.kind == "index_keys").entry_bytes()
    groups41 = [(s.copies, s.ratio) for s in lat41]                # (3, 2) and (1, 1) for the release
    copies41 = sum(c for c, _ in groups41)
    start = _per_token([(csa.copies, entry_v4 + key_v4, csa.ratio), (hca.copies, entry_v4, hca.ratio)])
    shared = _per_token([(copies41, entry_v4 + key_v4, csa.ratio)])
    ratios = _per_token([(c, entry_v4 + key_v4, r) for c, r in groups41])
    fp4 = _per_token([(c, entry_41 + key_v4, r) for c, r in groups41])
    keys = _per_token([(c, entry_41 + key_41, r) for c, r in groups41])
    rows = [
        ("DeepSeek-V4-Flash", start,
         f"{csa.copies} layers each store their own ratio-{csa.ratio} entries ({entry_v4} B) and indexer keys "
         f"({key_v4} B); {hca.copies} more store ratio-{hca.ratio} entries"),
        ("stored copies", shared,
         f"one stored copy per group of layers that share it: {copies41} copies instead of {csa.copies + hca.copies} "
         f"(still ratio {csa.ratio}, still V4-Flash's formats)"),
        ("ratios", ratios,
         "V4.1 pools less along the sequence: ratio " + ", ".join(f"{r} for {c} cop{'y' if c == 1 else 'ies'}"
                                                              for c, r in groups41) + ", so each copy grows faster"),
        ("FP4 entries with block scales", fp4,
         f"each entry in FP4 with one E4M3 scale per 16 numbers: {entry_41} B instead of {entry_v4} B"),
        ("smaller index keys", keys,
         f"index keys in FP4 with one UE8M0 scale per 32 numbers: {key_41} B instead of {key_v4} B"),
    ]
    out, prev = [], None
    for name, value, why in rows:
        out.append(WaterfallStep(name, value, 0.0 if prev is None else value - prev, why))
        prev = value
    return out


WATERFALL_NOTE = (
    "Why is V4.1's cache about a quarter of V4-Flash's although V4.1 pools fewer tokens into each entry? The chart "
    "changes one thing at a time in the part of the cache that grows with the context (bytes per token). Pooling "
    "less costs bytes; sharing one stored copy among many layers, FP4 entries and smaller index keys save more. "
    "The intermediate bars are what-ifs, not real models, and the fixed-size windows are left out. The first step "
    "changes two things at once (sharing copies, and dropping the ratio-128 layers' own entries), and the size of "
    "each bar depends on the order of the steps; only the two end points do not."
)
