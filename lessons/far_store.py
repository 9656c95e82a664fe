"""The far-fact reading of a shipped set of weights, stored beside its training.json as far_reading.json, so a server
draws the home page's picture and the pages' side-by-side without loading the recall checkpoints or running them.

`python -m lab far-readings` writes one file per shipped set (the reading lessons/far_compare.compare makes); the
app uses the files only while they match: the same weights file, the same held-out stories, the same story window
(the widest window of the sets read together) and this module's FORMAT. Otherwise the app computes the reading
once per server as before. What a reading holds is lessons/far_fact.FarFact; this module only moves it to and
from JSON and assembles the FarPair. It knows nothing of Streamlit.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

from lessons.far_compare import TITLES, FarPair, Side, learned_line
from lessons.far_fact import Answer, FarFact, LayerFact
from lessons.far_story import FactStory, FactTokens
from model.heldout import HELDOUT_STORIES_PATH

FILE = "far_reading.json"
FORMAT = 1              # raise when FarFact or the reading's rule changes: older files are then ignored


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fingerprint(directory: Path, story_window: int, stories: Path = HELDOUT_STORIES_PATH) -> dict:
    """What a stored reading must match to stand for a fresh one."""
    return {"format": FORMAT, "weights_sha256": sha256_of(directory / "model.safetensors"),
            "stories_sha256": sha256_of(stories), "story_window": int(story_window)}


def to_json(ff: FarFact, key: dict) -> dict:
    return {"key": key, "reading": asdict(ff)}


def from_json(data: dict) -> FarFact:
    """A FarFact back from `to_json`'s dict (entry ids, JSON object keys, back to ints)."""
    r = data["reading"]
    layers = [LayerFact(**{**lf, "entry_shares": {int(e): float(s) for e, s in lf["entry_shares"].items()}})
              for lf in r["layers"]]
    return FarFact(story=FactStory(**r["story"]), tokens=FactTokens(**r["tokens"]), window=int(r["window"]),
                   layers=layers, answers=[Answer(**a) for a in r["answers"]], token_texts=list(r["token_texts"]),
                   derivation=list(r["derivation"]), n_layers=int(r["n_layers"]))


def write(directory: Path, ff: FarFact, story_window: int) -> Path:
    path = directory / FILE
    path.write_text(json.dumps(to_json(ff, fingerprint(directory, story_window)), separators=(",", ":")) + "\n")
    return path


def read(directory: Path) -> dict | None:
    """The stored file's dict (None when missing or unreadable); whether it still matches is `matches`."""
    try:
        data = json.loads((directory / FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("key"), dict) else None


def matches(data: dict, key: dict) -> bool:
    return data.get("key") == key


def stored_pair(readings: list[tuple[str, FarFact, dict | None]]) -> FarPair:
    """The FarPair `compare` would make, from stored readings: (kind, reading, training record) per set, in the
    side-by-side's order."""
    sides = [Side(name=f"weights/{kind}", kind=kind, title=TITLES.get(kind, kind),
                  learned=learned_line(kind, record, ff.window), ff=ff) for kind, ff, record in readings]
    first = readings[0][1]
    return FarPair(sides=sides, distance=first.tokens.distance, windows=[ff.window for _, ff, _ in readings],
                   answer=first.story.answer)
