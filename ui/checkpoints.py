"""Which checkpoints a visitor may load, and the server-wide store of loaded models (no Streamlit here).

The allow-list: checkpoint directories are offered only from the roots the operator names, in the
environment variable V41_CHECKPOINT_ROOTS (paths separated by the OS path separator, ':' on Linux) or else in
`.streamlit/secrets.toml` (`checkpoint_roots = ["/srv/ckpt", ...]`), else the shipped weights only
(`data/weights`). A choice is a label from `find_checkpoints` (what the sidebar lists) or a path that names
one of those same directories: the path is normalised lexically, checked with `is_relative_to` against each
root before the file system is touched, then resolved (symlinks, `..`) and checked again. Anything else,
outside the roots or missing inside them, gets the one message `NOT_OFFERED`, which names no path.

The store: at most `MAX_MODELS` distinct models are held (least recently used out; the number held is what
counts, so eviction drops the store's reference and a test checks the model is really freed), one load per
key at a time however many sessions ask, a memory budget checked on the meta device before any allocation
(`check_budget`), and failures remembered for `FAILURE_TTL_S` seconds so a bad directory is not reloaded
on every rerun.
"""

from __future__ import annotations

import os
import threading
import time
import tomllib
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from model import V41Config
from model.accounting import human, resident_footprint
from model.checkpoint import available_memory, parse_bytes
from model.shipped import WEIGHTS_ROOT

ROOT = Path(__file__).resolve().parents[1]
ENV_ROOTS = "V41_CHECKPOINT_ROOTS"
ENV_BUDGET = "V41_MODEL_BUDGET"
SECRETS = ROOT / ".streamlit" / "secrets.toml"
DEFAULT_ROOTS = (WEIGHTS_ROOT,)          # the shipped sets (model/shipped.py)
MAX_MODELS = 4               # distinct models held by the server at once (the shipped sets and one more)
FAILURE_TTL_S = 60.0         # a failed load is answered from memory this long
BUDGET_SHARE = 0.25          # default budget per model: this share of the memory available at start
MAX_FOUND = 200              # checkpoints listed at most (the scan stops there)
MAX_DEPTH = 3                # directory levels scanned below each root
SCAN_TTL_S = 30.0
MAX_PATH_CHARS = 1024

NOT_OFFERED = ("This server does not offer that checkpoint. Choose one of the checkpoints listed in the sidebar "
               "(the server's operator decides which directories are offered; see the README).")


class CheckpointRefused(ValueError):
    """A checkpoint that will not be loaded; the message is safe to show as it is."""


# ---- the allow-list --------------------------------------------------------------------------------------------
def configured_roots() -> tuple[list[str], str]:
    """(root strings as configured, where they came from)."""
    env = os.environ.get(ENV_ROOTS)
    if env is not None:
        return [p for p in env.split(os.pathsep) if p.strip()], ENV_ROOTS
    try:
        data = tomllib.loads(SECRETS.read_text())
        roots = data.get("checkpoint_roots")
        if isinstance(roots, str):
            roots = [roots]
        if isinstance(roots, list):
            return [str(r) for r in roots if str(r).strip()], str(SECRETS.relative_to(ROOT))
    except (OSError, tomllib.TOMLDecodeError, ValueError):
        pass
    return [str(p) for p in DEFAULT_ROOTS], "default"


def allowed_roots() -> list[Path]:
    """The configured roots, absolute and resolved (relative ones are read from the app's directory)."""
    out: list[Path] = []
    for r in configured_roots()[0]:
        p = Path(r).expanduser()
        p = (p if p.is_absolute() else ROOT / p).resolve()
        if p.is_dir() and p not in out:
            out.append(p)
    return out


def _is_checkpoint(d: Path) -> bool:
    return (d / "config.json").is_file() and any(d.glob("*.safetensors"))


_scan_lock = threading.Lock()
_scan: dict[tuple, tuple[float, dict[str, Path]]] = {}


def find_checkpoints(roots: list[Path] | None = None) -> dict[str, Path]:
    """label -> resolved directory for every checkpoint under the allowed roots (symlinks leading out are
    left out), the shipped weights first. Rescanned at most every SCAN_TTL_S seconds."""
    roots = allowed_roots() if roots is None else roots
    key = tuple(roots)
    now = time.monotonic()
    with _scan_lock:
        hit = _scan.get(key)
        if hit and now - hit[0] < SCAN_TTL_S:
            return dict(hit[1])
    found: dict[str, Path] = {}
    for root in roots:
        for dirpath, dirnames, _ in os.walk(root, followlinks=False):
            d = Path(dirpath)
            depth = len(d.relative_to(root).parts)
            dirnames.sort()
            if depth >= MAX_DEPTH:
                dirnames.clear()
            real = d.resolve()
            if not any(real.is_relative_to(r) for r in roots) or not _is_checkpoint(d):
                continue
            rel = d.relative_to(root).as_posix()
            label = root.name if rel == "." else f"{root.name}/{rel}"
            while label in found:
                label += "+"
            if real not in found.values():
                found[label] = real
            if len(found) >= MAX_FOUND:
                break
    with _scan_lock:
        _scan[key] = (now, found)
    return dict(found)


