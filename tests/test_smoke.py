"""The main job end to end: the seven-differences matrix at smoke size, then its report."""

from __future__ import annotations

import re

import pytest

from seps.cli import main

pytestmark = pytest.mark.slow  # end-to-end: see tests/conftest.py


def test_smoke_seven_differences_matrix_and_report(tmp_path, capsys):
    results, reports = tmp_path / "results", tmp_path / "reports"
    args = [
        "run",
        "seven-differences",
        "--profile",
        "smoke",
        "--results",
        str(results),
        "--reports",
        str(reports),
        "--data-path",
        str(tmp_path / "synth"),
        "--device",
        "cpu",
        "--no-progress",
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "17 runs done, 0 failed" in out  # 16 variants and the laps reference
    report = (reports / "seven-differences.md").read_text()
    for section in (
        "## Protocol",
        "## Results",
        "## Reported by the paper",
        "## What this run shows",
        "## Cost",
    ):
        assert section in report
    table = [
        line
        for line in report.splitlines()
        if line.startswith("| code") or line.startswith("| paper")
    ]
    ids = {line.split("|")[1].strip().removesuffix(" (baseline)") for line in table}
    assert {"code", "paper", "code+scoring", "paper-ratio_loss"} <= ids
    assert re.search(r"\| code \(baseline\) .*\| baseline", report)
    assert (reports / "seven-differences-delta.png").stat().st_size > 1000
    # A second invocation skips every stored run and regenerates the same report bytes.
    assert main(args) == 0
    assert (reports / "seven-differences.md").read_text() == report
