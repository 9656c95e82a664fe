"""What a training command records beside the weights: entries of training.json and its logged rows.

Every training command (the language model, the DSpark drafter, the vision tower) writes its record
into the `training.json` of the weights it trained, so one file keeps every phase's command,
settings and per-step log (README, "The shipped tiny weights").
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_json_entry(path: Path, key: str, value: Any) -> None:
    """Set `key` of the JSON object in `path` (created if absent; other keys kept), atomically."""
    info = json.loads(path.read_text()) if path.exists() else {}
    info[key] = value
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(info, indent=1) + "\n")
    os.replace(tmp, path)


def rounded(rows: list[dict]) -> list[dict]:
    """Logged rows with floats to 5 decimals (training.json stays readable and small)."""
    return [{k: (round(v, 5) if isinstance(v, float) else v) for k, v in r.items()} for r in rows]
