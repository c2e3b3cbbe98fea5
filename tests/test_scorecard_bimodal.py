"""Bimodal and broken runs (seps/report/bimodal.py): a side whose seeds split into some at
chance level and some that learned is reported as `k of n seeds functional` with both
groups' means, and its verdict says the test is on a bimodal variant.

Hand-made records (1,000 test images: chance rSum 3.2, broken at <= 6.4); nothing trains.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from ablation_roots import make_ablation_root
from test_scorecard import MEASURED, SCALED, VERDICT, _rows, _verdicts

from seps.io.store import SCHEMA
from seps.report import write_report
from seps.report.bimodal import BROKEN_FACTOR, bimodal_sides, broken_limit, split_seeds
from seps.report.chance import chance_rsum
from seps.report.scorecard import write_scorecard
from seps.report.summary import metric_cell
from seps.report.verdicts import bimodal_verdict

#: Test rSum per seed: `flaky` learns on seeds 0, 1, 4 and stays at chance on 2 and 3.
RSUM = {
    "base": [212.0, 215.0, 209.0, 214.0, 211.0],
    "flaky": [210.0, 213.0, 0.7, 0.1, 208.0],
    "steady": [213.0, 214.5, 210.5, 213.0, 212.5],
}
MATRIX = {
    "name": "mini",
    "baseline": "base",
    "runs": [
        {"id": "base", "preset": "code"},
        {"id": "flaky", "preset": "code", "set": {"hrpa": "mean_topk"}},
        {"id": "steady", "preset": "code", "set": {"aggregation": "dual"}},
    ],
}


def _claim(cid: str, variant: str) -> dict[str, Any]:
    return {
        "id": cid,
        "claim": f"{variant} lowers rSum",
        "source": "a test",
        "matrix": "mini",
        "protocol": "candidate",
        "runs": {"baseline": "base", "variants": [variant]},
        "direction": "-",
        "size": None,
        "relative_size": -0.05,
    }


def _record(run: str, seed: int) -> dict[str, Any]:
    rsum = RSUM[run][seed]
    recalls = ("i2t_r1", "i2t_r5", "i2t_r10", "t2i_r1", "t2i_r5", "t2i_r10")
    head = {"embed_size": 64, **next(r.get("set", {}) for r in MATRIX["runs"] if r["id"] == run)}
    return {
        "schema": SCHEMA,
        "matrix": "mini",
        "profile": "standard",
        "run_id": run,
        "seed": seed,
        "key": f"k-{run}",
        "status": "done",
        "started": 1000.0,
        "head_config": head,
        "train_config": {"dataset": "synthetic", "dense_source": "candidate", "seed": seed},
        # Recall k of 6 is rSum * k / 21 (they sum to rSum), so each column differs.
        "metrics": {**{m: rsum * k / 21 for k, m in enumerate(recalls, 1)}, "rsum": rsum},
        "dense_source": "candidate",
        "eval_images": 1000,
        "code_version": "v1",
        "history": [],
    }


def _write_records(results: Path) -> None:
    """Every run's 5 records into ``results/mini``."""
    folder = results / "mini"
    folder.mkdir(parents=True)
    for run in RSUM:
        for s in range(5):
            path = folder / f"{run}-k-{run}-s{s}.json"
            path.write_text(json.dumps(_record(run, s), sort_keys=True))


def _side(run: str) -> dict[int, dict[str, Any]]:
    return {s: {"rsum": r, "eval_images": 1000} for s, r in enumerate(RSUM[run])}


def test_broken_is_at_most_k_times_chance():
    assert broken_limit(1000) == pytest.approx(BROKEN_FACTOR * chance_rsum(1000)[0])
    assert 6.0 < broken_limit(1000) < 7.0
    split = split_seeds("flaky", _side("flaky"))
    assert (split.functional, split.broken) == ((0, 1, 4), (2, 3))
    assert split.functional_mean == pytest.approx(210.333, abs=1e-3)
    assert split.broken_mean == pytest.approx(0.4)
    assert split.bimodal


def test_one_mode_is_not_bimodal():
    assert not split_seeds("steady", _side("steady")).bimodal
    all_broken = {s: {"rsum": 1.0, "eval_images": 1000} for s in range(3)}
    assert not split_seeds("dead", all_broken).bimodal
    # A seed without rSum or test size is in neither group.
    odd = {0: {"rsum": 200.0, "eval_images": 1000}, 1: {"rsum": None, "eval_images": 1000}}
    assert split_seeds("odd", odd).n == 1
    sides = {"flaky": _side("flaky"), "base": _side("base")}
    assert [s.run for s in bimodal_sides(sides)] == ["flaky"]


