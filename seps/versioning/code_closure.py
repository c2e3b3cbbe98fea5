"""Which files of the package decide a run's numbers, and what of them counts.

:func:`module_closure` follows the package's own imports, read statically from the
syntax trees, from a few entry modules; :func:`data_files` finds the package data those
modules name; :func:`behaviour_digest` hashes both. A module counts by its *behaviour*:
:func:`normalised_tree` drops its comments (the parser never sees them), its docstrings
and other statements that do nothing, and its line numbers, so editing prose changes
nothing while any change to an expression, a name or an import does.

Everything here works on a folder and module names relative to it (``train/loop.py``,
never an absolute path) and reads only ``.py`` sources and data bytes, never
``__pycache__``: a checkout and a wheel install of the same code give the same digest.
"""

from __future__ import annotations

import ast
import functools
import hashlib
from collections.abc import Iterable, Iterator
from pathlib import Path

__all__ = [
    "behaviour_digest",
    "data_files",
    "forget_parsed_sources",
    "module_closure",
    "module_imports",
    "modules",
    "normalised_tree",
]

#: Files of the package that are neither modules nor data (a marker for type checkers).
_NOT_DATA = frozenset({"py.typed"})


def _skipped(rel: Path) -> bool:
    """Caches and hidden files (editor swaps, temporary files) are never package content."""
    return "__pycache__" in rel.parts or any(p.startswith(".") for p in rel.parts)


