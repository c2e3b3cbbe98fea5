"""One matrix's report: ``reports/<matrix>.md`` and its plots, from stored records alone.

:func:`write_report` loads the matrix's records once, derives the current records, the
summary and the report's one correction family once (:class:`ReportData`: every paired
test of the results table and of the matrix's extra sections, Holm-corrected together),
draws the plots and the extra sections from them, and writes the markdown of
:func:`render_report` atomically. No clock is read and rows follow the matrix's run
order, so the same records give the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import pandas as pd

from ..experiments.definitions import Matrix, load_matrix
from ..io.store import atomic_write_text
from ..versioning.version import check_versions
from .chance import at_chance_runs, chance_lines
from .collapse import collapsed_lines, collapsed_runs, plot_collapsed
from .compare import Comparison, Family, family_of
from .differences import difference_comparisons, difference_section
from .grid_plots import measured_text, plot_grid, plot_rho
from .looks import hold_to_looks
from .loss_study import loss_study_comparisons, loss_study_section
from .paper import load_claims, load_paper_figures, paper_sections
from .plots import plot_curves, plot_delta
from .prose import (
    cost_lines,
    dense_header_lines,
    failed_lines,
    findings_lines,
    mixes_dense,
    other_lines,
    protocol_lines,
    results_table,
)
from .protocols import protocol_comparisons, protocol_section
from .records import current_records, load_results, machines_line, profiles, runs_of
from .scorecard import controls_report_section
from .summary import summarise_current, summary_comparisons, with_family
from .versions import version_banner, version_counts, version_line
from .world_card import world_lines

#: The line every generated report carries in its header (:func:`render_report`).
GENERATED_LINE = "Regenerated from the stored run records by `seps-bench report "


class Section(NamedTuple):
    """An extra section of a report: ``comparisons(current records)`` lists the paired
    tests it will print (they join the report's family); ``render(current records,
    matrix name, report folder, family) -> (markdown lines, plots, plotted series)``,
    also given ``root=`` (the definitions folder) when ``needs_root`` and ``results=``
    (the result store, for a section that reads other matrices' records too) when
    ``needs_results``; ``comparisons`` is given ``root=`` when ``needs_root``."""

    comparisons: Callable[..., list[Comparison]]
    render: Callable[..., tuple[list[str], Any, Any]]
    needs_root: bool = False
    needs_results: bool = False


#: Extra sections a matrix asks for with ``sections: [...]`` (see
#: :data:`seps.experiments.definitions.REPORT_SECTIONS`).
SECTIONS: dict[str, Section] = {
    # The scorecard's controls (claims.yaml, group: controls): their own Holm family.
    "controls": Section(lambda current, root=None: [], controls_report_section, needs_root=True),
    # With a sequential design (sequential.yaml) the section shows its decisions, which
    # read the design's every matrix: the store, not only this matrix's records.
    "differences": Section(
        difference_comparisons, difference_section, needs_root=True, needs_results=True
    ),
    "loss-study": Section(loss_study_comparisons, loss_study_section),
    "protocols": Section(protocol_comparisons, protocol_section),
}


@dataclass(frozen=True, eq=False)
class ReportData:
    """Everything a report shows, computed once from the frame of the matrix's records.

    ``records``: every row loaded for the matrix (runs no longer in the matrix included,
    to be named as unused); ``current``/``superseded``: the matrix's runs split by
    :func:`~seps.report.records.current_records`; ``summary``: the per-(profile, run)
    statistics of the current records that belong to this matrix; ``family``: every
    paired test of the report (results table and extra sections), corrected together.
    """

    matrix: Matrix
    records: pd.DataFrame
    current: pd.DataFrame
    superseded: pd.DataFrame
    summary: pd.DataFrame
    family: Family

    @classmethod
    def of(cls, matrix: Matrix, records: pd.DataFrame, root: Path | None = None) -> ReportData:
        """The report data of ``matrix`` from a frame of :func:`load_results` (``root``:
        the definitions folder, for sections that read it)."""
        current, superseded = current_records(runs_of(records, matrix), matrix)
        # A record names its matrix; only records of this one enter the statistics (the
        # others, copied into the folder by hand, are still counted and listed).
        own = current[current["matrix"] == matrix.name] if len(current) else current
        summary = summarise_current(own, matrix)
        tests = summary_comparisons(summary)
        for name in matrix.sections:
            section = SECTIONS[name]
            tests += section.comparisons(current, **({"root": root} if section.needs_root else {}))
        family = family_of(tests)
        return cls(matrix, records, current, superseded, with_family(summary, family), family)


def _reference_note(summary: pd.DataFrame) -> str:
    """How reverts are compared, for a summary that has any
    (:meth:`~seps.experiments.definitions.Matrix.reference`)."""
    if summary.empty or summary["reference"].isna().all():
        return ""
    return (
        " (a run that reverts one difference of another preset, e.g. `paper-X`: to that "
        "preset's own run, named in its Δ cell as `vs <run>`; against the baseline it "
        "would measure every other difference too)"
    )


def _versioned(cur: pd.DataFrame) -> pd.DataFrame:
    """The records whose code version can be known: all but the unreadable files (named
    under "Failed runs"), which carry none."""
    return cur[cur["status"] != "unreadable"] if len(cur) else cur


def render_report(
    data: ReportData,
    figures: Mapping[str, Any],
    claims: Mapping[str, str],
    plots: Mapping[str, str],
    extra: Sequence[str] = (),
    collapse_plot: str | None = None,
    current: str | None = None,
) -> str:
    """The markdown of one matrix's report (``plots``: caption -> PNG file name;
    ``extra``: the lines of the matrix's extra sections, placed before the cost;
    ``collapse_plot``: the PNG of the collapsed runs' validation curves, if drawn;
    ``current``: this code's version, which the header states the records' against, a
    stale page opening with a banner; ``None``: not compared)."""
    matrix, cur, summary, family = data.matrix, data.current, data.summary, data.family
    versions = version_counts(_versioned(cur)["code_version"]) if len(cur) else []
    lines = [f"# Report: {matrix.name}", "", *version_banner(versions, current)]
    if matrix.description:
        lines += [matrix.description, ""]
    lines += [
        f"{GENERATED_LINE}{matrix.name}` "
        f"({len(cur)} current record{'s' if len(cur) != 1 else ''}); never edit by hand.",
        "",
    ]
    if cur.empty:
        return "\n".join([*lines, "No stored results for this matrix yet.", ""])
    # Failed records never evaluated; describe the protocol of the numbers shown.
    done = cur[cur["status"] == "done"]
    shown = done if len(done) else cur
    dense_column = mixes_dense(shown)
    lines += dense_header_lines(shown)
    lines += [version_line(versions, current), ""]
    lines += [machines_line(cur), ""]
    lines += ["## Protocol", "", *protocol_lines(shown), ""]
    lines += [
        "## Results",
        "",
        "Percentages; mean ± 95% CI half-width over seeds (Student t, n−1 degrees of "
        "freedom; `n/a` with one seed). Δ rSum: mean of the per-seed differences to the "
        f"baseline `{matrix.baseline}` on the same seed{_reference_note(summary)}, ± its "
        "95% CI (per test, not "
        "adjusted for multiple comparisons: a CI that excludes 0 need not survive the "
        "correction). p (paired t): the "
        f"two-sided paired t-test's raw p-value; p (Holm): {family.sentence()} (one "
        "family: every profile's table and every section's tests); the verdict uses the "
        "corrected p: `*` p (Holm) < 0.05, `ns` p (Holm) ≥ 0.05, `n/a` fewer than 2 "
        "paired seeds, `identical` every seed's metrics bit-identical to the baseline's "
        "(no effect possible; not a test, so not in the family), with the reason when "
        "the configs show it."
        + (
            " `text-blind`: the run's scores (or its reference's) cannot depend on the "
            "query text, so its recalls are an artefact of how ties are counted, not "
            "retrieval (not a test; see What this run shows)."
            if summary["blind"].notna().any()
            else ""
        ),
        "",
    ]
    for profile in profiles(summary):
        lines += [
            f"### Profile `{profile}`",
            "",
            results_table(summary[summary["profile"] == profile], dense_column),
            "",
        ]
    lines += paper_sections(summary, matrix, figures, claims, dense_column)
    lines += findings_lines(summary, matrix, family)
    lines += failed_lines(cur, matrix)
    runs, checked = collapsed_runs(cur, matrix)
    lines += collapsed_lines(runs, checked, collapse_plot)
    lines += chance_lines(*at_chance_runs(cur, matrix))
    lines += other_lines(matrix, data.records, cur, data.superseded)
    if plots:
        lines += ["## Plots", ""]
        for caption, name in plots.items():
            lines += [f"![{caption}]({name})", ""]
    lines += list(extra)
    lines += cost_lines(summary)
    return "\n".join(lines)


def _write_collapse_plot(data: ReportData, out_dir: Path) -> str | None:
    """Draw ``<matrix>-collapsed.png`` (None, and no stale file, when nothing collapsed)."""
    path = out_dir / f"{data.matrix.name}-collapsed.png"
    runs, _ = collapsed_runs(data.current, data.matrix)
    if runs and plot_collapsed(runs, path):
        return path.name
    path.unlink(missing_ok=True)
    return None


def _write_plots(data: ReportData, out_dir: Path, figures: Mapping[str, Any]) -> dict[str, str]:
    """Draw the Δ and curves plots, and the rho or (l1, l2) grid plot of a matrix that
    sweeps those head fields (beside the paper's ``figures``); caption -> file name of
    those with something to show. A plot with nothing to show is removed rather than left
    stale."""
    name = data.matrix.name
    measured = measured_text(data.current)
    targets: list[tuple[str, str, Callable[[Path], dict[str, Any]]]] = [
        (
            "Δ rSum per variant with 95% CI",
            f"{name}-delta.png",
            lambda path: plot_delta(data.summary, data.matrix, path),
        ),
        (
            "training curves",
            f"{name}-curves.png",
            lambda path: plot_curves(data.current, data.matrix, path),
        ),
        (
            "rSum against the selection ratio ρ, measured and reported by the paper",
            f"{name}-rho.png",
            lambda path: plot_rho(data.summary, data.matrix, figures, path, measured),
        ),
        (
            "mean rSum over the (λ_sparse, λ_dense) grid, measured and reported by the paper",
            f"{name}-grid.png",
            lambda path: plot_grid(data.summary, data.matrix, figures, path, measured),
        ),
    ]
    plots: dict[str, str] = {}
    for caption, file, draw in targets:
        if not data.records.empty and draw(out_dir / file):
            plots[caption] = file
        else:
            (out_dir / file).unlink(missing_ok=True)
    return plots


def check_report_overwritable(path: Path, matrix_name: str) -> None:
    """Refuse (``ValueError``, one line) to replace ``path`` unless a report wrote it: its
    first line is the report's title and its header holds :data:`GENERATED_LINE`. Checked
    before any plot is drawn, so nothing the user owns is overwritten and no work is lost."""
    if path.is_dir():
        raise ValueError(f"{path}: is a folder; the report is written as this file")
    if not path.exists():
        return
    with path.open(encoding="utf-8", errors="replace") as f:
        head = [f.readline() for _ in range(20)]
    if head[0].rstrip("\n") != f"# Report: {matrix_name}" or not any(
        GENERATED_LINE in line for line in head
    ):
        raise ValueError(
            f"{path}: not written by seps-bench report (no report header), so it is not "
            "overwritten; move it aside or choose another --reports folder"
        )


def write_report(
    matrix_name: str,
    results_dir: str | Path,
    reports_dir: str | Path,
    root: Path | None = None,
    *,
    allow_mixed_versions: bool = False,
    current_version: str | None = None,
) -> Path:
    """Regenerate ``<reports_dir>/<matrix>.md`` and its plots from stored records alone.

    The current records must come from one version of the code and, given
    ``current_version`` (this code's: the command passes it), from that one
    (:func:`seps.versioning.version.check_versions`; a ``ValueError`` names the versions) unless
    ``allow_mixed_versions``, which writes the page with a banner naming them. The header
    names the version(s), against ``current_version`` when given.

    ``matrix_name`` is a matrix of ``root/matrices/`` (default :func:`default_root`) or a
    path to a matrix file; its records are read from ``<results_dir>/<matrix name>/``.
    Plots are ``<matrix>-delta.png``, ``<matrix>-curves.png``, ``<matrix>-collapsed.png``
    and, for a matrix sweeping ``sparse_ratio`` or the (``lambda_sparse``,
    ``lambda_dense``) grid (:mod:`seps.report.grid_plots`), ``<matrix>-rho.png`` or
    ``<matrix>-grid.png`` beside the markdown; a plot with nothing to show is removed
    rather than left stale. Returns the markdown path.
    """
    matrix = load_matrix(matrix_name, root)
    figures = load_paper_figures(root)
    claims = load_claims(root, figures)
    # a sequential design's matrix is read up to the seeds the design has read (.looks)
    records, held = hold_to_looks(
        load_results(results_dir, matrix.name), matrix.name, results_dir, root
    )
    data = ReportData.of(matrix, records, root)
    if len(data.current):
        check_versions(
            [None if pd.isna(v) else str(v) for v in _versioned(data.current)["code_version"]],
            allow_mixed=allow_mixed_versions,
            what=f"{Path(results_dir) / matrix.name}",
            current=current_version,
        )
    out_dir = Path(reports_dir)
    path = out_dir / f"{matrix.name}.md"
    check_report_overwritable(path, matrix.name)
    out_dir.mkdir(parents=True, exist_ok=True)
    plots = _write_plots(data, out_dir, figures)
    collapse_plot = _write_collapse_plot(data, out_dir)
    extra: list[str] = list(held)
    for name in matrix.sections:
        section = SECTIONS[name]
        where: dict[str, Any] = {"root": root} if section.needs_root else {}
        if section.needs_results:
            where["results"] = Path(results_dir)
        lines, _, _ = section.render(data.current, matrix.name, out_dir, data.family, **where)
        extra += lines
    profiles = (
        sorted({str(p) for p in data.current["profile"].dropna()}) if len(data.current) else []
    )
    extra += world_lines(results_dir, profiles, root)
    text = render_report(data, figures, claims, plots, extra, collapse_plot, current_version)
    atomic_write_text(path, text)
    return path


__all__ = [
    "GENERATED_LINE",
    "SECTIONS",
    "ReportData",
    "Section",
    "check_report_overwritable",
    "render_report",
    "write_report",
]
