"""Power on every scorecard row (seps/report/power.py, seps/report/scorecard_judge.py):
the scaled claim, the MDE, `not detected` only when the test could have seen the claim,
`underpowered (needs about N seeds)` otherwise, and `equivalent` by the TOST.

Rows are built by hand from per-seed differences: no record is read, nothing trains.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ablation_roots import make_ablation_root

from seps.experiments.definitions import Matrix, RunSpec
from seps.report.claims import Claim, ClaimError, Pair, load_claim_file
from seps.report.compare import Comparison, family_of
from seps.report.power import IMPACT_RANGES, impact_text, scaled_claim, size_check
from seps.report.scorecard_judge import judge_row, verdict_counts
from seps.report.scorecard_rows import Row
from seps.report.verdicts import (
    AGAINST,
    EQUIVALENT,
    NO_SIZE,
    NOT_DETECTED,
    against_claim,
    powered_verdict,
    underpowered_text,
)
from seps.stats.paired import minimal_detectable_effect, paired_test, seeds_needed

REPO = Path(__file__).resolve().parents[1]
MATRIX = Matrix(
    "m",
    "",
    "base",
    (RunSpec("base", "code"), RunSpec("var", "code", difference="hrpa")),
    Path("m.yaml"),
)
#: Differences with mean 0.04 and SD about 1.1 over 5 seeds: nothing detected.
NOISE = [0.5, -1.2, 1.4, -0.9, 0.4]


def _claim(cid: str = "c", direction: str = "+", **fields) -> Claim:
    size = fields.pop("size", None)
    pair = (Pair("base", ("var",)),)
    return Claim(cid, "a claim", "a test", ("m",), ("candidate",), pair, direction, size, **fields)


def _row(claim: Claim, diffs: list[float], base_mean: float = 200.0, key: str = "k") -> Row:
    mean, half, p, n = paired_test(diffs)
    c = Comparison(mean, half, p, n, key=key)
    return Row(claim, MATRIX, "candidate", "standard", "base", "var", c, base_mean)


def _judge(row: Row, levels: dict[str, str] | None = None):
    return judge_row(row, family_of([row.comparison]), levels or {})


def test_not_detected_only_when_mde_within_claim():
    # 10% of a baseline at 200 is 20 rSum, far above the test's MDE: not detected.
    big = _judge(_row(_claim(relative_size=0.1), NOISE))
    assert big.scaled.value == pytest.approx(20.0)
    assert big.power.mde <= 20.0 and big.verdict == NOT_DETECTED
    # 0.5% is 1 rSum, below the MDE of the same test: the test could not have seen it.
    small = _judge(_row(_claim(relative_size=0.005), NOISE))
    assert small.power.mde > 1.0 and small.verdict.startswith("underpowered")
    # The rule itself, on numbers.
    assert powered_verdict(NOT_DETECTED, scaled=-3.0, mde=3.0) == NOT_DETECTED
    assert powered_verdict(NOT_DETECTED, scaled=-3.0, mde=3.1).startswith("underpowered")
    assert powered_verdict("supported", scaled=1.0, mde=9.0) == "supported"


def test_underpowered_names_seed_count():
    judged = _judge(_row(_claim(relative_size=0.005), NOISE))
    sd, alpha = judged.tested.sd, judged.power.alpha
    n = seeds_needed(1.0, sd, alpha)
    assert judged.verdict == underpowered_text(n)
    assert judged.power.needed == n > 5
    assert (
        minimal_detectable_effect(sd, n, alpha) <= 1.0 < minimal_detectable_effect(sd, n - 1, alpha)
    )


def test_mde_is_at_the_worst_case_holm_level_of_the_claims_family():
    claim = _claim(relative_size=0.1)
    rows = [_row(claim, [d + 0.1 * i for d in NOISE], key=f"k{i}") for i in range(4)]
    family = family_of(r.comparison for r in rows)
    judged = judge_row(rows[0], family, {})
    assert judged.power.tests == 4 and judged.power.alpha == pytest.approx(0.05 / 4)
    c = rows[0].comparison
    assert judged.power.mde == pytest.approx(minimal_detectable_effect(c.sd, c.n, 0.05 / 4))


def test_no_stated_size_keeps_not_detected_with_its_qualifier():
    judged = _judge(_row(_claim(), NOISE))
    assert judged.scaled is None and judged.verdict == NO_SIZE
    assert judged.power.mde > 0  # the MDE is still stated
    counts = verdict_counts([_row(_claim(), NOISE)])
    assert counts[NO_SIZE] == 1 and counts[NOT_DETECTED] == 0


def test_equivalent_when_tost_places_the_effect_within_the_margin():
    tight = [0.1, -0.1, 0.05, -0.05, 0.0, 0.08, -0.02, 0.03]
    judged = _judge(_row(_claim(direction="0", equivalence_margin=2.0), tight))
    assert judged.verdict == EQUIVALENT and judged.power.equivalent
    # The same differences with a margin they do not fit inside: not equivalent; the
    # margin is the effect a claim of no effect must be able to see.
    narrow = _judge(_row(_claim(direction="0", equivalence_margin=0.01), tight))
    assert narrow.verdict != EQUIVALENT and narrow.scaled.text == "±0.0 (margin)"
    # A detected effect is never called equivalent.
    moved = _judge(_row(_claim(direction="0", equivalence_margin=2.0), [1.0, 1.1, 0.9, 1.05]))
    assert moved.verdict == "contradicted"


def test_scaled_claim_prefers_relative_then_size_then_stars():
    rel = scaled_claim(_claim(direction="-", relative_size=-0.04, size=-15.0), 250.0, "large")
    assert rel.value == pytest.approx(-10.0) and "-4.0% of 250.0" in rel.text
    size = scaled_claim(_claim(size=53.6), 250.0, "large")
    assert size.value == 53.6
    large = scaled_claim(_claim(), 200.0, "large")
    assert large.value == pytest.approx(6.0) and large.text == "≥ +6.0 (large, >3% of 200.0)"
    medium = scaled_claim(_claim(direction="-"), 200.0, "medium")
    assert medium.value == pytest.approx(-2.0) and medium.text.startswith("-2.0 to -6.0")
    small = scaled_claim(_claim(), 200.0, "small")  # powered for its high end, 1%
    assert small.value == pytest.approx(2.0) and small.text.startswith("up to +2.0")
    assert scaled_claim(_claim(), 200.0, None) is None
    assert scaled_claim(_claim(direction="0"), 200.0, "large") is None


def test_a_supported_effect_says_when_its_interval_excludes_the_claimed_size():
    # Claimed +1% of 200 (+2.0); measured about +40 on every seed: the sign holds, the
    # size does not, and the verdict says so after "supported" (still counted as one).
    far = [40.0, 41.0, 39.0, 40.5, 39.5]
    judged = _judge(_row(_claim(relative_size=0.01), far))
    assert judged.verdict == "supported; larger than claimed (interval beyond +2.0)"
    assert verdict_counts([_row(_claim(relative_size=0.01), far)])["supported"] == 1
    # Claimed +20% (+40.0); measured about +4: detected, and smaller than claimed.
    near = [4.0, 4.2, 3.8, 4.1, 3.9]
    assert _judge(_row(_claim(relative_size=0.2), near)).verdict == (
        "supported; smaller than claimed (interval within +40.0)"
    )
    # An interval that reaches the claimed value, a size on the source's scale and an
    # open star range ("large": > 3%, no far end) leave "supported" alone.
    assert _judge(_row(_claim(relative_size=0.2), [40.0, 30.0, 50.0, 45.0, 35.0])).verdict == (
        "supported"
    )
    assert _judge(_row(_claim(size=2.0), far)).verdict == "supported"
    assert _judge(_row(_claim(), far), {"hrpa": "large"}).verdict == "supported"
    # Stars with a far end: medium (1-3% of 200: +2 to +6) against +40.
    assert _judge(_row(_claim(), far), {"hrpa": "medium"}).verdict.endswith("beyond +6.0)")
    # A claimed decrease reads the interval on its own side.
    down = scaled_claim(_claim(direction="-", relative_size=-0.01), 200.0)
    assert size_check(down, -45.0, -35.0) == "larger than claimed (interval beyond -2.0)"
    assert size_check(down, -3.0, -1.0) is None


def test_star_rows_read_the_difference_the_pair_flips():
    judged = _judge(_row(_claim(), NOISE), {"hrpa": "medium"})
    assert judged.scaled.value == pytest.approx(2.0)  # 1% of 200
    assert impact_text("medium") == "medium (1-3%)"


def test_impact_ranges_are_the_ones_paper_figures_states():
    figures = yaml.safe_load((REPO / "ablations" / "paper_figures.yaml").read_text())
    scale = figures["claimed_impacts"]["scale"]
    assert {level: written for level, (_, _, written) in IMPACT_RANGES.items()} == scale
    header = (REPO / "ablations" / "differences.yaml").read_text()
    assert "(large >3%, medium 1-3%, small <1%)" in header


def test_relative_size_and_margin_are_checked(tmp_path):
    root = make_ablation_root(
        tmp_path / "ablations",
        {
            "m": {
                "name": "m",
                "baseline": "base",
                "runs": [{"id": "base", "preset": "code"}, {"id": "var", "preset": "code"}],
            }
        },
    )
    entry = {
        "id": "c",
        "claim": "x",
        "source": "y",
        "matrix": "m",
        "protocol": "candidate",
        "runs": {"baseline": "base", "variants": ["var"]},
        "direction": "+",
        "size": None,
    }
    bad = root / "bad.yaml"
    for change, message in [
        ({"relative_size": -0.1}, "sign opposite to direction"),
        ({"relative_size": "big"}, "field 'relative_size': expected a non-zero number"),
        ({"direction": "0", "relative_size": 0.1}, "field 'relative_size'"),
        ({"equivalence_margin": -1}, "field 'equivalence_margin': expected a positive"),
    ]:
        bad.write_text(yaml.safe_dump({"claims": [{**entry, **change}]}))
        with pytest.raises(ClaimError, match=message):
            load_claim_file(bad, root)


def test_repository_claims_scale_their_sources_and_give_no_effect_claims_a_margin():
    claims, _ = load_claim_file(REPO / "ablations" / "claims.yaml", REPO / "ablations")
    by_id = {c.id: c for c in claims}
    assert by_id["headline"].relative_size == pytest.approx((560.9 - 507.3) / 507.3, abs=1e-4)
    assert by_id["module-only-sparse-text"].relative_size == pytest.approx(
        (331.4 - 367.8) / 367.8, abs=1e-4
    )
    assert all(c.equivalence_margin for c in claims if c.direction == "0")


def _judge_grid(row: Row):
    """``row``, a grid optimum, judged in the family of its cells' tests."""
    return judge_row(row, family_of(c.comparison for c in row.cells if c.comparison), {})


