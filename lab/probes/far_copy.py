"""`python -m lab.probes.far_copy --weights DIR`: does a model copy through the compressed entries, and how far?

Synthetic copy rows (lab.training.batches.copy_rows: spans of 3-5 ids said again after exactly `gap` other
ids) at each gap, read at a sliding window (default 2, the far-recall curriculum's training window, where only
the entries can serve the copy; lab/README.md §2), in three modes: dense (every visible entry attended),
sparse (the default selection) and window only (the global branch off: nothing older than the window is read
directly). Accuracy is the share of the second copies' predictable tokens predicted exactly; chance is one over
the number of copy ids. Ends with one line `far_copy: key=value ...`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from lab.corpus import TokenStream
from lab.training import CopyIds, copy_rows, set_window
from model import Ablation, load

ROOT = Path(__file__).resolve().parents[2]
MODES = {"dense": Ablation(dense_compressed=True), "sparse": None, "window_only": Ablation(window_only=True)}


@torch.no_grad()
def copy_by_gap(m, ids: CopyIds, gaps: list[int], window: int, rows: int = 16, seq_len: int = 128,
                seed: int = 4242) -> dict[str, dict[int, float]]:
    """mode -> gap -> copy accuracy at `window` (0: the config's)."""
    set_window(m, window)
    m.eval()
    out: dict[str, dict[int, float]] = {k: {} for k in MODES}
    try:
        for gap in gaps:
            x, y, answers, _ = copy_rows(ids, rows, seq_len, torch.Generator().manual_seed(seed + gap), 5, gap,
                                      gap_min=gap)
            for name, ab in MODES.items():
                lg = (m(x) if ab is None else m(x, ablation=ab)).logits
                out[name][gap] = float((lg.argmax(-1) == y)[answers].float().mean())
    finally:
        set_window(m, 0)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lab.probes.far_copy")
    ap.add_argument("--weights", default=str(ROOT / "data" / "weights" / "tiny"))
    ap.add_argument("--stream", default=str(ROOT / ".cache" / "corpus" / "tokens_train.npy"))
    ap.add_argument("--ids", type=int, default=300, help="copy ids: the N most frequent ids of the stream")
    ap.add_argument("--windows", default="2,0", help="windows to read at (0: the config's)")
    ap.add_argument("--gaps", default="5,10,20,40,80")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    m = load(a.weights, device="cpu")
    ids = CopyIds(ids=TokenStream.load(a.stream).frequent_ids(a.ids))
    gaps = [int(g) for g in a.gaps.split(",")]
    summary = {}
    for w in (int(v) for v in a.windows.split(",")):
        res = copy_by_gap(m, ids, gaps, w)
        label = w or m.cfg.sliding_window
        print(f"window {label}: " + "; ".join(f"{k} " + " / ".join(f"{v:.2f}" for v in r.values())
                                             for k, r in res.items()) + f"  (gaps {a.gaps})")
        for k, r in res.items():
            summary[f"w{label}_{k}_gap{gaps[-2]}"] = r[gaps[-2]]
    print(f"far_copy: ids={a.ids} chance={1 / a.ids:.4f} " + " ".join(f"{k}={v:.3f}" for k, v in summary.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
