"""Imports point one way, in the app and inside model/ (docs/design/style.md §1).

An `ast` walk of every module of the tree (app.py, pages/, ui/, lessons/, model/, bench/, lab/) reads each
import (at module level, inside functions and under `if TYPE_CHECKING:`) and resolves relative names.

The app: pages -> ui -> lessons -> model. An import may go to the same layer or a lower one; lessons/
and model/ import no Streamlit, Plotly or pandas; nothing outside bench/ and lab/ imports bench (the
benchmarks sit beside the app, not under it); an import inside a function needs a comment that says why
(on its line or the line above).

The lab (lab/: training, corpus, research probes) may import anything; nothing in the product (app.py,
pages/, ui/, lessons/, model/) imports it, so the app runs without it. bench/ may (the training benchmark
times the lab's step).

model/arch/ names no training-only type (a class the lab's training defines: its targets, recorders, configs),
so a research loss arrives through the model's `Recorder` hooks, never as a branch or a field of the architecture.

Inside model/: no import cycle anywhere; every import goes to the same or a lower rank (`RANKS`);
`arch/` imports nothing from inference, checkpoint, heldout or cli; nothing imports the
package root `model`; imports inside functions only in `cli/` (which loads one command lazily).

The faces: each sub-package of model/ re-exports its public names in its `__init__` (`__all__`). Code
outside model/ (app.py, pages/, ui/, lessons/, bench/) imports from `model`, a sub-package's face or a
top-level module of model/ (the leaves, `accounting`), never from a module inside a sub-package, and
only names the face lists in `__all__` (no module reached through a face, no private name); every
name an `__all__` lists is bound in its `__init__`. `FACE_EXCEPTIONS` lists the few deep imports that
must stay, each with its reason. tests/ is left out of that rule: a test of a module's internals
imports that module (its private helpers, the globals it monkeypatches).

Every check is a function of the tree's root, so the last tests run them on a probe tree written
under `tmp_path` and see each rule fail when it should.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# rank of each top-level part of model/; an import may only go to the same rank or a lower one
RANKS = {
    "errors": 0, "fusion": 0, "config": 0, "layer_map": 0, "quant": 0, "tokenizer": 0, "scenes": 0, "shipped": 0,
    "arch": 2,
    "inference": 3,
    "model": 4, "accounting": 4,
    "checkpoint": 5, "heldout": 5,
    "cli": 7,
    # the command-line entry point and the public API sit on top of everything
    "__main__": 8, "__init__": 8,
}
ARCH_BANS = {"inference", "checkpoint", "heldout", "cli", "model", "accounting"}

# the app's layers, lowest first; bench/ is outside them (it may import any of them, none imports it)
APP = {"model": 0, "lessons": 1, "ui": 2, "pages": 3, "app": 4}
DRAWING = {"streamlit", "plotly", "pandas"}          # no drawing library below ui/
APP_DIRS = ("model", "lessons", "ui", "pages", "bench", "lab")
PRODUCT = ("app", "pages", "ui", "lessons", "model")  # what the app runs; none of it imports the lab


class Import:
    """One import statement's target, resolved to an absolute dotted name."""

    def __init__(self, target: str, line: int, in_function: bool, commented: bool):
        self.target, self.line, self.in_function, self.commented = target, line, in_function, commented

    @property
    def top(self) -> str:
        return self.target.split(".")[0]


def module_name(path: Path, root: Path = REPO) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path = REPO, dirs: tuple[str, ...] = APP_DIRS) -> dict[str, Path]:
    out = {module_name(p, root): p for d in dirs for p in sorted((root / d).rglob("*.py"))}
    if (root / "app.py").exists():
        out["app"] = root / "app.py"
    return out


