"""``seps-bench run``: run a named ablation matrix into the result store, then report.

Only :mod:`seps.experiments.ablation_index` (matrix and profile names for the help) is imported at
the top: ``run --help`` must not load torch (:mod:`seps.cli.registry`). The runner and
what it needs are imported by :func:`run`.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

from ..experiments.ablation_index import default_root, list_matrices, profile_summaries
from ..versioning.version import code_version  # light (no torch); tests replace it here
from .options import add_reports_option, add_results_option, seed_list


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "matrix",
        help="a matrix name in ablations/matrices/ "
        f"({', '.join(list_matrices())}) or a path to a matrix YAML file",
    )
    p.add_argument(
        "--profile",
        default="smoke",
        help="run size, a profile of ablations/profiles.yaml ("
        + "; ".join(f"{k}: {v}" for k, v in profile_summaries().items())
        + "); default smoke",
    )
    p.add_argument(
        "--seeds", type=seed_list, help="comma-separated integer seeds (default: the profile's)"
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        dest="sets",
        metavar="PART.FIELD=VALUE",
        help="change one field of the profile, repeatable: train.FIELD=VALUE (a train config "
        "field, e.g. train.epochs=3) or head.FIELD=VALUE (a head switch, e.g. "
        "head.embed_size=256); VALUE is read and checked as in profiles.yaml. Applied to "
        "the profile, so before each run's own fields: a run (or the matrix) that sets the "
        "field keeps its value and the matrix's comparison stands (--dataset, --data-path, "
        "--image-dir and --skip-bad-images win over it). The records carry the profile name "
        "with the changes, e.g. standard+train.epochs=3",
    )
    p.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda[:N]")
    p.add_argument(
        "--dataset", choices=("synthetic", "f30k", "coco"), help="override the profile's dataset"
    )
    p.add_argument("--data-path", help="dataset folder (official layout) or synthetic target")
    p.add_argument("--image-dir", help="image folder (default <data-path>/images)")
    p.add_argument(
        "--skip-bad-images",
        action="store_true",
        help="drop missing or unreadable images with their captions instead of failing the run",
    )
    add_results_option(p)
    add_reports_option(p)
    p.add_argument(
        "--backend",
        default="local",
        choices=("local", "ray"),
        help="local: one run after another; ray: one Ray task per training",
    )
    p.add_argument("--ray-address", help="Ray cluster address (default: start a local Ray)")
    p.add_argument("--only", help="comma-separated glob(s) over run ids, e.g. 'code*,paper'")
    p.add_argument(
        "--retry-failed",
        action="store_true",
        help="run failed and diverged runs again, and move unreadable records aside as "
        "*.corrupt and run them again (failures caused by the environment, e.g. out of "
        "memory, are retried without it)",
    )
    p.add_argument(
        "--rerun-stale",
        action="store_true",
        help="run again the runs whose record is stale: made by another version of the code "
        "that produces the numbers (or before records carried one); the old record is kept "
        "beside as <name>.stale.json. Without it they are kept, not rerun, and their number "
        "is printed in one line (a report refuses them unless --allow-mixed-versions)",
    )
    p.add_argument(
        "--no-reuse",
        action="store_true",
        help="evaluate every run here, even one another matrix of the store has already "
        "measured (same key and seed, this code version); by default that record is "
        "copied, naming its source in copied_from",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the resolved runs, their settings, what is to do (runs, trainings, "
        "epochs) and the disk the checkpoints will take, then exit",
    )
    p.add_argument(
        "--ablations",
        help="ablation definitions folder (default: $SEPS_ABLATIONS, else ./ablations when "
        "present, else the definitions shipped in the package, ablations/)",
    )
    p.add_argument(
        "--allow-mixed-versions",
        action="store_true",
        help="let the report step write the page even when its records are not all at this "
        "code's version (stale records kept) or are of several versions, with a banner "
        "naming them (default: the report step refuses them; see --rerun-stale)",
    )
    p.add_argument(
        "--until-decided",
        action="store_true",
        help="add seeds look by look, as the matrix's sequential design says "
        "(sequential.yaml of the ablation definitions), only to the runs its open rows "
        "need, analysing the design after each look and keeping the analysis in "
        "<results>/_sequential/; stops when every row is detected, bounded or at the cap "
        "(docs/statistics.md, 'Seeds until decided'); chooses its own seeds and runs, so "
        "--seeds and --only are refused with it",
    )
    p.add_argument(
        "--max-seeds",
        type=_positive_int,
        metavar="N",
        help="with --until-decided: stop before a look that needs more than N seeds "
        "(default: the design's cap)",
    )
    p.add_argument("--no-report", action="store_true", help="do not regenerate the report")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument(
        "--no-tensorboard",
        action="store_true",
        help="write no TensorBoard event files (by default each training writes them in its "
        "folder, <results>/_work/<train key>-s<seed>/tensorboard/); not part of any run: "
        "records and keys are the same either way",
    )


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"device": args.device}
    if args.dataset:
        out["dataset"] = args.dataset
    if args.data_path:
        out["data_path"] = args.data_path
    if args.image_dir:
        out["image_dir"] = args.image_dir
    if args.skip_bad_images:
        out["skip_bad_images"] = True
    return out


def _until_decided(
    args: argparse.Namespace, matrix: Any, profile: Any, root: Path, results: Path
) -> int:
    """``--until-decided``: :func:`seps.runs.until_decided.run_until_decided` with this
    command's runner."""
    from ..experiments.provenance import cpu_identity
    from ..io.store import check_writable
    from ..runs.runner import run_matrix
    from ..runs.until_decided import run_until_decided

    for flag, value in (("--seeds", args.seeds), ("--only", args.only)):
        if value is not None:
            raise ValueError(f"{flag}: not with --until-decided, which chooses the seeds and runs")
    if not args.dry_run:
        check_writable(results, "--results")

    def run_seeds(seeds: list[int], only: str) -> None:
        run_matrix(
            matrix,
            profile,
            list(seeds),
            results,
            backend=args.backend,
            only=only,
            retry_failed=args.retry_failed,
            rerun_stale=args.rerun_stale,
            progress=not args.no_progress,
            ray_address=args.ray_address,
            reuse=not args.no_reuse,
            tensorboard=not args.no_tensorboard,
            **_overrides(args),
        )

    status = run_until_decided(
        matrix,
        profile,
        results,
        root=root,
        run_seeds=run_seeds,
        here_cpu=str(cpu_identity()["model"]),
        max_seeds=args.max_seeds,
        dry_run=args.dry_run,
    )
    if status == 0 and not args.no_report and not args.dry_run:
        from ..report.render import write_report

        path = write_report(
            str(matrix.path),
            results,
            Path(args.reports),
            root=root,
            allow_mixed_versions=args.allow_mixed_versions,
            current_version=code_version(),
        )
        print(f"report: {path}")
    return status


