"""The shipped weight sets have one owner, model/shipped.py: no product module spells a shipped folder's path or
lists the shipped kinds by hand, so shipping another set is one row of `SHIPPED` (and its files)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from model.shipped import KINDS, RECALL_KINDS, SHIPPED, shipped_set, shipped_weights
from tests.conftest import ROOT

PRODUCT = ["app.py", "model", "lessons", "ui", "pages", "bench"]
OWNER = ROOT / "model" / "shipped.py"


def product_files() -> list[Path]:
    out: list[Path] = []
    for part in PRODUCT:
        p = ROOT / part
        out += [p] if p.is_file() else sorted(p.rglob("*.py"))
    return [f for f in out if f != OWNER]


def docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring constants (prose may name a folder; code may not)."""
    out = set()
    for n in ast.walk(tree):
        body = getattr(n, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant):
            out.add(id(body[0].value))
    return out


def path_parts(n: ast.BinOp) -> list[str]:
    """The string constants of a `a / "b" / "c"` chain."""
    out = []
    while isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div):
        if isinstance(n.right, ast.Constant) and isinstance(n.right.value, str):
            out.append(n.right.value)
        n = n.left
    return out


AMBIGUOUS = {"text", "recall"}     # kinds that are ordinary words too ("text" input, a "recall" axis)


def offences(path: Path, root: Path = ROOT) -> list[str]:
    tree = ast.parse(path.read_text())
    docs = docstrings(tree)
    folders = {s.folder for s in SHIPPED}
    found = []
    for n in ast.walk(tree):
        where = f"{path.relative_to(root)}:{getattr(n, 'lineno', '?')}"
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs:
            if any(f"weights/{f}" in n.value for f in folders):
                found.append(f"{where} spells a shipped folder's path: {n.value!r}")
            if n.value in set(KINDS) - AMBIGUOUS:
                found.append(f"{where} names a shipped kind: {n.value!r}")
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div):
            parts = path_parts(n)
            if "weights" in parts and folders & set(parts):
                found.append(f"{where} joins a shipped folder's path: {parts[::-1]}")
        if isinstance(n, (ast.Tuple, ast.List, ast.Set)):
            kinds = [e.value for e in n.elts if isinstance(e, ast.Constant) and e.value in KINDS]
            if len(kinds) >= 2:
                found.append(f"{where} lists shipped kinds by hand: {kinds}")
        if isinstance(n, ast.Dict):
            kinds = [k.value for k in n.keys if isinstance(k, ast.Constant) and k.value in KINDS]
            if len(kinds) >= 2:
                found.append(f"{where} keys a table by shipped kinds by hand: {kinds}")
    return sorted(set(found))      # a nested path join is one offence


def test_no_product_module_spells_a_shipped_path_or_lists_the_kinds():
    found = [o for f in product_files() for o in offences(f)]
    assert not found, "\n".join(found)


def test_the_checker_catches_each_way_of_writing_it_by_hand(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text('from pathlib import Path\nROOT = Path(".")\n'
                       'A = ROOT / "data" / "weights" / "tiny"\n'
                       'B = "data/weights/recall/config.json"\n'
                       'C = ("unaided", "recall")\n'
                       'D = {"text": 1, "recall": 2}\n'
                       'E = kind == "unaided"\n')
    got = offences(planted, tmp_path)
    assert [g.split(" ", 1)[0] for g in got].count("planted.py:5") == 2, got   # a kind list holding "unaided"
    assert {g.split(" ", 1)[0] for g in got} == {f"planted.py:{i}" for i in range(3, 8)}, got


def test_every_set_has_its_files_and_its_record():
    for s in SHIPPED:
        d = shipped_weights(s.kind)
        for name in ("config.json", "model.safetensors", "tokenizer.json", "training.json"):
            assert (d / name).is_file(), (s.kind, name)
    assert shipped_set().kind == "text"
    with pytest.raises(KeyError, match="kinds: text"):
        shipped_set("nope")


def test_the_side_by_side_draws_the_recall_sets_first_in_the_owner_order():
    from ui.weights import PAIR_ORDER

    assert set(PAIR_ORDER) == set(KINDS)
    assert PAIR_ORDER[: len(RECALL_KINDS)] == RECALL_KINDS
    assert RECALL_KINDS == tuple(s.kind for s in SHIPPED if s.far_recall) and "text" not in RECALL_KINDS