def imports(path: Path, mods: dict[str, Path], root: Path = REPO) -> list[Import]:
    """Every import in `path`; `from pkg import name` counts as importing pkg.name when that is a module."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    text = path.read_text()
    lines = text.splitlines()
    tree = ast.parse(text, str(path))
    out: list[Import] = []

    def commented(node: ast.stmt) -> bool:
        here = lines[node.lineno - 1]
        above = lines[node.lineno - 2].strip() if node.lineno >= 2 else ""
        return "#" in here or above.startswith("#")

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                out.extend(Import(a.name, child.lineno, in_function, commented(child)) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")
                    base = base[: len(base) - (child.level - 1)]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module or ""
                for a in child.names:
                    sub = f"{target}.{a.name}"
                    out.append(Import(sub if sub in mods else target, child.lineno, in_function, commented(child)))
            visit(child, inner)

    visit(tree, False)
    return out


# ---- model/ -----------------------------------------------------------------------------------------------------
def model_graph(root: Path = REPO) -> dict[str, set[str]]:
    mods = modules(root, ("model",))
    g: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        for imp in imports(p, mods, root):
            if imp.top != "model":
                continue
            target = imp.target
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
        for w in g.get(v, ()):
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
    """The rank key of a model module: its top-level part of model/ (`__main__` ranks as one)."""
    parts = name.split(".")
    if parts[-1] == "__main__":
        return "__main__"
    return "__init__" if len(parts) == 1 else parts[1]


def unranked(root: Path = REPO) -> list[str]:
    return sorted({part(m) for m in model_graph(root)} - set(RANKS))


def model_back_edges(root: Path = REPO) -> list[str]:
    """Imports inside model/ that point up the ranks, or from arch/ into what runs it."""
    bad = []
    for m, targets in model_graph(root).items():
        for t in targets:
            if t == "model":
                continue
            if RANKS.get(part(t), 99) > RANKS.get(part(m), 99):
                bad.append(f"{m} -> {t} (rank {part(t)} is above {part(m)})")
            elif part(m) == "arch" and part(t) in ARCH_BANS:
                bad.append(f"{m} -> {t} (arch/ imports only leaves and itself)")
    return sorted(bad)


def model_import_habits(root: Path = REPO) -> list[str]:
    """Imports of the package root from inside it, and function-level imports outside cli/."""
    mods = modules(root, ("model",))
    bad = []
    for m, p in mods.items():
        for imp in imports(p, mods, root):
            if imp.top != "model":
                continue
            if imp.target == "model":
                bad.append(f"{m}:{imp.line} imports the package root")
            elif imp.in_function and part(m) != "cli":
                bad.append(f"{m}:{imp.line} imports {imp.target} inside a function")
    return bad


# ---- the app ----------------------------------------------------------------------------------------------------
def app_violations(root: Path = REPO) -> list[str]:
    """Upward imports between the app's layers, drawing libraries below ui/, imports of bench/ from outside
    it and the lab, imports of the lab from the product, and uncommented function-level imports in app.py,
    pages/, ui/ and lessons/."""
    mods = modules(root)
    bad = []
    for m, p in mods.items():
        layer = m.split(".")[0]
        for imp in imports(p, mods, root):
            where = f"{p.relative_to(root)}:{imp.line}"
            if layer in APP and imp.top in APP and APP[imp.top] > APP[layer]:
                bad.append(f"{where} {layer}/ imports {imp.target} from the layer above")
            if layer in ("model", "lessons") and imp.top in DRAWING:
                bad.append(f"{where} {layer}/ imports {imp.target}: drawing belongs to ui/ and pages/")
            if layer not in ("bench", "lab") and imp.top == "bench":
                bad.append(f"{where} imports {imp.target}: nothing outside bench/ and lab/ imports bench")
            if layer in PRODUCT and imp.top == "lab":
                bad.append(f"{where} imports {imp.target}: the product (app.py, pages, ui, lessons, model) never "
                           "imports the lab")
            if layer in ("app", "pages", "ui", "lessons") and imp.in_function and not imp.commented:
                bad.append(f"{where} imports {imp.target} inside a function with no comment saying why")
    return list(dict.fromkeys(bad))        # one line per statement, however many names it imports


# ---- model/arch/ and the lab's training ----------------------------------------------------------------------------
def training_types(root: Path = REPO) -> set[str]:
    """The classes lab/training/ defines (at a module's top level)."""
    out: set[str] = set()
    for p in sorted((root / "lab" / "training").rglob("*.py")):
        out.update(n.name for n in ast.parse(p.read_text()).body if isinstance(n, ast.ClassDef))
    return out


def arch_training_types(root: Path = REPO) -> list[str]:
    """Each place model/arch/ names a training-only type: as a name, an attribute, an imported name or inside a
    string annotation."""
    banned = training_types(root)
    bad = []
    for p in sorted((root / "model" / "arch").rglob("*.py")):
        tree = ast.parse(p.read_text())
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Name):
                names = [node.id]
            elif isinstance(node, ast.Attribute):
                names = [node.attr]
            elif isinstance(node, ast.alias):
                names = [node.name.split(".")[-1], node.asname or ""]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
                names = [node.value]                       # a quoted annotation
            for n in names:
                if n in banned:
                    bad.append(f"{p.relative_to(root)}:{getattr(node, 'lineno', 0)} names {n}, a type of lab/training")
    return sorted(set(bad))


