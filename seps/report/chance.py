"""Runs at chance level: test recalls that a random similarity matrix would also give.

A run whose rSum is no higher than random scores would give has not learned to retrieve
(training failed, or the switch leaves nothing to learn from). A mean over seeds that
includes such a seed mixes that failure with the effect of the switch, so the report
lists these seeds, as it lists collapsed ones (:mod:`seps.report.collapse`).

Chance for a test split of ``n`` images with ``c`` captions each, and i.i.d. continuous
random scores (no ties):

- image-to-text R@K is the probability that none of the image's ``c`` captions is among
  the top ``K`` of the ``n·c`` texts, subtracted from 1: the hypergeometric
  ``1 − P(X = 0)`` with population ``n·c``, ``c`` successes and ``K`` draws;
- text-to-image R@K is ``min(K, n) / n``.

:func:`chance_rsum` gives the expected rSum and an upper bound on its standard deviation:
each recall is a mean of ``n`` (image-to-text) or ``n·c`` (text-to-image) independent
Bernoulli indicators, and the standard deviation of a sum is at most the sum of the
standard deviations whatever their correlation (the six recalls share one matrix).

*Decision* (nothing in SPEC.md): a seed is *at chance* when its test rSum is at most the
expected rSum plus 3 of these bounds, :data:`CHANCE_SDS`. With 1,000 test images the
expected rSum is 3.2 and the threshold 6.0; on 200 images 15.9 and 29.5.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd
from scipy.stats import hypergeom

from ..data.layout import CAPTIONS_PER_IMAGE
from ..experiments.definitions import Matrix
from ..io.formatting import fmt, is_missing, markdown_table

__all__ = [
    "CHANCE_SDS",
    "at_chance_runs",
    "chance_lines",
    "chance_rsum",
    "floor",
    "is_at_chance",
    "threshold",
]

#: A test rSum at most this many standard-deviation bounds above chance is at chance.
CHANCE_SDS = 3.0
_KS = (1, 5, 10)


@functools.cache  # pure in two ints; every record of a report asks for the same size
def chance_rsum(n_images: int, captions_per_image: int = CAPTIONS_PER_IMAGE) -> tuple[float, float]:
    """(expected rSum, upper bound on its standard deviation) of i.i.d. random scores on
    a test split of ``n_images`` images with ``captions_per_image`` captions each."""
    if n_images < 1 or captions_per_image < 1:
        raise ValueError(
            "need n_images >= 1 and captions_per_image >= 1, "
            f"got {n_images} and {captions_per_image}"
        )
    n_texts = n_images * captions_per_image
    mean = sd = 0.0
    # P(none of the image's captions among the top K texts): hypergeometric X = 0.
    i2t = [1.0 - float(hypergeom.pmf(0, n_texts, captions_per_image, min(k, n_texts))) for k in _KS]
    t2i = [min(k, n_images) / n_images for k in _KS]
    for queries, probs in ((n_images, i2t), (n_texts, t2i)):
        for p in probs:
            mean += 100.0 * p
            sd += 100.0 * math.sqrt(p * (1.0 - p) / queries)
    return mean, sd


def threshold(n_images: int) -> float:
    """The highest test rSum that is at chance on ``n_images`` test images."""
    mean, sd = chance_rsum(n_images)
    return mean + CHANCE_SDS * sd


def floor(n_images: int) -> float:
    """Below this test rSum a run ranks positives *lower* than random scores would: its
    scores are anti-correlated with the ground truth, not merely uninformative."""
    mean, sd = chance_rsum(n_images)
    return mean - CHANCE_SDS * sd


def _eval_size(rec: Mapping[str, Any]) -> int | None:
    """The test-split size of a record with a finite rSum (None: it cannot be checked)."""
    n, rsum = rec.get("eval_images"), rec.get("rsum")
    if is_missing(n) or is_missing(rsum) or not math.isfinite(float(rsum)):
        return None
    return int(n)


def is_at_chance(rec: Mapping[str, Any]) -> bool:
    """Whether one record (or row) has a test rSum at or below :func:`threshold` for its
    ``eval_images``; ``False`` when either is missing."""
    n = _eval_size(rec)
    return n is not None and float(rec["rsum"]) <= threshold(n)


def at_chance_runs(
    cur: pd.DataFrame, matrix: Matrix
) -> tuple[list[dict[str, Any]], list[int], int]:
    """(seeds at chance, test-split sizes, records checked).

    The completed records at chance come in (profile, matrix order, seed) order, each
    with ``profile``, ``run_id``, ``seed``, ``rsum``, ``n_images``, ``chance``,
    ``threshold`` and ``below`` (under :func:`floor`). The sizes are the sorted distinct
    ``eval_images`` of the records checked: those with ``eval_images`` and a finite rSum.
    """
    if cur.empty:
        return [], [], 0
    order = {r.id: i for i, r in enumerate(matrix.runs)}
    done = cur[cur["status"] == "done"].to_dict("records")
    done.sort(key=lambda r: (str(r["profile"]), order.get(r["run_id"], len(order)), int(r["seed"])))
    out, sizes, checked = [], set(), 0
    for r in done:
        n = _eval_size(r)
        if n is None:
            continue
        sizes.add(n)
        checked += 1
        if is_at_chance(r):
            rsum = float(r["rsum"])
            out.append(
                {
                    "profile": r["profile"],
                    "run_id": r["run_id"],
                    "seed": int(r["seed"]),
                    "rsum": rsum,
                    "n_images": n,
                    "chance": chance_rsum(n)[0],
                    "below": rsum < floor(n),
                    "threshold": threshold(n),
                }
            )
    return out, sorted(sizes), checked


def chance_lines(runs: Sequence[dict[str, Any]], sizes: Sequence[int], checked: int) -> list[str]:
    """The report's "Runs at chance level" section (``sizes``: the test-split sizes of
    the ``checked`` records, whose chance levels it states)."""
    if not checked:
        return []
    levels = "; ".join(
        f"{n:,} test images: chance {fmt(chance_rsum(n)[0])}, threshold {fmt(threshold(n))}"
        for n in sizes
    )
    lines = [
        "## Runs at chance level",
        "",
        "A seed is *at chance* when its test rSum is no higher than random scores would "
        f"give: at most the expected rSum of a random similarity matrix plus {CHANCE_SDS:g} "
        f"upper bounds on its standard deviation ({levels}; `seps/report/chance.py`). Such "
        "a seed learned nothing, and the mean of its run mixes that failure with the "
        "effect of the switch. *Below chance*: lower than the expected rSum minus the same "
        "margin, so its scores rank the ground truth lower than random ones would.",
        "",
    ]
    if not runs:
        return [*lines, f"None of the {checked} completed records is at chance level.", ""]
    rows = [
        [
            str(r["profile"]),
            f"`{r['run_id']}`",
            str(r["seed"]),
            fmt(r["rsum"]) + (" (below chance)" if r["below"] else ""),
            f"{fmt(r['chance'])} (threshold {fmt(r['threshold'])}, {r['n_images']:,} images)",
        ]
        for r in runs
    ]
    return [
        *lines,
        f"{len(runs)} of the {checked} completed records are at chance level:",
        "",
        markdown_table(rows, ["profile", "run", "seed", "test rSum", "chance (threshold)"]),
        "",
    ]
