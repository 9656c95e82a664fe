"""`python -m lab far-readings`: read the held-out far story on every shipped set of weights (the reading the app's
home page and side-by-side panels draw, lessons/far_compare.compare) and store each set's reading beside its
training.json (lessons/far_store.py), so a server draws them without loading or running the recall checkpoints.

Run it again after retraining a set or regenerating the held-out stories: a stored reading that no longer matches
its weights or stories is ignored by the app, which then computes the reading once per server.
"""

from __future__ import annotations

import argparse
import time

import torch


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(prog="python -m lab far-readings", description=__doc__.splitlines()[0]).parse_args(argv)
    torch.set_num_threads(1)
    from lessons.far_compare import SideInput, compare
    from lessons.far_store import write
    from model import load
    from model.shipped import SHIPPED

    sets = [s for s in SHIPPED if (s.directory / "model.safetensors").is_file()]
    if not sets:
        print("no shipped weights found")
        return 1
    t0 = time.perf_counter()
    models = {s.kind: load(s.directory, device="cpu") for s in sets}
    pair = compare([SideInput(f"weights/{s.kind}", s.kind, models[s.kind]) for s in sets])
    story_window = max(m.cfg.sliding_window for m in models.values())
    for s, side in zip(sets, pair.sides):
        path = write(s.directory, side.ff, story_window)
        best = side.best_decoder
        print(f"{s.kind}: {path} (best decoder share {0.0 if best is None else best.share:.3f}, "
              f"answer {side.ff.answers[0].token.strip()!r})")
    print(f"far-readings: sets={len(sets)} distance={pair.distance} seconds={time.perf_counter() - t0:.1f}")
    return 0