# ---- the faces of model/'s sub-packages ---------------------------------------------------------------------------
FACE_USERS = ("app", "pages", "ui", "lessons", "bench")   # code outside model/ that must import through the faces
# (file, deep module) -> why that file must reach past the face (the lab is not held to the faces: it trains and
# probes the model's insides)
FACE_EXCEPTIONS: dict[tuple[str, str], str] = {}


def face_exports(root: Path = REPO) -> dict[str, list[str]]:
    """`model` and each of its sub-packages -> the names its `__init__` lists in `__all__` (read with ast, not
    imported)."""
    out = {}
    for init in [root / "model" / "__init__.py", *sorted((root / "model").glob("*/__init__.py"))]:
        names: list[str] = []
        for node in ast.parse(init.read_text()).body:
            targets = node.targets if isinstance(node, ast.Assign) else []
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                names = list(ast.literal_eval(node.value))
        out[module_name(init, root)] = names
    return out


def bound_names(path: Path) -> set[str]:
    """The names a module binds at its top level (imports, defs, classes, assignments)."""
    out: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                out.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
    return out


def face_gaps(root: Path = REPO) -> list[str]:
    """Names an `__all__` lists but its `__init__` does not bind, names listed twice, and faces with no `__all__`."""
    bad = []
    for face, names in face_exports(root).items():
        init = root / face.replace(".", "/") / "__init__.py"
        if not names:
            bad.append(f"{face} has no __all__")
        bad += [f"{face}.__all__ lists {n!r}, which its __init__ does not bind" for n in names
                if n not in bound_names(init)]
        bad += [f"{face}.__all__ lists {n!r} twice" for n in sorted({n for n in names if names.count(n) > 1})]
    return bad


