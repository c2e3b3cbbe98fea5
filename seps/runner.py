"""The ablation runner: ``seps-bench run MATRIX`` and the result store.

Each run of a matrix, under a profile and a seed, is keyed by a hash of its fully
resolved configs (:func:`seps.ablations.config_key`) and stored as one JSON record,
``<results>/<matrix>/<run id>-<key>-s<seed>.json``, written atomically. Completed runs are
skipped; a failed run is recorded with its error and traceback and does not stop the
others (``--retry-failed`` runs it again). Training state lives in
``<results>/_work/<train key>-s<seed>/`` (the epoch checkpoints): an interrupted run
resumes from its last epoch, and runs that differ only in the evaluation protocol
(``dense_source``) share one training and only evaluate again.

Backends: ``local`` runs one after another in this process; ``ray`` submits each group
of runs that share a training as one Ray task (one GPU each when CUDA is present), to a
local Ray or to ``--ray-address``; records land in the same store.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import re
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .ablations import (
    Matrix,
    Profile,
    RunSpec,
    config_key,
    default_root,
    list_matrices,
    load_matrix,
    load_profile,
    resolve,
)
from .cli import command

SCHEMA = "seps-bench/run/1"
#: Fields that only change the evaluation, so runs differing in them share a training.
EVAL_ONLY_FIELDS = ("dense_source", "eval_split", "eval_text_shard", "eval_image_shard")


@dataclass(frozen=True)
class PlannedRun:
    """One (run, seed) of a matrix with its resolved configs and store paths."""

    matrix: str
    profile: str
    run: RunSpec
    seed: int
    train_cfg: Any
    head: Any
    key: str
    train_key: str

    @property
    def record_name(self) -> str:
        slug = re.sub(r"[^A-Za-z0-9_.=+-]+", "_", self.run.id)
        return f"{slug}-{self.key}-s{self.seed}.json"


def plan(
    matrix: Matrix,
    profile: Profile,
    seeds: list[int],
    results: Path,
    only: str | None = None,
    **train_overrides: Any,
) -> list[PlannedRun]:
    """Every (run, seed) of ``matrix`` that matches ``only`` (a glob over run ids)."""
    out = []
    for run in matrix.runs:
        if only and not any(fnmatch.fnmatch(run.id, p) for p in only.split(",")):
            continue
        for seed in seeds:
            train_cfg, head = resolve(run, profile, seed, **train_overrides)
            key = config_key(train_cfg, head)
            train_key = config_key(train_cfg, head, exclude=EVAL_ONLY_FIELDS)
            work = results / "_work" / f"{train_key}-s{seed}"
            train_cfg.out_dir = str(work)
            train_cfg.cache_dir = str(results / "_work" / "feature_cache")
            out.append(
                PlannedRun(matrix.name, profile.name, run, seed, train_cfg, head, key, train_key)
            )
    return out


def store_dir(results: Path, matrix: str) -> Path:
    return results / matrix


def read_record(path: Path) -> dict[str, Any] | None:
    try:
        rec = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return rec if isinstance(rec, dict) and rec.get("schema") == SCHEMA else None


def execute(p: PlannedRun, results: Path, progress: bool = False) -> dict[str, Any]:
    """Train (or resume) and evaluate one planned run; write and return its record."""
    from .train import atomic_write_json, environment, train

    cfg = p.train_cfg
    cfg.progress = progress
    started = time.time()
    t0 = time.perf_counter()
    record: dict[str, Any] = {
        "schema": SCHEMA,
        "matrix": p.matrix,
        "profile": p.profile,
        "run_id": p.run.id,
        "describe": p.run.describe(),
        "preset": p.run.preset,
        "difference": p.run.difference,
        "paper_row": p.run.paper_row,
        "seed": p.seed,
        "key": p.key,
        "train_key": p.train_key,
        "head_config": p.head.to_dict(),
        "train_config": cfg.to_dict(),
        "started": started,
    }
    try:
        result = train(cfg, p.head, resume=True)
        record.update(
            status="done",
            error=None,
            traceback=None,
            **{
                k: result[k]
                for k in (
                    "metrics",
                    "dense_source",
                    "protocol",
                    "history",
                    "nonfinite_steps",
                    "train_seconds",
                    "eval_seconds",
                    "eval_pairs_per_second",
                    "parameters",
                    "trainable_parameters",
                    "peak_memory_bytes",
                    "environment",
                    "eval_images",
                )
            },
        )
        hist = result["history"]
        record["train_pairs_per_second"] = (
            sum(h["train_pairs_per_second"] for h in hist) / len(hist) if hist else None
        )
    except Exception as exc:  # recorded, the matrix goes on
        record.update(
            status="failed",
            error=f"{type(exc).__name__}: {exc}",
            traceback=traceback.format_exc(),
            environment=environment(),
        )
    record["wall_seconds"] = time.perf_counter() - t0
    atomic_write_json(store_dir(results, p.matrix) / p.record_name, record)
    return record


def _execute_group(group: list[PlannedRun], results: str) -> list[dict[str, Any]]:
    return [execute(p, Path(results)) for p in group]


def run_matrix(
    matrix: Matrix,
    profile: Profile,
    seeds: list[int],
    results: Path,
    *,
    backend: str = "local",
    only: str | None = None,
    retry_failed: bool = False,
    progress: bool = True,
    ray_address: str | None = None,
    **train_overrides: Any,
) -> list[dict[str, Any]]:
    """Run every pending (run, seed) of ``matrix``; return all records of the plan."""
    from tqdm.auto import tqdm

    planned = plan(matrix, profile, seeds, results, only, **train_overrides)
    todo = []
    for p in planned:
        rec = read_record(store_dir(results, p.matrix) / p.record_name)
        if rec is None or (rec["status"] == "failed" and retry_failed):
            todo.append(p)
    if backend == "ray":
        _run_ray(todo, results, ray_address)
    elif backend == "local":
        bar = tqdm(todo, desc=f"{matrix.name} ({profile.name})", disable=not progress, unit="run")
        for p in bar:
            bar.set_postfix_str(f"{p.run.id} s{p.seed}")
            rec = execute(p, results, progress=progress)
            if rec["status"] == "failed":
                tqdm.write(f"run {p.run.id} (seed {p.seed}) failed: {rec['error']}")
    else:
        raise ValueError(f"--backend: invalid value {backend!r}; allowed: local, ray")
    out = []
    for p in planned:
        rec = read_record(store_dir(results, p.matrix) / p.record_name)
        if rec is not None:
            out.append(rec)
    return out


def _run_ray(todo: list[PlannedRun], results: Path, address: str | None) -> None:
    try:
        import ray
    except ImportError as exc:
        raise ValueError(
            "--backend ray: Ray is not installed (pip install 'seps-bench[ray]')"
        ) from exc
    import torch

    groups: dict[tuple[str, int], list[PlannedRun]] = {}
    for p in todo:
        groups.setdefault((p.train_key, p.seed), []).append(p)
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(
            address=address, include_dashboard=False, ignore_reinit_error=True, log_to_driver=False
        )
    try:
        gpus = 1 if torch.cuda.is_available() else 0
        task = ray.remote(num_gpus=gpus, num_cpus=1)(_execute_group)
        ray.get([task.remote(g, str(results)) for g in groups.values()])
    finally:
        if started_here:
            ray.shutdown()


# ------------------------------------------------------------------------------- CLI
def _add_run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "matrix",
        help="a matrix name in ablations/matrices/ "
        f"({', '.join(list_matrices())}) or a path to a matrix YAML file",
    )
    p.add_argument(
        "--profile",
        default="smoke",
        help="run size from ablations/profiles.yaml: smoke (CI), quick (CPU), paper (GPU)",
    )
    p.add_argument("--seeds", help="comma-separated seeds (default: the profile's)")
    p.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda[:N]")
    p.add_argument(
        "--dataset", choices=("synthetic", "f30k", "coco"), help="override the profile's dataset"
    )
    p.add_argument("--data-path", help="dataset folder (official layout) or synthetic target")
    p.add_argument("--image-dir", help="image folder (default <data-path>/images)")
    p.add_argument("--results", default="results", help="result store (default results/)")
    p.add_argument("--reports", default="reports", help="report folder (default reports/)")
    p.add_argument(
        "--backend",
        default="local",
        choices=("local", "ray"),
        help="local: one run after another; ray: one Ray task per training",
    )
    p.add_argument("--ray-address", help="Ray cluster address (default: start a local Ray)")
    p.add_argument("--only", help="comma-separated glob(s) over run ids, e.g. 'code*,paper'")
    p.add_argument("--retry-failed", action="store_true", help="run failed runs again")
    p.add_argument("--dry-run", action="store_true", help="print the resolved runs and exit")
    p.add_argument("--ablations", help="ablation definitions folder (default ./ablations)")
    p.add_argument("--no-report", action="store_true", help="do not regenerate the report")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"device": args.device}
    if args.dataset:
        out["dataset"] = args.dataset
    if args.data_path:
        out["data_path"] = args.data_path
    if args.image_dir:
        out["image_dir"] = args.image_dir
    return out


@command(
    "run", "run a named ablation matrix into the result store, then write its report", _add_run_args
)
def _run(args: argparse.Namespace) -> int:
    root = Path(args.ablations) if args.ablations else default_root()
    matrix = load_matrix(args.matrix, root)
    profile = load_profile(args.profile, root)
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else list(profile.seeds)
    results = Path(args.results)
    if args.dry_run:
        from tabulate import tabulate

        rows = []
        for p in plan(matrix, profile, seeds, results, args.only, **_overrides(args)):
            done = read_record(store_dir(results, p.matrix) / p.record_name)
            rows.append(
                [
                    p.run.id,
                    p.seed,
                    p.run.preset,
                    p.run.describe(),
                    p.key,
                    "-" if done is None else done["status"],
                ]
            )
        print(
            tabulate(
                rows,
                headers=["run", "seed", "preset", "overrides", "key", "stored"],
                tablefmt="github",
            )
        )
        return 0
    t0 = time.perf_counter()
    records = run_matrix(
        matrix,
        profile,
        seeds,
        results,
        backend=args.backend,
        only=args.only,
        retry_failed=args.retry_failed,
        progress=not args.no_progress,
        ray_address=args.ray_address,
        **_overrides(args),
    )
    failed = [r for r in records if r["status"] == "failed"]
    print(
        f"{matrix.name}: {len(records) - len(failed)} runs done, {len(failed)} failed, "
        f"{time.perf_counter() - t0:.0f} s"
    )
    if not args.no_report:
        from .report import write_report

        path = write_report(matrix.name, results, Path(args.reports), root=root)
        print(f"report: {path}")
    return 1 if failed else 0


__all__ = ["SCHEMA", "PlannedRun", "execute", "plan", "read_record", "run_matrix"]
