"""Seed statistics of the reports: mean ± 95% CI, the paired t-test, Student t.

Every number a report puts beside a mean comes from here, so that a report, the
loss-study section and a reader's own analysis agree on what "95% CI" and "paired
p" mean:

- over seeds, a mean has the half-width ``t(0.975, n-1) * sd / sqrt(n)`` (seeds are
  independent repetitions; the sample sd has n-1 degrees of freedom);
- a variant is compared with its baseline *paired by seed* (the same seed gives the same
  data order and initial weights, so the per-seed difference removes most seed noise),
  with a two-sided one-sample t-test on those differences.

Pure functions of their arguments; the Student t distribution is SciPy's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
from scipy.stats import t as student_t

#: Significance level of the paired test and of the confidence intervals.
ALPHA = 0.05
#: The mark of a comparison that cannot be tested (fewer than 2 paired seeds).
UNTESTABLE = "n/a"


def t_two_sided_p(t: float, df: float) -> float:
    """Two-sided p-value ``P(|T| >= |t|)`` of Student's t with ``df`` degrees of freedom
    (NaN for a NaN ``t`` or ``df <= 0``)."""
    if math.isnan(t) or df <= 0:
        return math.nan
    return float(2.0 * student_t.sf(abs(t), df))


def t_quantile(q: float, df: float) -> float:
    """The ``q`` quantile (``0.5 < q < 1``) of Student's t with ``df`` degrees of freedom."""
    if not 0.5 < q < 1.0 or df <= 0:
        raise ValueError(f"t_quantile: need 0.5 < q < 1 and df > 0, got q={q}, df={df}")
    return float(student_t.ppf(q, df))


def mean_ci(values: Iterable[float]) -> tuple[float, float, int]:
    """(mean, 95% CI half-width, n) of independent values; the half-width is NaN for n < 2.

    ``None`` and NaN values (a metric a record does not have) are left out, not counted."""
    x = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    n = len(x)
    if n == 0:
        return math.nan, math.nan, 0
    mean = float(np.mean(x))
    if n < 2:
        return mean, math.nan, n
    half = t_quantile(1.0 - ALPHA / 2.0, n - 1) * float(np.std(x, ddof=1)) / math.sqrt(n)
    return mean, half, n


def paired_test(diffs: Sequence[float]) -> tuple[float, float, float, int]:
    """(mean, 95% CI half-width, two-sided p, n) of per-seed differences (paired t-test).

    With fewer than 2 differences the half-width and p are NaN. Identical non-zero
    differences (sd 0) give p = 0: every seed moved the same way by the same amount.
    """
    d = np.asarray(diffs, dtype=float)
    n = len(d)
    if n == 0:
        return math.nan, math.nan, math.nan, 0
    mean = float(np.mean(d))
    if n < 2:
        return mean, math.nan, math.nan, n
    se = float(np.std(d, ddof=1)) / math.sqrt(n)
    if se == 0.0:
        return mean, 0.0, (0.0 if mean != 0.0 else 1.0), n
    half = t_quantile(1.0 - ALPHA / 2.0, n - 1) * se
    return mean, half, t_two_sided_p(abs(mean) / se, n - 1), n


def paired_mark(p: float, n: int) -> str:
    """``*`` (p < 0.05), ``ns`` (not significant) or ``n/a`` (fewer than 2 paired seeds)."""
    if n < 2 or math.isnan(p):
        return UNTESTABLE
    return "*" if p < ALPHA else "ns"


__all__ = [
    "ALPHA",
    "UNTESTABLE",
    "mean_ci",
    "paired_mark",
    "paired_test",
    "t_quantile",
    "t_two_sided_p",
]