def resolve_choice(text: str, roots: list[Path] | None = None) -> tuple[str, Path]:
    """(label, directory) for a label or a path naming an offered checkpoint; CheckpointRefused otherwise,
    always with NOT_OFFERED, whatever is or is not at that path."""
    roots = allowed_roots() if roots is None else roots
    found = find_checkpoints(roots)
    text = (text or "").strip()
    if text in found:
        return text, found[text]
    if not text or len(text) > MAX_PATH_CHARS or "\x00" in text:
        raise CheckpointRefused(NOT_OFFERED)
    p = Path(text).expanduser()
    p = Path(os.path.normpath(p if p.is_absolute() else ROOT / p))      # lexical: '..' and '.' folded
    # configured roots, unresolved too: a root reached through a symlink is named by either spelling
    lexical = [Path(os.path.normpath((Path(r).expanduser() if Path(r).expanduser().is_absolute()
                                      else ROOT / r))) for r in configured_roots()[0]]
    if not any(p.is_relative_to(r) for r in list(roots) + lexical):
        raise CheckpointRefused(NOT_OFFERED)                          # outside: nothing on disk is looked at
    real = p.resolve()
    if not any(real.is_relative_to(r) for r in roots):
        raise CheckpointRefused(NOT_OFFERED)                          # a symlink inside pointing out
    for label, d in found.items():
        if d == real:
            return label, d
    raise CheckpointRefused(NOT_OFFERED)                              # missing, or not a checkpoint


def display_path(path: Path | str, roots: list[Path] | None = None) -> str:
    """A path as a visitor may see it: relative to its allowed root, named by the root's last part."""
    p = Path(path)
    for r in (allowed_roots() if roots is None else roots):
        if p.is_relative_to(r):
            rel = p.relative_to(r).as_posix()
            return r.name if rel == "." else f"{r.name}/{rel}"
    return p.name


def scrub(message: str, roots: list[Path] | None = None) -> str:
    """An exception message with every allowed root's absolute path replaced by its short name."""
    for r in sorted(allowed_roots() if roots is None else roots, key=lambda x: -len(str(x))):
        message = message.replace(str(r), r.name)
    return message.replace(str(ROOT) + os.sep, "")


# ---- the memory budget ------------------------------------------------------------------------------------------
def model_budget() -> int:
    """Bytes one model may keep resident: V41_MODEL_BUDGET (e.g. '4G'), else BUDGET_SHARE of available RAM."""
    env = os.environ.get(ENV_BUDGET)
    if env:
        return parse_bytes(env)
    return int(available_memory(torch.device("cpu")) * BUDGET_SHARE)


def check_budget(path: Path, budget: int | None = None) -> None:
    """Refuse (CheckpointRefused) a checkpoint whose config needs more resident memory than the budget,
    counted on the meta device before anything is allocated. Config problems raise the loader's own error."""
    cfg = V41Config.from_json(path / "config.json")
    streamed = bool(cfg.quantization_config) or (path / "model.safetensors.index.json").exists()
    fp = resident_footprint(cfg, streamed=streamed)
    budget = model_budget() if budget is None else budget
    if fp.total > budget:
        raise CheckpointRefused(
            f"This checkpoint would keep {human(fp.total)} in memory, more than this server allows for one model "
            f"({human(budget)}): {fp.describe(cfg)}. Nothing was loaded.")


# ---- the store ----------------------------------------------------------------------------------------------
@dataclass
class _Failure:
    error: Exception
    at: float


@dataclass
class ModelStore:
    """Server-wide LRU of loaded models with single-flight loading and remembered failures."""

    max_models: int = MAX_MODELS
    failure_ttl: float = FAILURE_TTL_S
    clock: Callable[[], float] = time.monotonic
    _models: OrderedDict = field(default_factory=OrderedDict)
    _failures: dict = field(default_factory=dict)
    _locks: dict = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    loads: int = 0

    def _held_or_failed(self, key: tuple) -> object | None:
        """Under `_lock`: the held model (now most recent), or raise its remembered failure, or None."""
        if key in self._models:
            self._models.move_to_end(key)
            return self._models[key]
        fail = self._failures.get(key)
        if fail and self.clock() - fail.at < self.failure_ttl:
            raise fail.error
        return None

    def get(self, key: tuple, loader: Callable[[], object]) -> object:
        with self._lock:
            model = self._held_or_failed(key)
            if model is not None:
                return model
            key_lock = self._locks.setdefault(key, threading.Lock())
        with key_lock:                      # one load per key; the others wait and then find it
            with self._lock:
                model = self._held_or_failed(key)
                if model is not None:
                    return model
            try:
                model = loader()
            except Exception as e:
                with self._lock:
                    self._failures[key] = _Failure(e, self.clock())
                raise
            with self._lock:
                self.loads += 1
                self._failures.pop(key, None)
                self._models[key] = model
                while len(self._models) > self.max_models:
                    self._models.popitem(last=False)
                return model

    def held(self) -> list[tuple]:
        with self._lock:
            return list(self._models)

    def clear(self) -> None:
        with self._lock:
            self._models.clear()
            self._failures.clear()
