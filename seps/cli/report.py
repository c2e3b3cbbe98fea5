"""The ``seps-bench report [MATRIX ...]`` subcommand (listed in :mod:`seps.cli.registry`).

Kept apart from the report code so that all of the command line (arguments, messages,
exit status) of reports is in this one file. Records at another code version than this
code's (:func:`seps.versioning.version.code_version`), or at several, are refused in one line
unless ``--allow-mixed-versions``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .options import add_reports_option, add_results_option


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "matrices",
        nargs="*",
        metavar="MATRIX",
        help="matrix names (ablations/matrices/<name>.yaml) or matrix files; default: every "
        "matrix that has records under --results",
    )
    add_results_option(p, "to read")
    add_reports_option(p, "folder for <matrix>.md and its PNG plots")
    p.add_argument(
        "--allow-mixed-versions",
        action="store_true",
        help="write the page even when its records are not all at this code's version "
        "(stale: made by other code, or before records carried a version) or are of several "
        "versions; the page then opens with a banner naming them. Default: refuse, naming "
        "the versions ('seps-bench run MATRIX --rerun-stale' recomputes the stale ones)",
    )
    p.add_argument(
        "--ablations",
        help="ablation definitions folder with matrices/, differences.yaml and "
        "paper_figures.yaml (default: $SEPS_ABLATIONS, else ./ablations when present, else the "
        "package's ablations/)",
    )


def run(args: argparse.Namespace) -> int:
    # Imported here, not at the top: `--help` must not load torch (seps.cli.registry).
    from ..experiments.definitions import default_root, load_matrix
    from ..io.store import scan_records
    from ..report.records import matrices_with_records
    from ..report.render import write_report
    from ..versioning.version import code_version

    root = Path(args.ablations) if args.ablations else default_root()
    if os.path.lexists(args.results) and not Path(args.results).is_dir():
        raise ValueError(f"--results: {args.results}: not a folder; expected a result store")
    names = list(args.matrices) or matrices_with_records(args.results)
    if not names:
        raise ValueError(
            f"--results {args.results}: no run records, nothing to report "
            "(seps-bench run MATRIX writes them)"
        )
    known = {p.stem for p in (root / "matrices").glob("*.yaml")}
    status = 0
    for name in names:
        if not args.matrices and name not in known:
            # Discovered from the store but no longer defined: say so, report the rest.
            print(f"skipping {name}: no matrix file {root}/matrices/{name}.yaml", file=sys.stderr)
            status = 1
            continue
        # A name or a matrix file: its records are under <results>/<the matrix's name>/.
        matrix = load_matrix(name, root)
        for err in scan_records(Path(args.results) / matrix.name)[1]:
            print(f"warning: {err}; listed under 'Failed runs'", file=sys.stderr)
        path = write_report(
            str(matrix.path),
            args.results,
            args.reports,
            root=root,
            allow_mixed_versions=args.allow_mixed_versions,
            current_version=code_version(),
        )
        print(f"report: {path}")
    return status