def modules(root: Path) -> dict[str, Path]:
    """``{dotted module name: source file}`` of the package at ``root`` (named after
    the folder: ``seps``, ``seps.train``, ``seps.train.loop``)."""
    root = Path(root)
    out: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if _skipped(rel) or not path.is_file():
            continue
        parts = [root.name, *rel.with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def module_imports(name: str, path: Path, known: Iterable[str]) -> set[str]:
    """The modules of ``known`` that module ``name`` (source ``path``) may import.

    Counts every ``import`` and ``from ... import`` anywhere in the file: at the top, in
    functions (lazy imports), under ``if TYPE_CHECKING`` (counted rather than argued
    about), relative ones resolved against the module's package; ``from a import b``
    counts ``a.b`` too when that is a module. A string constant that is exactly the name
    of a known module counts as well: it is how tables of lazy imports name them
    (``importlib.import_module(_WHERE[name])``)."""
    known = set(known)
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    imports, strings = _scan(Path(path).read_bytes())
    for level, module, names in imports:
        if level:
            base = package.split(".")
            base = base[: len(base) - (level - 1)]
            target = ".".join([*base, module] if module else base)
        else:
            target = module or ""
        found.add(target)
        found.update(f"{target}.{n}" for n in names)
    found.update(strings)
    return found & known


def _parents(name: str) -> Iterator[str]:
    """``a.b.c`` gives ``a`` and ``a.b``: importing a module runs its packages first."""
    parts = name.split(".")
    for i in range(1, len(parts)):
        yield ".".join(parts[:i])


def module_closure(
    root: Path, entries: Iterable[str], excluded: Iterable[str] = ()
) -> dict[str, Path]:
    """Every module of the package at ``root`` that importing ``entries`` may run.

    The transitive closure of :func:`module_imports`, with each module's parent
    packages (their ``__init__`` runs first). A module of ``excluded`` is neither part
    of it nor followed: what only it imports is not reached through it (an exclusion
    that names no module excludes nothing).

    Raises:
        ValueError: an entry that is not a module of the package (a renamed entry must
            not silently leave the version empty).
    """
    known = modules(root)
    excluded = set(excluded)
    entries = list(entries)
    missing = sorted(m for m in entries if m not in known)
    if missing:
        raise ValueError(f"{root}: no such module(s): {', '.join(missing)}")
    seen: set[str] = set()
    todo = list(entries)
    while todo:
        name = todo.pop()
        if name in seen or name in excluded:
            continue
        seen.add(name)
        todo.extend(_parents(name))
        todo.extend(module_imports(name, known[name], known))
    return {name: known[name] for name in sorted(seen)}


def data_files(root: Path, sources: Iterable[Path]) -> dict[str, Path]:
    """``{path relative to root: file}`` of the package data that ``sources`` read.

    A data file (any file of the package that is not a module, a cache or hidden) counts
    when one of ``sources`` holds a string constant that contains its file name, or the
    name of a folder of data alone (no module in it) that holds it. A file found through
    a name built at run time would be missed; the tests check that every data file of
    the package is named somewhere."""
    root = Path(root)
    strings = [s for path in sources for s in _scan(Path(path).read_bytes())[1]]
    out: dict[str, Path] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if not path.is_file() or _skipped(rel) or path.suffix in (".py", ".pyc"):
            continue
        if rel.name in _NOT_DATA:
            continue
        names = [rel.name] + [
            d.name for d in rel.parents if d != Path(".") and not any((root / d).glob("*.py"))
        ]
        if any(n in s for n in names for s in strings):
            out[rel.as_posix()] = path
    return out


def _no_op(stmt: ast.AST) -> bool:
    return isinstance(stmt, ast.Pass) or (
        isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
    )


@functools.lru_cache(maxsize=1024)
def _normalised(source: bytes) -> ast.Module:
    """The tree of ``source`` without docstrings, bare constants (``...`` included) and
    ``pass``, wherever they stand (keyed by content: each module is parsed once per
    process, however many times it is asked for). Callers must not change it."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            stmts = getattr(node, field, None)
            if isinstance(stmts, list) and any(_no_op(s) for s in stmts):
                setattr(node, field, [s for s in stmts if not _no_op(s)])
    return tree


def forget_parsed_sources() -> None:
    """Drop the cached syntax trees of :func:`normalised_tree` (large; a later call parses
    again). The imports and strings found in them stay cached: they are small."""
    _normalised.cache_clear()


def normalised_tree(path: Path) -> ast.Module:
    """The syntax tree of the module at ``path`` without its docstrings, bare constants
    and ``pass`` statements (comments never reach the tree). Type annotations stay:
    dataclasses and config parsers read them."""
    return _normalised(Path(path).read_bytes())


#: ``(level, module, names)`` of an import: ``import a.b`` is ``(0, "a.b", ())``,
#: ``from ..x import y`` is ``(2, "x", ("y",))``.
_Import = tuple[int, "str | None", tuple[str, ...]]


@functools.lru_cache(maxsize=1024)
def _scan(source: bytes) -> tuple[tuple[_Import, ...], frozenset[str]]:
    """The imports and the string constants of a module's normalised tree, found in
    one walk (parsed once per process for all callers)."""
    imports: list[_Import] = []
    strings: set[str] = set()
    for node in ast.walk(_normalised(source)):
        if isinstance(node, ast.Import):
            imports.extend((0, alias.name, ()) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imports.append((node.level, node.module, tuple(a.name for a in node.names)))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            strings.add(node.value)
    return tuple(imports), frozenset(strings)


def _canonical(node: object) -> str:
    """A text of ``node`` that is the same on every Python the package supports: no
    line or column numbers, and no field that is ``None`` or empty (newer Pythons add
    such fields, e.g. ``type_params``), nor the unused ``kind``/``type_comment``."""
    if isinstance(node, ast.AST):
        fields = [
            f"{name}={_canonical(value)}"
            for name, value in ast.iter_fields(node)
            if name not in ("kind", "type_comment") and value is not None and value != []
        ]
        return f"{type(node).__name__}({', '.join(fields)})"
    if isinstance(node, list):
        return f"[{', '.join(_canonical(v) for v in node)}]"
    return repr(node)


def canonical_source(path: Path) -> bytes:
    """A module's behaviour as bytes: its normalised syntax tree (:func:`normalised_tree`)
    written out canonically, so comments, docstrings and line numbers do not count."""
    return _canonical(normalised_tree(path)).encode()


def behaviour_digest(root: Path, sources: dict[str, Path], data: dict[str, Path]) -> str:
    """64 hex digits of SHA-256 over ``sources`` (module name: file), each as its
    normalised tree under its path relative to ``root``, and ``data`` (relative path:
    file), as bytes with line endings made ``\\n``; all in sorted order."""
    root = Path(root)
    h = hashlib.sha256()
    items = [(p.relative_to(root).as_posix(), p, True) for p in sources.values()]
    items += [(rel, p, False) for rel, p in data.items()]
    for rel, path, is_module in sorted(items):
        if is_module:
            blob = canonical_source(path)
        else:
            blob = path.read_bytes().replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        h.update(f"{rel}\0{len(blob)}\0".encode())
        h.update(blob)
    return h.hexdigest()
