"""The `differences` report section (seps.report.differences): each documented difference
flipped on `code` and reverted in `paper`, both as the effect of adopting the paper's
choice, each against its own preset."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from ablation_roots import make_ablation_root

from seps.experiments.definitions import load_matrix
from seps.report import load_results, write_report
from seps.report.differences import (
    difference_cells,
    difference_comparisons,
    difference_frozen,
    difference_section,
)
from seps.report.records import current_records
from seps.report.render import ReportData
from seps.runs.runner import SCHEMA

REPO = Path(__file__).resolve().parents[1]

MATRIX = {
    "name": "both-ways",
    "description": "flips on code and reverts in paper",
    "baseline": "code",
    "sections": ["differences"],
    "runs": [
        {"id": "code", "preset": "code"},
        {"expand": "flip", "from": "code", "to": "paper", "over": "differences"},
        {"id": "paper", "preset": "paper"},
        {"expand": "revert", "from": "paper", "to": "code", "over": "differences"},
    ],
}
#: rSum per (run, seed). The paper's scoring helps in both contexts (+2 on code, paper −
#: paper-scoring = 300 - 296 = +4); hrpa's revert has no record; ratio_loss's flip is
#: bit-identical to code (the constant ratio loss under top-K).
RSUM = {
    "code": [200.0, 210.0, 220.0],
    "code+scoring": [202.0, 212.5, 221.5],
    "code+hrpa": [199.0, 209.0, 221.0],
    "code+ratio_loss": [200.0, 210.0, 220.0],
    "paper": [300.0, 310.0, 320.0],
    "paper-scoring": [296.0, 306.5, 315.5],
}
HEAD = {
    "code": {"scoring": "code", "hrpa": "mean", "ratio_loss": "unified", "decision": "topk"},
    "paper": {"scoring": "paper", "hrpa": "mean_topk", "ratio_loss": "separate"},
}


def _record(run_id: str, seed: int, rsum: float) -> dict[str, Any]:
    preset = "paper" if run_id.startswith("paper") else "code"
    head = dict(HEAD["code"])
    if preset == "paper":
        head.update(HEAD["paper"], decision="gumbel_topk")
    sep = "+" if preset == "code" else "-"
    diff = run_id.partition(sep)[2] or None
    if diff:
        head[diff] = HEAD["paper" if preset == "code" else "code"][diff]
    recalls = {f"{d}_r{k}": rsum / 6 for d in ("i2t", "t2i") for k in (1, 5, 10)}
    return {
        "schema": SCHEMA,
        "matrix": "both-ways",
        "profile": "standard",
        "run_id": run_id,
        "describe": "(preset)" if not diff else f"{diff}={head[diff]}",
        "preset": preset,
        "difference": diff,
        "seed": seed,
        "key": f"{run_id}-k",
        "status": "done",
        "head_config": head,
        "train_config": {"dataset": "synthetic", "dense_source": "candidate", "seed": seed},
        # Metrics carry the rSum itself, so a bit-identical run compares equal.
        "metrics": {**recalls, "rsum": rsum},
        "dense_source": "candidate",
        "started": 1.0,
        "environment": {},
    }


@pytest.fixture()
def env(tmp_path: Path) -> dict[str, Path]:
    root = make_ablation_root(tmp_path / "ablations", {"both-ways": MATRIX})
    results = tmp_path / "results"
    for run_id, values in RSUM.items():
        for seed, rsum in enumerate(values):
            path = results / "both-ways" / f"{run_id}-k-s{seed}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(_record(run_id, seed, rsum)))
    return {"root": root, "results": results, "reports": tmp_path / "reports"}


def _current(env) -> Any:
    return current_records(load_results(env["results"], "both-ways"))[0]


def test_both_directions_measure_adopting_the_papers_choice(env):
    cells = difference_cells(_current(env))["standard"]
    flip, revert = cells["scoring"]["code"], cells["scoring"]["paper"]
    # code+scoring - code: +2, +2.5, +1.5; paper - paper-scoring: +4, +3.5, +4.5.
    assert flip.mean == pytest.approx(2.0) and flip.n == 3
    assert revert.mean == pytest.approx(4.0) and revert.n == 3


def test_differences_follow_the_differences_file_and_missing_sides_stay_empty(env):
    cells = difference_cells(_current(env))["standard"]
    assert list(cells) == ["scoring", "hrpa", "ratio_loss"]  # differences.yaml order
    assert set(cells["hrpa"]) == {"code"}  # no paper-hrpa record: no revert cell
    assert cells["ratio_loss"]["code"].identical


def test_a_revert_is_compared_with_its_own_preset_and_a_flip_with_the_baseline(env):
    matrix = load_matrix("both-ways", env["root"])
    assert matrix.reference("paper-scoring") == "paper"
    assert matrix.reference("code+scoring") == "code"
    assert matrix.reference("paper") == "code"  # a preset run: the baseline
    data = ReportData.of(matrix, load_results(env["results"], "both-ways"))
    rows = {r["run_id"]: r for r in data.summary.to_dict("records")}
    # paper-scoring - paper: -4, -3.5, -4.5 (the table's sign: variant - reference).
    assert rows["paper-scoring"]["reference"] == "paper"
    assert rows["paper-scoring"]["delta_rsum_mean"] == pytest.approx(-4.0)
    assert rows["code+scoring"]["reference"] is None


def test_the_sections_tests_are_the_results_tables_own(env):
    data = ReportData.of(
        load_matrix("both-ways", env["root"]), load_results(env["results"], "both-ways")
    )
    section = {c.key for c in difference_comparisons(data.current) if c.testable}
    table = {c.key for c in data.summary["comparison"] if c is not None and c.testable}
    # Flips of scoring and hrpa (ratio_loss: identical, not a test), the revert of
    # scoring; the table adds paper vs code.
    assert len(section) == 3 and section <= table
    assert data.family.size == len(table) == 4


def test_section_table_reads_the_cells_and_the_plot_draws_them(env, tmp_path):
    cur = _current(env)
    lines, plots, drawn = difference_section(cur, "m", tmp_path, family=None)
    text = "\n".join(lines)
    rows = {ln.split("|")[1].strip(): ln for ln in text.splitlines() if ln.startswith("| `")}
    assert "+2.0 ± " in rows["`scoring`"] and "+4.0 ± " in rows["`scoring`"]
    assert "large" in rows["`scoring`"]  # seed 004's claimed impact
    assert "no record" in rows["`hrpa`"]
    assert "identical" in rows["`ratio_loss`"]
    assert (tmp_path / "m-differences.png").stat().st_size > 0 and plots
    assert drawn["standard"]["code"][0] == pytest.approx(2.0)
    assert drawn["standard"]["paper"][0] == pytest.approx(4.0)
    assert math.isnan(drawn["standard"]["paper"][1])
    assert "Each difference in both directions" in text


def test_report_shows_the_section_and_keeps_reverts_out_of_the_claimed_impact_table(env):
    path = write_report("both-ways", env["results"], env["reports"], env["root"])
    text = path.read_text()
    assert "## Each difference in both directions" in text
    impact = text[text.index("Claimed impact of each documented difference") :]
    impact = impact[: impact.index("\n\n", impact.index("|"))]
    assert "code+scoring" in impact
    assert "paper-scoring" not in impact  # a revert against `code` measures six changes
    # Holm over the report's 4 tests: scoring's flip (raw p 0.020, x2) and revert (raw p
    # 0.005, x3) both stay below 0.05; hrpa and ratio_loss have no revert record.
    assert "| -4.0 ± 1.2 vs paper " in text  # the results table: paper-scoring - paper
    section = text[text.index("## Each difference in both directions") :]
    assert "with the same sign (the paper's choice moves rSum the same way" in section
    assert "whatever the rest of the head): `scoring`." in section
    assert "- Not yet measured in both contexts: `hrpa`, `ratio_loss`." in section


def test_section_without_flip_or_revert_records_draws_nothing(env, tmp_path):
    cur = _current(env)
    only_presets = cur[cur["difference"].isna()]
    (tmp_path / "m-differences.png").write_text("stale")
    assert difference_section(only_presets, "m", tmp_path, family=None) == ([], {}, {})
    assert not (tmp_path / "m-differences.png").exists()


def test_a_cell_whose_learned_part_did_not_train_is_not_testable_in_the_section(env):
    """The scorecard's rule (`seps.report.frozen`) in the section's own table: the flip
    of `scoring` adds a score predictor that never moved, so its cell is not a test,
    whatever its p; the revert, where the predictor trained, keeps its verdict."""
    folder = env["results"] / "both-ways"
    for path in folder.glob("*.json"):
        rec = json.loads(path.read_text())
        moved = {"image_projection": {"relative_change": 0.05, "grad_share": 0.5}}
        if rec["head_config"]["scoring"] == "paper":
            still = rec["run_id"] == "code+scoring"
            moved["score_predictor"] = {
                "relative_change": 0.0 if still else 0.05,
                "grad_share": 0.1,
            }
        rec["movement"] = moved
        path.write_text(json.dumps(rec))
    frozen = difference_frozen(_current(env))
    assert set(frozen) == {"standard"} and set(frozen["standard"]) == {"scoring"}
    assert "score_predictor at most 0%" in frozen["standard"]["scoring"]["code"]
    assert "paper" not in frozen["standard"]["scoring"]
    path = write_report("both-ways", env["results"], env["reports"], env["root"])
    section = path.read_text().split("## Each difference in both directions", 1)[1]
    (row,) = [ln for ln in section.splitlines() if ln.startswith("| `scoring`")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[4] == "not testable here: the module did not train"
    assert cells[7] != cells[4] and "+4.0 ± " in cells[5]
    assert "- Not testable here (the learned part" in section


def test_forest_plot_notes_say_no_effect_possible_only_where_the_configs_show_why():
    from seps.report.compare import Comparison
    from seps.report.differences import _point_note

    def comp(**kw):
        return Comparison(mean=0.0, half=1.0, p=0.5, n=5, key=None, **kw)

    assert _point_note(comp()) is None
    assert _point_note(comp(identical=True, reason="cannot act")) == "identical: no effect possible"
    assert _point_note(comp(identical=True)) == "identical to the other side"
    assert _point_note(comp(blind="no text reaches it")) == "text-blind: not measured"
    assert _point_note(comp(frozen="no gradient")) == "did not train: not a test"
    single = Comparison(mean=1.0, half=math.nan, p=math.nan, n=1, key=None)
    assert _point_note(single) == "1 seed, no CI"
