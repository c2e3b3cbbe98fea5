"""The ``seps-bench scorecard`` subcommand (listed in :mod:`seps.cli.registry`).

Writes the claims scorecard (:mod:`seps.report.scorecard`) from ``ablations/claims.yaml``
and the stored run records; never trains. Records at another code version than this
code's (:func:`seps.versioning.version.code_version`), or at several, are refused in one line
unless ``--allow-mixed-versions``. Kept apart from the report code so that all of
the command line of the scorecard (arguments, messages, exit status) is in this file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .options import add_results_option, deprecated_alias


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_results_option(p, "to read")
    p.add_argument(
        "--output",
        metavar="PATH",
        default="reports/README.md",
        help="the scorecard's markdown file (default: reports/README.md); a file there that "
        "the scorecard did not write is never overwritten",
    )
    deprecated_alias(p, "--out", "--output")
    p.add_argument(
        "--ablations",
        help="ablation definitions folder with claims.yaml, matrices/, differences.yaml and "
        "paper_figures.yaml (default: $SEPS_ABLATIONS, else ./ablations when present, else the "
        "package's ablations/)",
    )
    p.add_argument(
        "--readme",
        metavar="PATH",
        help="instead of the scorecard file, rewrite the generated headline block of PATH "
        "(e.g. README.md): the verdict counts and the seven differences' table, between the "
        "lines '<!-- BEGIN GENERATED: headline -->' and '<!-- END GENERATED: headline -->'; "
        "nothing else in PATH changes",
    )
    p.add_argument(
        "--allow-mixed-versions",
        action="store_true",
        help="write the page even when its records are not all at this code's version "
        "(stale: made by other code, or before records carried a version) or are of several "
        "versions; the page then opens with a banner naming them. Default: refuse, naming "
        "the versions ('seps-bench run MATRIX --rerun-stale' recomputes the stale ones)",
    )


def run(args: argparse.Namespace) -> int:
    # Imported here, not at the top: `--help` must not load torch (seps.cli.registry).
    from ..experiments.definitions import default_root
    from ..io.store import scan_records
    from ..report.headline import write_headline
    from ..report.scorecard import write_scorecard
    from ..versioning.version import code_version

    root = Path(args.ablations) if args.ablations else default_root()
    results = Path(args.results)
    if not results.is_dir():
        raise ValueError(f"--results: {results}: not a folder; expected a result store")
    folders = sorted(d for d in results.iterdir() if d.is_dir()) if results.is_dir() else []
    for folder in folders:
        if not folder.name.startswith(("_", ".")):
            for err in scan_records(folder)[1]:
                print(f"warning: {err}; not used by the scorecard", file=sys.stderr)
    if args.readme:
        path = write_headline(
            args.readme,
            results,
            root,
            allow_mixed_versions=args.allow_mixed_versions,
            current_version=code_version(),
        )
        print(f"headline block: {path}")
        return 0
    path = write_scorecard(
        args.results,
        args.output,
        root,
        allow_mixed_versions=args.allow_mixed_versions,
        current_version=code_version(),
    )
    print(f"scorecard: {path}")
    return 0
