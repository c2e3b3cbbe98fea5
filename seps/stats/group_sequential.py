"""Group-sequential tests: alpha spending, boundaries, repeated intervals, Holm over looks.

A matrix's seeds can be added in stages ("looks") and a comparison stopped as soon as it
is decided, without inflating its error rate, if every look's threshold comes from a
design fixed in advance. The design here is the classical one (Jennison & Turnbull,
*Group Sequential Methods*, 2000):

- **Alpha spending** (Lan & DeMets 1983): a function ``f(t; alpha)`` of the information
  fraction ``t`` (here seeds over the cap) says how much of the two-sided type I error
  may be spent by the look at ``t``; :func:`spent` offers the Pocock-type shape
  ``alpha ln(1 + (e - 1) t)`` and the O'Brien-Fleming-type ``2 - 2 Phi(z_{alpha/2} /
  sqrt(t))``.
- **Boundaries** (:func:`boundaries`): the z thresholds ``c_1 .. c_K`` such that, for a
  standardised statistic that is a Brownian motion in the information, the probability
  of first crossing ``|Z_k| >= c_k`` at look ``k`` is the spending increment. Computed by
  the Armitage-McPherson-Rowe recursion: the sub-density of ``Z_k`` over the paths that
  have not stopped is carried from look to look on a Simpson grid
  (:func:`crossing_probabilities` is the same recursion under a drift, for power).
- **t statistics** (the significance-level approach, J&T section 3.8): the seeds' variance
  is estimated, so each look compares the paired t-test's two-sided p-value with the
  boundary's nominal level ``2 (1 - Phi(c_k))``; the repeated confidence interval at a
  look is ``mean +- t_{df}^{-1}(1 - nominal / 2) se`` (J&T chapter 9). Repeated intervals
  cover the true difference at every look at once with probability ``1 - alpha``, so a
  comparison may stop whenever one of them lies within a margin (*bounded*) and the bound
  stays valid.
- **Several comparisons** (:func:`holm_over_looks`): Holm's step-down procedure in its
  group-sequential form (Maurer & Bretz 2013, "Multiple testing in group sequential
  trials using graphical approaches"): each comparison of a family starts with
  ``alpha / m``; when one is rejected at some look its level goes, in equal parts, to the
  comparisons not yet rejected, which are then tested again, at every look they have
  had, against the boundaries of their larger level. The family-wise error rate over all
  comparisons and all looks stays at most ``alpha``, whatever their dependence.
- **Blocks** (:func:`blocked_t`): seeds that share a pretrained build (or a CPU type)
  share part of their outcome. The paired differences are analysed with the block as a
  fixed effect: the mean is the seeds' mean (each block weighted by its seeds), its
  variance the pooled within-block variance over ``n`` with ``n - G`` degrees of freedom
  for ``G`` blocks. :func:`plain_t` is the same without blocks (``n - 1`` degrees of
  freedom), shown beside it.

Pure functions of their arguments (NumPy and SciPy's normal and Student t); nothing here
knows about records.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq
from scipy.special import stdtr, stdtrit
from scipy.stats import norm

__all__ = [
    "SHAPES",
    "LookStat",
    "blocked_t",
    "boundaries",
    "crossing_probabilities",
    "holm_over_looks",
    "nominal_levels",
    "plain_t",
    "repeated_interval",
    "spent",
]

#: The spending-function shapes :func:`spent` knows.
SHAPES = ("pocock", "obrien-fleming")

#: Grid points per unit of the standardised statistic in the recursion: the boundaries
#: of the published tables come back to their printed three decimals with 20; 60 keeps
#: a margin (tests/test_group_sequential.py).
_POINTS_PER_UNIT = 60
#: How far beyond a boundary (or the mean, when there is none) the grid reaches, in
#: standard deviations of the statistic: the density there is below 1e-20.
_REACH = 10.0
#: A spending increment below this cannot be met by a threshold worth computing: the
#: look has no boundary (it can never reject).
_NEGLIGIBLE = 1e-15


def spent(t: float, alpha: float, shape: str) -> float:
    """Two-sided alpha spent by information fraction ``t`` (0 at ``t <= 0``, ``alpha``
    at ``t >= 1``) under the Lan-DeMets spending function of ``shape``:

    - ``pocock``: ``alpha ln(1 + (e - 1) t)``;
    - ``obrien-fleming``: ``2 - 2 Phi(Phi^{-1}(1 - alpha / 2) / sqrt(t))``.
    """
    if shape not in SHAPES:
        raise ValueError(f"spending shape {shape!r}: expected one of {', '.join(SHAPES)}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha {alpha}: expected 0 < alpha < 1")
    if t <= 0.0:
        return 0.0
    if t >= 1.0:
        return alpha
    if shape == "pocock":
        return alpha * math.log(1.0 + (math.e - 1.0) * t)
    return float(2.0 * norm.sf(norm.isf(alpha / 2.0) / math.sqrt(t)))


def _simpson(lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """Points and Simpson weights over ``[lo, hi]`` (an odd count, about
    :data:`_POINTS_PER_UNIT` per unit)."""
    n = max(3, math.ceil((hi - lo) * _POINTS_PER_UNIT) | 1)
    z = np.linspace(lo, hi, n)
    w = np.ones(n)
    w[1:-1:2], w[2:-1:2] = 4.0, 2.0
    return z, w * (hi - lo) / (3.0 * (n - 1))


@dataclass(frozen=True)
class _Continuing:
    """The sub-density of ``Z_k`` over the paths still running after look ``k``, on a
    grid: ``mass[i]`` is density times quadrature weight at ``z[i]``."""

    z: np.ndarray
    mass: np.ndarray
    info: float


def _region(c: float, centre: float) -> tuple[float, float]:
    """The continuation interval ``(-c, c)``, cut to where the density is not negligible."""
    return max(-c, centre - _REACH), min(c, centre + _REACH)


def _first_look(c: float, info: float, drift: float) -> _Continuing:
    mean = drift * math.sqrt(info)
    z, w = _simpson(*_region(c, mean))
    return _Continuing(z, w * norm.pdf(z - mean), info)


def _step(prev: _Continuing, info: float, drift: float) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation of ``Z_k`` given each grid point of ``Z_{k-1}``:
    ``Z_k sqrt(I_k) = Z_{k-1} sqrt(I_{k-1}) + N(drift dI, dI)``."""
    d_info = info - prev.info
    mean = (prev.z * math.sqrt(prev.info) + drift * d_info) / math.sqrt(info)
    return mean, math.sqrt(d_info / info)


