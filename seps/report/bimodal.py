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

The scorecard, the matrix pages (:mod:`seps.report.prose`) and the loss-study tables
(:mod:`seps.report.loss_study`) all report a bimodal run this way.

Pure functions of ``{seed: record}`` mappings.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..formatting import code, fmt
from .chance import chance_rsum

#: A seed whose test rSum is at most this many times the chance rSum is broken.
BROKEN_FACTOR = 2.0


@dataclass(frozen=True)
class Split:
    """The seeds of one run split into ``functional`` and ``broken`` ones (sorted), with
    each group's mean test rSum."""

    run: str
    functional: tuple[int, ...]
    broken: tuple[int, ...]
    functional_mean: float
    broken_mean: float

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


def split_seeds(run: str, side: Mapping[int, Mapping[str, Any]]) -> Split:
    """The :class:`Split` of one run's records, ``{seed: record}`` (``rsum`` and
    ``eval_images`` read)."""
    groups: dict[bool, list[int]] = {True: [], False: []}
    for seed, rec in sorted(side.items()):
        broken = is_broken(rec)
        if broken is not None:
            groups[broken].append(int(seed))

    def mean(seeds: list[int]) -> float:
        return sum(float(side[s]["rsum"]) for s in seeds) / len(seeds) if seeds else math.nan

    return Split(
        run, tuple(groups[False]), tuple(groups[True]), mean(groups[False]), mean(groups[True])
    )


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
