"""A matrix given as a file (outside the ablation root) runs end to end, report included,
and ``seps-bench report`` and ``export`` take the same file."""

from __future__ import annotations

import json

import pytest

from seps.cli import main

MATRIX = """
name: own-matrix
description: a matrix file kept beside the user's work, not in the ablation root
baseline: code
runs:
  - {id: code, preset: code}
  - {id: code+hrpa, preset: code, set: {hrpa: mean_topk}}
"""


@pytest.mark.slow
def test_a_matrix_file_runs_end_to_end_and_reports(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "mine" / "matrix.yaml"
    path.parent.mkdir()
    path.write_text(MATRIX)
    fast = ["--set", "train.max_steps_per_epoch=2", "--set", "train.synth_images=120"]
    argv = ["run", str(path), "--profile", "smoke", "--no-progress", *fast]
    assert main([*argv, "--results", "results", "--reports", "reports"]) == 0
    out = capsys.readouterr().out
    assert "report: reports/own-matrix.md" in out
    records = sorted((tmp_path / "results" / "own-matrix").glob("*.json"))
    assert len(records) == 2
    report = (tmp_path / "reports" / "own-matrix.md").read_text()
    assert "code+hrpa" in report

    (tmp_path / "reports" / "own-matrix.md").unlink()
    assert main(["report", str(path), "--results", "results", "--reports", "reports"]) == 0
    assert (tmp_path / "reports" / "own-matrix.md").read_text() == report

    capsys.readouterr()
    assert main(["export", str(path), "--results", "results", "--format", "jsonl"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted(r["run_id"] for r in rows) == ["code", "code+hrpa"]
    assert {r["matrix"] for r in rows} == {"own-matrix"}
