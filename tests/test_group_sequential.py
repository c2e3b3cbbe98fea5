"""The sequential design's statistics (seps.stats.group_sequential) and its replay over looks
(seps.report.sequential.replay): boundaries against published tables and an independent
computation, the family-wise error rate and the power of the whole procedure by
simulation.

The simulations run the suite's own replay on synthetic paired differences (seeds on
three builds, as the `standard` profile puts them), so what they measure is the
procedure the records are judged by, not a copy of it. Their Monte Carlo standard error
is stated in each assertion.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import multivariate_normal, norm

from seps.report.sequential import Design, RowResult, SeedPair, replay
from seps.stats.group_sequential import (
    LookStat,
    blocked_t,
    boundaries,
    crossing_probabilities,
    holm_over_looks,
    nominal_levels,
    plain_t,
    repeated_interval,
    spent,
)

LOOKS = (5, 10, 15, 20, 30)
FRACTIONS = [n / LOOKS[-1] for n in LOOKS]


def _design(**changes) -> Design:
    fields = dict(
        name="sim",
        claims=("c",),
        matrices=("m",),
        looks=LOOKS,
        spending="pocock",
        alpha=0.05,
        margin=0.06,
        reference={"flip": "base", "revert": "paper"},
        blocks=("build", "cpu"),
        written="test",
    )
    fields.update(changes)
    return Design(**fields)


def _constant(K: int, alpha: float, shape: str) -> float:
    """The classical Pocock (``P``) or O'Brien-Fleming (``B``) constant for K equally
    spaced looks, solved from this module's crossing probabilities."""
    from scipy.optimize import brentq

    fr = [k / K for k in range(1, K + 1)]

    def excess(c: float) -> float:
        b = [c] * K if shape == "P" else [c * math.sqrt(K / k) for k in range(1, K + 1)]
        return sum(sum(x) for x in crossing_probabilities(b, fr, 0.0)) - alpha

    return brentq(excess, 1.0, 5.0, xtol=1e-8)


# Jennison & Turnbull (2000), Table 2.1 (Pocock, C_P(K, 0.05)) and Table 2.3
# (O'Brien & Fleming, C_B(K, 0.05)), two-sided alpha = 0.05, K = 2..5.
@pytest.mark.parametrize(
    ("K", "pocock", "obf"),
    [(2, 2.178, 1.977), (3, 2.289, 2.004), (4, 2.361, 2.024), (5, 2.413, 2.040)],
)
def test_crossing_probabilities_give_the_published_pocock_and_obrien_fleming_constants(
    K, pocock, obf
):
    assert _constant(K, 0.05, "P") == pytest.approx(pocock, abs=6e-4)
    assert _constant(K, 0.05, "B") == pytest.approx(obf, abs=6e-4)


@pytest.mark.parametrize("shape", ["pocock", "obrien-fleming"])
@pytest.mark.parametrize("alpha", [0.05, 0.0125])
def test_boundaries_spend_what_scipy_multivariate_normal_says_they_do(shape, alpha):
    """Independent computation: P(some |Z_j| >= c_j, j <= k) from SciPy's multivariate
    normal (Genz's algorithm; corr(Z_i, Z_j) = sqrt(t_i / t_j)) equals the spending at
    every look of the design's unequal schedule."""
    b = boundaries(FRACTIONS, alpha, shape)
    t = np.asarray(FRACTIONS)
    cov = np.sqrt(np.minimum.outer(t, t) / np.maximum.outer(t, t))
    for k in range(1, len(t) + 1):
        c = np.minimum(np.asarray(b[:k]), 30.0)
        mvn = multivariate_normal(mean=np.zeros(k), cov=cov[:k, :k], allow_singular=False)
        crossed = 1.0 - mvn.cdf(c, lower_limit=-c)
        assert crossed == pytest.approx(spent(t[k - 1], alpha, shape), abs=2e-5)


def test_lan_demets_pocock_boundaries_are_nearly_constant_and_above_the_fixed_sample_z():
    b = boundaries([k / 5 for k in range(1, 6)], 0.05, "pocock")
    assert b == pytest.approx([2.438, 2.427, 2.410, 2.397, 2.386], abs=1e-3)


def test_spending_is_zero_before_any_information_and_alpha_at_the_cap():
    for shape in ("pocock", "obrien-fleming"):
        assert spent(0.0, 0.05, shape) == 0.0
        assert spent(1.0, 0.05, shape) == 0.05
        assert spent(1.5, 0.05, shape) == 0.05
        assert 0 < spent(0.5, 0.05, shape) < 0.05


def test_a_look_past_the_cap_cannot_reject():
    levels = nominal_levels([0.5, 1.0, 1.2], 0.05, "pocock")
    assert levels[2] == 0.0


def test_blocked_t_removes_block_shifts_that_plain_t_counts_as_noise():
    rng = np.random.default_rng(1)
    blocks = [s % 3 for s in range(30)]
    diffs = 5.0 + rng.normal(0, 1, 30) + np.asarray([(-20, 0, 20)[b] for b in blocks])
    plain, blocked = plain_t(diffs), blocked_t(diffs, blocks)
    assert plain.mean == pytest.approx(blocked.mean)
    assert blocked.df == 27 and plain.df == 29
    assert blocked.se < plain.se / 5
    assert blocked.p < 1e-10 < plain.p


def test_blocked_t_has_no_test_when_every_block_holds_one_seed():
    s = blocked_t([1.0, 2.0, 3.0], ["a", "b", "c"])
    assert s.df == 0 and math.isnan(s.p)
    assert repeated_interval(s, 0.05) == (-math.inf, math.inf)


