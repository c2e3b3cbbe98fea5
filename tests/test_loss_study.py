"""The loss-study matrix end to end (smoke profile): report, plots, and plotted series
that come from the stored per-step records."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from seps.ablations import load_matrix
from seps.cli import main
from seps.report import current_records, load_results
from seps.report.loss_study import CRITERIA, loss_study_section, plot_files

PLOTS = ("keep-ratio", "ratio-curves", "align", "grad-norm")


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    root = tmp_path_factory.mktemp("loss-study")
    results, reports = root / "results", root / "reports"
    code = main(
        [
            "run",
            "loss-study",
            "--profile",
            "smoke",
            "--results",
            str(results),
            "--reports",
            str(reports),
            "--no-progress",
        ]
    )
    assert code == 0
    return results, reports


def _records(results: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((results / "loss-study").glob("*.json"))]


def _cell(records: list[dict], decision: str, crit: str, form: str) -> list[dict]:
    """The records of one ratio cell; the paper default is stored under two run ids
    (``ratio/...`` and ``align/triplet``) with the same key: one run."""
    out, seen = [], set()
    for r in records:
        if (r["key"], r["seed"]) in seen:
            continue
        seen.add((r["key"], r["seed"]))
        h = r["head_config"]
        c = "off" if h["ratio_loss"] == "off" else h["ratio_criterion"]
        if (h["decision"], c, h["ratio_loss"], h["align_loss"]) == (
            decision,
            crit,
            form,
            "triplet",
        ):
            out.append(r)
    return out


def _series(results: Path, reports: Path) -> dict:
    df = load_results(results, "loss-study")
    matrix = load_matrix("loss-study")
    cur, _ = current_records(df[df["run_id"].isin([r.id for r in matrix.runs])])
    _, _, series = loss_study_section(cur, "loss-study", reports)
    return series["smoke"]


def test_report_and_every_plot_exist(study):
    results, reports = study
    records = _records(results)
    assert len(records) == 35 and all(r["status"] == "done" for r in records)
    md = (reports / "loss-study.md").read_text()
    for heading in ("## Loss study", "Table 1: ratio constraint", "Table 2: alignment losses"):
        assert heading in md
    for name in plot_files("loss-study", "smoke"):
        assert (reports / name).stat().st_size > 0
        assert f"]({name})" in md
    assert "decision=topk: the ratio loss is a constant" in md
    assert "decision=gumbel_topk: the ratio loss is a constant" in md
    assert "decision=gumbel_per_patch: the ratio loss acts" in md
    assert "Hardest-negative triplet vs multi-positive InfoNCE" in md


def test_keep_ratio_and_gradient_series_come_from_the_records(study):
    results, reports = study
    records = _records(results)
    series = _series(results, reports)
    for decision in ("topk", "gumbel_topk", "gumbel_per_patch"):
        lines = series["keep-ratio"][decision]["lines"]
        grads = series["grad-norm"][decision]["lines"]
        assert set(lines) == set(CRITERIA)
        for crit in CRITERIA:
            runs = _cell(records, decision, crit, "off" if crit == "off" else "separate")
            assert len(runs) == 1
            log = [s for h in runs[0]["history"] for s in h["steps_log"]]
            want = [float(np.mean(list(s["keep_ratio"].values()))) for s in log]
            x, y = lines[crit]
            assert x == list(range(len(log)))
            np.testing.assert_allclose(y, want, rtol=1e-12)
            np.testing.assert_allclose(
                grads[f"{crit} (ratio loss only)"][1], [s["ratio_grad_norm"] for s in log]
            )
            np.testing.assert_allclose(grads[crit][1], [s["selector_grad_norm"] for s in log])
        assert series["keep-ratio"][decision]["target"] == 0.5
    # The constancy is in the records themselves, not only in the text.
    for r in _cell(records, "topk", "mse", "unified"):
        log = [s for h in r["history"] for s in h["steps_log"]]
        assert {s["ratio"] for s in log} == {0.25}
        assert {s["ratio_grad_norm"] for s in log} == {0.0}


def test_ratio_curve_points_and_alignment_bars_come_from_the_records(study):
    results, reports = study
    records = _records(results)
    series = _series(results, reports)
    for crit in ("mse", "l1", "ce"):
        pts = series["ratio-curves"][crit]["points"]["gumbel_per_patch"]
        (run,) = _cell(records, "gumbel_per_patch", crit, "separate")
        xs, ys = [], []
        for h in run["history"]:
            for s in h["steps_log"]:
                for b, term in s["ratio_parts"].items():
                    xs.append(s["keep_ratio"][b])
                    ys.append(term / run["head_config"][f"lambda_{b}"])
        np.testing.assert_allclose(pts[0], xs)
        np.testing.assert_allclose(pts[1], ys)
    bars = series["align"]["rsum"]
    by_kind: dict[str, dict[int, float]] = {}
    for r in records:
        h = r["head_config"]
        if (h["decision"], h["ratio_loss"], h["ratio_criterion"]) == (
            "gumbel_topk",
            "separate",
            "mse",
        ):
            by_kind.setdefault(h["align_loss"], {})[r["seed"]] = r["metrics"]["rsum"]
    assert set(bars) == set(by_kind)
    for kind, per_seed in by_kind.items():
        assert bars[kind] == pytest.approx(np.mean(list(per_seed.values())))


def test_report_regenerates_byte_identically(study):
    results, reports = study
    before = {p.name: p.read_bytes() for p in reports.iterdir()}
    assert main(["report", "loss-study", "--results", str(results), "--reports", str(reports)]) == 0
    after = {p.name: p.read_bytes() for p in reports.iterdir()}
    assert before == after
