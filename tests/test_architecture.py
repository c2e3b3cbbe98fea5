"""The layout of ``seps/`` (docs/architecture.md): layers as subpackages, imports only
downwards, no module too long to read, a training path of short functions.

Imports are read statically from every module's syntax tree, lazy ones inside functions
and ``TYPE_CHECKING`` blocks included, so a function-level import cannot hide an upward
edge.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "seps"

#: Each subpackage's layer, bottom up (docs/architecture.md): a module may import its own
#: package and any package of a lower layer. ``report`` is below ``runs`` (the runner's
#: sequential loop reads the reports' analysis); ``bench`` beside ``runs``.
LAYERS = {
    "runtime": 0,
    "versioning": 0,
    "stats": 0,
    "io": 1,
    "core": 2,
    "model": 3,
    "data": 4,
    "train": 5,
    "experiments": 6,
    "report": 7,
    "runs": 8,
    "bench": 8,
    "cli": 9,
}
#: Modules over this many lines are split (a module is one concept, read in one sitting).
MAX_MODULE_LINES = 600
#: Functions of the training path over this many lines are split (the loop reads as
#: SPEC.md's: encode, head, loss, step).
MAX_TRAIN_FUNCTION_LINES = 80


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The ``seps`` modules that module ``name`` imports, resolved."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            targets = [f"{target}.{a.name}" for a in node.names] + [target]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in MODULES:
                t = t.rpartition(".")[0]
            if t.startswith("seps") and t != name:
                found.add(t)
    return found


def _package(name: str) -> str | None:
    parts = name.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in LAYERS) else None


def test_every_module_sits_in_a_layer_package():
    loose = sorted(n for n in MODULES if _package(n) is None and n not in ("seps", "seps.__main__"))
    assert loose == [], "modules outside the layer packages of docs/architecture.md"
    assert {_package(n) for n in MODULES} - {None} == set(LAYERS)


def test_no_module_imports_a_higher_layer():
    upward = []
    for name, path in MODULES.items():
        own = _package(name)
        if own is None:
            continue
        for target in _imports(name, path):
            other = _package(target)
            if other is not None and LAYERS[other] > LAYERS[own]:
                upward.append(f"{name} -> {target}")
            if other is not None and other != own and LAYERS[other] == LAYERS[own]:
                upward.append(f"{name} -> {target} (same layer, other package)")
    assert upward == []


def test_there_is_no_import_cycle():
    graph = {n: _imports(n, p) for n, p in MODULES.items()}
    state: dict[str, int] = {}
    cycles = []

    def visit(n: str, trail: list[str]) -> None:
        state[n] = 1
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                cycles.append(" -> ".join([*trail[trail.index(m) :], m]))
            elif m not in state:
                visit(m, [*trail, m])
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n, [n])
    # A package's __init__ that re-exports its own modules imports them, and a submodule
    # that names its package imports the __init__: Python's package machinery, not a cycle
    # of the code.
    assert [c for c in cycles if not _within_one_package(c)] == []


def _within_one_package(cycle: str) -> bool:
    """A cycle made only of a package's ``__init__`` and its own submodules."""
    names = cycle.split(" -> ")
    inits = [n for n in names if MODULES[n].name == "__init__.py"]
    return bool(inits) and all(n == inits[0] or n.startswith(inits[0] + ".") for n in names)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_is_longer_than_a_sitting(name):
    lines = len(MODULES[name].read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{name}: {lines} lines"


def test_no_function_of_the_training_path_is_longer_than_a_screen():
    long = []
    for path in sorted((PACKAGE / "train").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_TRAIN_FUNCTION_LINES:
                    long.append(f"{path.name}:{node.name} {n} lines")
    assert long == []
