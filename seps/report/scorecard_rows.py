"""The scorecard's rows: one per claim and tested pair, made from the current records.

:func:`claim_rows` turns one claim of ``ablations/claims.yaml``
(:mod:`seps.report.claims`) and the current completed records of its matrices
(:func:`matrix_records`) into :class:`Row` objects, each holding what its verdict and its
cells are judged from: the paired comparison of an effect (:mod:`seps.report.compare`),
the cells of a grid optimum, the runs without records, the seeds at chance level
(:mod:`seps.report.chance`), the bimodal sides (:mod:`seps.report.bimodal`) and why a
learned part did not train (:mod:`seps.report.frozen`). Nothing is judged here: that is
:mod:`seps.report.scorecard_judge`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from ..experiments.definitions import Matrix
from ..experiments.provenance import record_cpu_model
from ..io.formatting import code
from ..stats.paired import mean_ci
from .bimodal import Split, bimodal_sides
from .chance import is_at_chance
from .claims import Claim
from .collapse import COLLAPSE_DROP, collapsed, val_curve
from .compare import Comparison, compare
from .frozen import frozen_reason
from .records import current_records, eval_dense_of, load_results, runs_of
from .verdicts import Cell


@dataclass(frozen=True)
class Row:
    """A scorecard row before judging. Effect rows: ``variant`` and, when both sides have
    records, ``comparison`` and ``base_mean`` (the baseline's mean rSum over the paired
    seeds); optimum rows: ``cells`` (the claimed cell first when it has records).
    ``missing``: the runs without a completed record; ``observed``: the records'
    evaluation protocols when they are not the claimed ones; ``at_chance``: which seeds
    of an effect row's two sides are at chance level (:mod:`seps.report.chance`), if any;
    ``frozen``: why the learned part the switch acts through did not train
    (:mod:`seps.report.frozen`), which makes the row not testable; ``bimodal``: the
    sides of an effect row (variant first) whose seeds split into broken and functional
    ones (:mod:`seps.report.bimodal`), if any; ``collapsed``: which seeds of the two
    sides ended their training more than 10% below their best validation epoch
    (:mod:`seps.report.collapse`), if any; ``machine``: the CPU models of its records;
    ``sequential``: its result under a sequential design, if one decides it."""

    claim: Claim
    matrix: Matrix
    protocol: str
    profile: str | None
    baseline: str
    variant: str | None = None
    comparison: Comparison | None = None
    base_mean: float = math.nan
    cells: tuple[Cell, ...] = ()
    missing: tuple[str, ...] = ()
    observed: str | None = None
    at_chance: str | None = None
    frozen: str | None = None
    bimodal: tuple[Split, ...] = ()
    collapsed: str | None = None
    machine: str | None = None
    #: The row's result under a sequential design (:mod:`seps.report.sequential`), when a
    #: design decides it: its verdict is then the design's, not the claim family's.
    sequential: Any = None


def _machines(sides: Iterable[Mapping[int, Mapping[str, Any]]]) -> str | None:
    """The CPU models (``environment.cpu.model``) of the records of ``sides``, joined
    with `` + `` when several (a row whose sides come from two CPU types, whose
    difference then holds the machines' own); ``None`` without records."""
    models = {record_cpu_model(rec) for side in sides for rec in side.values()}
    return " + ".join(sorted(models)) or None


def matrix_records(results_dir: str | Path, matrix: Matrix) -> pd.DataFrame:
    """The current completed records of ``matrix``'s runs in ``results_dir/<matrix>``
    (records naming another matrix, copied there by hand, are left out)."""
    df = load_results(results_dir, matrix.name)
    df = df[df["matrix"] == matrix.name] if len(df) else df
    cur, _ = current_records(runs_of(df, matrix), matrix)
    return cur[cur["status"] == "done"].reset_index(drop=True) if len(cur) else cur


def by_seed(frame: pd.DataFrame, profile: str | None, run: str) -> dict[int, dict[str, Any]]:
    if frame.empty or profile is None:
        return {}
    sub = frame[(frame["profile"] == profile) & (frame["run_id"] == run)]
    return {int(r["seed"]): r for r in sub.to_dict("records")}


def _profiles(frame: pd.DataFrame, runs: Iterable[str]) -> list[str | None]:
    """Profiles with a record of any of ``runs``, sorted; ``[None]`` when none has one."""
    if frame.empty:
        return [None]
    found = frame[frame["run_id"].isin(list(runs))]["profile"].dropna()
    return sorted({str(p) for p in found}) or [None]


def _pair_profiles(frame: pd.DataFrame, baseline: str, variant: str) -> list[str | None]:
    """The profiles a pair's row is judged in: those with records of both runs; when no
    profile has both, those with a record of the variant, else the first (sorted) with
    one of the baseline (one row, naming what is missing), else ``[None]``. A world that
    runs only some of a matrix's runs (the second world runs the dense rows) so gets
    rows for the pairs it measured, not a row "no record of ..." for every pair whose
    baseline it happens to share."""
    if frame.empty:
        return [None]
    runs = frame[["profile", "run_id"]].dropna()
    has = {
        run: {str(p) for p in runs[runs["run_id"] == run]["profile"]} for run in (baseline, variant)
    }
    both = has[baseline] & has[variant]
    return sorted(both or has[variant]) or sorted(has[baseline])[:1] or [None]


def _observed(protocol: str, variant: Mapping[int, Any], baseline: Mapping[int, Any]) -> str | None:
    """The records' evaluation protocols when they are not the claimed ``protocol`` (one
    name for both sides, or ``A vs B``: the variant's, then the baseline's)."""
    want = protocol.split(" vs ") * (2 if " vs " not in protocol else 1)
    got = [
        "/".join(sorted({str(eval_dense_of(r)) for r in s.values()})) for s in (variant, baseline)
    ]
    if got == want:
        return None
    return got[0] if got[0] == got[1] else f"{got[0]} vs {got[1]}"


def _effect_row(
    claim: Claim,
    m: Matrix,
    protocol: str,
    frame: pd.DataFrame,
    profile: str | None,
    base: str,
    variant: str,
) -> Row:
    var, ref = by_seed(frame, profile, variant), by_seed(frame, profile, base)
    missing = tuple(r for r, side in ((base, ref), (variant, var)) if not side)
    if missing:
        return Row(claim, m, protocol, profile, base, variant, missing=missing)
    paired = [float(ref[s]["rsum"]) for s in sorted(var) if s in ref]
    mean = sum(paired) / len(paired) if paired else math.nan
    c, seen = compare(var, ref), _observed(protocol, var, ref)
    chance = _at_chance_text({variant: var, base: ref})
    frozen = frozen_reason([ref, var])
    # Both sides over the paired seeds: the seeds the test is on.
    common = sorted(s for s in var if s in ref)
    fell = _collapsed_text(
        {r: {s: side[s] for s in common} for r, side in ((variant, var), (base, ref))}
    )
    bimodal = bimodal_sides(
        {r: {s: side[s] for s in common} for r, side in ((variant, var), (base, ref))}
    )
    return Row(
        claim,
        m,
        protocol,
        profile,
        base,
        variant,
        c,
        mean,
        observed=seen,
        at_chance=chance,
        frozen=frozen,
        bimodal=bimodal,
        collapsed=fell,
        machine=_machines((var, ref)),
    )


def _collapsed_text(sides: Mapping[str, Mapping[int, Any]]) -> str | None:
    """``collapsed in training: k of n seeds of `run` (0, 2) end more than 10% below their
    best validation epoch`` for each side with such seeds, sides joined by ``and`` (None:
    none). ``n`` counts the side's seeds with a validation curve of at least 2 epochs
    (the seeds that could collapse); pass the paired seeds only. Their test scores are of
    weights that training had made worse, so the difference mixes that failure with the
    switch's effect."""
    parts = []
    for run, side in sides.items():
        checked = {s: r for s, r in sorted(side.items()) if len(val_curve(r.get("history"))) >= 2}
        seeds = [str(s) for s, r in checked.items() if collapsed(r.get("history"))]
        if seeds:
            parts.append(
                f"{len(seeds)} of {len(checked)} seeds of {code(run)} ({', '.join(seeds)})"
            )
    if not parts:
        return None
    return (
        f"collapsed in training: {' and '.join(parts)} end more than "
        f"{round(100 * COLLAPSE_DROP)}% below their best validation epoch"
    )


def _at_chance_text(sides: Mapping[str, Mapping[int, Any]]) -> str | None:
    """``seeds 2, 3 of `run` at chance`` for each side with such seeds (None: none)."""
    parts = []
    for run, side in sides.items():
        seeds = [str(s) for s, r in sorted(side.items()) if is_at_chance(r)]
        if seeds:
            parts.append(f"seed{'s' if len(seeds) > 1 else ''} {', '.join(seeds)} of {code(run)}")
    return f"{'; '.join(parts)} at chance level" if parts else None


def _optimum_row(
    claim: Claim, m: Matrix, protocol: str, frame: pd.DataFrame, profile: str | None
) -> Row:
    pair = claim.pairs[0]
    ref = by_seed(frame, profile, pair.baseline)
    cells, missing, sides = [], [], []
    for run in (pair.baseline, *pair.variants):
        side = by_seed(frame, profile, run)
        if not side:
            missing.append(run)
            continue
        sides.append(side)
        mean, half, n = mean_ci([float(r["rsum"]) for _, r in sorted(side.items())])
        c = compare(side, ref) if ref and run != pair.baseline else None
        cells.append(Cell(run, mean, half, n, c))
    frozen = frozen_reason(sides) if ref else None  # the claimed cell is sides[0]
    return Row(
        claim,
        m,
        protocol,
        profile,
        pair.baseline,
        cells=tuple(cells),
        missing=tuple(missing),
        frozen=frozen,
        machine=_machines(sides),
    )


def _group_cells(
    claim: Claim, frame: pd.DataFrame, profile: str | None
) -> tuple[tuple[Cell, ...], tuple[str, ...]]:
    """A group claim's ``order`` then ``shown`` runs (each once) as cells: mean ± 95% CI of
    rSum over each run's seeds, no comparison; and the runs of them without a record."""
    cells, missing = [], []
    for run in dict.fromkeys((*claim.order, *claim.shown)):
        side = by_seed(frame, profile, run)
        if not side:
            missing.append(run)
            continue
        cells.append(Cell(run, *mean_ci([float(r["rsum"]) for _, r in sorted(side.items())])))
    return tuple(cells), tuple(missing)


def claim_rows(
    claim: Claim, matrices: Mapping[str, Matrix], frames: Mapping[str, pd.DataFrame]
) -> list[Row]:
    """The rows of one claim; ``frames``: matrix name -> :func:`matrix_records`.

    An untestable claim gives one row (its first matrix and protocol). Otherwise, per
    matrix/protocol in order: an optimum gives one row per profile holding any of its
    cells; an effect one row per (pair, variant, profile holding either side). A group
    claim's (a control's) rows also carry its ``order`` and ``shown`` runs as ``cells``
    (a run without a record joins ``missing``); a matrix it names that is not defined
    (:attr:`Claim.undefined`) gives its pairs as rows without records, of a matrix
    without runs.
    """
    if not claim.testable:
        return [Row(claim, matrices[claim.matrices[0]], claim.protocols[0], None, "")]
    rows: list[Row] = []
    for name, protocol in zip(claim.matrices, claim.protocols, strict=True):
        if name in claim.undefined:
            stub = Matrix(name, "", "", (), Path("matrices", f"{name}.yaml"))
            for pair in claim.pairs:
                for variant in pair.variants:
                    missing = (pair.baseline, variant, *claim.order, *claim.shown)
                    rows.append(
                        Row(claim, stub, protocol, None, pair.baseline, variant, missing=missing)
                    )
            continue
        m, frame = matrices[name], frames[name]
        if claim.kind == "optimum":
            for profile in _profiles(frame, claim.runs()):
                rows.append(_optimum_row(claim, m, protocol, frame, profile))
            continue
        for pair in claim.pairs:
            for variant in pair.variants:
                for profile in _pair_profiles(frame, pair.baseline, variant):
                    row = _effect_row(claim, m, protocol, frame, profile, pair.baseline, variant)
                    if claim.group is not None:
                        cells, missing = _group_cells(claim, frame, profile)
                        row = replace(row, cells=cells, missing=(*row.missing, *missing))
                    rows.append(row)
    return rows


def paper_rows(rows: Iterable[Row]) -> list[Row]:
    """The rows of the claims table: those of claims without a ``group`` (the controls
    are judged in their own section, :mod:`seps.report.controls`)."""
    return [r for r in rows if r.claim.group is None]


__all__ = ["Row", "by_seed", "claim_rows", "matrix_records", "paper_rows"]
