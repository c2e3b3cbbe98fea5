"""Scorecard verdicts of the rows a sequential design decides.

A row of a claim that a design of ``sequential.yaml`` covers carries its replayed result
(:attr:`seps.report.scorecard_rows.Row.sequential`, attached by
:func:`attach_sequential`), and :func:`sequential_verdict` words its decision as the
scorecard's verdicts: ``supported`` or ``contradicted`` (detected, with the claimed sign
or the other; ``larger/smaller than claimed`` where the repeated interval lies wholly
outside the claimed size), ``bounded`` (the repeated interval rules out effects beyond
``±X``), ``open at the cap`` and, below the cap, ``underpowered (needs about N seeds)``
as a fixed-sample test would say, or ``open`` when nothing can be said. The design's
Holm over looks, not the claim's fixed-sample family, decided them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path

from ..io.formatting import fmt
from .power import ScaledClaim, size_check
from .scorecard_rows import Row
from .sequential import Analysis, RowResult, analyse, load_designs
from .verdicts import underpowered_text

__all__ = [
    "BOUNDED",
    "OPEN",
    "OPEN_AT_CAP",
    "analyses",
    "attach_sequential",
    "sequential_verdict",
]

BOUNDED = "bounded"
OPEN_AT_CAP = "open at the cap"
OPEN = "open"


def analyses(results: str | Path, root: Path | None = None) -> list[Analysis]:
    """Every design of ``<root>/sequential.yaml`` replayed on ``results``."""
    return [analyse(d, results, root) for d in load_designs(root).values()]


def attach_sequential(rows: Sequence[Row], replayed: Iterable[Analysis]) -> list[Row]:
    """``rows`` with each row a design decides carrying its result (matched by the
    design's profile, matrix, variant and baseline: two worlds' designs decide rows of
    the same names, each on its own profile's records)."""
    index = {
        (a.design.profile, r.matrix, r.variant, r.baseline): r for a in replayed for r in a.rows()
    }
    out = []
    for row in rows:
        hit = index.get((row.profile, row.matrix.name, row.variant, row.baseline))
        out.append(replace(row, sequential=hit) if hit is not None else row)
    return out


def sequential_verdict(result: RowResult, scaled: ScaledClaim | None, needed: int | None) -> str:
    """The verdict of a decided, bounded or open row (module docstring); ``needed``: the
    seeds a fixed-sample test would need to see the scaled claim (None: unknown)."""
    final = result.final()
    if result.decision == "detected" and final is not None:
        sign = "+" if final.mean > 0 else "-"
        if sign != result.direction:
            return "contradicted"
        j = result.crossed_look if result.crossed_look is not None else -1
        size = size_check(scaled, *result.intervals[j])
        return "supported" + (f"; {size}" if size else "")
    if result.decision == "bounded":
        pct = 100.0 * (result.bound() or 0.0) / result.reference_rsum
        return (
            f"{BOUNDED}: the repeated interval rules out effects beyond ±{fmt(result.bound())} "
            f"rSum ({fmt(pct)}% of `{result.reference}`'s {fmt(result.reference_rsum)})"
        )
    if result.decision == OPEN_AT_CAP:
        return f"{OPEN_AT_CAP} ({final.n if final is not None else 0} seeds)"
    if needed is not None and needed > (final.n if final is not None else 0):
        return underpowered_text(needed)
    return f"{OPEN} (look {result.looks_taken} of the design)"