def test_grid_optimum_not_detected_is_qualified_by_its_quoted_cells_power():
    from seps.report.verdicts import Cell

    def optimum(relative: float) -> Row:
        claim = _claim("grid", "-", kind="optimum", relative_size=relative)
        mean, half, p, n = paired_test(NOISE)
        cells = (Cell("base", 200.0, 2.0, 5), Cell("var", 200.0 + mean, 2.0, 5, Comparison(
            mean, half, p, n, key="var")))  # fmt: skip
        return Row(claim, MATRIX, "candidate", "standard", "base", cells=cells)

    wide = _judge_grid(optimum(-0.05))  # 10 rSum below the claimed cell's 200: seen
    assert wide.scaled.value == pytest.approx(-10.0) and wide.verdict == NOT_DETECTED
    narrow = _judge_grid(optimum(-0.001))  # 0.2 rSum: the quoted cell's test cannot see it
    assert narrow.verdict == underpowered_text(narrow.power.needed)


def test_grid_optimum_supported_only_when_its_quoted_cells_test_could_see_a_cell_above():
    from seps.report.verdicts import Cell

    below = [-6.0, -5.1, -6.4, -5.5, -6.2]  # a cell detectably below the claimed one
    above = [30.0, -20.0, 45.0, -10.0, 40.0]  # the best cell: above, not detected, wide

    def optimum(relative: float) -> Row:
        claim = _claim("grid", "-", kind="optimum", relative_size=relative)
        cells = [Cell("base", 200.0, 2.0, 5)]
        for run, diffs in (("low", below), ("high", above)):
            mean, half, p, n = paired_test(diffs)
            cells.append(Cell(run, 200.0 + mean, 2.0, 5, Comparison(mean, half, p, n, key=run)))
        return Row(claim, MATRIX, "candidate", "standard", "base", cells=tuple(cells))

    # The best cell's test has an MDE of tens of rSum: a claim of 2 rSum could hide above.
    small = _judge_grid(optimum(-0.01))
    assert small.optimum.verdict == "supported" and small.optimum.below
    assert small.power.mde > 2.0
    assert small.verdict == underpowered_text(small.power.needed)
    # Against a claimed drop of half the baseline the same test could see a cell above.
    large = _judge_grid(optimum(-0.5))
    assert large.power.mde <= 100.0 and large.verdict == "supported"


