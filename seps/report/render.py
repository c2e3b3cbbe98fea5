"""One matrix's report: ``reports/<matrix>.md`` and its plots, from stored records alone.

:func:`write_report` loads the matrix's records once, derives the current records and
the summary once (:class:`ReportData`), draws the plots and the matrix's extra sections
from them, and writes the markdown of :func:`render_report` atomically. No clock is read
and rows follow the matrix's run order, so the same records give the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ..ablations import Matrix, load_matrix
from ..store import atomic_write_text
from .loss_study import loss_study_section
from .paper import load_claims, load_paper_figures, paper_sections
from .plots import plot_curves, plot_delta
from .prose import (
    cost_lines,
    failed_lines,
    findings_lines,
    other_lines,
    protocol_lines,
    results_table,
)
from .records import current_records, load_results, profiles, runs_of
from .summary import summarise_current

#: Extra sections a matrix asks for with ``sections: [...]`` (see
#: :data:`seps.ablations.REPORT_SECTIONS`): ``(current records, matrix name, report
#: folder) -> (markdown lines, plots, plotted series)``.
SECTIONS: dict[str, Callable[[pd.DataFrame, str, Path], tuple[list[str], Any, Any]]] = {
    "loss-study": loss_study_section,
}


@dataclass(frozen=True, eq=False)
class ReportData:
    """Everything a report shows, computed once from the frame of the matrix's records.

    ``records``: every row loaded for the matrix (runs no longer in the matrix included,
    to be named as unused); ``current``/``superseded``: the matrix's runs split by
    :func:`~seps.report.records.current_records`; ``summary``: the per-(profile, run)
    statistics of the current records that belong to this matrix.
    """

    matrix: Matrix
    records: pd.DataFrame
    current: pd.DataFrame
    superseded: pd.DataFrame
    summary: pd.DataFrame

    @classmethod
    def of(cls, matrix: Matrix, records: pd.DataFrame) -> ReportData:
        """The report data of ``matrix`` from a frame of :func:`load_results`."""
        current, superseded = current_records(runs_of(records, matrix))
        # A record names its matrix; only records of this one enter the statistics (the
        # others, copied into the folder by hand, are still counted and listed).
        own = current[current["matrix"] == matrix.name] if len(current) else current
        summary = summarise_current(own, matrix)
        return cls(matrix, records, current, superseded, summary)


def render_report(
    data: ReportData,
    figures: Mapping[str, Any],
    claims: Mapping[str, str],
    plots: Mapping[str, str],
    extra: Sequence[str] = (),
) -> str:
    """The markdown of one matrix's report (``plots``: caption -> PNG file name;
    ``extra``: the lines of the matrix's extra sections, placed before the cost)."""
    matrix, cur, summary = data.matrix, data.current, data.summary
    lines = [f"# Report: {matrix.name}", ""]
    if matrix.description:
        lines += [matrix.description, ""]
    lines += [
        f"Regenerated from the stored run records by `seps-bench report {matrix.name}` "
        f"({len(cur)} current record{'s' if len(cur) != 1 else ''}); never edit by hand.",
        "",
    ]
    if cur.empty:
        return "\n".join([*lines, "No stored results for this matrix yet.", ""])
    # Failed records never evaluated; describe the protocol of the numbers shown.
    done = cur[cur["status"] == "done"]
    lines += ["## Protocol", "", *protocol_lines(done if len(done) else cur), ""]
    lines += [
        "## Results",
        "",
        "Percentages; mean ± 95% CI half-width over seeds (Student t, n−1 degrees of "
        "freedom; `n/a` with one seed). Δ rSum: mean of the per-seed differences to the "
        f"baseline `{matrix.baseline}` on the same seed, ± its 95% CI; `*` paired t-test "
        "two-sided p < 0.05, `ns` p ≥ 0.05, `n/a` fewer than 2 paired seeds.",
        "",
    ]
    for profile in profiles(summary):
        lines += [
            f"### Profile `{profile}`",
            "",
            results_table(summary[summary["profile"] == profile]),
            "",
        ]
    lines += paper_sections(summary, matrix, figures, claims)
    lines += findings_lines(summary, matrix)
    lines += failed_lines(cur, matrix)
    lines += other_lines(matrix, data.records, cur, data.superseded)
    if plots:
        lines += ["## Plots", ""]
        for caption, name in plots.items():
            lines += [f"![{caption}]({name})", ""]
    lines += list(extra)
    lines += cost_lines(summary)
    return "\n".join(lines)


def _write_plots(data: ReportData, out_dir: Path) -> dict[str, str]:
    """Draw the Δ and curves plots; caption -> file name of those with something to show.
    A plot with nothing to show is removed rather than left stale."""
    name = data.matrix.name
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
    ]
    plots: dict[str, str] = {}
    for caption, file, draw in targets:
        if not data.records.empty and draw(out_dir / file):
            plots[caption] = file
        else:
            (out_dir / file).unlink(missing_ok=True)
    return plots


def write_report(
    matrix_name: str,
    results_dir: str | Path,
    reports_dir: str | Path,
    root: Path | None = None,
) -> Path:
    """Regenerate ``<reports_dir>/<matrix>.md`` and its plots from stored records alone.

    ``matrix_name`` is a matrix of ``root/matrices/`` (default :func:`default_root`) or a
    path to a matrix file; its records are read from ``<results_dir>/<matrix name>/``.
    Plots are ``<matrix>-delta.png`` and ``<matrix>-curves.png`` beside the markdown; a
    plot with nothing to show is removed rather than left stale. Returns the markdown path.
    """
    matrix = load_matrix(matrix_name, root)
    figures = load_paper_figures(root)
    claims = load_claims(root, figures)
    data = ReportData.of(matrix, load_results(results_dir, matrix.name))
    out_dir = Path(reports_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    plots = _write_plots(data, out_dir)
    extra: list[str] = []
    for section in matrix.sections:
        lines, _, _ = SECTIONS[section](data.current, matrix.name, out_dir)
        extra += lines
    path = out_dir / f"{matrix.name}.md"
    atomic_write_text(path, render_report(data, figures, claims, plots, extra))
    return path


__all__ = ["SECTIONS", "ReportData", "render_report", "write_report"]
