"""Bimodal runs: some seeds broken (retrieval at chance level), the others functional.

A run that fails to learn on some seeds and learns on the others has no useful mean ±
CI: the mean lies between two groups that no seed is near, and the interval measures
the split rather than seed noise. The scorecard reports such a run as ``k of n seeds
functional`` with the mean rSum of each group instead.

*Definition* (a decision; SPEC.md is silent). A seed is **broken** when its test rSum is
at most :data:`BROKEN_FACTOR` times the chance rSum of its test split (the expected rSum
of a random similarity matrix on ``eval_images`` images,
:func:`seps.report.chance.chance_rsum`: 3.2 on 1,000 test images, so broken means rSum
<= 6.4 there; 15.9 and 31.8 on 200), else **functional**. A run is **bimodal** when both
groups are non-empty; a seed without a finite rSum or an ``eval_images`` is neither and
is left out of both. The factor 2 keeps the broken group at chance level: it is close to
the "at chance" threshold of :mod:`seps.report.chance` (expected rSum plus 3 bounds on
its standard deviation, 6.0 on 1,000 images) and below every run that learned here:
the lowest functional seeds of the `standard` records are `training-protocol`'s
`finetune` (11.2 and 22.7: fine-tuning the backbones barely learns at that budget) and
the `shuffled` dense-caption controls (13.7-18.0), the next 84.6.

The scorecard, the matrix pages (:mod:`seps.report.prose`, every metric column: each
recall too is given per group) and the loss-study tables (:mod:`seps.report.loss_study`)
all report a bimodal run this way.

Pure functions of ``{seed: record}`` mappings.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..io.formatting import code, fmt
from .chance import chance_rsum

#: A seed whose test rSum is at most this many times the chance rSum is broken.
BROKEN_FACTOR = 2.0


@dataclass(frozen=True)
class Split:
    """The seeds of one run split into ``functional`` and ``broken`` ones (sorted), with
    each group's mean test rSum and, in ``others``, ``(metric, functional mean, broken
    mean)`` for each further metric asked of :func:`split_seeds`."""

    run: str
    functional: tuple[int, ...]
    broken: tuple[int, ...]
    functional_mean: float
    broken_mean: float
    others: tuple[tuple[str, float, float], ...] = ()

    @property
    def n(self) -> int:
        """Seeds in either group."""
        return len(self.functional) + len(self.broken)

    @property
    def bimodal(self) -> bool:
        """Both groups hold a seed."""
        return bool(self.functional) and bool(self.broken)

    def text(self) -> str:
        """``k of n seeds functional`` with both groups' means, e.g. ```x`: 3 of 5 seeds
        functional (mean rSum 168.1; broken seeds 2, 3: 0.4)``."""
        seeds = ", ".join(map(str, self.broken))
        return (
            f"{code(self.run)}: {len(self.functional)} of {self.n} seeds functional (mean "
            f"rSum {fmt(self.functional_mean)}; broken seed{'s' * (len(self.broken) > 1)} "
            f"{seeds}: {fmt(self.broken_mean)})"
        )

    def cell(self) -> str:
        """A results table's rSum cell in place of a mean ± CI, e.g. ``3 of 5
        functional: 225.0; broken: 4.1``."""
        return (
            f"{len(self.functional)} of {self.n} functional: {fmt(self.functional_mean)}; "
            f"broken: {fmt(self.broken_mean)}"
        )

    def metric_cell(self, metric: str) -> str | None:
        """A results table's cell for ``metric`` in place of a mean ± CI: :meth:`cell` for
        ``rsum``, ``<functional mean>; broken: <broken mean>`` for a metric in
        ``others`` (e.g. ``21.2; broken: 0.1``), None for any other."""
        if metric == "rsum":
            return self.cell()
        for m, functional, broken in self.others:
            if m == metric:
                return f"{fmt(functional)}; broken: {fmt(broken)}"
        return None


def rsum_cell(run: str, side: Mapping[int, Mapping[str, Any]], otherwise: str) -> str:
    """``side``'s rSum cell: :meth:`Split.cell` when the run is bimodal, else
    ``otherwise`` (its mean ± CI)."""
    s = split_seeds(run, side)
    return s.cell() if s.bimodal else otherwise


def broken_limit(eval_images: int) -> float:
    """The highest test rSum of a broken seed on ``eval_images`` test images."""
    return BROKEN_FACTOR * chance_rsum(int(eval_images))[0]


def is_broken(rec: Mapping[str, Any]) -> bool | None:
    """Whether one record is broken (``None``: no finite rSum or no ``eval_images``)."""
    rsum, n = rec.get("rsum"), rec.get("eval_images")
    try:
        rsum, n = float(rsum), int(n)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    if not math.isfinite(rsum) or n < 1:
        return None
    return rsum <= broken_limit(n)


def split_seeds(
    run: str, side: Mapping[int, Mapping[str, Any]], metrics: Sequence[str] = ()
) -> Split:
    """The :class:`Split` of one run's records, ``{seed: record}`` (``rsum`` and
    ``eval_images`` read), with each group's mean of every metric in ``metrics`` other
    than ``rsum`` (over the group's seeds that have it; NaN when none does) in
    ``Split.others``."""
    groups: dict[bool, list[int]] = {True: [], False: []}
    for seed, rec in sorted(side.items()):
        broken = is_broken(rec)
        if broken is not None:
            groups[broken].append(int(seed))

    def mean(seeds: list[int], metric: str) -> float:
        # Like seps.stats.paired.mean_ci: a seed without the value is left out, not NaN.
        values = [v for s in seeds if math.isfinite(v := _number(side[s].get(metric)))]
        return sum(values) / len(values) if values else math.nan

    ok, bad = groups[False], groups[True]
    others = tuple((m, mean(ok, m), mean(bad, m)) for m in metrics if m != "rsum")
    return Split(run, tuple(ok), tuple(bad), mean(ok, "rsum"), mean(bad, "rsum"), others)


def _number(x: Any) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def bimodal_sides(sides: Mapping[str, Mapping[int, Mapping[str, Any]]]) -> tuple[Split, ...]:
    """The bimodal runs among ``sides`` (run -> ``{seed: record}``), in the order given."""
    return tuple(s for run, side in sides.items() if (s := split_seeds(run, side)).bimodal)


__all__ = [
    "BROKEN_FACTOR",
    "Split",
    "bimodal_sides",
    "broken_limit",
    "is_broken",
    "rsum_cell",
    "split_seeds",
]
