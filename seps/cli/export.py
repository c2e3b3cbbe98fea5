"""``seps-bench export [MATRIX ...]``: the stored run records as one CSV or JSON-lines table
(:mod:`seps.runs.export`), to a file or to standard output."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .options import add_results_option

FORMATS = ("csv", "jsonl")  # seps.runs.export.EXPORT_FORMATS, kept here so --help imports no pandas


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "matrices",
        nargs="*",
        metavar="MATRIX",
        help="matrix names (folders of --results) or matrix files; default: every matrix "
        "that has records under --results",
    )
    p.add_argument(
        "--format",
        default="csv",
        choices=FORMATS,
        help="csv (lists as JSON text) or jsonl (one JSON object per record); default csv",
    )
    add_results_option(p, "to read")
    p.add_argument(
        "--output",
        default="-",
        metavar="PATH",
        help="file to write (written atomically; an existing file only with --overwrite, "
        "never one inside --results); default '-', standard output",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace --output when it exists (default: refuse, so no file is lost)",
    )


def run(args: argparse.Namespace) -> int:
    from ..io.store import atomic_write_text
    from ..runs.export import export_table, render_export

    if not Path(args.results).is_dir():
        raise ValueError(f"--results: {args.results}: not a folder; expected a result store")
    if args.output != "-":
        _check_output(Path(args.output), Path(args.results), args.overwrite)
    df = export_table(args.results, args.matrices)
    if df.empty:
        print(f"no run records under {args.results}/: nothing to export", file=sys.stderr)
        return 1
    if "status" in df:
        # Kept as rows (the file and the reason in `error`), but never silently.
        for error in df.loc[df["status"] == "unreadable", "error"]:
            print(f"warning: {error}; exported with status 'unreadable'", file=sys.stderr)
    text = render_export(df, args.format)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        atomic_write_text(Path(args.output), text)
        print(f"export: {args.output} ({len(df)} records)", file=sys.stderr)
    return 0


def _check_output(out: Path, results: Path, overwrite: bool) -> None:
    """Refuse, before reading any record, an ``--output`` that would replace a folder, a
    file of the result store, or (without ``--overwrite``) any existing file."""
    if out.is_dir():
        raise ValueError(f"--output: {out}: is a folder; expected a file to write")
    try:
        inside = out.resolve().is_relative_to(results.resolve())
    except (OSError, RuntimeError) as exc:  # a symbolic link loop (RuntimeError before 3.13)
        raise ValueError(
            f"--output: {out}: cannot be resolved ({exc}); expected a file path"
        ) from None
    if inside:
        raise ValueError(
            f"--output: {out}: inside the result store {results}; expected a path outside it"
        )
    if out.exists() and not overwrite:
        raise ValueError(f"--output: {out}: exists; pass --overwrite to replace it")