def test_bimodal_variant_reported_as_k_of_n(tmp_path: Path):
    root = make_ablation_root(tmp_path / "ablations", {"mini": MATRIX})
    claims = [_claim("breaks", "flaky"), _claim("holds", "steady")]
    (root / "claims.yaml").write_text(yaml.safe_dump({"claims": claims}, sort_keys=False))
    _write_records(tmp_path / "results")
    text = write_scorecard(tmp_path / "results", tmp_path / "README.md", root).read_text()
    rows = _rows(text)
    measured = rows["breaks"][MEASURED]
    # k of n with both groups' means, the baseline on the same seeds, no mean ± CI.
    assert measured.startswith(
        "`flaky`: 3 of 5 seeds functional (mean rSum 210.3; broken seeds 2, 3: 0.4); "
        "`base` 212.2 on the same seeds; Δ -85.8 over all 5 paired seeds (p Holm "
    )
    assert measured.endswith("; no interval: bimodal)") and "[" not in measured
    # The paired test still ran (a verdict of a test), and says it is on a bimodal variant.
    verdict = _verdicts(text)["breaks"]
    assert verdict.endswith("test on a bimodal variant: `flaky` 3 of 5 seeds functional")
    assert verdict.startswith(("underpowered", "not detected", "supported"))
    assert rows["breaks"][SCALED].startswith("-10.6 (-5.0% of 212.2)")
    # A one-mode variant keeps its mean and interval.
    assert rows["holds"][MEASURED].startswith("+0.5 [") and "bimodal" not in rows["holds"][VERDICT]


def test_bimodal_verdict_names_only_a_test_verdict():
    split = split_seeds("flaky", _side("flaky"))
    assert bimodal_verdict("supported", [split]).endswith("`flaky` 3 of 5 seeds functional")
    assert bimodal_verdict("no records yet", [split]) == "no records yet"
    assert bimodal_verdict("not detected", []) == "not detected"


def test_matrix_page_gives_a_bimodal_run_each_groups_mean(tmp_path: Path):
    """The matrix page, like the scorecard: the results table's rSum cell of a bimodal run
    holds `k of n functional` with each group's mean, and each recall cell each group's
    mean of that recall, not a mean ± CI; a bullet under "What this run shows" names the
    run; a one-mode run keeps its mean ± CI."""
    root = make_ablation_root(tmp_path / "ablations", {"mini": MATRIX})
    _write_records(tmp_path / "results")
    text = write_report("mini", tmp_path / "results", tmp_path / "reports", root=root).read_text()
    rows = {
        cells[1].strip(): cells
        for line in text.splitlines()
        if line.startswith("| ") and len(cells := line.split("|")) > 10
    }
    assert any(c.strip() == "3 of 5 functional: 210.3; broken: 0.4" for c in rows["flaky"])
    # Recall k is rSum * k / 21 in these records, so column k holds 210.3 k / 21 for the
    # functional seeds and 0.4 k / 21 for the broken ones, in the recalls' order.
    assert [c.strip() for c in rows["flaky"][4:10]] == [
        "10.0; broken: 0.0",
        "20.0; broken: 0.0",
        "30.0; broken: 0.1",
        "40.1; broken: 0.1",
        "50.1; broken: 0.1",
        "60.1; broken: 0.1",
    ]
    assert not any("functional" in c for c in rows["steady"] + rows["base (baseline)"])
    assert sum("±" in c for c in rows["steady"][4:11]) == 7
    bullet = next(line for line in text.splitlines() if line.startswith("- Bimodal:"))
    assert f"at most {BROKEN_FACTOR:g} × chance" in bullet
    assert bullet.endswith(
        "`flaky`: 3 of 5 seeds functional (mean rSum 210.3; broken seeds 2, 3: 0.4)."
    )


def test_metric_cell_gives_each_group_for_a_bimodal_row_only():
    """`metric_cell`, shared by the results, paper-comparison and README tables: mean ± CI
    for a row without a split (None or a NaN that pandas put there), each group's mean
    for a bimodal one, on plain mappings and pandas rows alike."""
    records = {s: _record("flaky", s) for s in range(5)}
    side = {s: {**r["metrics"], "eval_images": r["eval_images"]} for s, r in records.items()}
    split = split_seeds("flaky", side, ("i2t_r1", "rsum"))
    row = {"i2t_r1_mean": 6.0, "i2t_r1_ci": 1.3, "rsum_mean": 126.4, "rsum_ci": 3.0, "n": 5}
    assert metric_cell({**row, "split": None}, "i2t_r1") == "6.0 ± 1.3"
    assert metric_cell({**row, "split": math.nan}, "rsum") == "126.4 ± 3.0"
    assert metric_cell(pd.Series({**row, "split": split}), "i2t_r1") == "10.0; broken: 0.0"
    assert metric_cell({**row, "split": split}, "rsum") == "3 of 5 functional: 210.3; broken: 0.4"
    # A metric the split was not asked for keeps its mean ± CI.
    assert metric_cell({**row, "t2i_r1_mean": 2.0, "t2i_r1_ci": 0.5, "split": split}, "t2i_r1") == (
        "2.0 ± 0.5"
    )
