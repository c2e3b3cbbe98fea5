"""Seed statistics of the reports: mean ± 95% CI, the paired t-test, Student t.

Every number a report puts beside a mean comes from here, so that a report, the
loss-study section and a reader's own analysis agree on what "95% CI" and "paired
p" mean:

- over seeds, a mean has the half-width ``t(0.975, n-1) * sd / sqrt(n)`` (seeds are
  independent repetitions; the sample sd has n-1 degrees of freedom);
- a variant is compared with its baseline *paired by seed* (the same seed gives the same
  data order and initial weights, so the per-seed difference removes most seed noise),
  with a two-sided one-sample t-test on those differences;
- the p-values of one family are corrected together for multiple comparisons
  (:func:`holm`, Holm-Bonferroni, controls the family-wise error rate; :func:`correct`
  also offers Benjamini-Hochberg, which controls the false discovery rate);
- what a paired test could have seen: :func:`paired_power` (the power of the two-sided
  paired t-test against a true mean difference, from the noncentral t),
  :func:`minimal_detectable_effect` (the difference it detects with 80% power) and
  :func:`seeds_needed` (how many paired seeds would bring that down to a given effect);
- :func:`tost_p`, the two one-sided tests of equivalence: whether the mean difference
  lies within a margin ``(-margin, +margin)``.

Pure functions of their arguments; the Student t and noncentral t distributions, the root
finder and Benjamini-Hochberg are SciPy's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
from scipy.optimize import brentq
from scipy.stats import false_discovery_control
from scipy.stats import nct as noncentral_t
from scipy.stats import t as student_t

#: Significance level of the paired test and of the confidence intervals.
ALPHA = 0.05
#: The mark of a comparison that cannot be tested (fewer than 2 paired seeds).
UNTESTABLE = "n/a"
#: Multiple-comparison corrections of :func:`correct`, with their names in prose.
CORRECTIONS = {"holm": "Holm", "bh": "Benjamini-Hochberg"}
#: The power at which :func:`minimal_detectable_effect` states the effect a test can see.
POWER = 0.8
#: :func:`seeds_needed` looks no further than this many paired seeds.
MAX_SEEDS = 100_000


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


def paired_sd(half: float, n: int) -> float:
    """The standard deviation of ``n`` per-seed differences whose 95% CI half-width is
    ``half`` (:func:`paired_test`): ``half * sqrt(n) / t(0.975, n-1)``; NaN for n < 2."""
    if n < 2 or half is None or math.isnan(half):
        return math.nan
    return half * math.sqrt(n) / t_quantile(1.0 - ALPHA / 2.0, n - 1)


def paired_power(effect: float, sd: float, n: int, alpha: float = ALPHA) -> float:
    """The power of the two-sided paired t-test at level ``alpha`` over ``n`` seeds whose
    differences have standard deviation ``sd``, when their true mean is ``effect``.

    With ``df = n - 1``, critical value ``c = t(1 - alpha/2, df)`` and noncentrality
    ``effect * sqrt(n) / sd``, it is ``P(T' > c) + P(T' < -c)`` for the noncentral t
    ``T'``. NaN for ``n < 2``; with ``sd = 0`` every seed moves by ``effect``: power 1 for
    a non-zero effect (:func:`paired_test` gives p = 0), else ``alpha``."""
    if n < 2 or math.isnan(sd) or math.isnan(effect):
        return math.nan
    if sd == 0.0:
        return 1.0 if effect != 0.0 else alpha
    df = n - 1
    crit = float(student_t.ppf(1.0 - alpha / 2.0, df))
    nc = abs(effect) * math.sqrt(n) / sd
    # SciPy's lower tail can come back NaN far out (about 1e-20 and below): 0 there.
    lower = float(noncentral_t.cdf(-crit, df, nc))
    return float(noncentral_t.sf(crit, df, nc)) + (0.0 if math.isnan(lower) else lower)


def minimal_detectable_effect(
    sd: float, n: int, alpha: float = ALPHA, power: float = POWER
) -> float:
    """The smallest true mean difference (>= 0, the units of ``sd``) that the two-sided
    paired t-test at level ``alpha`` over ``n`` seeds detects with probability ``power``
    (:func:`paired_power` solved for the effect). NaN for ``n < 2`` or a NaN ``sd``; 0
    when ``sd`` is 0."""
    if n < 2 or math.isnan(sd):
        return math.nan
    if sd == 0.0:
        return 0.0
    if not 0.0 < alpha < 1.0 or not alpha < power < 1.0:
        raise ValueError(f"need 0 < alpha < power < 1, got alpha={alpha}, power={power}")
    hi = 1.0
    while paired_power(hi * sd, sd, n, alpha) < power:
        hi *= 2.0
    d = brentq(lambda x: paired_power(x * sd, sd, n, alpha) - power, 0.0, hi, xtol=1e-10)
    return float(d) * sd


def seeds_needed(
    effect: float, sd: float, alpha: float = ALPHA, power: float = POWER, at_least: int = 2
) -> int | None:
    """The fewest paired seeds (at least ``at_least``, at least 2) over which the
    two-sided paired t-test at level ``alpha`` has a :func:`minimal_detectable_effect` of
    at most ``|effect|`` for differences of standard deviation ``sd`` (the observed one
    assumed to hold). ``None`` when even :data:`MAX_SEEDS` seeds are not enough, or
    ``effect`` is 0 or NaN."""
    if math.isnan(effect) or math.isnan(sd) or effect == 0.0:
        return None
    target = abs(effect)

    def enough(n: int) -> bool:
        return minimal_detectable_effect(sd, n, alpha, power) <= target

    lo = max(2, at_least)
    if enough(lo):
        return lo
    hi = lo
    while not enough(hi):
        if hi >= MAX_SEEDS:
            return None
        lo, hi = hi, min(2 * hi, MAX_SEEDS)
    while hi - lo > 1:  # enough(hi) and not enough(lo): the MDE falls as n grows
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid, hi)
    return hi


def tost_p(mean: float, sd: float, n: int, margin: float) -> float:
    """The p-value of the two one-sided paired t-tests (TOST) of equivalence: that the
    true mean difference lies within ``(-margin, +margin)``.

    With ``se = sd / sqrt(n)`` and ``df = n - 1`` it is the larger of ``P(T >= (mean +
    margin) / se)`` (against a difference at or below ``-margin``) and ``P(T <= (mean -
    margin) / se)`` (at or above ``+margin``); equivalence is shown at level ``alpha``
    when it is below ``alpha`` (the ``1 - 2 alpha`` interval lies within the margin).
    NaN for ``n < 2`` or a margin that is not positive; with ``sd = 0``, 0 when ``|mean|
    < margin``, else 1."""
    if n < 2 or math.isnan(sd) or math.isnan(mean) or not margin > 0.0:
        return math.nan
    if sd == 0.0:
        return 0.0 if abs(mean) < margin else 1.0
    se, df = sd / math.sqrt(n), n - 1
    lower = float(student_t.sf((mean + margin) / se, df))
    upper = float(student_t.cdf((mean - margin) / se, df))
    return max(lower, upper)


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
    "MAX_SEEDS",
    "POWER",
    "UNTESTABLE",
    "correct",
    "holm",
    "mean_ci",
    "minimal_detectable_effect",
    "paired_mark",
    "paired_power",
    "paired_sd",
    "paired_test",
    "seeds_needed",
    "t_quantile",
    "t_two_sided_p",
    "tost_p",
]
