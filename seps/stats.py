"""Seed statistics of the reports: mean ± 95% CI, the paired t-test, Student t.

Every number a report puts beside a mean comes from here, so that a report, the
loss-study section and a reader's own analysis agree on what "95% CI" and "paired
p" mean:

- over seeds, a mean has the half-width ``t(0.975, n-1) * sd / sqrt(n)`` (seeds are
  independent repetitions; the sample sd has n-1 degrees of freedom);
- a variant is compared with its baseline *paired by seed* (the same seed gives the same
  data order and initial weights, so the per-seed difference removes most seed noise),
  with a two-sided one-sample t-test on those differences;
- the p-values of one report are one family and are corrected together for multiple
  comparisons (:func:`holm`, Holm-Bonferroni, controls the family-wise error rate;
  :func:`correct` also offers Benjamini-Hochberg, which controls the false discovery rate).

Pure functions of their arguments; the Student t distribution and Benjamini-Hochberg are
SciPy's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
from scipy.stats import false_discovery_control
from scipy.stats import t as student_t

#: Significance level of the paired test and of the confidence intervals.
ALPHA = 0.05
#: The mark of a comparison that cannot be tested (fewer than 2 paired seeds).
UNTESTABLE = "n/a"
#: Multiple-comparison corrections of :func:`correct`, with their names in prose.
CORRECTIONS = {"holm": "Holm", "bh": "Benjamini-Hochberg"}


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


def _finite_p(pvalues: Iterable[float]) -> tuple[np.ndarray, np.ndarray]:
    """(all p-values as floats, mask of the non-NaN ones); a p outside [0, 1] is an error."""
    p = np.asarray([math.nan if v is None else float(v) for v in pvalues], dtype=float)
    ok = ~np.isnan(p)
    if np.any((p[ok] < 0.0) | (p[ok] > 1.0)):
        raise ValueError(f"p-values must lie in [0, 1], got {p[ok].tolist()}")
    return p, ok


def holm(pvalues: Iterable[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the order given.

    With the m non-NaN p-values sorted ascending, ``p(1) <= ... <= p(m)``, the adjusted
    value of the i-th is ``min(1, max over j <= i of (m - j + 1) * p(j))``: the step-down
    multipliers m, m-1, ..., 1, made monotone by the running maximum and capped at 1.
    Rejecting where the adjusted p < alpha controls the family-wise error rate at alpha
    for any dependence between the tests. Tied p-values get the same adjusted value
    whatever their order. NaN entries (no test) do not count in m and stay NaN.
    """
    p, ok = _finite_p(pvalues)
    out = np.full(len(p), math.nan)
    idx = np.flatnonzero(ok)
    m = len(idx)
    if m:
        order = idx[np.argsort(p[idx], kind="stable")]
        running = 0.0
        for rank, i in enumerate(order):
            running = max(running, (m - rank) * p[i])
            out[i] = min(1.0, running)
    return [float(v) for v in out]


def correct(pvalues: Iterable[float], method: str = "holm") -> list[float]:
    """Adjusted p-values of one family, in the order given, NaN entries left NaN.

    ``method``: ``holm`` (:func:`holm`, family-wise error rate) or ``bh``
    (Benjamini-Hochberg false discovery rate, :func:`scipy.stats.false_discovery_control`).
    """
    if method == "holm":
        return holm(pvalues)
    if method != "bh":
        raise ValueError(f"correct: unknown method {method!r}; allowed: {', '.join(CORRECTIONS)}")
    p, ok = _finite_p(pvalues)
    out = np.full(len(p), math.nan)
    if ok.any():
        out[ok] = false_discovery_control(p[ok], method="bh")
    return [float(v) for v in out]


__all__ = [
    "ALPHA",
    "CORRECTIONS",
    "UNTESTABLE",
    "correct",
    "holm",
    "mean_ci",
    "paired_mark",
    "paired_test",
    "t_quantile",
    "t_two_sided_p",
]
