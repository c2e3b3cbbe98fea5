"""The rho and (l1, l2) grid plots of swept matrices (seps/report/grid_plots.py).

No test trains: records are the hand-made ones of ``test_report`` retargeted at the
repository's ``selection-ratio``, ``coefficients`` and ``seven-differences`` matrices
(copied into a temporary ablation root), with rSum = 370 + 6k per record. ``coefficients``
sweeps (l1, l2) once per decision (gumbel_per_patch, topk).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest
from ablation_roots import make_ablation_root
from report_records import T975_DF2, _record, _write

from seps.experiments.definitions import RunSpec, load_matrix
from seps.report import (
    grid_runs,
    load_paper_figures,
    load_results,
    paper_reference,
    plot_grid,
    plot_rho,
    rho_runs,
    summarise,
    write_report,
)
from seps.report.bimodal import Split

MATRICES = ("selection-ratio", "coefficients", "seven-differences")
#: rho -> per-seed k of selection-ratio (seeds 0, 1, 2): peaks at rho 0.5. rho 0.9 has one
#: seed only and rho 0.8 no record at all.
RHO_K = {
    0.1: [0.0, 1.0, -1.0],
    0.2: [1.0, 2.0, 0.0],
    0.3: [2.0, 3.0, 1.0],
    0.4: [3.0, 3.5, 2.5],
    0.5: [4.0, 5.0, 3.0],
    0.6: [3.0, 4.0, 2.0],
    0.7: [2.0, 2.0, 2.0],
    0.9: [1.0],
}
#: (l1, l2) -> per-seed k of coefficients under gumbel_per_patch. (1, 0.25) has no
#: record, (0.5, 1) only a failed one, (0.25, 1) one seed.
GRID_K = {
    (l1, l2): [l1 + l2, l1 + l2 + 1.0, l1 + l2 - 1.0]
    for l1 in (0.25, 0.5, 1.0)
    for l2 in (0.25, 0.5, 0.75, 1.0)
    if (l1, l2) not in ((1.0, 0.25), (0.5, 1.0), (0.25, 1.0))
}
GRID_K[(0.25, 1.0)] = [2.0]
#: The same under topk, where the coefficients cannot act: every cell alike, and
#: (0.25, 0.25) without a record.
TOPK_K = {
    (l1, l2): [3.0, 4.0, 2.0]
    for l1 in (0.25, 0.5, 1.0)
    for l2 in (0.25, 0.5, 0.75, 1.0)
    if (l1, l2) != (0.25, 0.25)
}
GUMBEL, TOPK = "decision=gumbel_per_patch", "decision=topk"


def _retarget(matrix: str, run: RunSpec, seed: int, k: float, **kw: Any) -> dict[str, Any]:
    """A record of ``test_report`` made a record of ``run`` in ``matrix``."""
    rec = _record("base", seed, k=k, **kw)
    rec.update(matrix=matrix, run_id=run.id, describe=run.describe(), preset=run.preset)
    rec["head_config"] = {**rec["head_config"], **run.set}
    return rec


def _file(run_id: str, key: str, seed: int) -> str:
    """The record's file name as the runner slugs it (``/`` and ``,`` become ``_``)."""
    return f"{re.sub(r'[^A-Za-z0-9_.=+-]+', '_', run_id)}-{key}-s{seed}.json"


def _store(
    results: Path, root: Path, name: str, ks: dict[str, list[float]], profile: str = "quick"
) -> None:
    matrix = load_matrix(name, root)
    for run_id, per_seed in ks.items():
        for seed, k in enumerate(per_seed):
            rec = _retarget(name, matrix.run(run_id), seed, k, profile=profile)
            _write(results / name / _file(run_id, f"{profile}-k0", seed), rec)


def _coefficient_ks(decision: str, ks: dict[tuple[float, float], list[float]]) -> dict:
    return {f"{decision}/l1={a:g},l2={b:g}": k for (a, b), k in ks.items()}


