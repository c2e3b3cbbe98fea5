"""What a scorecard row could have seen: the claimed effect scaled to this benchmark, the
minimal detectable effect (MDE) of its paired test, and equivalence within a margin.

A paired test that detects nothing says something about a claim only when it could have
detected the claimed effect. Per row, :func:`row_power` gives:

- the **scaled claim** (:func:`scaled_claim`): the claimed difference in rSum on this
  benchmark, signed as the claimed direction. In this order: the claim's
  ``relative_size`` (the source's relative change) times the baseline's mean rSum over
  the row's paired seeds (a grid optimum: the claimed cell's mean over its seeds); else
  its ``size`` as stated (an rSum difference of the source's scale, e.g. Flickr30K);
  else seed 004's impact stars of the difference the pair flips (``claimed_impact`` in
  ``differences.yaml``), as the range of :data:`IMPACT_RANGES` times the baseline's mean
  rSum; for a claim of no effect (direction ``0``), its ``equivalence_margin``, the
  smallest effect that would contradict it. Otherwise none: the row says "no stated
  size";
- the **MDE**: the smallest true mean difference the row's test detects with 80% power
  (:func:`seps.stats.paired.minimal_detectable_effect`: two-sided paired t-test, noncentral t),
  for the row's paired SD and number of paired seeds, at level ``0.05 / m`` where ``m``
  is the number of tests in the row's Holm family. That is the level Holm's step-down
  applies to the family's smallest p-value, the strictest any test of the family meets,
  so the MDE is conservative (an upper bound on what the correction needs);
- **seeds needed**: the fewest paired seeds at which that MDE would be at most the
  scaled claim, with the same SD and level (:func:`seps.stats.paired.seeds_needed`);
- **equivalence**: the two one-sided paired t-tests (TOST, :func:`seps.stats.paired.tost_p`)
  that the mean difference lies within ``± equivalence_margin`` (rSum), at the same
  level ``0.05 / m``.

The verdict rule that uses them is :func:`seps.report.verdicts.powered_verdict`. Pure
functions of a claim, a comparison and numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..io.formatting import fmt, is_missing
from ..stats.paired import ALPHA, POWER, minimal_detectable_effect, seeds_needed, tost_p
from .claims import Claim
from .compare import Comparison

#: Seed 004's impact stars as ranges of the relative change of rSum, (low, high, as
#: written), high ``None`` for an open range. Source: seed 004's legend (large >3%,
#: medium 1-3%, small <1%), stated in the header of ``ablations/differences.yaml``
#: and in ``claimed_impacts.scale`` of ``paper_figures.yaml``
#: (``tests/test_power.py`` checks that they agree). A row is powered for the low end of
#: its level's range, the smallest effect the stars claim; "small" claims no effect
#: above 0, so a small row is powered for its high end (1%): a `not detected` there
#: rules out small effects of 1% and more, not the smaller ones.
IMPACT_RANGES: dict[str, tuple[float, float | None, str]] = {
    "large": (0.03, None, ">3%"),
    "medium": (0.01, 0.03, "1-3%"),
    "small": (0.0, 0.01, "<1%"),
}


@dataclass(frozen=True)
class ScaledClaim:
    """The effect a row must be able to see: ``value`` (rSum, signed as the claimed
    direction; positive for a margin) and ``text``, how it was obtained. ``low`` and
    ``high``: the claimed effect's range in rSum, as magnitudes (a relative size: both
    its value; stars: their range, ``high`` None for an open one), against which a
    detected effect's size is checked (:func:`size_check`); both None where the size
    is on the source's scale or a margin."""

    value: float
    text: str
    low: float | None = None
    high: float | None = None


@dataclass(frozen=True)
class Power:
    """What a row's paired test could see: ``mde`` (rSum) at level ``alpha`` (``0.05 /
    tests``, the Holm family's worst case); ``needed``: the paired seeds at which the MDE
    would reach the scaled claim (``None``: no scaled claim, already reached, or more
    than :data:`seps.stats.paired.MAX_SEEDS`); ``equivalence_p``: the TOST p-value within the
    claim's margin (NaN without a margin)."""

    mde: float
    alpha: float
    tests: int
    needed: int | None = None
    equivalence_p: float = math.nan

    @property
    def equivalent(self) -> bool:
        """Equivalence shown at the row's level."""
        return not is_missing(self.equivalence_p) and self.equivalence_p < self.alpha


def impact_text(level: str) -> str:
    """Seed 004's star level with its range, e.g. ``medium (1-3%)``."""
    return f"{level} ({IMPACT_RANGES[level][2]})" if level in IMPACT_RANGES else level


