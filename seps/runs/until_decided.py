"""``seps-bench run MATRIX --until-decided``: seeds added look by look to the runs that
the matrix's open rows need, with the design's analysis after each look.

The loop (:func:`run_until_decided`): replay the design on the store
(:func:`seps.report.sequential.analyse`) and keep its log (:func:`write_log`); ask
:func:`~seps.report.sequential.next_stage` what the next look needs; run those runs on
those seeds, one seed at a time (so that an interruption leaves whole seeds, and the
store holds every finished one); then analyse again. It stops when every row of the
matrix is decided, bounded or at the cap, at ``max_seeds``, or when a stage makes no
progress (a failed run, or seeds that must be finished on another CPU type).

*CPU types.* A paired difference must come from one CPU type (a bitwise rerun does not
carry over between CPU types, and the difference would hold the machines' own); the
analysis blocks on the CPU type. So a seed whose needed runs already have records from
another CPU type is left to that CPU type (said in one line) and the others go on.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..experiments.definitions import Matrix, Profile
from ..io.store import atomic_write_text, scan_records
from ..report.sequential import Analysis, Stage, analyse, analysis_log, design_for, next_stage

__all__ = ["LOG_DIR", "log_path", "run_until_decided", "summary_line", "write_log"]

#: Where a store keeps its sequential analyses (``<results>/_sequential/<design>.json``).
LOG_DIR = "_sequential"


def log_path(results: Path, design: str) -> Path:
    return Path(results) / LOG_DIR / f"{design}.json"


def write_log(analysis: Analysis, results: Path) -> Path:
    """Write :func:`~seps.report.sequential.analysis_log` to the store (atomically)."""
    path = log_path(results, analysis.design.name)
    atomic_write_text(path, json.dumps(analysis_log(analysis), indent=1, sort_keys=True) + "\n")
    return path


def summary_line(analysis: Analysis, matrix: str | None = None) -> str:
    """``seven-differences: 3 detected, 2 bounded, 0 open at the cap, 5 open (of 10)``."""
    rows = [r for r in analysis.rows() if matrix is None or r.matrix == matrix]
    counts = {}
    for r in rows:
        counts[r.decision] = counts.get(r.decision, 0) + 1
    parts = ", ".join(
        f"{counts.get(k, 0)} {k}" for k in ("detected", "bounded", "open at the cap", "open")
    )
    return f"{matrix or analysis.design.name}: {parts} (of {len(rows)} rows)"


def _foreign_seeds(results: Path, matrix: str, stage: Stage, here: str) -> dict[int, str]:
    """Seeds of ``stage`` with a record of one of its runs made on another CPU type
    than ``here``: seed -> that CPU type."""
    out: dict[int, str] = {}
    runs, seeds = set(stage.runs), set(stage.seeds)
    for _, rec in scan_records(Path(results) / matrix)[0]:
        if rec.get("run_id") in runs and rec.get("seed") in seeds and rec.get("status") == "done":
            cpu = ((rec.get("environment") or {}).get("cpu") or {}).get("model")
            if cpu and cpu != here:
                out[int(rec["seed"])] = str(cpu)
    return out


def run_until_decided(
    matrix: Matrix,
    profile: Profile,
    results: Path,
    *,
    root: Path | None,
    run_seeds: Callable[[Sequence[int], str], Any],
    here_cpu: str,
    max_seeds: int | None = None,
    dry_run: bool = False,
    say: Callable[[str], None] = print,
) -> int:
    """The loop of the module docstring. ``run_seeds(seeds, only)`` runs the matrix on
    ``seeds`` for the runs ``only`` names (``seps-bench run``'s runner); ``here_cpu`` is
    this machine's CPU model. Returns 0 when the matrix has nothing left to run, 1 when
    a stage could not progress."""
    design = design_for(matrix.name, root, profile.name)
    if design is None:
        raise ValueError(
            f"{matrix.name}: no sequential design names this matrix for profile "
            f"{profile.name!r} (sequential.yaml of the ablation definitions); --until-decided "
            "needs one"
        )
    previous: Stage | None = None
    while True:
        analysis = analyse(design, results, root)
        if not dry_run:
            write_log(analysis, results)
        say(summary_line(analysis, matrix.name))
        stage = next_stage(analysis, matrix.name, max_seeds)
        if stage is None:
            say(f"{matrix.name}: nothing left to run under design {design.name!r}")
            return 0
        say(
            f"{matrix.name}: look {stage.look + 1} needs seeds 0-{stage.seeds[-1]} of "
            f"{len(stage.runs)} runs ({', '.join(stage.runs)}) for {len(stage.rows)} open rows"
        )
        if dry_run:
            return 0
        if stage == previous:
            say(f"{matrix.name}: look {stage.look + 1} made no progress; stopping")
            return 1
        foreign = _foreign_seeds(results, matrix.name, stage, here_cpu)
        for seed, cpu in sorted(foreign.items()):
            say(f"{matrix.name}: seed {seed} has records made on {cpu}; left to that CPU type")
        for seed in (s for s in stage.seeds if s not in foreign):
            run_seeds([seed], ",".join(stage.runs))
        previous = stage
