"""``seps-bench sequential``: a sequential design replayed on a store, and its check.

Prints each row's decision, look and interval (:mod:`seps.report.sequential`), writes the
analysis to ``<results>/_sequential/<design>.json`` (``--no-write``: only prints), and
with ``--check`` compares a fresh replay with the stored analysis instead: the same
records must give the same decisions at the same looks (exit 1 when they do not).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..experiments.ablation_index import default_root
from .options import add_results_option


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "design",
        nargs="?",
        help="a design of sequential.yaml in the ablation definitions (default: every design)",
    )
    add_results_option(p, "to read")
    p.add_argument(
        "--check",
        action="store_true",
        help="replay the design and compare it with the analysis the store keeps "
        "(<results>/_sequential/<design>.json): exit 1 when a decision, its look or a "
        "statistic differs; writes nothing",
    )
    p.add_argument("--json", action="store_true", help="print the analysis as JSON")
    p.add_argument(
        "--no-write", action="store_true", help="print only; do not write the store's analysis"
    )
    p.add_argument(
        "--ablations",
        help="ablation definitions folder (default: $SEPS_ABLATIONS, else ./ablations when "
        "present, else the definitions shipped in the package)",
    )


def _differences(stored: dict, fresh: dict) -> list[str]:
    """Where two analysis logs differ: each row's decision, looks and statistics."""
    out = []
    old = {(r["matrix"], r["variant"], r["baseline"]): r for r in stored.get("rows", [])}
    for r in fresh["rows"]:
        key = (r["matrix"], r["variant"], r["baseline"])
        name = f"{key[0]}: {key[1]} vs {key[2]}"
        if key not in old:
            out.append(f"{name}: not in the stored analysis")
        elif old[key] != r:
            fields = sorted(k for k in r if old[key].get(k) != r.get(k))
            out.append(f"{name}: differs in {', '.join(fields)}")
    out += [
        f"{k[0]}: {k[1]} vs {k[2]}: only in the stored analysis"
        for k in old.keys() - {(r["matrix"], r["variant"], r["baseline"]) for r in fresh["rows"]}
    ]
    if stored.get("design") != fresh["design"]:
        out.append("the design differs from the one the stored analysis was made with")
    return out


def _log_shape_ok(stored: object) -> bool:
    """Whether a stored analysis log has the shape :func:`_differences` reads."""
    if not isinstance(stored, dict) or not isinstance(stored.get("rows", []), list):
        return False
    keys = ("matrix", "variant", "baseline")
    rows = stored.get("rows", [])
    return all(isinstance(r, dict) and all(isinstance(r.get(k), str) for k in keys) for r in rows)


def run(args: argparse.Namespace) -> int:
    from tabulate import tabulate

    from ..report.sequential import analyse, analysis_log, load_designs
    from ..report.sequential_section import counts_line, decision_phrase, interval_text
    from ..runs.until_decided import log_path, write_log

    root = Path(args.ablations) if args.ablations else default_root()
    designs = load_designs(root)
    if args.design is not None and args.design not in designs:
        known = ", ".join(designs) or "none"
        raise ValueError(f"design {args.design!r}: not in {root}/sequential.yaml (known: {known})")
    status = 0
    for name, design in designs.items():
        if args.design is not None and name != args.design:
            continue
        analysis = analyse(design, args.results, root)
        log = analysis_log(analysis)
        if args.check:
            path = log_path(Path(args.results), name)
            if not path.is_file():
                raise ValueError(f"{path}: no stored analysis to check; run without --check first")
            try:
                stored = json.loads(path.read_text(encoding="utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise ValueError(f"{path}: not a readable analysis ({exc})") from None
            if not _log_shape_ok(stored):  # only ever written by us: damaged, or by hand
                raise ValueError(
                    f"{path}: not a readable analysis (expected a JSON object whose 'rows' "
                    "are objects naming 'matrix', 'variant' and 'baseline'); run without "
                    "--check to write it again"
                )
            diffs = _differences(stored, log)
            for line in diffs:
                print(f"{name}: {line}")
            print(f"{name}: {'differs from' if diffs else 'same decisions as'} {path}")
            status = max(status, 1 if diffs else 0)
            continue
        if args.json:
            print(json.dumps(log, indent=1, sort_keys=True))
        else:
            rows = [
                [
                    r.key,
                    r.claim,
                    decision_phrase(r, design.cap, len(design.looks)),
                    interval_text(r),
                ]
                for r in analysis.rows()
            ]
            print(f"design {name}: {counts_line(analysis)}")
            print(tabulate(rows, headers=["row", "claim", "decision", "Δ rSum [repeated CI]"],
                           tablefmt="github"))  # fmt: skip
        if not args.no_write:
            write_log(analysis, Path(args.results))
    return status
