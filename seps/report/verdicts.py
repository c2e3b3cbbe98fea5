"""Verdicts of the claims scorecard: pure functions of paired comparisons.

:func:`effect_verdict` judges one paired test (:class:`~seps.report.compare.Comparison`)
against a claimed direction; :func:`optimum_verdict` judges a grid whose claimed best cell
is compared with every other cell; :func:`holm_interval` widens a paired CI to match its
Holm-corrected p-value. A test that detects nothing is then qualified by what it could
have seen (:func:`powered_verdict`, with the numbers of :mod:`seps.report.power`):
``equivalent``, ``not detected``, ``not detected (no stated size)`` or ``underpowered
(needs about N seeds)``; a test on a bimodal side says so (:func:`bimodal_verdict`). The
tests belong to Holm families (:class:`~seps.report.compare.Family`, one per claim),
built by :mod:`seps.report.scorecard_judge`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..io.formatting import is_missing
from ..stats.paired import ALPHA, t_quantile
from .compare import Comparison, Family

if TYPE_CHECKING:
    from .bimodal import Split

NO_RECORDS = "no records yet"
IDENTICAL = "identical (no effect possible)"
#: A claim of no effect whose sides are bit-identical on every seed: the strongest
#: support it can get (counted under ``supported``; not a test, so in no family).
IDENTICAL_HOLDS = "supported (identical bits)"
UNTESTABLE = "not testable here"
#: Not detected, and the test could have detected the scaled claim (its MDE <= it).
NOT_DETECTED = "not detected"
#: Not detected, and the claim states no size to judge the test's power against.
NO_SIZE = "not detected (no stated size)"
#: Not detected, and the test could not have detected the scaled claim.
UNDERPOWERED = "underpowered"
#: Not detected, and the TOST shows the effect within the claim's equivalence margin.
EQUIVALENT = "equivalent"
#: Order of the verdict counts in the summary line (a verdict counts under the longest
#: of these it starts with: ``underpowered (needs about 12 seeds)`` under
#: ``underpowered``, ``not detected (no stated size)`` under itself).
VERDICTS = ("supported", "contradicted", EQUIVALENT, NOT_DETECTED, NO_SIZE, UNDERPOWERED)
# A sequential design's other outcomes (seps.report.sequential_verdicts).
VERDICTS += ("bounded", "open at the cap", "open")
VERDICTS += (IDENTICAL, "not enough seeds", NO_RECORDS, UNTESTABLE)
#: Verdicts of a test that ran (a bimodal side is named after them).
TESTED = ("supported", "contradicted", EQUIVALENT, NOT_DETECTED, NO_SIZE, UNDERPOWERED)


def verdict_kind(verdict: str) -> str:
    """The entry of :data:`VERDICTS` that ``verdict`` counts under: the longest one it
    starts with."""
    kinds = [v for v in VERDICTS if verdict.startswith(v)]
    if not kinds:
        raise ValueError(f"unknown verdict {verdict!r}; known: {', '.join(VERDICTS)}")
    return max(kinds, key=len)


@dataclass(frozen=True)
class Cell:
    """A cell of a grid optimum: mean ± 95% CI of rSum over ``n`` seeds, and
    ``comparison``: this cell − the claimed cell, paired over their common seeds (``None``
    for the claimed cell itself)."""

    run: str
    mean: float
    half: float
    n: int
    comparison: Comparison | None = None

    @property
    def identical(self) -> bool:
        """Bit-identical to the claimed cell on every seed (true of the claimed cell)."""
        return self.comparison is None or self.comparison.identical

    @property
    def reason(self) -> str | None:
        """Why it is identical to the claimed cell, when the configs show it."""
        return self.comparison.reason if self.comparison is not None else None


def holm_interval(c: Comparison, p_holm: float) -> tuple[float, float]:
    """The paired t interval of ``c`` widened for Holm's correction: level ``1 − 0.05/k``
    with ``k = p_holm / p`` (``1 <= k <= m``: the multiplier Holm's step-down applied to
    this test), so that it excludes 0 exactly when ``p_holm < 0.05``. (NaN, NaN) when
    ``c`` is not a test; zero width when every seed moved by the same amount."""
    if not c.testable or is_missing(p_holm):
        return math.nan, math.nan
    if c.half == 0.0:
        return c.mean, c.mean
    k = p_holm / c.p if c.p > 0.0 and p_holm > 0.0 else 1.0
    se = c.half / t_quantile(1.0 - ALPHA / 2.0, c.n - 1)
    half = t_quantile(1.0 - ALPHA / (2.0 * k), c.n - 1) * se
    return c.mean - half, c.mean + half


def effect_verdict(direction: str, c: Comparison | None, p_holm: float) -> str:
    """``supported`` (the Holm-widened CI excludes 0 on the claimed side), ``contradicted``
    (it excludes 0 on the other side, or at all for a claim of no effect: ``direction``
    ``0``), ``not detected`` (it includes 0), ``identical (no effect possible)`` (every
    seed bit-identical: not a test; ``supported (identical bits)`` for a claim of no
    effect, which identical bits confirm), ``not testable here`` (a side's scores cannot depend
    on the text: :mod:`seps.report.blind`), ``not enough seeds (n=1)`` or ``no records
    yet``."""
    if c is None or c.n == 0:
        return NO_RECORDS
    if c.identical:
        return IDENTICAL_HOLDS if direction == "0" else IDENTICAL
    if c.blind:
        return UNTESTABLE
    if c.n < 2 or is_missing(p_holm):
        return f"not enough seeds (n={c.n})"
    if p_holm >= ALPHA:
        return NOT_DETECTED
    return "supported" if ("+" if c.mean > 0 else "-") == direction else "contradicted"


#: Beyond this many seeds the count is said as "over" it, with the figure to two
#: significant digits: it extrapolates one SD from a handful of seeds, so "8,570" would
#: claim a precision it does not have, and no campaign of this benchmark comes near it.
REACH = 100


def underpowered_text(needed: int | None) -> str:
    """``underpowered (needs about N seeds)``; over :data:`REACH` seeds
    ``underpowered (needs over 100 seeds: about 8,600)`` (two significant digits, rounded
    up); without N (more than any count searched): ``underpowered (needs more seeds than
    can be run)``."""
    if needed is None:
        return f"{UNDERPOWERED} (needs more seeds than can be run)"
    if needed > REACH:
        step = 10 ** (len(str(needed)) - 2)  # two significant digits, rounded up
        rounded = -(-needed // step) * step
        return f"{UNDERPOWERED} (needs over {REACH} seeds: about {rounded:,})"
    return f"{UNDERPOWERED} (needs about {needed:,} seeds)"


#: Appended to an ``underpowered`` row whose estimate has the sign opposite to the claim:
#: the seed count is what the test needs to see the claimed effect, not a promise that
#: more seeds would confirm it.
AGAINST = "estimate opposite to the claim"


def against_claim(verdict: str, direction: str, mean: float) -> str:
    """``verdict`` + ``; estimate opposite to the claim`` when it is ``underpowered``, the
    claim has a sign (``direction`` ``+`` or ``-``) and ``mean`` (the paired Δ) has the
    other one; else ``verdict`` unchanged."""
    if not verdict.startswith(UNDERPOWERED) or direction not in ("+", "-") or is_missing(mean):
        return verdict
    if mean == 0.0 or ("+" if mean > 0 else "-") == direction:
        return verdict
    return f"{verdict}; {AGAINST}"


def powered_verdict(
    verdict: str,
    *,
    scaled: float | None,
    mde: float,
    needed: int | None = None,
    equivalent: bool = False,
    optimum: bool = False,
) -> str:
    """A ``not detected`` verdict qualified by what its test could see; any other
    ``verdict`` is returned as it is, except a grid optimum's ``supported``.

    ``equivalent`` when the TOST showed the effect within the claim's margin; ``not
    detected (no stated size)`` without a scaled claim (``scaled`` None); ``not detected``
    only when the test's ``mde`` is at most ``|scaled|`` (it would have seen the claimed
    effect with 80% power); else ``underpowered (needs about N seeds)``, N = ``needed``.

    A grid optimum (``optimum``) is ``supported`` partly because no cell is detectably
    above the claimed one, which says nothing when the quoted cell's test could not have
    seen a cell above by the scaled claim: with ``mde`` over ``|scaled|`` it is
    ``underpowered`` too (a cell detectably below, the other half, is in its cell).
    Without a scaled claim it stays ``supported``."""
    powered = scaled is not None and not is_missing(mde) and mde <= abs(scaled)
    if optimum and verdict == "supported":
        return verdict if scaled is None or powered else underpowered_text(needed)
    if verdict != NOT_DETECTED:
        return verdict
    if equivalent:
        return EQUIVALENT
    if scaled is None:
        return NO_SIZE
    return NOT_DETECTED if powered else underpowered_text(needed)


def bimodal_verdict(verdict: str, splits: Sequence[Split]) -> str:
    """``verdict`` followed by ``; test on a bimodal variant: `run` k of n seeds
    functional`` for each bimodal side (:mod:`seps.report.bimodal`), when the verdict is
    a test's (:data:`TESTED`): the paired test still ran, on every paired seed, but its
    mean and SD mix the broken seeds with the functional ones."""
    if not splits or verdict_kind(verdict) not in TESTED:
        return verdict
    sides = ", ".join(f"`{s.run}` {len(s.functional)} of {s.n} seeds functional" for s in splits)
    return f"{verdict}; test on a bimodal variant: {sides}"


@dataclass(frozen=True)
class Optimum:
    """A judged grid optimum: ``verdict``; ``best``, the cell of highest mean rSum (the
    first in grid order on a tie); ``shown``, the cell whose paired difference to the
    claimed cell the scorecard quotes; ``above``/``below``, the cells detectably above and
    below the claimed one (Holm-corrected p < 0.05); ``tested``, how many cells were
    compared with it (those not bit-identical to it)."""

    verdict: str
    best: Cell | None = None
    shown: Cell | None = None
    above: tuple[Cell, ...] = ()
    below: tuple[Cell, ...] = ()
    tested: int = 0


def optimum_verdict(claimed: str, cells: Sequence[Cell], family: Family) -> Optimum:
    """Judge a grid whose claimed best cell is the run ``claimed`` (``cells``: the cells
    with records, the claimed one first when it has any; each other cell carries its
    paired comparison to the claimed one, a test of ``family``).

    The rule, the scorecard's paired tests applied to a grid: ``contradicted`` when some
    cell is detectably above the claimed one (Holm-corrected p < 0.05, positive mean
    difference); ``supported`` when none is and some cell is detectably below (the
    claimed cell is in the grid's optimum region, and the grid is not flat);
    ``not detected`` when no cell differs detectably from it; ``identical (no effect
    possible)`` when every cell is bit-identical to the claimed one; ``not enough seeds``
    when a cell has fewer than 2 seeds in common with it; ``no records yet`` without the
    claimed cell or another. The quoted cell (``shown``) is the detectably higher cell of
    smallest corrected p when there is one, else the best cell, else (the claimed cell is
    the best) the runner-up. The scorecard then qualifies ``supported`` by the quoted
    cell's power (:func:`powered_verdict`)."""
    if len(cells) < 2 or cells[0].run != claimed:
        return Optimum(NO_RECORDS)
    if all(c.identical for c in cells):
        return Optimum(IDENTICAL)
    best = max(cells, key=lambda c: c.mean)  # max keeps the first of equal means
    # The other cells that are tests: a cell without a comparison is the claimed one.
    tests = [(c, c.comparison) for c in cells[1:] if c.comparison and not c.comparison.identical]
    runner_up = max((c for c, _ in tests), key=lambda c: c.mean)
    n = min(t.n for _, t in tests)
    if n < 2:
        return Optimum(f"not enough seeds (n={n})", best, runner_up, tested=len(tests))
    found = [(c, t) for c, t in tests if family.p(t) < ALPHA]
    above = tuple(c for c, t in found if t.mean > 0)
    below = tuple(c for c, t in found if t.mean < 0)
    if above:
        shown = min(above, key=lambda c: (family.p(c.comparison), -c.mean))  # type: ignore[arg-type]
        return Optimum("contradicted", best, shown, above, below, len(tests))
    shown = best if best is not cells[0] else runner_up
    verdict = "supported" if below else NOT_DETECTED
    return Optimum(verdict, best, shown, above, below, len(tests))


__all__ = [
    "AGAINST",
    "EQUIVALENT",
    "IDENTICAL",
    "IDENTICAL_HOLDS",
    "NOT_DETECTED",
    "NO_RECORDS",
    "NO_SIZE",
    "REACH",
    "TESTED",
    "UNDERPOWERED",
    "UNTESTABLE",
    "VERDICTS",
    "Cell",
    "Optimum",
    "against_claim",
    "bimodal_verdict",
    "effect_verdict",
    "holm_interval",
    "optimum_verdict",
    "powered_verdict",
    "underpowered_text",
    "verdict_kind",
]
