"""model/ depends one way: leaves -> arch -> inference -> model.py -> checkpoint -> training -> cli.

An `ast` walk of every module in model/ reads each import (at module level, inside functions and
under `if TYPE_CHECKING:`), resolves relative names, and asserts: no import cycle anywhere; every
import goes to the same or a lower rank (README, "How the code is laid out"); `arch/` imports
nothing from inference, checkpoint, training, corpus or cli; nothing imports the package root
`model`; imports inside functions only in `cli/`.
"""

from __future__ import annotations

import ast
from pathlib import Path

MODEL = Path(__file__).resolve().parents[1] / "model"

# rank of each top-level part of model/; an import may only go to the same rank or a lower one
RANKS = {
    "errors": 0, "fusion": 0, "config": 0, "layer_map": 0, "quant": 0,
    "corpus": 1,
    "arch": 2,
    "inference": 3,
    "model": 4, "accounting": 4, "footprint": 4,
    "checkpoint": 5,
    "training": 6,
    "cli": 7,
    # the command-line entry points and the public API sit on top of everything
    "__main__": 8, "__init__": 8, "train": 8, "train_vision": 8, "dspark": 8, "release": 8, "dataset": 8,
}


def module_name(path: Path, root: Path = MODEL) -> str:
    parts = ["model", *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(MODEL.rglob("*.py"))}


def is_package(name: str, mods: dict[str, Path]) -> bool:
    return mods.get(name, Path()).name == "__init__.py"


def imports(path: Path, mods: dict[str, Path], root: Path = MODEL) -> list[tuple[str, int, bool]]:
    """(imported module, line, inside a function) for every import of a model/ module in `path`."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    out: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                out.extend((a.name, child.lineno, in_function) for a in child.names if a.name.split(".")[0] == "model")
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")
                    base = base[: len(base) - (child.level - 1)]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module or ""
                if target.split(".")[0] != "model":
                    continue
                for a in child.names:  # `from pkg import submodule` imports the submodule
                    sub = f"{target}.{a.name}"
                    out.append((sub if sub in mods else target, child.lineno, in_function))
            visit(child, inner)

    visit(tree, False)
    return out


def graph() -> dict[str, set[str]]:
    mods = modules()
    g: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        for target, _, _ in imports(p, mods):
            while target not in mods and "." in target:
                target = target.rpartition(".")[0]
            if target != m:
                g[m].add(target)
    return g


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in g:
        if v not in index:
            strong(v)
    return out


def part(name: str) -> str:
    """The rank key of a module: its top-level part of model/ (an entry `__main__` ranks as one)."""
    parts = name.split(".")
    if parts[-1] == "__main__":
        return "__main__"
    return "__init__" if len(parts) == 1 else parts[1]


def test_no_import_cycle_in_model():
    assert cycles(graph()) == []


def test_imports_only_go_down_the_ranks():
    bad = []
    for m, targets in graph().items():
        for t in targets:
            if t != "model" and RANKS[part(t)] > RANKS[part(m)]:
                bad.append(f"{m} -> {t}")
    assert bad == []


def test_arch_imports_no_inference_checkpoint_training_corpus_or_cli():
    banned = {"inference", "checkpoint", "training", "corpus", "cli", "model", "accounting", "footprint"}
    bad = [f"{m} -> {t}" for m, ts in graph().items() if part(m) == "arch" for t in ts if part(t) in banned]
    assert bad == []


def test_nothing_inside_model_imports_the_package_root():
    mods = modules()
    bad = [f"{m}:{line}" for m, p in mods.items() for t, line, _ in imports(p, mods) if t == "model"]
    assert bad == []


def test_imports_inside_functions_only_in_cli():
    mods = modules()
    bad = [f"{m}:{line} {t}" for m, p in mods.items() if part(m) != "cli"
           for t, line, inside in imports(p, mods) if inside]
    assert bad == []


def test_the_walk_sees_every_kind_of_import(tmp_path):
    """The checker itself: a module-level, a function-level and a TYPE_CHECKING import all count."""
    src = ("from typing import TYPE_CHECKING\nfrom .a import x\nif TYPE_CHECKING:\n    from .b import y\n"
           "def f():\n    from .c import z\n")
    root = tmp_path / "model"
    p = root / "arch" / "probe.py"
    p.parent.mkdir(parents=True)
    p.write_text(src)
    mods = {"model.arch.a": p, "model.arch.b": p, "model.arch.c": p}
    got = {(t, inside) for t, _, inside in imports(p, mods, root)}
    assert got == {("model.arch.a", False), ("model.arch.b", False), ("model.arch.c", True)}
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