def make_env(tmp_path: Path) -> dict[str, Path]:
    """The temporary ablation root and results of these tests (also usable outside
    pytest, e.g. to look at the PNGs)."""
    root = make_ablation_root(tmp_path / "ablations", repo_matrices=tuple(MATRICES))
    results = tmp_path / "results"
    _store(results, root, "selection-ratio", {f"rho={r}": k for r, k in RHO_K.items()})
    _store(results, root, "coefficients", _coefficient_ks("gumbel_per_patch", GRID_K))
    _store(results, root, "coefficients", _coefficient_ks("topk", TOPK_K))
    coefficients = load_matrix("coefficients", root)
    run = coefficients.run("gumbel_per_patch/l1=0.5,l2=1")
    failed = _retarget("coefficients", run, 0, 0.0, status="failed", error="boom")
    _write(results / "coefficients" / _file(run.id, "quick-k0", 0), failed)
    _store(results, root, "seven-differences", {"code": [0.0, 1.0, -1.0], "laps": [-2.0] * 3})
    return {"root": root, "results": results, "reports": tmp_path / "reports"}


@pytest.fixture()
def env(tmp_path: Path) -> dict[str, Path]:
    return make_env(tmp_path)


def _report(env: dict[str, Path], name: str, reports: Path | None = None) -> str:
    return write_report(
        name, env["results"], reports or env["reports"], root=env["root"]
    ).read_text()


def _summary(env: dict[str, Path], name: str) -> Any:
    matrix = load_matrix(name, env["root"])
    return summarise(load_results(env["results"]), matrix), matrix


def _mean_ci(ks: list[float]) -> tuple[float, float]:
    """Mean rSum and 95% CI half-width of records with offsets ``ks`` (3 seeds or 1)."""
    rsum = [370.0 + 6.0 * k for k in ks]
    mean = sum(rsum) / len(rsum)
    if len(rsum) == 1:
        return mean, math.nan
    sd = math.sqrt(sum((r - mean) ** 2 for r in rsum) / (len(rsum) - 1))
    return mean, T975_DF2 * sd / math.sqrt(len(rsum))


# ------------------------------------------------------------------------ detection
def test_sweeps_are_detected_from_the_runs_not_the_matrix_name(env):
    assert rho_runs(load_matrix("selection-ratio", env["root"])) == {
        f"rho={r / 10:g}": r / 10 for r in range(1, 10)
    }
    coefficients = grid_runs(load_matrix("coefficients", env["root"]))
    assert len(coefficients) == 24
    assert coefficients["gumbel_per_patch/l1=0.25,l2=0.75"] == (GUMBEL, 0.25, 0.75)
    assert coefficients["topk/l1=1,l2=1"] == (TOPK, 1.0, 1.0)
    seven = load_matrix("seven-differences", env["root"])
    assert rho_runs(seven) is None and grid_runs(seven) is None
    assert rho_runs(load_matrix("coefficients", env["root"])) is None
    assert grid_runs(load_matrix("selection-ratio", env["root"])) is None

    # Renamed, it is still a sweep; one run differing in anything else makes it none.
    text = (env["root"] / "matrices" / "selection-ratio.yaml").read_text()
    (env["root"] / "matrices" / "anything.yaml").write_text(
        text.replace("name: selection-ratio", "name: anything")
    )
    assert rho_runs(load_matrix("anything", env["root"])) is not None
    (env["root"] / "matrices" / "mixed.yaml").write_text(
        "name: mixed\nbaseline: a\nruns:\n"
        "  - {id: a, preset: paper, set: {sparse_ratio: 0.3}}\n"
        "  - {id: b, preset: paper, set: {sparse_ratio: 0.5}, train: {epochs: 3}}\n"
        "  - {id: c, preset: paper, set: {lambda_sparse: 0.5, lambda_dense: 0.5}}\n"
        "  - {id: d, preset: paper, set: {lambda_sparse: 1.0, lambda_dense: 0.5}}\n"
    )
    assert rho_runs(load_matrix("mixed", env["root"])) is None
    assert grid_runs(load_matrix("mixed", env["root"])) is None
    # A single column of l2 is a line, not a 2-D grid.
    (env["root"] / "matrices" / "line.yaml").write_text(
        "name: line\nbaseline: c\nruns:\n"
        "  - {id: c, preset: paper, set: {lambda_sparse: 0.5, lambda_dense: 0.5}}\n"
        "  - {id: d, preset: paper, set: {lambda_sparse: 1.0, lambda_dense: 0.5}}\n"
    )
    assert grid_runs(load_matrix("line", env["root"])) is None
    # Runs that differ only in l1, l2 form one group, named "".
    (env["root"] / "matrices" / "plain.yaml").write_text(
        "name: plain\nbaseline: a\nruns:\n"
        "  - grid: {preset: [paper], lambda_sparse: [0.5, 1.0], lambda_dense: [0.5, 1.0]}\n"
        "    id: 'l1={lambda_sparse:g},l2={lambda_dense:g}'\n"
        "  - {id: a, preset: paper, set: {lambda_sparse: 0.25, lambda_dense: 0.25}}\n"
    )
    assert set(grid_runs(load_matrix("plain", env["root"])).values()) == {
        ("", 0.5, 0.5),
        ("", 0.5, 1.0),
        ("", 1.0, 0.5),
        ("", 1.0, 1.0),
        ("", 0.25, 0.25),
    }
    # Every group must be a 2-D grid: a decision with a single run makes none.
    (env["root"] / "matrices" / "lonely.yaml").write_text(
        "name: lonely\nbaseline: c\nruns:\n"
        "  - grid: {preset: [paper], lambda_sparse: [0.5, 1.0], lambda_dense: [0.5, 1.0]}\n"
        "    id: 'l1={lambda_sparse:g},l2={lambda_dense:g}'\n"
        "  - {id: c, preset: paper, set: {decision: topk, lambda_sparse: 1, lambda_dense: 1}}\n"
    )
    assert grid_runs(load_matrix("lonely", env["root"])) is None