def test_holm_passes_a_rejected_rows_level_to_the_others():
    # Row b alone would need p <= alpha/2-design levels; once a is rejected it has alpha.
    fr = [0.5, 1.0]
    lone = nominal_levels(fr, 0.025, "pocock")
    full = nominal_levels(fr, 0.05, "pocock")
    p_b = (lone[1] + full[1]) / 2  # between the two levels at the second look
    looks = {
        "a": [LookStat(10, 5.0, 1.0, 9, 1e-9)],
        "b": [LookStat(10, 1.0, 1.0, 9, 0.5), LookStat(20, 1.0, 1.0, 19, p_b)],
    }
    assert holm_over_looks(looks, 20, 0.05, "pocock") == {"a": 0, "b": 1}
    looks["a"] = [LookStat(10, 0.0, 1.0, 9, 0.9)]
    assert holm_over_looks(looks, 20, 0.05, "pocock") == {}


def _family(rng, effects, sd, corr=0.5, z_known=False):
    """One family of rows with true mean differences ``effects`` (one per row), per-seed
    sd ``sd``, rows correlated through a shared baseline (``corr``)."""
    n = LOOKS[-1]
    shared = rng.normal(0, 1, n)
    rows = []
    for i, effect in enumerate(effects):
        own = rng.normal(0, 1, n)
        d = effect + sd * (math.sqrt(corr) * shared + math.sqrt(1 - corr) * own)
        pairs = [SeedPair(s, float(d[s]), f"b{s % 3}", "cpu") for s in range(n)]
        rows.append(RowResult("c", "m", "candidate", "base", f"v{i}", "base", 100.0, 6.0, pairs))
    return {"c": rows}


def _simulate(n_families, effects, sd, seed, design=None):
    design = design or _design()
    rng = np.random.default_rng(seed)
    detected = np.zeros(len(effects))
    any_detected = 0
    for _ in range(n_families):
        rows = replay(design, _family(rng, effects, sd)).rows()
        hits = [r.decision == "detected" for r in rows]
        detected += hits
        any_detected += any(hits)
    return detected / n_families, any_detected / n_families


N_NULL = 10000


def test_the_family_wise_error_rate_over_all_rows_and_looks_is_at_most_alpha():
    """Four null rows (correlated 0.5 through a shared baseline), five looks, blocked on
    three builds: the chance that any row is declared detected stays at most 5%."""
    _, fwer = _simulate(N_NULL, [0.0] * 4, 20.0, seed=11)
    mc = math.sqrt(0.05 * 0.95 / N_NULL)
    assert fwer <= 0.05 + 3 * mc, f"FWER {fwer:.4f} (Monte Carlo SE {mc:.4f}, {N_NULL} families)"


def test_testing_every_look_at_the_plain_level_would_inflate_the_error_rate():
    """The negative control of the test above: the same simulation without spending or
    Holm (each row tested at 0.05 at every look) rejects far more often, so the
    simulation can see an invalid procedure."""
    rng = np.random.default_rng(12)
    hits = 0
    for _ in range(1000):
        rows = _family(rng, [0.0] * 4, 20.0)["c"]
        hits += any(
            blocked_t([p.diff for p in r.pairs[:n]], [p.build for p in r.pairs[:n]]).p < 0.05
            for r in rows
            for n in LOOKS
        )
    assert hits / 1000 > 0.2


def _z_power(effect, sd, alpha_row):
    """The design's predicted power for one row at level ``alpha_row`` with a known sd:
    the sum of its crossing probabilities at the drift of ``effect``."""
    b = boundaries(FRACTIONS, alpha_row, "pocock")
    drift = effect * math.sqrt(LOOKS[-1]) / sd
    return sum(sum(x) for x in crossing_probabilities(b, FRACTIONS, drift))


def test_a_planted_effect_the_size_of_code_hrpa_is_detected_as_the_design_predicts():
    """code+hrpa at 5 seeds: +39.0 rSum, paired sd 21.2. Planted in one row of a family
    of four (the others null), the procedure detects it with the power the design's
    boundaries predict (with the sd known, 1.000), within the Monte Carlo error; the
    t statistic's cost at the first looks (2 to 7 degrees of freedom) moves the look it
    is found at, not whether it is found by the cap."""
    n = 1000
    power, _ = _simulate(n, [39.0, 0.0, 0.0, 0.0], 21.2, seed=13)
    predicted = _z_power(39.0, 21.2, 0.05 / 4)
    mc = math.sqrt(max(predicted * (1 - predicted), 1 / n) / n)
    assert predicted > 0.999
    assert power[0] >= predicted - 3 * mc - 1e-3, f"power {power[0]:.4f}, predicted {predicted:.4f}"


def test_power_at_a_moderate_effect_matches_the_crossing_probabilities_with_a_known_sd():
    """Where power is far from 1, the recursion's prediction is checked against the
    procedure run on z statistics (the sd known: each look's LookStat built with
    infinite degrees of freedom), within 3 Monte Carlo standard errors."""
    effect, sd, n_sim = 10.0, 20.0, 3000
    predicted = _z_power(effect, sd, 0.05 / 4)
    assert 0.4 < predicted < 0.9
    rng = np.random.default_rng(14)
    hits = 0
    for _ in range(n_sim):
        d = effect + sd * rng.normal(0, 1, LOOKS[-1])
        looks = []
        for n in LOOKS:
            mean, se = float(d[:n].mean()), sd / math.sqrt(n)
            p = float(2 * norm.sf(abs(mean) / se))
            looks.append(LookStat(n, mean, se, 10**9, p))
            if holm_over_looks({"x": looks, "y": [], "z": [], "w": []}, 30, 0.05, "pocock"):
                hits += 1
                break
    mc = math.sqrt(predicted * (1 - predicted) / n_sim)
    assert hits / n_sim == pytest.approx(predicted, abs=3 * mc)
