"""Judging the scorecard's rows: Holm families per claim, power, and the verdicts.

*Families.* The claims table corrects its tests claim by claim: one Holm family per claim
id (:func:`claim_families`), holding the paired test of each of its effect rows and of
each grid cell against its claimed best cell (each pair of record sets once; identical
runs, text-blind sides, single seeds and parts that did not train are not tests). A
claim's verdicts then depend on its own tests only, and the family-wise error rate is
controlled per claim, the unit a reader accepts or rejects. :func:`family_of_rows` makes
one family of any rows: the controls' (their own family, as before) and the whole
scorecard's, whose verdict counts the scorecard prints beside for comparison.

*Verdicts.* :func:`judge_row` applies :func:`~seps.report.verdicts.effect_verdict` or
:func:`~seps.report.verdicts.optimum_verdict` in the row's family, qualifies a ``not
detected`` (and a grid optimum's ``supported``, which rests on no cell detected above) by
the row's power (:mod:`seps.report.power`,
:func:`~seps.report.verdicts.powered_verdict`), says when a ``supported`` effect's
interval lies wholly outside the claimed size (:func:`~seps.report.power.size_check`:
the claimed sign is not the claimed size) and names a bimodal side
(:func:`~seps.report.verdicts.bimodal_verdict`). Pure functions of rows.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .compare import Comparison, Family, family_of
from .power import Power, ScaledClaim, row_power, scaled_claim, size_check
from .scorecard_rows import Row
from .sequential_verdicts import sequential_verdict
from .verdicts import (
    IDENTICAL,
    IDENTICAL_HOLDS,
    NO_RECORDS,
    UNTESTABLE,
    VERDICTS,
    Optimum,
    against_claim,
    bimodal_verdict,
    effect_verdict,
    holm_interval,
    optimum_verdict,
    powered_verdict,
    verdict_kind,
)


def family_of_rows(rows: Iterable[Row]) -> Family:
    """One Holm family of ``rows``: the paired test of every effect row and of every grid
    cell against its claimed best cell (each pair of record sets once; identical runs and
    single seeds are not tests)."""
    rows = list(rows)
    # A row whose learned part did not train is not a test (like a text-blind side).
    tests = [r.comparison for r in rows if r.comparison is not None and not r.frozen]
    tests += [
        c.comparison for r in rows if not r.frozen for c in r.cells if c.comparison is not None
    ]
    return family_of(tests)


def claim_families(rows: Iterable[Row]) -> dict[str, Family]:
    """Claim id -> the Holm family of that claim's rows (:func:`family_of_rows`), in the
    order the claims first appear."""
    by_claim: dict[str, list[Row]] = {}
    for r in rows:
        by_claim.setdefault(r.claim.id, []).append(r)
    return {cid: family_of_rows(group) for cid, group in by_claim.items()}


def single_family(rows: Sequence[Row]) -> dict[str, Family]:
    """Claim id -> one family of every row (the whole-scorecard correction), in the shape
    of :func:`claim_families`."""
    whole = family_of_rows(rows)
    return {r.claim.id: whole for r in rows}


def impact_level(row: Row, levels: Mapping[str, str]) -> str | None:
    """Seed 004's impact level (e.g. ``large``) of the documented difference the row's
    pair flips or reverts (``levels``: difference id -> level); ``None`` for a grid
    optimum (its cells are not one difference's two sides) or a pair of no difference."""
    for run in (row.variant, row.baseline) if row.variant else ():
        spec = next((r for r in row.matrix.runs if r.id == run), None)
        if spec is not None and spec.difference in levels:
            return levels[spec.difference]
    return None


@dataclass(frozen=True)
class Judged:
    """A judged row: ``verdict`` (the full text, reason excluded), ``optimum`` (a grid's
    judgement), ``tested`` (the comparison the row's power is about: the effect, or the
    optimum's quoted cell), ``scaled`` and ``power`` (:mod:`seps.report.power`; ``None``
    when absent or not a test)."""

    verdict: str
    optimum: Optimum | None = None
    tested: Comparison | None = None
    scaled: ScaledClaim | None = None
    power: Power | None = None


def judge_row(row: Row, family: Family, levels: Mapping[str, str] | None = None) -> Judged:
    """The verdict of ``row`` in ``family`` (its claim's), with its scaled claim and
    power; ``levels``: difference id -> seed 004's impact level."""
    if not row.claim.testable:
        return Judged(UNTESTABLE)
    if row.sequential is not None:
        return _sequential_judged(row, levels or {})
    optimum, base_mean = None, row.base_mean
    if row.claim.kind == "optimum":
        optimum = optimum_verdict(row.baseline, row.cells, family)
        verdict = optimum.verdict
        shown = optimum.shown
        c = shown.comparison if shown is not None else None
        claimed = row.cells[0] if row.cells and row.cells[0].run == row.baseline else None
        base_mean = claimed.mean if claimed is not None else math.nan
    else:
        c = row.comparison
        verdict = effect_verdict(str(row.claim.direction), c, family.p(c) if c else math.nan)
    # Records, identical bits and text-blind sides say more than a frozen part.
    if row.frozen and verdict not in (NO_RECORDS, IDENTICAL, IDENTICAL_HOLDS, UNTESTABLE):
        return Judged(UNTESTABLE, optimum, c)
    scaled = scaled_claim(row.claim, base_mean, impact_level(row, levels or {}))
    power = None
    if c is not None and c.testable:
        power = row_power(c, family.size, scaled, row.claim.equivalence_margin)
    if power is not None:
        verdict = powered_verdict(
            verdict,
            scaled=None if scaled is None else scaled.value,
            mde=power.mde,
            needed=power.needed,
            equivalent=power.equivalent,
            optimum=optimum is not None,
        )
    if verdict == "supported" and optimum is None and c is not None:
        size = size_check(scaled, *holm_interval(c, family.p(c)))
        verdict += f"; {size}" if size else ""
    if optimum is None and c is not None:
        verdict = against_claim(verdict, str(row.claim.direction), c.mean)
    return Judged(bimodal_verdict(verdict, row.bimodal), optimum, c, scaled, power)


def _sequential_judged(row: Row, levels: Mapping[str, str]) -> Judged:
    """A row a sequential design decides (:mod:`seps.report.sequential_verdicts`): its
    verdict is the design's; the fixed-sample power of its comparison (all its seeds, the
    claim's family size) only says how many seeds an open row would need."""
    c = row.comparison
    scaled = scaled_claim(row.claim, row.base_mean, impact_level(row, levels))
    power = row_power(c, len(row.claim.pairs) * len(row.claim.matrices), scaled) if c else None
    needed = power.needed if power is not None else None
    verdict = sequential_verdict(row.sequential, scaled, needed)
    if c is not None:
        verdict = against_claim(verdict, str(row.claim.direction), c.mean)
    return Judged(verdict, None, c, scaled, None)


def verdict_of(row: Row, family: Family, levels: Mapping[str, str] | None = None) -> str:
    """The verdict of ``row`` in ``family`` (:func:`judge_row`)."""
    return judge_row(row, family, levels).verdict


def verdict_counts(
    rows: Sequence[Row],
    families: Mapping[str, Family] | None = None,
    levels: Mapping[str, str] | None = None,
) -> dict[str, int]:
    """How many of ``rows`` (one per claim and tested pair) get each verdict, in the order
    of :data:`VERDICTS` (zero counts kept; a verdict counts under
    :func:`~seps.report.verdicts.verdict_kind`), each judged in its claim's family of
    ``families`` (default: :func:`claim_families` of ``rows``, as the scorecard judges
    them; :func:`single_family` for the whole-scorecard correction)."""
    families = families if families is not None else claim_families(rows)
    counts = dict.fromkeys(VERDICTS, 0)
    for r in rows:
        counts[verdict_kind(verdict_of(r, families[r.claim.id], levels))] += 1
    return counts


def counts_by_profile(
    rows: Sequence[Row], families: Mapping[str, Family], levels: Mapping[str, str] | None = None
) -> tuple[tuple[str, dict[str, int]], ...]:
    """(profile, :func:`verdict_counts` of its rows) for each profile some row reads,
    sorted; each row judged in its claim's family of ``families`` (of all rows), so that
    the counts of one regime are the scorecard's own verdicts. Rows without records have
    no profile and are left out."""
    profiles = sorted({str(r.profile) for r in rows if r.profile is not None})
    return tuple(
        (p, verdict_counts([r for r in rows if r.profile == p], families, levels)) for p in profiles
    )


def paired_tests(families: Mapping[str, Family]) -> int:
    """How many paired tests ``families`` (one per claim) hold in all."""
    return sum(f.size for f in families.values())


__all__ = [
    "Judged",
    "claim_families",
    "counts_by_profile",
    "family_of_rows",
    "impact_level",
    "judge_row",
    "paired_tests",
    "single_family",
    "verdict_counts",
    "verdict_of",
]