def powered_for(level: str) -> float | None:
    """The relative change a row of star ``level`` must be able to see (see
    :data:`IMPACT_RANGES`); ``None`` for an unknown level."""
    if level not in IMPACT_RANGES:
        return None
    low, high, _ = IMPACT_RANGES[level]
    return low if low > 0 or high is None else high


def _stars_text(level: str, sign: float, base: float) -> str:
    low, high, written = IMPACT_RANGES[level]
    lo, hi = sign * low * base, None if high is None else sign * high * base
    of = f"{level}, {written} of {fmt(base)}"
    if hi is None:
        return f"{'≥' if sign > 0 else '≤'} {fmt(lo, 1, sign=True)} ({of})"
    if low == 0.0:
        return f"up to {fmt(hi, 1, sign=True)} ({of})"
    return f"{fmt(lo, 1, sign=True)} to {fmt(hi, 1, sign=True)} ({of})"


def scaled_claim(claim: Claim, base_mean: float, level: str | None = None) -> ScaledClaim | None:
    """The claimed effect of ``claim`` on this benchmark (the rule in the module
    docstring); ``base_mean``: the baseline's mean rSum over the row's paired seeds;
    ``level``: seed 004's impact stars of the difference the row's pair flips, if any.
    ``None`` when the claim states no size."""
    if claim.direction == "0":
        margin = claim.equivalence_margin
        return None if margin is None else ScaledClaim(margin, f"±{fmt(margin)} (margin)")
    sign = -1.0 if claim.direction == "-" else 1.0
    known = not is_missing(base_mean) and base_mean > 0
    if claim.relative_size is not None and known:
        value = claim.relative_size * base_mean
        pct = fmt(100.0 * claim.relative_size, 1, sign=True)
        text = f"{fmt(value, 1, sign=True)} ({pct}% of {fmt(base_mean)})"
        return ScaledClaim(value, text, abs(value), abs(value))
    if claim.size is not None:
        return ScaledClaim(claim.size, f"{fmt(claim.size, 1, sign=True)} (stated, source's scale)")
    share = powered_for(level) if level is not None else None
    if share is not None and known and level is not None:
        low, high, _ = IMPACT_RANGES[level]
        return ScaledClaim(
            sign * share * base_mean,
            _stars_text(level, sign, base_mean),
            low * base_mean,
            None if high is None else high * base_mean,
        )
    return None


def size_check(scaled: ScaledClaim | None, lo: float, hi: float) -> str | None:
    """How a detected effect's size compares with the claimed one: ``larger than
    claimed (interval above +X)`` when the corrected interval [``lo``, ``hi``] lies
    wholly beyond the claimed range's far end, ``smaller than claimed (interval below
    +X)`` when it lies wholly inside its near end; ``None`` when it overlaps the range,
    or the claim has no range in rSum (a size on the source's scale, a margin). A
    "supported" +160 against a claimed +0.8 has the claimed sign and not the claimed
    size, which a reader must see beside the verdict."""
    if scaled is None or scaled.low is None or is_missing(lo) or is_missing(hi):
        return None
    sign = -1.0 if scaled.value < 0 else 1.0
    near, far = sorted((sign * lo, sign * hi))  # the interval's magnitudes on the claimed side
    if scaled.high is not None and near > scaled.high:
        return f"larger than claimed (interval beyond {fmt(sign * scaled.high, 1, sign=True)})"
    if far < scaled.low:
        return f"smaller than claimed (interval within {fmt(sign * scaled.low, 1, sign=True)})"
    return None


def row_power(
    c: Comparison, tests: int, scaled: ScaledClaim | None, margin: float | None = None
) -> Power | None:
    """The :class:`Power` of a row whose paired test is ``c``, in a Holm family of
    ``tests`` tests; ``None`` when ``c`` is not a test (fewer than 2 paired seeds,
    identical, text-blind)."""
    if not c.testable:
        return None
    alpha = ALPHA / max(tests, 1)
    sd = c.sd
    mde = minimal_detectable_effect(sd, c.n, alpha, POWER)
    needed = None
    if scaled is not None and mde > abs(scaled.value):
        needed = seeds_needed(scaled.value, sd, alpha, POWER, at_least=c.n + 1)
    eq = tost_p(c.mean, sd, c.n, margin) if margin is not None else math.nan
    return Power(mde, alpha, max(tests, 1), needed, eq)


__all__ = [
    "IMPACT_RANGES",
    "Power",
    "ScaledClaim",
    "impact_text",
    "powered_for",
    "row_power",
    "scaled_claim",
    "size_check",
]