# ------------------------------------------------------------------------ the plots
def test_selection_ratio_report_writes_and_links_the_rho_plot(env):
    text = _report(env, "selection-ratio")
    assert (env["reports"] / "selection-ratio-rho.png").stat().st_size > 1000
    assert "(selection-ratio-rho.png)" in text.split("\n## Plots\n")[1]
    assert not (env["reports"] / "selection-ratio-grid.png").exists()
    assert "-grid.png" not in text


def test_rho_plot_draws_the_summary_means_cis_and_the_paper_curve(env, tmp_path):
    summary, matrix = _summary(env, "selection-ratio")
    figures = load_paper_figures(env["root"])
    drawn = plot_rho(summary, matrix, figures, tmp_path / "rho.png", "measured here (synthetic)")
    measured = drawn["measured"]["quick"]
    # Sorted by rho; rho 0.8 has no record, so no point.
    assert measured["rho"] == list(RHO_K)
    expected = [_mean_ci(k) for k in RHO_K.values()]
    assert measured["rsum"] == pytest.approx([m for m, _ in expected])
    assert measured["ci"][:-1] == pytest.approx([c for _, c in expected[:-1]])
    assert math.isnan(measured["ci"][-1])  # one seed: no error bar
    # The paper's curve covers every run of the matrix, read through paper_reference.
    assert drawn["paper"]["rho"] == [r / 10 for r in range(1, 10)]
    assert drawn["paper"]["rsum"] == [
        paper_reference(run, figures).values["rsum"] for run in matrix.runs
    ]
    assert drawn["paper"]["rsum"][4] == 564.3


def test_coefficients_report_writes_and_links_the_grid_plot(env):
    text = _report(env, "coefficients")
    assert (env["reports"] / "coefficients-grid.png").stat().st_size > 1000
    assert "(coefficients-grid.png)" in text.split("\n## Plots\n")[1]
    assert not (env["reports"] / "coefficients-rho.png").exists()
    # The paper's rows stand beside both decisions' runs, saying under which it measured.
    paper = text.split("\n## Reported by the paper\n")[1]
    note = "measured by the paper under its own decision, gumbel_topk"
    assert paper.count(note) == 22  # the 24 runs but the two without any record


