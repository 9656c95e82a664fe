"""Where the lesson texts come from, named the way a reader can look them up, and how sure each claim is.

Reader-visible text cites public sources by name (the release, the model card, the technical report, the
Hugging Face port, DeepSeek's own code, third-party serving code, the two explainers); the design notes the
code docstrings cite are internal and never shown. Every source carries a sureness marker, so a reader can
tell a fact read in a port of the released code from a statement of the report as our source texts cite it,
and both from our own inference.
"""

from __future__ import annotations

from dataclasses import dataclass

# how sure a statement is: key -> the marker a reader sees
SURENESS = {
    "release": "from the release announcement and model card, as our source texts cite them",
    "report": "from the technical report, as our source texts cite it",
    "port": "from the Hugging Face port of the released config and code, whose field names mirror the checkpoint's "
            "config",
    "deepseek": "from DeepSeek's own published code and papers",
    "third-party": "from third-party configs and serving code, such as vLLM",
    "explainer": "from the public explainers we follow",
    "literature": "from published interpretability research on other transformers",
    "hardware": "from the GPU makers' datasheets and the roofline model's paper",
    "inference": "our inference",
    "ours": "our own test or teaching device",
    "measured": "measured here, on the running model",
}

REPORT = "the DeepSeek-V4.1-Flash technical report"
# the two public explainers the lessons follow, named so a reader can look them up
EXPLAINER_1 = "the explainer 'DeepSeek-V4.1-Flash: doing less repeated work'"
# whose numbering the 1-based layer numbers follow (the report and the code count from 0)
ONE_BASED = f"as {EXPLAINER_1} counts"
EXPLAINER_2 = "the explainer 'DeepSeek-V4.1-Flash' on prefill, decode and cache sharing"


@dataclass(frozen=True)
class Source:
    name: str
    what: str
    sureness: str      # a key of SURENESS

    @property
    def marker(self) -> str:
        return SURENESS[self.sureness]

    def line(self) -> str:
        return f"{self.name}: {self.what} ({self.marker})"


SOURCES = [
    Source("DeepSeek-V4.1-Flash release announcement", "release date, open weights, active parameters in prefill "
           "and decode, separate accelerator-memory and persistent-cache comparisons with V4-Flash", "release"),
    Source("DeepSeek-V4.1-Flash model card", "the causal encoder-decoder layout, the vision encoder, Engram, mHC, "
           "DSpark", "release"),
    Source("DeepSeek-V4.1-Flash technical report", "Figure 3 and its sections on the encoder-decoder, CSA2, the "
           "indexer, Engram, mHC, DSpark, FP4 storage and bounded replay", "report"),
    Source("Hugging Face transformers, DeepSeek-V4.1 config and modeling code", "the layer schedule, the CSA2 "
           "modes, the candidate pool, the FP4/FP8 storage formats, Engram, single-pass mHC", "port"),
    Source("DeepSpec repository and DSpark paper (DeepSeek)", "the block drafter, Markov and confidence heads, "
           "verification and scheduling", "deepseek"),
    Source("Published DeepSeek-V4-Flash configs and vLLM's DeepSeek-V4 serving code", "V4-Flash's layer schedule "
           "and cache byte layout used for comparisons", "third-party"),
    Source(EXPLAINER_1[0].upper() + EXPLAINER_1[1:], "the walkthrough's order, the 16-position and 10/30 examples, "
           "the layer numbering from 1, and the remarks on other models", "explainer"),
    Source(EXPLAINER_2[0].upper() + EXPLAINER_2[1:], "the 10,000-in / 100-out agent round, the uniform 8 MiB cache "
           "example and the caveats on separate components", "explainer"),
    Source("Elhage et al. 2021, 'A Mathematical Framework for Transformer Circuits'; Olsson et al. 2022, 'In-context "
           "Learning and Induction Heads'", "previous-token and induction heads, the probe of a span said twice",
           "literature"),
    Source("NVIDIA H100, H200 and DGX/HGX B200 datasheets; Williams, Waterman and Patterson 2009, 'Roofline: an "
           "Insightful Visual Performance Model for Multicore Architectures'", "the chips' dense peaks per "
           "precision, memory bandwidth and size, NVLink bandwidth; the roofline and its ridge", "hardware"),
    Source("This explorer's own runs", "every live number: traces, byte counts and timings of the model running "
           "here, on the weights chosen in the sidebar", "measured"),
]


def marker(key: str) -> str:
    """The reader-facing sureness marker for a key of SURENESS."""
    if key not in SURENESS:
        raise KeyError(f"unknown sureness {key!r}; choose from {', '.join(SURENESS)}")
    return SURENESS[key]


def footer_lines() -> list[str]:
    return [s.line() for s in SOURCES]


SOURCES_NOTE = (
    "Facts describe the versions named. The tiny model running here has the release's layer kinds, not its "
    "sizes: fewer layers, a narrower window, a smaller selection and pool, fewer experts and small widths (the "
    "table below).\n\nHow sure each statement is: " + "; ".join(f"*{v}*" for v in SURENESS.values()) + "."
)
