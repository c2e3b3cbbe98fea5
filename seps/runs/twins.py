"""Runs another matrix has already measured: copy the record instead of evaluating again.

Matrices share runs: ``regime``'s ``code`` is ``seven-differences``'s ``code``, and the
``laps`` reference stands in most matrices. A run's key hashes its fully resolved head
and training configs (:func:`seps.experiments.definitions.config_key`), so two planned runs with the
same key and seed are the same computation. The runner already shares their training
(``<results>/_work/<train key>-s<seed>/``); without this module it would still evaluate
the finished training once per matrix (a minute or more on a CPU for a 1,000-image
split) and get the same bits each time. Instead, when a record of the current code version
with the same key and seed is stored under another matrix, the runner copies it, with
this matrix's labels (:data:`LABELS`) and the source named in ``copied_from``
(``<matrix>/<file>``, relative to the store, always the record that was computed, never
a copy of it). Only a record made on this machine's :func:`seps.experiments.provenance.bits_key`
(float path and CPU model) is a twin: a run made on another CPU type is another
computation with other numbers (an Intel and an AMD run of one config at `standard`
ended 45 rSum apart), so such a run is computed here rather than copied. A matrix's own
records from another machine are kept; the runner warns before it adds runs beside them
and the dry run counts them (docs/across-machines.md).

What is copied is a measurement, not a promise: the copy keeps the source's
``environment`` (CPU, float path), ``pretrain_fingerprint``, timings and ``started``, as
the record of the computation that produced its numbers. ``seps-bench run --no-reuse``
evaluates again instead (e.g. to time a run); a rerun into a new store
(``--results NEWDIR``) never finds a twin, so the bitwise reproduction check
(``seps-bench same-bits``) always compares fresh computations.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..experiments.provenance import record_bits_key
from ..io.store import RecordError, read_record
from ..versioning.version import VERSION_KEY

#: Record fields that describe the run's place in its matrix rather than its result;
#: a copy takes them from the run it stands for.
LABELS = ("matrix", "profile", "run_id", "describe", "preset", "difference", "paper_row")

#: The field naming the record a copy was made from.
COPIED_FROM = "copied_from"


def find_twin(
    results: Path, matrix: str, key: str, seed: int, version: str, machine: Any
) -> tuple[Path, dict[str, Any]] | None:
    """The first record (by path) under ``results`` of another matrix than ``matrix``
    that has this ``key`` and ``seed``, status ``done``, code ``version`` and was made on
    ``machine`` (a :func:`seps.experiments.provenance.bits_key`; ``None`` matches nothing); ``None``
    when there is none.

    Unreadable files, records set aside as stale (``*.stale.json``, which the name
    pattern does not match) and the training folder ``_work/`` are passed over.
    """
    for path in sorted(Path(results).glob(f"*/*-{key}-s{seed}.json")):
        if path.parent.name in (matrix, "_work"):
            continue
        try:
            rec = read_record(path)
        except RecordError:
            continue
        if (
            rec is not None
            and rec.get("status") == "done"
            and rec.get(VERSION_KEY) == version
            and rec.get("key") == key
            and rec.get("seed") == seed
            and machine is not None
            and record_bits_key(rec) == machine
        ):
            return path, rec
    return None


def copy_record(
    twin: dict[str, Any], twin_path: Path, results: Path, labels: dict[str, Any]
) -> dict[str, Any]:
    """``twin`` relabelled as the run ``labels`` describes (:data:`LABELS`), naming
    its source: the twin's own ``copied_from`` when it is itself a copy, else
    ``<matrix>/<file>`` of ``twin_path`` relative to ``results``."""
    missing = [k for k in LABELS if k not in labels]
    if missing:
        raise ValueError(f"copy_record: labels lack {', '.join(missing)}")
    rec = dict(twin)
    rec.update({k: labels[k] for k in LABELS})
    rec[COPIED_FROM] = twin.get(COPIED_FROM) or Path(twin_path).relative_to(results).as_posix()
    return rec


__all__ = ["COPIED_FROM", "LABELS", "copy_record", "find_twin"]
