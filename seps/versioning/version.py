"""The version of the code that produces a run's numbers, stamped on every run record.

:func:`code_version` is 16 hex digits of a hash of what the training and evaluation
paths run, by behaviour (:mod:`seps.versioning.code_closure`): the modules that importing
:data:`ENTRY_MODULES` may run (their ``seps`` imports followed statically, lazy ones
included, less :data:`EXCLUDED_MODULES`), each as its syntax tree without comments,
docstrings or line numbers, and the package data files they name, as bytes. Editing prose
keeps the version; changing an expression, or importing a new module from the training
path, changes it. A record carries it under :data:`VERSION_KEY`; the runner calls a
record *stale* when its version is not the current one (or it has none: it was written
before records carried one), and the report refuses to put records of several versions
side by side unless asked to (:func:`check_versions`).

:func:`source_hash` hashes a listed set of files the same way (modules by behaviour, data
by bytes); it names the generated datasets (:func:`data_version`) and the pretrained
backbones' folders.
"""

from __future__ import annotations

import functools
import hashlib
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from .code_closure import (
    behaviour_digest,
    canonical_source,
    data_files,
    forget_parsed_sources,
    module_closure,
)

__all__ = [
    "ENTRY_MODULES",
    "EXCLUDED_MODULES",
    "VERSION_KEY",
    "behaviour_hash",
    "check_versions",
    "code_version",
    "hashed_files",
    "source_hash",
]

#: The record field that holds the code version.
VERSION_KEY = "code_version"

#: Where the numbers of a record come from; everything they import counts too. The
#: training loop (:func:`seps.train.train`: model, losses, data, checkpoints, the run),
#: the evaluation of a trained model, the pretraining of the tiny backbones, and the
#: pixel-free baseline whose score records store (``text_only_rsum``). The loop imports
#: the other three today; they are named so that a refactor cannot drop them.
ENTRY_MODULES: tuple[str, ...] = (
    "seps.train.loop",
    "seps.train.evaluation",
    "seps.train.pretrain",
    "seps.data.baselines",
)

#: Modules that the entries import but that cannot change a stored number: neither
#: hashed nor followed. ``store``: atomic file writes and locks (bytes on disk, not what
#: they hold); ``faults``: kill points that only tests arm; ``float_path``: pins the CPU
#: kernels when asked, a machine setting stamped on each record
#: (``environment.cpu.overrides``), not code; ``version``: this hash and the names of
#: generated folders, whose content is keyed by the code that writes it; the console and
#: TensorBoard hooks of the training loop: they only write what the loop computed
#: (tests/test_tensorboard.py shows a run's record the same with and without them).
EXCLUDED_MODULES: tuple[str, ...] = (
    "seps.io.store",
    "seps.runtime.faults",
    "seps.runtime.float_path",
    "seps.versioning.version",
    "seps.train.hooks_log",
    "seps.train.hooks_tensorboard",
)

_PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # seps/


def hashed_files(
    root: Path | None = None,
    entries: Iterable[str] = ENTRY_MODULES,
    excluded: Iterable[str] = EXCLUDED_MODULES,
) -> tuple[dict[str, Path], dict[str, Path]]:
    """What :func:`code_version` covers in the package at ``root`` (default: this one):
    ``({module name: source}, {relative path: data file})``."""
    root = Path(root) if root is not None else _PACKAGE_ROOT
    sources = module_closure(root, entries, excluded)
    return sources, data_files(root, sources.values())


def behaviour_hash(
    root: Path,
    entries: Iterable[str] = ENTRY_MODULES,
    excluded: Iterable[str] = EXCLUDED_MODULES,
) -> str:
    """16 hex digits of the behaviour of :func:`hashed_files` (see the module docstring)."""
    sources, data = hashed_files(root, entries, excluded)
    return behaviour_digest(root, sources, data)[:16]


def source_hash(root: Path, sources: Iterable[str]) -> str:
    """16 hex digits of SHA-256 over the files ``sources`` names under ``root`` (paths
    relative to it; absent ones are skipped), by behaviour as :func:`code_version` is: a
    module (``.py``) counts by its syntax tree without comments, docstrings or line
    numbers, any other file by its bytes with line endings normalised to ``\\n``.

    It names the generated datasets (:func:`data_version`) and the pretrained backbones'
    folders (:func:`seps.train.pretrain.recipe_key`): a prose edit to their generators
    leaves both where they are, a code edit moves them. Files are taken in sorted
    relative-path order; each contributes its path, its length and its content."""
    h = hashlib.sha256()
    for rel in sorted(set(sources)):
        path = Path(root) / rel
        if not path.is_file():
            continue
        if path.suffix == ".py":
            data = canonical_source(path)
        else:
            data = path.read_bytes().replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        h.update(f"{rel}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()[:16]


@functools.cache
def code_version() -> str:
    """The version of this package's number-producing code (:func:`behaviour_hash`),
    computed once per process. The syntax trees parsed for it are dropped afterwards:
    kept, they would cost each later full garbage collection a walk over their millions
    of nodes, the one at exit included (0.3 s of a 2 s ``seps-bench status`` on this
    loaded 2-core machine)."""
    try:
        return behaviour_hash(_PACKAGE_ROOT)
    finally:
        forget_parsed_sources()


def check_versions(
    versions: Iterable[str | None], *, allow_mixed: bool, what: str, current: str | None = None
) -> None:
    """Refuse records of more than one code version, or (given ``current``, this code's
    version) records at any other version than ``current``, unless ``allow_mixed``.

    ``versions`` holds each record's :data:`VERSION_KEY` (``None`` for a record written
    before records carried one: counted as ``unversioned``); ``what`` names where they
    come from (a matrix, a results folder) in the message. A page written from records of
    other code would show numbers this code did not make, even when the records agree
    with each other: the report and scorecard commands pass ``current``.

    Raises:
        ValueError: one line naming ``what``, each distinct version with its count (most
            frequent first), this code's version when it is the cause, and the two ways
            out.
    """
    counts = Counter("unversioned" if v is None else v for v in versions)
    stale = current is not None and any(v != current for v in counts)
    if allow_mixed or (len(counts) <= 1 and not stale):
        return
    listed = ", ".join(f"{v} ({n})" for v, n in sorted(counts.items(), key=lambda i: (-i[1], i[0])))
    if len(counts) > 1:
        found = f"records from {len(counts)} code versions: {listed}"
        found += f" (this code: {current})" if current is not None else ""
    else:
        found = f"records at code version {listed}, not this code's {current}"
    raise ValueError(
        f"{what}: {found}; pass --allow-mixed-versions to write the page anyway (it opens "
        "with a banner naming them), or run 'seps-bench run ... --rerun-stale' to recompute "
        "the stale ones"
    )


#: The modules that write the synthetic dataset (scenes, captions, their noise).
DATA_SOURCES: tuple[str, ...] = (
    "data/scenes.py",
    "data/captions.py",
    "data/dense_captions.py",
    "data/noise.py",
    "data/synth.py",
)


@functools.cache
def data_version() -> str:
    """8 hex digits of :data:`DATA_SOURCES`: the generated folders are named with it, so
    a set written by other generator code is never read as this code's."""
    return source_hash(_PACKAGE_ROOT, DATA_SOURCES)[:8]
