"""Power of the paired t-test, seeds needed and equivalence (seps.stats.paired), against values
worked out independently: the textbook paired-t sample sizes and a Monte Carlo check."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import ttest_1samp

from seps.stats.paired import (
    MAX_SEEDS,
    minimal_detectable_effect,
    paired_power,
    paired_sd,
    paired_test,
    seeds_needed,
    tost_p,
)


def test_mde_has_80_percent_power_at_its_level():
    for sd, n, alpha in [(1.0, 5, 0.05), (2.5, 3, 0.05 / 8), (0.7, 12, 0.01)]:
        mde = minimal_detectable_effect(sd, n, alpha)
        assert paired_power(mde, sd, n, alpha) == pytest.approx(0.8, abs=1e-6)
        # It scales with the SD and shrinks with more seeds and a looser level.
        assert minimal_detectable_effect(2 * sd, n, alpha) == pytest.approx(2 * mde)
        assert minimal_detectable_effect(sd, n + 5, alpha) < mde
        assert minimal_detectable_effect(sd, n, min(0.05, 2 * alpha)) <= mde


def test_seeds_needed_matches_textbook_paired_t_sample_sizes():
    # Two-sided paired t, alpha 0.05, power 0.8: d = 0.5 needs 34 pairs, d = 0.8 needs 15,
    # d = 1.0 needs 10 (Cohen's tables; G*Power gives the same).
    assert seeds_needed(0.5, 1.0) == 34
    assert seeds_needed(0.8, 1.0) == 15
    assert seeds_needed(1.0, 1.0) == 10
    # A stricter level needs more seeds; the sign of the effect does not matter.
    assert seeds_needed(-0.5, 1.0, 0.05 / 4) > 34
    assert seeds_needed(1e-6, 1.0) is None and MAX_SEEDS >= 10_000


def test_seeds_needed_is_the_fewest_whose_mde_reaches_the_effect():
    effect, sd, alpha = 2.0, 3.0, 0.05 / 4
    n = seeds_needed(effect, sd, alpha)
    assert minimal_detectable_effect(sd, n, alpha) <= effect
    assert minimal_detectable_effect(sd, n - 1, alpha) > effect
    assert seeds_needed(effect, sd, alpha, at_least=n + 3) == n + 3


def test_power_matches_a_monte_carlo_paired_t_test():
    rng = np.random.default_rng(0)
    n, sd, alpha = 6, 2.0, 0.05
    effect = minimal_detectable_effect(sd, n, alpha)
    draws = rng.normal(effect, sd, size=(20_000, n))
    hit = np.mean(ttest_1samp(draws, 0.0, axis=1).pvalue < alpha)
    assert hit == pytest.approx(0.8, abs=0.015)


def test_paired_sd_inverts_the_ci_half_width():
    diffs = [1.0, 2.5, -0.5, 0.7, 1.9]
    _, half, _, n = paired_test(diffs)
    assert paired_sd(half, n) == pytest.approx(float(np.std(diffs, ddof=1)))
    assert math.isnan(paired_sd(math.nan, 1))


def test_tost_shows_equivalence_only_within_the_margin():
    # mean 0.1, sd 1, n 10, margin 1: p = max(P(T >= 1.1/se), P(T <= -0.9/se)).
    se = 1.0 / math.sqrt(10)
    from scipy.stats import t

    want = max(t.sf(1.1 / se, 9), t.cdf(-0.9 / se, 9))
    assert tost_p(0.1, 1.0, 10, 1.0) == pytest.approx(want)
    assert tost_p(0.1, 1.0, 10, 1.0) < 0.05  # equivalent within ±1
    assert tost_p(0.1, 1.0, 10, 0.3) > 0.05  # not within ±0.3
    assert tost_p(1.5, 0.1, 10, 1.0) > 0.5  # clearly outside
    assert tost_p(0.2, 0.0, 5, 1.0) == 0.0 and tost_p(2.0, 0.0, 5, 1.0) == 1.0
    assert math.isnan(tost_p(0.1, 1.0, 1, 1.0))
