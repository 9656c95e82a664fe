"""Command-line options from a training config dataclass: one `--field-name` per field, and back.

The training commands (train, train-vision, dspark train) expose every field of their config this way,
so a new field is an option with no parser change (configs are dataclasses: docs/design/style.md §3).
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, fields
from typing import Any


def add_config_options(ap: argparse.ArgumentParser, config_cls: type, *, skip: tuple[str, ...] = (),
                       defaults: dict[str, Any] | None = None) -> None:
    """`--field-name` for each field of `config_cls` not in `skip`, typed by its default; `defaults`
    overrides a field's default on the command line. A bool field is `--name / --no-name`."""
    for name, value in asdict(config_cls()).items():
        if name in skip:
            continue
        value = (defaults or {}).get(name, value)
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            ap.add_argument(flag, action=argparse.BooleanOptionalAction, default=value)
        else:
            ap.add_argument(flag, type=type(value), default=value)


def config_from(args: argparse.Namespace, config_cls: type):
    """The config the parsed options describe (every field read from `args`)."""
    return config_cls(**{f.name: getattr(args, f.name) for f in fields(config_cls)})