def run(args: argparse.Namespace) -> int:
    from ..experiments.definitions import load_matrix, load_profile
    from ..experiments.overrides import apply_sets, shadowed_sets
    from ..io.store import check_writable
    from ..runs.run_plan import dry_run_text
    from ..runs.runner import check_data_dirs, plan, run_matrix
    from ..runtime.devices import check_device
    from ..runtime.float_path import requested

    root = Path(args.ablations) if args.ablations else default_root()
    requested()  # an unknown SEPS_FLOAT_PATH is refused by --dry-run too, as by a run
    check_device(args.device)
    matrix = load_matrix(args.matrix, root)
    profile = apply_sets(load_profile(args.profile, root), args.sets)
    for line in shadowed_sets(matrix, args.sets):
        print(line)
    seeds = args.seeds if args.seeds is not None else list(profile.seeds)
    results = Path(args.results)
    if args.max_seeds is not None and not args.until_decided:
        raise ValueError("--max-seeds: only with --until-decided")
    if os.path.lexists(results) and not results.is_dir():  # a dry run reads it too
        raise ValueError(
            f"--results {str(results)!r}: not a folder (a file, or a link that leads "
            "nowhere); expected a result store folder"
        )
    if not args.no_report:  # what the report step reads, before anything trains
        from ..report.preflight import check_report_definitions

        check_report_definitions(matrix, root)
    if args.until_decided:
        return _until_decided(args, matrix, profile, root, results)
    if args.dry_run:
        planned = plan(matrix, profile, seeds, results, args.only, **_overrides(args))
        print(
            dry_run_text(
                planned,
                results,
                version=code_version(),
                retry_failed=args.retry_failed,
                rerun_stale=args.rerun_stale,
                reuse=not args.no_reuse,
            )
        )
        return 0
    check_writable(results, "--results")
    if not args.no_report:
        check_writable(Path(args.reports), "--reports")
    check_data_dirs(plan(matrix, profile, seeds, results, args.only, **_overrides(args)))
    t0 = time.perf_counter()
    records = run_matrix(
        matrix,
        profile,
        seeds,
        results,
        backend=args.backend,
        only=args.only,
        retry_failed=args.retry_failed,
        rerun_stale=args.rerun_stale,
        progress=not args.no_progress,
        ray_address=args.ray_address,
        reuse=not args.no_reuse,
        tensorboard=not args.no_tensorboard,
        **_overrides(args),
    )
    counts = {s: sum(r["status"] == s for r in records) for s in ("done", "failed", "diverged")}
    print(
        f"{matrix.name}: {counts['done']} runs done, {counts['failed']} failed, "
        f"{counts['diverged']} diverged, {len(records.unreadable)} unreadable, "
        f"{time.perf_counter() - t0:.0f} s"
    )
    if not args.no_report:
        from ..report.render import write_report

        # The matrix it ran (its file), not its name: a matrix given as a path to a YAML
        # file outside the ablation root is reported as well.
        path = write_report(
            str(matrix.path),
            results,
            Path(args.reports),
            root=root,
            allow_mixed_versions=args.allow_mixed_versions,
            current_version=code_version(),
        )
        print(f"report: {path}")
    return 0 if counts["done"] == len(records) and not records.unreadable else 1