def _exit(prev: _Continuing, info: float, drift: float, c: float) -> tuple[float, float]:
    """(P(Z_k >= c), P(Z_k <= -c)) over the paths still running before look ``k``."""
    mean, sd = _step(prev, info, drift)
    upper = float(prev.mass @ norm.sf((c - mean) / sd))
    lower = float(prev.mass @ norm.cdf((-c - mean) / sd))
    return upper, lower


def _carry(prev: _Continuing, info: float, drift: float, c: float) -> _Continuing:
    """The sub-density of ``Z_k`` on ``(-c, c)`` over the paths still running."""
    centre = drift * math.sqrt(info)
    z, w = _simpson(*_region(c, centre))
    mean, sd = _step(prev, info, drift)
    dens = prev.mass @ (norm.pdf((z[None, :] - mean[:, None]) / sd) / sd)
    return _Continuing(z, w * dens, info)


def _check_fractions(fractions: Sequence[float]) -> list[float]:
    t = [float(x) for x in fractions]
    if not t or any(x <= 0.0 for x in t) or any(b <= a for a, b in itertools.pairwise(t)):
        raise ValueError(f"information fractions {t}: expected increasing values above 0")
    return t


def boundaries(fractions: Sequence[float], alpha: float, shape: str) -> list[float]:
    """The two-sided z boundaries ``c_1 .. c_K`` of the Lan-DeMets design with spending
    ``shape`` at level ``alpha`` and looks at information ``fractions`` (increasing; the
    cap is 1, and a fraction above 1 spends nothing more). A look whose spending increment
    is negligible gets ``inf`` (it cannot reject)."""
    t = _check_fractions(fractions)
    cum = [spent(x, alpha, shape) for x in t]
    out: list[float] = []
    state: _Continuing | None = None
    for k, info in enumerate(t):
        target = cum[k] - (cum[k - 1] if k else 0.0)
        if state is None:
            c = float(norm.isf(target / 2.0)) if target > _NEGLIGIBLE else math.inf
            state = _first_look(c, info, 0.0)
        else:
            if target > _NEGLIGIBLE and sum(_exit(state, info, 0.0, 0.0)) > target:
                prev = state

                def excess(
                    c: float, prev: _Continuing = prev, info: float = info, target: float = target
                ) -> float:
                    return sum(_exit(prev, info, 0.0, c)) - target

                c = float(brentq(excess, 0.0, 40.0, xtol=1e-10))
            else:
                c = math.inf
            state = _carry(state, info, 0.0, c)
        out.append(c)
    return out