def face_violations(root: Path = REPO) -> list[str]:
    """Imports from outside model/ that go past a face, name what a face does not list, or name a private."""
    mods = modules(root)
    faces = face_exports(root)
    doors = {"model"} | {f"model.{p.stem}" for p in (root / "model").iterdir()
                         if p.stem not in ("__init__", "__main__", "__pycache__") and (p.suffix == ".py" or p.is_dir())}
    bad = []
    for m, p in mods.items():
        if m.split(".")[0] not in FACE_USERS:
            continue
        rel = p.relative_to(root).as_posix()
        for imp in imports(p, mods, root):
            if imp.top == "model" and imp.target not in doors and (rel, imp.target) not in FACE_EXCEPTIONS:
                bad.append(f"{rel}:{imp.line} imports {imp.target}: import it from its package's face")
        for node in ast.walk(ast.parse(p.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and
                    node.module.split(".")[0] == "model"):
                continue
            for a in node.names:
                if a.name.startswith("_"):
                    bad.append(f"{rel}:{node.lineno} imports the private name {node.module}.{a.name}")
                elif node.module in faces and a.name not in faces[node.module] and \
                        f"{node.module}.{a.name}" not in mods:      # (a module reached through a face is caught above)
                    bad.append(f"{rel}:{node.lineno} imports {a.name} from {node.module}, not in its __all__")
    return list(dict.fromkeys(bad))


# ---- the tests --------------------------------------------------------------------------------------------------
def test_every_model_part_has_a_rank():
    assert unranked() == [], "give each new top-level part of model/ a rank in RANKS (and a line in the README)"


def test_no_import_cycle_in_model():
    assert cycles(model_graph()) == []


def test_model_imports_only_go_down_the_ranks():
    assert model_back_edges() == []


def test_model_imports_no_package_root_and_loads_lazily_only_in_cli():
    assert model_import_habits() == []


def test_the_app_imports_point_down():
    assert app_violations() == []


def test_model_arch_names_no_training_only_type():
    assert "LookupTarget" in training_types() and "TrainConfig" in training_types()
    assert arch_training_types() == []


def test_the_forward_takes_what_a_forward_needs():
    """The model's forward takes at most 10 parameters: the research losses are recorders, not arguments."""
    import inspect

    from model.arch import Backbone

    assert len(inspect.signature(Backbone.forward).parameters) - 1 <= 10


def test_code_outside_model_imports_through_the_faces():
    assert face_violations() == []


def test_every_face_binds_what_its_all_lists():
    assert face_gaps() == []
    for face, names in face_exports().items():          # and, imported for real, each name is there
        package = importlib.import_module(face)
        assert [n for n in names if not hasattr(package, n)] == [], face


def test_each_face_exception_is_still_needed():
    mods = modules()
    for (rel, target), why in FACE_EXCEPTIONS.items():
        assert why and target in {i.target for i in imports(REPO / rel, mods)}, f"{rel} no longer imports {target}"


def test_the_walk_sees_every_kind_of_import(tmp_path):
    """The walker: a module-level, a function-level and a TYPE_CHECKING import all count."""
    src = ("from typing import TYPE_CHECKING\nfrom .a import x\nif TYPE_CHECKING:\n    from .b import y\n"
           "def f():\n    from .c import z\n")
    p = tmp_path / "model" / "arch" / "probe.py"
    p.parent.mkdir(parents=True)
    p.write_text(src)
    mods = {"model.arch.a": p, "model.arch.b": p, "model.arch.c": p}
    got = {(i.target, i.in_function) for i in imports(p, mods, tmp_path) if i.top == "model"}
    assert got == {("model.arch.a", False), ("model.arch.b", False), ("model.arch.c", True)}
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


CLEAN = {
    "app.py": "import streamlit as st\nfrom pages import page\n",
    "pages/__init__.py": "", "pages/page.py": "from ui import widgets\nfrom lessons import lesson\n",
    "ui/__init__.py": "", "ui/widgets.py": "import plotly\nfrom lessons import lesson\nfrom model.config import x\n",
    "lessons/__init__.py": "", "lessons/lesson.py": "import torch\nfrom model.arch import Attention\n",
    "model/__init__.py": "from .config import x\n__all__ = ['x']\n", "model/config.py": "x = 1\n",
    "model/arch/__init__.py": "from .attention import Attention\n__all__ = ['Attention']\n",
    "model/arch/attention.py": "from ..config import x\nclass Attention: ...\n",
    "model/inference/__init__.py": "from .engine import prefill\n__all__ = ['prefill']\n",
    "model/inference/engine.py": "from ..arch import attention\ndef prefill(): ...\n",
    "bench/__init__.py": "", "bench/quality.py": "from lessons import lesson\nfrom model.inference import prefill\n",
    "bench/train.py": "from lab.training import step\n",
    "lab/__init__.py": "", "lab/training/__init__.py": "",
    "lab/training/step.py": "import torch\nfrom model.arch import attention\nclass TrainConfig: ...\n",
    "lab/probes/__init__.py": "",
    "lab/probes/heads.py": "from bench import quality\nfrom lessons import lesson\nfrom ui import widgets\n",
}


def test_the_checks_pass_a_clean_probe_tree(tmp_path):
    root = _tree(tmp_path, CLEAN)
    assert app_violations(root) == []
    assert model_back_edges(root) == [] and model_import_habits(root) == [] and unranked(root) == []
    assert face_violations(root) == [] and face_gaps(root) == [] and arch_training_types(root) == []


def test_the_checks_fail_on_each_kind_of_back_edge(tmp_path):
    """Each probe, added alone to the clean tree, is reported by the check that guards it."""
    probes = {
        "lessons imports streamlit": ("lessons/bad.py", "import streamlit as st\n", app_violations),
        "lessons imports plotly in a function": ("lessons/bad.py", "def f():\n    import plotly  # lazy\n",
                                                 app_violations),
        "lessons imports ui": ("lessons/bad.py", "from ui import widgets\n", app_violations),
        "lessons imports bench": ("lessons/bad.py", "from bench.quality import evaluate\n", app_violations),
        "ui imports pages": ("ui/bad.py", "from pages import page\n", app_violations),
        "model imports lessons": ("model/arch/bad.py", "from lessons import lesson\n", app_violations),
        "model imports pandas": ("model/arch/bad.py", "import pandas\n", app_violations),
        "pages imports bench": ("pages/bad.py", "import bench.quality\n", app_violations),
        "model imports the lab": ("model/config.py", "from lab.training import step\nx = 1\n", app_violations),
        "arch imports the lab": ("model/arch/bad.py", "import lab.training.step\n", app_violations),
        "lessons imports the lab": ("lessons/bad.py", "from lab.probes import heads\n", app_violations),
        "ui imports the lab in a commented function": ("ui/bad.py", "def f():\n    import lab.training  # lazy\n",
                                                        app_violations),
        "pages imports the lab": ("pages/bad.py", "from lab import training\n", app_violations),
        "app imports the lab": ("app.py", "import streamlit as st\nimport lab\n", app_violations),
        "arch annotates with a training type": ("model/arch/bad.py", "def f(tc: 'TrainConfig'): ...\n",
                                                arch_training_types),
        "arch builds a training type": ("model/arch/bad.py", "def f(m):\n    return m.TrainConfig()\n",
                                        arch_training_types),
        "arch imports a training type": ("model/arch/bad.py", "from x import TrainConfig as T\n", arch_training_types),
        "an uncommented lazy import": ("ui/bad.py", "def f():\n    from lessons import lesson\n", app_violations),
        "arch imports inference": ("model/arch/bad.py", "from ..inference import engine\n", model_back_edges),
        "config imports arch": ("model/config.py", "from .arch import attention\n", model_back_edges),
        "arch imports inference in a function": ("model/arch/bad.py", "def f():\n    from ..inference import engine\n",
                                                 model_import_habits),
        "model imports its package root": ("model/arch/bad.py", "import model\n", model_import_habits),
        "an unranked part of model": ("model/newthing.py", "", unranked),
        "pages imports a module inside a sub-package": ("pages/bad.py", "from model.inference.engine import prefill\n",
                                                        face_violations),
        "bench imports a module inside a sub-package": ("bench/bad.py", "import model.arch.attention\n",
                                                        face_violations),
        "lessons reaches a module through a face": ("lessons/bad.py", "from model.inference import engine\n",
                                                    face_violations),
        "ui imports a name the face does not list": ("ui/bad.py", "from model.arch import attend\n", face_violations),
        "app imports a private name": ("app.py", "from model.config import _hidden\n", face_violations),
        "a face lists a name it does not bind": ("model/inference/__init__.py",
                                                 "from .engine import prefill\n__all__ = ['prefill', 'decode']\n",
                                                 face_gaps),
        "a face without __all__": ("model/arch/__init__.py", "from .attention import Attention\n", face_gaps),
        "pages imports from model a name its __all__ does not list": ("pages/bad.py", "from model import config_x\n",
                                                                        face_violations),
    }
    for what, (rel, text, check) in probes.items():
        root = tmp_path / what.replace(" ", "_")
        _tree(root, {**CLEAN, rel: text})
        assert check(root), f"the check missed: {what}"
