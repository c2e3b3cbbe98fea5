"""The automatic verdict: a claim whose switch acts through a learned part that moved
less than 1% is `not testable here: the module did not train` (seps/report/frozen.py).

Hand-made records of test_scorecard's mini matrix, with a ``movement`` field added.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from ablation_roots import make_ablation_root
from test_scorecard import CLAIMS, MATRIX, MEASURED, SEEDS, _record, _rows, _verdicts

from seps.report.frozen import MOVED, SWITCH_MODULES, frozen_reason
from seps.report.scorecard import write_scorecard
from seps.train.movement import GROUPS
from seps.train.movement import MOVED as TRAIN_MOVED

#: What test_scorecard's records get without movement (today's verdicts).
BEFORE = {
    "rises": "supported",
    "flat": "not detected: no stated size, so its power cannot be judged",
    "falls": "contradicted",
    "best": "supported",
    "leak": "supported",
}


def _moved(run: str, relevance: float) -> dict[str, dict[str, float]]:
    """A record's movement: every part of its head trained (5%) but the relevance MLP
    (``relevance``), which only ``hrpa="mean_topk"`` (run ``up``) has."""
    parts = ["image_projection", "text_projection", "aggregation"]
    out = {p: {"relative_change": 0.05, "grad_share": 0.3} for p in parts}
    if run == "up":
        out["relevance_mlp"] = {"relative_change": relevance, "grad_share": 0.1}
    return out


def _scorecard(tmp_path: Path, relevance: list[float] | None, without: str | None = None):
    root = make_ablation_root(tmp_path / "ablations", {"mini": MATRIX})
    (root / "claims.yaml").write_text(yaml.safe_dump({"claims": CLAIMS}, sort_keys=False))
    folder = tmp_path / "results" / "mini"
    folder.mkdir(parents=True)
    for run in ("base", "up", "noise", "down", "same"):
        for s in SEEDS:
            rec = _record(run, s)
            if relevance is not None and run != without:
                rec["movement"] = _moved(run, relevance[s])
            (folder / f"{run}-k-{run}-s{s}.json").write_text(json.dumps(rec, sort_keys=True))
    out = write_scorecard(tmp_path / "results", tmp_path / "README.md", root)
    text = out.read_text()
    return {cid: cells for cid, cells in _rows(text).items() if cid in BEFORE}, text


def _judged(text: str) -> dict[str, str]:
    return {cid: v for cid, v in _verdicts(text).items() if cid in BEFORE}


def test_frozen_module_makes_its_claim_not_testable(tmp_path):
    rows, text = _scorecard(tmp_path, [0.004, 0.002, 0.009, 0.001, 0.003])
    verdicts = _judged(text)
    frozen = (
        "not testable here: the module did not train "
        "(relative parameter change: relevance_mlp at most 0.9%)"
    )
    # up differs from base only in hrpa, which acts through the relevance MLP.
    assert verdicts == {**BEFORE, "rises": frozen, "leak": frozen}
    assert rows["rises"][MEASURED] == "+12.0 (n=5, not a test)"
    # The rises/leak rows are not tests, so their claims' families are empty; their pair
    # (base vs up) stays a test as a cell of the optimum `best`, whose cells differ in
    # an unlisted switch too.
    assert "3 families with a test (5 paired tests in all, 1 to 3 per family)" in text
    assert "**Parts that did not train.**" in text


def test_a_module_that_trained_in_any_record_keeps_the_verdict(tmp_path):
    _, text = _scorecard(tmp_path, [0.004, 0.002, 0.02, 0.001, 0.003])
    assert _judged(text) == BEFORE
    assert "**Parts that did not train.**" not in text


@pytest.mark.parametrize("without", [None, "base"])
def test_records_without_movement_keep_todays_verdicts(tmp_path, without):
    # None: no record has movement (every committed record); base: one side lacks it.
    relevance = None if without is None else [0.0] * len(SEEDS)
    _, text = _scorecard(tmp_path, relevance, without)
    assert _judged(text) == BEFORE


def test_switch_table_names_measured_parts_and_the_training_threshold():
    assert {m for ms in SWITCH_MODULES.values() for m in ms} <= set(GROUPS)
    assert MOVED == TRAIN_MOVED


def test_a_difference_outside_the_switch_table_gives_no_automatic_verdict():
    def rec(**head):
        moved = {"score_predictor": {"relative_change": 0.0}}
        return {"head_config": head, "train_config": {}, "movement": moved}

    frozen = [{0: rec(scoring="code")}, {0: rec(scoring="paper")}]
    assert frozen_reason(frozen).startswith("the module did not train")
    # dense_fusion acts without any learned part: the comparison stays a test.
    mixed = [{0: rec(scoring="code")}, {0: rec(scoring="paper", dense_fusion="fused")}]
    assert frozen_reason(mixed) is None
    assert frozen_reason([{0: rec(scoring="code")}, {0: rec(scoring="code")}]) is None


def _report(tmp_path: Path, relevance: list[float]) -> str:
    """The `mini` matrix report of the scorecard's records (with ``relevance`` as the
    relevance MLP's movement per seed)."""
    from seps.report import write_report

    _scorecard(tmp_path, relevance)
    path = write_report(
        "mini", tmp_path / "results", tmp_path / "reports", root=tmp_path / "ablations"
    )
    return path.read_text()


def _family_size(report: str) -> int:
    found = re.search(r"corrected across the (\d+) paired tests? of this report", report)
    assert found, "the report states its correction family"
    return int(found.group(1))


def test_matrix_report_shows_an_untrained_comparison_as_no_test(tmp_path):
    # `up` differs from `base` only in hrpa, whose relevance MLP moved under 1%: the
    # matrix report says so, as the scorecard does, and corrects without that test.
    frozen = _report(tmp_path / "frozen", [0.004, 0.002, 0.009, 0.001, 0.003])
    up = next(line for line in frozen.splitlines() if line.startswith("| up "))
    assert "not testable here: the module did not train" in up and "not a test" in up
    assert "Not testable here: the learned part the switch acts through did not train" in frozen
    trained = _report(tmp_path / "trained", [0.05] * 5)
    up = next(line for line in trained.splitlines() if line.startswith("| up "))
    assert "not testable here" not in up and "higher *" in up
    assert _family_size(frozen) == _family_size(trained) - 1
