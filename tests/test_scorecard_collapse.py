"""Collapsed training in the scorecard (seps/report/scorecard_rows.py): an effect row whose
sides have seeds that ended training more than 10% below their best validation epoch says
which, since their test scores are of weights that training made worse.

Hand-made records with two-epoch validation curves; nothing trains.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from ablation_roots import make_ablation_root
from test_scorecard import MEASURED, _rows
from test_scorecard_bimodal import MATRIX, _claim, _record

from seps.report.collapse import COLLAPSE_DROP
from seps.report.scorecard import write_scorecard
from seps.report.scorecard_rows import _collapsed_text

#: Validation rSum per epoch and seed; `steady` falls on seeds 0 and 3 by more than 10%.
CURVES = {
    "base": [(300.0, 310.0)] * 5,
    "steady": [(300.0, 150.0), (300.0, 295.0), (300.0, 271.0), (300.0, 120.0), (300.0, 280.0)],
}


def _history(val: tuple[float, float]) -> list[dict[str, Any]]:
    return [{"epoch": e, "val": {"rsum": v}} for e, v in enumerate(val)]


def test_collapsed_text_names_each_sides_falling_seeds():
    sides = {
        run: {s: {"history": _history(c)} for s, c in enumerate(CURVES[run])} for run in CURVES
    }
    text = _collapsed_text(sides)
    assert text == (
        "collapsed in training: 2 of 5 seeds of `steady` (0, 3) end more than 10% below "
        "their best validation epoch"
    )
    assert _collapsed_text({"base": sides["base"]}) is None
    # n counts the seeds with a curve of 2 epochs or more; both sides joined by "and".
    short = {**sides["steady"], 5: {"history": _history((300.0, 100.0))[:1]}}
    fell = {0: {"history": _history((300.0, 100.0))}, 1: {"history": _history((300.0, 300.0))}}
    assert _collapsed_text({"steady": short, "base": fell}) == (
        "collapsed in training: 2 of 5 seeds of `steady` (0, 3) and 1 of 2 seeds of `base` "
        "(0) end more than 10% below their best validation epoch"
    )
    # Exactly 10% below the best is not a collapse; no validation curve cannot collapse.
    exact = {0: {"history": _history((300.0, 300.0 * (1 - COLLAPSE_DROP)))}, 1: {"history": []}}
    assert _collapsed_text({"edge": exact}) is None


def _scorecard_with_curves(tmp_path: Path, claim: str, variant: str, curves) -> str:
    """The scorecard of one claim on ``base`` and ``variant`` (5 seeds each, records of
    the bimodal tests), each record's validation curve ``curves(run, seed)``."""
    root = make_ablation_root(tmp_path / "ablations", {"mini": MATRIX})
    (root / "claims.yaml").write_text(
        yaml.safe_dump({"claims": [_claim(claim, variant)]}, sort_keys=False)
    )
    folder = tmp_path / "results" / "mini"
    folder.mkdir(parents=True)
    for run in ("base", variant):
        for s in range(5):
            record = {**_record(run, s), "history": _history(curves(run, s))}
            (folder / f"{run}-k-{run}-s{s}.json").write_text(json.dumps(record, sort_keys=True))
    return write_scorecard(tmp_path / "results", tmp_path / "README.md", root).read_text()


def test_scorecard_effect_cell_says_which_seeds_collapsed(tmp_path: Path):
    text = _scorecard_with_curves(tmp_path, "falls", "steady", lambda r, s: CURVES[r][s])
    measured = _rows(text)["falls"][MEASURED]
    assert measured.startswith("+0.5 [")  # the paired test is still reported as such
    assert measured.endswith(
        "; collapsed in training: 2 of 5 seeds of `steady` (0, 3) end "
        "more than 10% below their best validation epoch"
    )
    assert "**Collapsed training.**" in text


def test_bimodal_cell_keeps_the_collapse_note(tmp_path: Path):
    """The bimodal cell (`k of n seeds functional`) still says which seeds collapsed."""

    def curves(run: str, seed: int) -> tuple[float, float]:
        return (300.0, 30.0) if (run, seed) == ("flaky", 2) else (300.0, 305.0)

    measured = _rows(_scorecard_with_curves(tmp_path, "breaks", "flaky", curves))["breaks"][
        MEASURED
    ]
    assert "3 of 5 seeds functional" in measured
    assert measured.endswith(
        "; collapsed in training: 1 of 5 seeds of `flaky` (2) end more than 10% below "
        "their best validation epoch"
    )
