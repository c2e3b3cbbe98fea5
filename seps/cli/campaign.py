"""``seps-bench campaign``: run a campaign's steps (:mod:`seps.experiments.campaigns`) in order.

Each step is handed to ``seps-bench run`` itself: its arguments
(:func:`seps.experiments.campaigns.step_argv`)
are parsed by ``run``'s own argument builder and run by ``run``'s own function from the
command registry, so a step behaves exactly as the same ``seps-bench run`` command line
(resume, stale records, twins, locks). A failed step is reported in one line and the
next step goes on, as the shell script the campaigns replace did; the exit status is 1
when any step failed.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from ..experiments.ablation_index import default_root, list_matrices
from ..experiments.campaigns import Campaign, list_campaigns, load_campaign, step_argv
from .options import add_reports_option, add_results_option
from .registry import load


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "campaign",
        help=f"a campaign shipped in ablations/campaigns/ ({', '.join(list_campaigns())}) or a "
        "path to a campaign YAML file",
    )
    add_results_option(p)
    add_reports_option(
        p,
        "report folder, for campaigns that write reports (a campaign with 'report: false', "
        "as standard, writes none: run 'seps-bench report' afterwards, with "
        "--allow-mixed-versions while the store mixes code versions)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="list the steps, each as the seps-bench run command it stands for, and exit",
    )
    p.add_argument(
        "--ablations",
        help="ablation definitions folder for every step (default: $SEPS_ABLATIONS, else "
        "./ablations when present, else the definitions shipped in the package)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument(
        "--no-tensorboard",
        action="store_true",
        help="write no TensorBoard event files (passed to every step's run)",
    )


def _run_step(argv: list[str]) -> int:
    """``seps-bench run ARGV`` through ``run``'s own parser and function."""
    add_args, runner = load("run")
    parser = argparse.ArgumentParser(prog="seps-bench run")
    add_args(parser)
    args = parser.parse_args(argv)
    args.command = "run"
    return int(runner(args) or 0)


def _check_steps(campaign: Campaign, root: Path, args: argparse.Namespace) -> None:
    """Load what every step's ``seps-bench run`` reads (the profile, each step's matrix
    and its ``--only`` selection, the report's definitions when the campaign writes
    reports); raise the first fault as ``ValueError`` naming the campaign file and step."""
    from ..experiments.definitions import load_matrix, load_profile, select_runs

    load_profile(campaign.profile, root)
    for i, step in enumerate(campaign.steps):
        try:
            matrix = load_matrix(step.matrix, root)
            select_runs(matrix, step.only)
            if getattr(step, "until_decided", False):  # its design, read before step 1
                from ..report.sequential import check_design, design_for

                design = design_for(matrix.name, root, campaign.profile)
                if design is None:
                    raise ValueError(
                        f"{matrix.name}: no sequential design names this matrix for profile "
                        f"{campaign.profile!r} (sequential.yaml of the ablation definitions); "
                        "until_decided needs one"
                    )
                check_design(design, root)
            if campaign.report:
                from ..report.preflight import check_report_definitions

                check_report_definitions(matrix, root)
        except ValueError as exc:
            raise ValueError(f"{campaign.path}: steps[{i}] ({step.matrix}): {exc}") from None
    if not args.dry_run:
        from ..io.store import check_writable

        check_writable(Path(args.results), "--results")
        if campaign.report:
            check_writable(Path(args.reports), "--reports")


def run(args: argparse.Namespace) -> int:
    root = Path(args.ablations) if args.ablations else default_root()
    campaign = load_campaign(args.campaign, list_matrices(root))
    extra = ["--no-progress"] if args.no_progress else []
    if args.no_tensorboard:
        extra.append("--no-tensorboard")
    if args.ablations:
        extra += ["--ablations", args.ablations]
    n = len(campaign.steps)
    # Every step's definitions are checked before the first step trains (the profile, each
    # matrix with its runs, each --only): a fault in step 5 stops the campaign now, in one
    # line, not after hours of steps 1 to 4. A dry run checks the same, so a campaign that
    # lists cleanly also starts.
    _check_steps(campaign, root, args)
    if args.dry_run:
        print(f"campaign {campaign.name}: {n} steps, profile {campaign.profile}")
        for i, step in enumerate(campaign.steps, 1):
            argv = step_argv(campaign, step, args.results, args.reports, extra)
            print(f"{i:>3}. seps-bench run {shlex.join(argv)}")
        return 0
    failed = []
    for i, step in enumerate(campaign.steps, 1):
        print(f"campaign {campaign.name}: step {i}/{n}: {step.label()}", flush=True)
        try:
            status = _run_step(step_argv(campaign, step, args.results, args.reports, extra))
        except (ValueError, OSError) as exc:
            print(
                f"campaign {campaign.name}: step {i} ({step.matrix}): error: {exc}", file=sys.stderr
            )
            status = 2
        if status:
            failed.append(i)
    done = n - len(failed)
    tail = f"; failed steps: {', '.join(map(str, failed))}" if failed else ""
    print(f"campaign {campaign.name}: {done} of {n} steps completed{tail}")
    return 1 if failed else 0