def nominal_levels(fractions: Sequence[float], alpha: float, shape: str) -> list[float]:
    """Each look's two-sided nominal level ``2 (1 - Phi(c_k))`` (0 where the look has no
    boundary): a paired test's p-value at or below it rejects at that look."""
    return list(_nominal_levels(tuple(float(t) for t in fractions), float(alpha), shape))


@functools.lru_cache(maxsize=4096)
def _nominal_levels(fractions: tuple[float, ...], alpha: float, shape: str) -> tuple[float, ...]:
    # A family replays the same few designs at every look (and a simulation thousands of
    # times): each is computed once.
    return tuple(float(2.0 * norm.sf(c)) for c in boundaries(fractions, alpha, shape))


def crossing_probabilities(
    bounds: Sequence[float], fractions: Sequence[float], drift: float
) -> list[tuple[float, float]]:
    """Per look, (P(first crossing above), P(first crossing below)) of a statistic
    ``Z_k`` with mean ``drift * sqrt(t_k)`` (a Brownian motion in the information; the
    drift is the mean of ``Z`` at the cap, e.g. ``effect * sqrt(n_cap) / sd``) against
    the two-sided ``bounds``. The power of a design is the sum of all of them at the
    drift of the effect; at drift 0 they sum to the spending."""
    t = _check_fractions(fractions)
    if len(bounds) != len(t):
        raise ValueError(f"{len(bounds)} boundaries for {len(t)} looks")
    out: list[tuple[float, float]] = []
    state: _Continuing | None = None
    for c, info in zip(bounds, t, strict=True):
        if state is None:
            mean = drift * math.sqrt(info)
            out.append((float(norm.sf(c - mean)), float(norm.cdf(-c - mean))))
            state = _first_look(c, info, drift)
        else:
            out.append(_exit(state, info, drift, c))
            state = _carry(state, info, drift, c)
    return out


@dataclass(frozen=True)
class LookStat:
    """A paired comparison at one look: the mean difference, its standard error, the
    degrees of freedom of the variance estimate and the two-sided t-test p-value, over
    ``n`` paired seeds."""

    n: int
    mean: float
    se: float
    df: int
    p: float


def _t_stat(mean: float, se: float, df: int, n: int) -> LookStat:
    if df < 1 or math.isnan(se):
        return LookStat(n, mean, math.nan, df, math.nan)
    if se == 0.0:  # every seed moved alike: p 0 for a move, 1 for none
        return LookStat(n, mean, 0.0, df, 0.0 if mean != 0.0 else 1.0)
    # scipy.special's Student t (what scipy.stats.t calls underneath, without its
    # argument checks): a replay computes thousands of these, a simulation millions.
    return LookStat(n, mean, se, df, float(2.0 * stdtr(df, -abs(mean) / se)))