def test_grid_plot_annotates_cells_and_marks_missing_ones_without_crashing(env, tmp_path):
    summary, matrix = _summary(env, "coefficients")
    figures = load_paper_figures(env["root"])
    drawn = plot_grid(summary, matrix, figures, tmp_path / "grid.png")
    quick = drawn["measured"]["quick"][GUMBEL]
    assert set(quick["values"]) == set(GRID_K)  # the two cells without a completed seed
    mean, half = _mean_ci(GRID_K[(0.5, 0.75)])
    assert quick["values"][(0.5, 0.75)] == pytest.approx(mean)
    assert quick["labels"][(0.5, 0.75)] == f"{mean:.1f} ± {half:.1f}\nn = 3"
    assert quick["labels"][(0.25, 1.0)] == f"{370 + 12:.1f} ± n/a\nn = 1"
    assert quick["labels"][(1.0, 0.25)] == "no records"
    assert quick["labels"][(0.5, 1.0)] == "all seeds\nfailed"
    # The paper's map: its twelve reported cells on a colour scale of their own.
    paper = drawn["paper"]
    assert paper["values"][(0.5, 0.5)] == 564.3 and paper["labels"][(1.0, 0.25)] == "540.9"
    assert paper["clim"] == (540.9, 564.3)
    assert quick["clim"] == pytest.approx((min(quick["values"].values()), 370 + 6 * 2.0))


def test_grid_plot_draws_one_measured_map_per_decision_and_the_paper_once(env, tmp_path):
    summary, matrix = _summary(env, "coefficients")
    figures = load_paper_figures(env["root"])
    drawn = plot_grid(summary, matrix, figures, tmp_path / "grid.png", "measured here (x)")
    assert list(drawn["measured"]) == ["quick"]
    panels = drawn["measured"]["quick"]
    assert list(panels) == [GUMBEL, TOPK]  # the matrix's order
    # topk: every cell the same mean (the coefficients cannot act), on a flat scale of its
    # own; the cell without a record hatched, though gumbel_per_patch has it. The title
    # says how far apart the colours are, beside the largest CI half-width.
    topk = panels[TOPK]
    mean, half = _mean_ci(TOPK_K[(1.0, 1.0)])
    assert topk["title"] == (
        "measured here (x), profile quick\ndecision=topk\nmean rSum ± 95% CI half-width, "
        f"n seeds\ncolours span 0.0 rSum; CI half-widths up to {half:.1f}"
    )
    gumbel = panels[GUMBEL]
    span = max(gumbel["values"].values()) - min(gumbel["values"].values())
    assert "decision=gumbel_per_patch\n" in gumbel["title"]
    assert f"\ncolours span {span:.1f} rSum; CI half-widths up to " in gumbel["title"]
    assert set(topk["values"]) == set(TOPK_K)
    assert list(topk["values"].values()) == pytest.approx([mean] * len(TOPK_K))
    assert topk["clim"] == pytest.approx((mean - 0.5, mean + 0.5))
    assert topk["labels"][(0.25, 0.25)] == "no records"
    assert topk["labels"][(1.0, 0.25)] == f"{mean:.1f} ± {half:.1f}\nn = 3"
    assert panels[GUMBEL]["labels"][(1.0, 0.25)] == "no records"
    # One paper map, noting the decision the paper measured its grid under.
    assert drawn["paper"]["values"][(0.5, 0.5)] == 564.3
    assert drawn["paper"]["title"].endswith(
        "\nmeasured by the paper under its own decision, gumbel_topk"
    )


