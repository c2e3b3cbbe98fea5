"""The version of the code that produces a run's numbers, stamped on every run record.

:func:`code_version` is a 16-hex-digit hash of the source files listed in
:data:`SOURCES`. A record carries it under :data:`VERSION_KEY`; the runner calls a record
*stale* when its version is not the current one (or it has none: it was written before
records carried one), and the report refuses to put records of several versions side
by side unless asked to (:func:`check_versions`).
"""

from __future__ import annotations

import functools
import hashlib
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

__all__ = ["SOURCES", "VERSION_KEY", "check_versions", "code_version", "source_hash"]

#: The record field that holds the code version.
VERSION_KEY = "code_version"

#: What the hash covers, relative to the ``seps`` package (a trailing ``/`` is a whole
#: sub-package). These are the modules that decide a run's numbers: the model (head
#: config, selection, aggregation, alignment, losses, the head and its input checks,
#: text chunking, the
#: kernels and the per-text reference loop, encoders, the full model, the official
#: weights' mapping), the data (tokenizer and text, dataset readers and the synthetic
#: generator with its package data), and the training (the loop and its package, its
#: config, evaluation, metrics, device choice, numeric precision), plus pre-training once it exists
#: (``pretrain.py`` here; ``train/pretrain.py`` is inside ``train/``) and the
#: pixel-free baseline scorer (its scores are retrieval numbers too).
#:
#: Left out on purpose, since changing them cannot change a stored number: ``report/``,
#: ``stats``, ``formatting`` (read and present records); ``bench/`` (latency, records of
#: its own); ``cli/``, ``runner``, ``staleness``, ``twins``, ``run_plan``, ``overrides``,
#: ``store``, ``faults``, ``interrupts`` (orchestration, storage, kill points for tests,
#: stopping at a safe point on SIGTERM); ``prebuild``
#: (builds a pretraining cache before a run, whose content the pretraining key fixes);
#: ``provenance`` (stamps the CPU and the pretrained weights' fingerprint on a record:
#: facts, not numbers); ``machine_load`` (the load average while a run was timed);
#: ``float_path`` (pins the CPU kernels when asked: a machine setting like the CPU
#: itself, stamped on each record as ``environment.cpu.overrides``, not code);
#: ``ratio_scale`` (prints ratio weights, which count in run keys once copied into a
#: matrix); ``data_fingerprint`` (run keys of official-layout data); ``hub`` (whether the
#: hub answers, not what a tokenizer does);
#: ``ablations`` (resolves a matrix into configs, whose full content is already in each
#: record's key); ``lexical`` (the BM25 text-only matcher of ``seps-bench text-only``,
#: whose numbers no record stores); the package ``__init__``/``__main__`` (re-exports).
SOURCES: tuple[str, ...] = (
    # model
    "config.py",
    "selection.py",
    "aggregation.py",
    "alignment.py",
    "losses.py",
    "head.py",
    "head_inputs.py",
    "chunking.py",
    "kernels/",
    "reference.py",
    "encoders.py",
    "model.py",
    "official.py",
    # data
    "text.py",
    "data/",
    # training
    "train/",
    "train_config.py",
    "evaluate.py",
    "metrics.py",
    "devices.py",
    "precision.py",
    "pretrain.py",
    "safe_files.py",  # a resumed run's state comes back through it
    # baselines
    "baselines.py",
)

#: Entries of :data:`SOURCES` that may be absent (hashed when present).
OPTIONAL_SOURCES = frozenset({"pretrain.py"})

#: Files of a listed sub-package that are hashed: its modules and its package data.
_PACKAGE_SUFFIXES = (".py", ".json")

_PACKAGE_ROOT = Path(__file__).resolve().parent


def _files(root: Path, sources: Iterable[str]) -> dict[str, Path]:
    """``{relative posix path: file}`` for every file ``sources`` names under ``root``."""
    out: dict[str, Path] = {}
    for entry in sources:
        path = root / entry.rstrip("/")
        if entry.endswith("/"):
            if path.is_dir():
                for f in path.rglob("*"):
                    rel = f.relative_to(root)
                    if (
                        f.is_file()
                        and f.suffix in _PACKAGE_SUFFIXES
                        and "__pycache__" not in rel.parts
                        and not any(part.startswith(".") for part in rel.parts)
                    ):
                        out[rel.as_posix()] = f
        elif path.is_file():
            out[entry] = path
    return out


def source_hash(root: Path, sources: Iterable[str] = SOURCES) -> str:
    """16 hex digits of SHA-256 over the files ``sources`` names under ``root``.

    Files are taken in sorted relative-path order; each contributes its path, its
    length and its bytes with line endings normalised to ``\\n`` (a checkout on Windows
    gives the same version). Entries that do not exist are skipped."""
    h = hashlib.sha256()
    for rel, path in sorted(_files(Path(root), sources).items()):
        data = path.read_bytes().replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        h.update(f"{rel}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()[:16]


@functools.cache
def code_version() -> str:
    """The version of this checkout's number-producing code (:data:`SOURCES`), computed
    once per process."""
    return source_hash(_PACKAGE_ROOT)


def check_versions(versions: Iterable[str | None], *, allow_mixed: bool, what: str) -> None:
    """Refuse records of more than one code version, unless ``allow_mixed``.

    ``versions`` holds each record's :data:`VERSION_KEY` (``None`` for a record written
    before records carried one: counted as ``unversioned``); ``what`` names where they
    come from (a matrix, a results folder) in the message.

    Raises:
        ValueError: one line naming ``what``, each distinct version with its count (most
            frequent first), and the two ways out.
    """
    counts = Counter("unversioned" if v is None else v for v in versions)
    if allow_mixed or len(counts) <= 1:
        return
    listed = ", ".join(f"{v} ({n})" for v, n in sorted(counts.items(), key=lambda i: (-i[1], i[0])))
    raise ValueError(
        f"{what}: records from {len(counts)} code versions: {listed}; pass "
        "--allow-mixed-versions to report them together, or run "
        "'seps-bench run ... --rerun-stale' to recompute the stale ones"
    )


#: The modules that write the synthetic dataset (scenes, captions, their noise).
DATA_SOURCES: tuple[str, ...] = (
    "data/scenes.py",
    "data/captions.py",
    "data/noise.py",
    "data/synth.py",
)


@functools.cache
def data_version() -> str:
    """8 hex digits of :data:`DATA_SOURCES`: the generated folders are named with it, so
    a set written by other generator code is never read as this code's."""
    return source_hash(_PACKAGE_ROOT, DATA_SOURCES)[:8]