def test_powered_verdict_leaves_an_optimums_supported_without_a_stated_size():
    assert powered_verdict("supported", scaled=None, mde=50.0, optimum=True) == "supported"
    assert powered_verdict("supported", scaled=1.0, mde=50.0) == "supported"
    assert powered_verdict("supported", scaled=1.0, mde=50.0, needed=40, optimum=True) == (
        "underpowered (needs about 40 seeds)"
    )


def test_underpowered_says_over_100_seeds_rounded_up_beyond_reach():
    assert underpowered_text(12) == "underpowered (needs about 12 seeds)"
    assert underpowered_text(100) == "underpowered (needs about 100 seeds)"
    assert underpowered_text(101) == "underpowered (needs over 100 seeds: about 110)"
    assert underpowered_text(8_570) == "underpowered (needs over 100 seeds: about 8,600)"
    assert underpowered_text(None) == "underpowered (needs more seeds than can be run)"


def test_underpowered_row_whose_estimate_points_against_the_claim_says_so():
    under = underpowered_text(13)
    assert against_claim(under, "-", 24.6) == f"{under}; {AGAINST}"
    assert against_claim(under, "+", 24.6) == under  # the claimed sign: unchanged
    assert against_claim(under, "0", 24.6) == under  # a claim of no effect has no sign
    assert against_claim("not detected", "-", 24.6) == "not detected"  # powered: no note
    assert against_claim("supported", "-", 24.6) == "supported"
    # Through the judge: a claimed gain, a noisy estimated loss, too few seeds.
    against = _judge(_row(_claim(relative_size=0.005), [-x for x in NOISE]))
    assert against.tested.mean < 0 and against.verdict.startswith("underpowered")
    assert against.verdict.endswith(f"; {AGAINST}")
    along = _judge(_row(_claim(relative_size=0.005), NOISE))
    assert along.tested.mean > 0 and along.verdict == underpowered_text(along.power.needed)