def plain_t(diffs: Sequence[float]) -> LookStat:
    """The paired t-test on ``diffs`` with the seeds as independent (``n - 1`` degrees
    of freedom): :func:`blocked_t` with one block."""
    return blocked_t(diffs, [None] * len(diffs))


def blocked_t(diffs: Sequence[float], blocks: Sequence[Hashable]) -> LookStat:
    """The paired t-test on ``diffs`` with each seed's block (its pretrained build and
    CPU type) as a fixed effect: mean = the seeds' mean, ``se = s / sqrt(n)`` with ``s^2``
    the pooled within-block variance on ``n - G`` degrees of freedom (``G`` blocks).

    The null hypothesis it tests is that the switch moves no block's mean; what it
    estimates is the blocks' mean effects weighted by their seeds (equal weights once
    the seeds are balanced over the blocks). A block of one seed adds nothing to ``s``
    and takes one degree of freedom. Degrees of freedom below 1: no test (NaN)."""
    d = [float(x) for x in diffs]
    if len(blocks) != len(d):
        raise ValueError(f"{len(blocks)} blocks for {len(d)} differences")
    n = len(d)
    groups: dict[Hashable, list[float]] = {}
    for x, b in zip(d, blocks, strict=True):
        groups.setdefault(b, []).append(x)
    df = n - len(groups)
    mean = math.fsum(d) / n if n else math.nan
    if df < 1:
        return LookStat(n, mean, math.nan, df, math.nan)
    ss = 0.0
    for g in groups.values():
        m = math.fsum(g) / len(g)
        ss += math.fsum((x - m) ** 2 for x in g)
    return _t_stat(mean, math.sqrt(ss / df) / math.sqrt(n), df, n)


def repeated_interval(stat: LookStat, level: float) -> tuple[float, float]:
    """The repeated confidence interval of a look whose nominal two-sided level is
    ``level``: ``mean +- t_{df}^{-1}(1 - level / 2) se`` (infinite without a test or a
    boundary)."""
    if math.isnan(stat.se) or level <= 0.0:
        return -math.inf, math.inf
    half = float(stdtrit(stat.df, 1.0 - level / 2.0)) * stat.se
    return stat.mean - half, stat.mean + half


def holm_over_looks(
    looks: Mapping[str, Sequence[LookStat]],
    cap: int,
    alpha: float,
    shape: str,
) -> dict[str, int]:
    """Holm's procedure over a family's comparisons and their looks (Maurer & Bretz 2013).

    ``looks`` holds, for each comparison, its statistics at the looks it has had so far,
    in order; ``cap`` is the number of seeds at information 1. Every comparison starts
    with level ``alpha / m``; one is rejected when at any of its looks ``j`` its p-value
    is at or below the nominal level of look ``j`` in the design of its current level
    (fractions ``n_j / cap``); its level then goes in equal parts to the comparisons not
    yet rejected, and the search starts again, until nothing more is rejected.

    Returns each rejected comparison with the index of the first look that crossed.
    """
    names = sorted(looks)
    level = {name: alpha / len(names) for name in names} if names else {}
    rejected: dict[str, int] = {}
    cache: dict[tuple[tuple[int, ...], float], list[float]] = {}

    def crossed(name: str) -> int | None:
        stats = looks[name]
        if not stats:
            return None
        ns = tuple(s.n for s in stats)
        key = (ns, level[name])
        if key not in cache:
            cache[key] = nominal_levels([n / cap for n in ns], level[name], shape)
        for j, (s, nominal) in enumerate(zip(stats, cache[key], strict=True)):
            if not math.isnan(s.p) and s.p <= nominal:
                return j
        return None

    progress = True
    while progress:
        progress = False
        for name in names:
            if name in rejected:
                continue
            j = crossed(name)
            if j is None:
                continue
            rejected[name] = j
            rest = [x for x in names if x not in rejected]
            for x in rest:
                level[x] += level[name] / len(rest)
            level[name] = 0.0
            progress = True
            break
    return rejected
