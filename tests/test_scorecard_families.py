"""Families a reviewer accepts: Holm within each claim's rows, the whole-scorecard family
only as a line for comparison (seps/report/scorecard_judge.py, seps/report/scorecard.py).

Rows are built by hand with chosen raw p-values; no record is read.
"""

from __future__ import annotations

import pandas as pd
import pytest
from test_scorecard_power import MATRIX, _claim

from seps.report.compare import Comparison
from seps.report.scorecard import render_scorecard
from seps.report.scorecard_judge import (
    claim_families,
    family_of_rows,
    single_family,
    verdict_counts,
    verdict_of,
)
from seps.report.scorecard_rows import Row


def _row(claim, p: float, key: str, mean: float = 5.0) -> Row:
    # A clear paired difference (mean 5, half-width 1 over 5 seeds) with raw p ``p``.
    c = Comparison(mean, 1.0, p, 5, key=key)
    return Row(claim, MATRIX, "candidate", "standard", "base", "var", c, 200.0)


def _rows() -> list[Row]:
    strong, many = _claim("strong"), _claim("many")
    rows = [_row(strong, 0.01, "s")]
    rows += [_row(many, 0.004 * (i + 1), f"m{i}") for i in range(9)]
    return rows


def test_holm_is_per_claim():
    rows = _rows()
    families = claim_families(rows)
    assert list(families) == ["strong", "many"]
    assert [f.size for f in families.values()] == [1, 9]
    # Alone in its claim's family, `strong` keeps its p of 0.01: supported. In one family
    # of all 10 tests Holm would multiply it by 8 (it is the third smallest p).
    strong = rows[0]
    assert families["strong"].p(strong.comparison) == pytest.approx(0.01)
    assert verdict_of(strong, families["strong"]) == "supported"
    whole = family_of_rows(rows)
    assert whole.p(strong.comparison) == pytest.approx(0.08)
    assert verdict_of(strong, whole).startswith("not detected")
    # The counts the scorecard prints, and the whole-scorecard ones beside them.
    per_claim = verdict_counts(rows)
    assert per_claim == verdict_counts(rows, families)
    assert per_claim["supported"] > verdict_counts(rows, single_family(rows))["supported"]


def test_scorecard_states_its_families_and_the_whole_scorecard_counts():
    text = render_scorecard(_rows(), pd.DataFrame())
    assert "one family per claim id, 2 families with a test (10 paired tests in all, 1 to 9" in text
    counts = verdict_counts(_rows(), single_family(_rows()))
    line = next(x for x in text.splitlines() if x.startswith("For comparison, one whole-"))
    assert "(10 paired tests corrected together, MDEs at 0.05/10)" in line
    assert f"{counts['supported']} supported" in line
    header = next(x for x in text.splitlines() if x.startswith("| claim: test "))
    cells = [c.strip() for c in header.strip("|").split("|")]
    assert cells[3:6] == ["scaled claim (rSum)", "MDE, 80% power", "verdict"]
