"""Reports regenerated from the result store: ``seps-bench report [MATRIX ...]``.

A report is a pure function of the stored run records (``results/<matrix>/*.json``, schema
``seps-bench/run/1``, written by :mod:`seps.runs.runner`), the matrix definition and the
paper's reported figures (``ablations/paper_figures.yaml``). Nothing here trains or
evaluates. The same records give a byte-identical ``reports/<matrix>.md`` and the same PNG
plots: rows follow the matrix's run order, floats have fixed formats, no clock is read,
and files are written atomically (temp file + ``os.replace``).

Statistics (:mod:`seps.stats.paired`). Per (profile, run) the seeds are independent repetitions:
the table shows the mean and the 95% confidence half-width ``t(0.975, n-1) * sd /
sqrt(n)``. A variant is compared with the matrix's baseline *paired by seed* (the same seed
gives the same data order and initial weights, so the per-seed difference removes most seed
noise) with a two-sided paired t-test. All the paired tests of one report (every profile,
every section) are one family: their p-values are Holm-corrected together
(:mod:`seps.report.compare`) and every verdict (``*`` when the corrected p < 0.05) uses the
corrected p. A variant whose every seed is bit-identical to the baseline's is shown as
``identical (no effect possible)`` with the reason read off the configs, and is not a test.
A run whose final validation rSum is more than 10% below its best epoch's is listed under
"Collapsed runs" (:mod:`seps.report.collapse`). The header states the training and the
evaluation dense-caption protocol of the numbers (per row when a matrix mixes them).

The ``Cost`` section (timings, throughput, memory, parameter counts) is the last one, so
the accuracy part of two reports can be compared as ``text.split("\\n## Cost")[0]`` even
when the records come from machines with different speeds.

One module per job, imported one way only (each imports only those below it)::

    render -> differences -> paper, summary, compare, records
    render -> protocols -> compare, records
    render -> loss_study -> loss_plots -> loss_records -> records
              -> prose, paper -> summary -> compare -> records
              -> collapse, plots -> records
              -> grid_plots -> paper, records
    loss_study -> compare
    loss_plots -> plots (same_curves)
    (all of them) -> seps.stats.paired, seps.io.formatting -> seps.io.store

The ``report`` subcommand is :mod:`seps.cli.report`.
"""

from ..stats.paired import (
    correct,
    holm,
    mean_ci,
    paired_mark,
    paired_test,
    t_quantile,
    t_two_sided_p,
)
from .collapse import collapsed, plot_collapsed
from .compare import Comparison, Family, compare, family_of, identical_reason
from .grid_plots import grid_runs, plot_grid, plot_rho, rho_runs
from .loss_study import loss_study_section
from .paper import PAPER_LABEL, PaperRef, load_claims, load_paper_figures, paper_reference
from .plots import plot_curves, plot_delta
from .records import (
    LABELS,
    METRICS,
    RECALLS,
    RECORD_COLUMNS,
    current_records,
    load_results,
    matrices_with_records,
)
from .render import SECTIONS, ReportData, render_report, write_report
from .summary import summarise, summarise_current

__all__ = [
    "LABELS",
    "METRICS",
    "PAPER_LABEL",
    "RECALLS",
    "RECORD_COLUMNS",
    "SECTIONS",
    "Comparison",
    "Family",
    "PaperRef",
    "ReportData",
    "collapsed",
    "compare",
    "correct",
    "current_records",
    "family_of",
    "grid_runs",
    "holm",
    "identical_reason",
    "load_claims",
    "load_paper_figures",
    "load_results",
    "loss_study_section",
    "matrices_with_records",
    "mean_ci",
    "paired_mark",
    "paired_test",
    "paper_reference",
    "plot_collapsed",
    "plot_curves",
    "plot_delta",
    "plot_grid",
    "plot_rho",
    "render_report",
    "rho_runs",
    "summarise",
    "summarise_current",
    "t_quantile",
    "t_two_sided_p",
    "write_report",
]
