"""Resumable training state: the model and AdamW state in one safetensors file plus a JSON record of
the step, the run's settings and its log (never a pickle); reading the model tensors of such a file,
or a previous phase's weights, to start a new phase from.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from model.checkpoint.native import load_state_dict
from model.model import V41Model

from .schedule import TrainConfig


# What a training command records beside the weights: entries of training.json and its logged rows.
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


def save_state(path: Path, m: V41Model, opt: torch.optim.Optimizer, step: int, tc: TrainConfig, log: list,
               extra: dict | None = None) -> None:
    """Write ckpt.safetensors (model under `model.`, optimizer state under `opt.`, atomically) and ckpt.json
    (with `extra`: e.g. where a curriculum stands)."""
    path.mkdir(parents=True, exist_ok=True)
    t = {f"model.{k}": v.detach().contiguous() for k, v in m.state_dict().items()}
    names = {id(p): n for n, p in m.named_parameters()}
    for group in opt.param_groups:
        for p in group["params"]:
            st = opt.state.get(p)
            if not st:
                continue
            n = names.get(id(p))
            if n is None:      # a training-only part's (the entry probe's read-out): not saved, restarts on resume
                continue
            for k, v in st.items():
                t[f"opt.{n}.{k}"] = (v if torch.is_tensor(v) else torch.tensor(v)).detach().contiguous().clone()
    tmp = path / "ckpt.safetensors.tmp"
    save_file(t, str(tmp))
    os.replace(tmp, path / "ckpt.safetensors")
    (path / "ckpt.json").write_text(json.dumps({"step": step, "train": asdict(tc), "log": log, **(extra or {})}))


def model_state(t: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The model's tensors of a training checkpoint (save_state stores them under `model.`)."""
    return {k[len("model."):]: v for k, v in t.items() if k.startswith("model.")}


def load_state(path: Path, m: V41Model, opt: torch.optim.Optimizer) -> tuple[int, list]:
    """Restore what save_state wrote (model strictly, optimizer state by parameter name) -> (step, log);
    `read_meta` gives the rest of ckpt.json."""
    t = load_file(str(path / "ckpt.safetensors"))
    meta = json.loads((path / "ckpt.json").read_text())
    m.load_state_dict(model_state(t), strict=True)
    params = dict(m.named_parameters())
    for key, v in t.items():
        if not key.startswith("opt."):
            continue
        name, field = key[4:].rsplit(".", 1)
        # the moments live beside their parameter (a GPU run resumes on the GPU); the step count stays on the CPU
        opt.state[params[name]][field] = v if v.ndim == 0 else v.to(params[name].device)
    return meta["step"], meta.get("log", [])


def read_meta(path: Path) -> dict:
    """ckpt.json of a training checkpoint directory ({} when there is none)."""
    f = path / "ckpt.json"
    return json.loads(f.read_text()) if f.exists() else {}


def save_weights_bf16(m: V41Model, path: Path, record: dict, tokenizer: str | Path | None = None) -> Path:
    """The weights only, in bfloat16 (about a sixth of a training checkpoint with its AdamW moments), with
    config.json and stage.json (`record`): what a curriculum commits at each stage boundary, so a later
    run on another machine resumes from the repository (`--init-from` it, fresh optimizer moments)."""
    path.mkdir(parents=True, exist_ok=True)
    m.cfg.save_json(path / "config.json")
    t = {k: (v.detach().to(torch.bfloat16) if v.is_floating_point() else v.detach()).contiguous().cpu()
         for k, v in m.state_dict().items()}
    tmp = path / "model.safetensors.tmp"
    save_file(t, str(tmp), metadata={"format": "pt", "dtype": "bfloat16"})
    os.replace(tmp, path / "model.safetensors")
    (path / "stage.json").write_text(json.dumps(record, indent=1) + "\n")
    if tokenizer is not None:          # a loadable checkpoint (model.load, the app, the benchmarks)
        shutil.copy(tokenizer, path / "tokenizer.json")
    return path


def init_from(m: V41Model, src: Path) -> dict:
    """Load the weights a new phase starts from: a training checkpoint (its model tensors, strict) or a
    weights directory (load_state_dict, not strict). Returns the record of that previous phase."""
    if (src / "ckpt.safetensors").exists():
        m.load_state_dict(model_state(load_file(str(src / "ckpt.safetensors"))), strict=True)
        meta = json.loads((src / "ckpt.json").read_text())
        return {"from": str(src), "step": meta["step"], "train_config": meta["train"],
                "log_every_step": meta.get("log", [])}
    if (src / "stage.json").exists():   # a curriculum stage's weights: every tensor must be there
        load_state_dict(m, src, strict=True)
        return {"from": str(src), "stage": json.loads((src / "stage.json").read_text())}
    load_state_dict(m, src, strict=False)
    return {"from": str(src)}