def test_grid_plot_stacks_profiles_and_hatches_a_group_without_records(env, tmp_path):
    # A second profile with topk records only: its gumbel_per_patch map is all hatched.
    _store(env["results"], env["root"], "coefficients", _coefficient_ks("topk", TOPK_K), "wide")
    summary, matrix = _summary(env, "coefficients")
    figures = load_paper_figures(env["root"])
    drawn = plot_grid(summary, matrix, figures, tmp_path / "grid.png")
    assert list(drawn["measured"]) == ["quick", "wide"]
    wide = drawn["measured"]["wide"]
    assert wide[GUMBEL]["values"] == {}
    assert set(wide[GUMBEL]["labels"].values()) == {"no records"}
    assert set(wide[TOPK]["values"]) == set(TOPK_K)
    assert "profile wide\ndecision=topk" in wide[TOPK]["title"]


def test_seven_differences_gets_neither_sweep_plot(env):
    reports = env["reports"]
    reports.mkdir()
    # Stale files of an earlier definition are removed, not left beside the report.
    for stale in ("seven-differences-rho.png", "seven-differences-grid.png"):
        (reports / stale).write_bytes(b"stale")
    text = _report(env, "seven-differences")
    assert not (reports / "seven-differences-rho.png").exists()
    assert not (reports / "seven-differences-grid.png").exists()
    plots = text.split("\n## Plots\n")[1].split("\n## ")[0]
    assert [line for line in plots.splitlines() if line.startswith("![")] == [
        "![Δ rSum per variant with 95% CI](seven-differences-delta.png)",
        "![training curves](seven-differences-curves.png)",
    ]


def test_sweep_without_a_completed_seed_has_no_plot(env, tmp_path):
    results = tmp_path / "only-failed"
    matrix = load_matrix("selection-ratio", env["root"])
    rec = _retarget("selection-ratio", matrix.run("rho=0.5"), 0, 0.0, status="failed", error="x")
    _write(results / "selection-ratio" / "rho=0.5-k0-s0.json", rec)
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "selection-ratio-rho.png").write_bytes(b"stale")
    path = write_report("selection-ratio", results, reports, root=env["root"])
    assert not (reports / "selection-ratio-rho.png").exists()
    assert "-rho.png" not in path.read_text()


def test_same_records_give_byte_identical_sweep_plots(env, tmp_path):
    for name, plot in (("selection-ratio", "rho"), ("coefficients", "grid")):
        first, second = tmp_path / f"{name}-a", tmp_path / f"{name}-b"
        assert _report(env, name, first) == _report(env, name, second)
        png = f"{name}-{plot}.png"
        assert (first / png).read_bytes() == (second / png).read_bytes(), png


def test_sweep_plots_give_a_bimodal_cell_each_groups_mean_and_no_interval(env, tmp_path):
    """A bimodal run (seps/report/bimodal.py) in a sweep: its heat-map cell gives each
    group's mean instead of a mean ± CI, and its point on the rho curve has no error bar;
    the other cells and points keep theirs."""
    split = Split("x", (0, 1), (2,), 400.0, 1.0)
    summary, matrix = _summary(env, "coefficients")
    cell = next(r for r, g in grid_runs(matrix).items() if g == (GUMBEL, 0.5, 0.75))
    summary["split"] = [split if r == cell else None for r in summary["run_id"]]
    quick = plot_grid(summary, matrix, {}, tmp_path / "grid.png")["measured"]["quick"][GUMBEL]
    assert quick["labels"][(0.5, 0.75)] == "2 of 3 functional:\n400.0; broken: 1.0\nn = 3"
    mean, half = _mean_ci(GRID_K[(0.5, 0.5)])
    assert quick["labels"][(0.5, 0.5)] == f"{mean:.1f} ± {half:.1f}\nn = 3"

    summary, matrix = _summary(env, "selection-ratio")
    point = next(r for r, rho in rho_runs(matrix).items() if rho == 0.5)
    summary["split"] = [split if r == point else None for r in summary["run_id"]]
    measured = plot_rho(summary, matrix, {}, tmp_path / "rho.png", "x")["measured"]["quick"]
    ci = dict(zip(measured["rho"], measured["ci"], strict=True))
    assert math.isnan(ci[0.5])
    assert ci[0.4] == pytest.approx(_mean_ci(RHO_K[0.4])[1])
