"""The ablation runner: plans a matrix, trains and evaluates each run, stores its record.

Each run of a matrix, under a profile and a seed, is keyed by a hash of its fully
resolved configs (:func:`seps.experiments.definitions.config_key`) and stored as one JSON record,
``<results>/<matrix>/<run id>-<key>-s<seed>.json``, written atomically. Completed runs are
skipped; a failed run is recorded with its error and traceback and does not stop the
others (``--retry-failed`` runs it again). Every record carries the
:func:`~seps.versioning.version.code_version` that produced it; a completed record of another
version
is *stale*: it is kept and counted, and ``--rerun-stale`` redoes the run after moving the
old record aside (:func:`decide`). Training state lives in
``<results>/_work/<train key>-s<seed>/`` (the epoch checkpoints): an interrupted run
resumes from its last epoch, and runs that differ only in the evaluation protocol
(``eval_dense_source``) share one training and only evaluate again. That folder names the
code version that trained in it; training state of other code is set aside as
``<folder>.stale`` and trained again, never resumed (:func:`claim_work_dir`).

Backends: ``local`` runs one after another in this process; ``ray``
(:mod:`seps.runs.ray_backend`) submits each group of runs that share a training as one Ray
task (one GPU each when CUDA is present), to a local Ray or to ``--ray-address``; records
land in the same store.
"""

from __future__ import annotations

import contextlib
import functools
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .. import train as trainer
from ..experiments.definition_checks import record_slug
from ..experiments.definitions import (
    Matrix,
    Profile,
    RunSpec,
    config_key,
    resolve,
    select_runs,
)
from ..experiments.provenance import here_bits_key, resume_warning, stamp
from ..experiments.staleness import (  # noqa: F401  (re-exported: the runner's API)
    WORK_VERSION_FILE,
    Decision,
    claim_work_dir,
    decide,
    is_stale,
    needs_run,
    reusable_work_dir,
    set_aside_stale,
    stale_message,
    stale_path,
    work_dir_version,
)
from ..io.store import (
    SCHEMA,
    RecordError,
    RunLock,
    atomic_write_json,
    clean_stale_temps,
    quarantine,
    read_record,
)
from ..runtime.float_path import check_in_force
from ..runtime.interrupts import check_stop, stop_on_sigterm
from ..runtime.machine_load import LOAD_FIELD, LoadWatch
from ..versioning.version import VERSION_KEY, code_version
from .prebuild import distinct_inputs, prebuild_pretraining
from .twins import copy_record, find_twin

#: Fields that change only the evaluation: runs that differ in nothing else share one
#: training. ``dense_source`` is not one of them: it decides the pairing in training too.
EVAL_ONLY_FIELDS = (
    "eval_dense_source",
    "eval_split",
    "eval_text_shard",
    "eval_image_shard",
    "eval_sim_noise",
    "eval_permute",
    "eval_checkpoint",
)


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
        return f"{record_slug(self.run.id)}-{self.key}-s{self.seed}.json"


def feature_cache_dir(results: str | Path) -> Path:
    """Where the runs of the store ``results`` cache their frozen backbones' features
    (shared by every matrix and by ``seps-bench ratio-scale``)."""
    return Path(results) / "_work" / "feature_cache"


def plan(
    matrix: Matrix,
    profile: Profile,
    seeds: list[int],
    results: Path,
    only: str | None = None,
    **train_overrides: Any,
) -> list[PlannedRun]:
    """Every (run, seed) of ``matrix`` whose run matches ``only``
    (:func:`~seps.experiments.definitions.select_runs`: a ``ValueError`` names a pattern that
    matches
    nothing)."""
    out = []
    for run in select_runs(matrix, only):
        for seed in seeds:
            try:  # a rule across fields (each field was checked where it was written)
                train_cfg, head = resolve(run, profile, seed, **train_overrides)
            except ValueError as exc:
                raise ValueError(
                    f"{matrix.path}: run {run.id!r} under profile {profile.name!r}: {exc}"
                ) from None
            key = config_key(train_cfg, head)
            train_key = config_key(train_cfg, head, exclude=EVAL_ONLY_FIELDS)
            work = results / "_work" / f"{train_key}-s{seed}"
            train_cfg.out_dir = str(work)
            train_cfg.cache_dir = str(feature_cache_dir(results))
            out.append(
                PlannedRun(matrix.name, profile.name, run, seed, train_cfg, head, key, train_key)
            )
    return out


def store_dir(results: Path, matrix: str) -> Path:
    return results / matrix


def record_path(results: Path, p: PlannedRun) -> Path:
    return store_dir(results, p.matrix) / p.record_name


def lock_path(results: Path, p: PlannedRun) -> Path:
    """One lock per training: the runs of a group share ``_work/<train key>-s<seed>/``."""
    return results / "_work" / f"{p.train_key}-s{p.seed}.lock"


def lock_labels(group: list[PlannedRun]) -> dict[str, Any]:
    """What the lock file of ``group``'s training names beside its holder: the matrix,
    profile, seed and run ids, so that ``seps-bench status`` can say what is running
    without resolving configs into keys (which needs torch; :mod:`seps.runs.status`)."""
    first = group[0]
    return {
        "matrix": first.matrix,
        "profile": first.profile,
        "seed": first.seed,
        "runs": [p.run.id for p in group],
    }


#: Failures that say something about the machine, not about the run: they are not final
#: (the next ``seps-bench run`` tries again without ``--retry-failed``).
ENVIRONMENT_ERRORS: tuple[type[BaseException], ...] = (MemoryError, ImportError, OSError)


def failure_kind(exc: BaseException) -> str:
    """``environment`` for out-of-memory, missing modules, I/O and CUDA errors; else
    ``error`` (deterministic for the config: final until ``--retry-failed``)."""
    if isinstance(exc, (*ENVIRONMENT_ERRORS, torch.cuda.OutOfMemoryError)):
        return "environment"
    if isinstance(exc, RuntimeError) and str(exc).lstrip().upper().startswith(("CUDA", "NCCL")):
        return "environment"
    return "error"


def _decision(path: Path, retry_failed: bool, rerun_stale: bool) -> Decision:
    """:func:`decide` for the record at ``path`` and this code's version.

    Raises:
        RecordError: the record is unreadable and ``retry_failed`` is off (it is left in
            place; with ``retry_failed`` it is moved aside as ``*.corrupt`` and redone).
    """
    try:
        rec = read_record(path)
    except RecordError:
        if not retry_failed:
            raise
        quarantine(path)
        return "run"
    return decide(rec, code_version(), retry_failed=retry_failed, rerun_stale=rerun_stale)


def labels(p: PlannedRun) -> dict[str, Any]:
    """The record fields that place ``p`` in its matrix (:data:`seps.runs.twins.LABELS`)."""
    return {
        "matrix": p.matrix,
        "profile": p.profile,
        "run_id": p.run.id,
        "describe": p.run.describe(),
        "preset": p.run.preset,
        "difference": p.run.difference,
        "paper_row": p.run.paper_row,
    }


def copy_twin(p: PlannedRun, results: Path) -> dict[str, Any] | None:
    """Store and return a copy of the record another matrix holds for ``p``'s key and
    seed at this code version (:mod:`seps.runs.twins`); ``None`` when there is none."""
    found = find_twin(results, p.matrix, p.key, p.seed, code_version(), here_bits_key())
    if found is None:
        return None
    path, twin = found
    record = copy_record(twin, path, results, labels(p))
    atomic_write_json(record_path(results, p), record, fault_point="record_write")
    return record


def _what_runs_here(work: Path) -> str:
    """What of a run this process does, given its training folder: the load it samples
    covers that part only (a training finished or begun by an earlier process was timed
    under that process's load, which its own record holds)."""
    if (work / "result.json").is_file():
        return "evaluation"
    if trainer.run_checkpoint_path(work).is_file():
        return "rest of training, evaluation"
    return "training, evaluation"


def _train_into(record: dict[str, Any], p: PlannedRun, tensorboard: bool = True) -> None:
    """Train and evaluate ``p``, adding its outcome to ``record`` (see :func:`execute`)."""
    try:
        # Looked up at call time (tests stand a failing trainer in for it).
        result = trainer.train(p.train_cfg, p.head, resume=True, tensorboard=tensorboard)
        record.update(
            status="done",
            error=None,
            traceback=None,
            **{k: result[k] for k in RESULT_FIELDS},
            # headroom beside text_only_rsum (seps.data.oracle); absent from older results
            **{k: result.get(k) for k in ("chance_rsum", "oracle_rsum")},
        )
        if result.get("movement") is not None:  # seps.train.movement
            record["movement"] = result["movement"]
        hist = result["history"]
        record["train_pairs_per_second"] = (
            sum(h["train_pairs_per_second"] for h in hist) / len(hist) if hist else None
        )
    except trainer.DivergedError as exc:
        record.update(
            status="diverged",
            error=str(exc),
            traceback=None,
            divergence=exc.info,
            history=exc.history,
            nonfinite_steps=exc.info["nonfinite_steps"],
            environment=trainer.environment(),
        )
    except Exception as exc:  # recorded, the matrix goes on
        record.update(
            status="failed",
            error=f"{type(exc).__name__}: {exc}",
            traceback=traceback.format_exc(),
            failure_kind=failure_kind(exc),
            environment=trainer.environment(),
        )


def execute(
    p: PlannedRun, results: Path, progress: bool = False, tensorboard: bool = True
) -> dict[str, Any]:
    """Train (or resume) and evaluate one planned run; write and return its record.

    ``status`` is ``done``; ``diverged`` (a non-finite loss ended training: the
    ``divergence`` field says at which epoch and step, with the count of non-finite
    steps); or ``failed`` with ``error``, ``traceback`` and ``failure_kind``
    (:func:`failure_kind`). Every record, whatever its status, carries the
    :func:`~seps.versioning.version.code_version` of this code under ``code_version``, and
    ``machine_load``: the load average sampled while it ran (:mod:`seps.runtime.machine_load`),
    which says whether its timings had the machine to themselves, and ``covers``: what
    of the run this process did (:func:`_what_runs_here`). ``tensorboard``: the training
    writes TensorBoard event files in its folder (:mod:`seps.train.hooks_tensorboard`;
    not part of the run or its key).
    """
    cfg = p.train_cfg
    cfg.progress = progress
    started = time.time()
    t0 = time.perf_counter()
    record: dict[str, Any] = {
        "schema": SCHEMA,
        VERSION_KEY: code_version(),
        **labels(p),
        "seed": p.seed,
        "key": p.key,
        "train_key": p.train_key,
        "head_config": p.head.to_dict(),
        "train_config": cfg.to_dict(),
        "started": started,
    }
    covers = _what_runs_here(Path(cfg.out_dir))
    with LoadWatch() as watch:  # what else ran while this run was timed
        _train_into(record, p, tensorboard)
    record[LOAD_FIELD] = {**watch.summary(), "covers": covers}
    stamp(record, cfg.pretrain_build)  # the CPU and pretrained weights, which decide the bits too
    record["wall_seconds"] = time.perf_counter() - t0
    atomic_write_json(record_path(results, p), record, fault_point="record_write")
    return record


#: What a finished training's result contributes to the run record.
RESULT_FIELDS = (
    "metrics",
    "evaluated_epoch",
    "dense_source",
    "eval_dense_source",
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
    "text_only_rsum",
    "tokenizer_hash",
)


def run_group(
    group: list[PlannedRun],
    results: Path,
    *,
    retry_failed: bool = False,
    rerun_stale: bool = False,
    progress: bool = False,
    block: bool = False,
    reuse: bool = True,
    say: Callable[[str], None] = print,
    tensorboard: bool = True,
) -> list[dict[str, Any]] | None:
    """Run the pending runs of one training group under its lock.

    Returns the records written, or ``None`` when another process holds the lock and
    ``block`` is False. With ``block`` it waits for the lock (saying so once); each
    run's record is read again once the lock is held, since the other process may have
    completed it meanwhile. With ``rerun_stale``, a stale record is moved aside
    (:func:`set_aside_stale`) just before its run is redone. Before the first run that
    executes, the group's work folder is claimed for this code (:func:`claim_work_dir`):
    training state written by other code is set aside, not resumed. With ``reuse``, a
    run whose key and seed another matrix of the store has already measured at this code
    version is copied from that record instead (:func:`copy_twin`).
    """
    lock = RunLock(lock_path(results, group[0]), about=lock_labels(group))
    if not lock.acquire():
        if not block:
            return None
        ids = ", ".join(f"{p.run.id} s{p.seed}" for p in group)
        say(f"waiting for {lock.describe()}, which is running {ids}")
        for _ in lock.wait():
            pass
    out = []
    claimed = False
    with lock:
        for p in group:
            path = record_path(results, p)
            try:
                todo = _decision(path, retry_failed, rerun_stale)
            except RecordError:  # named when the matrix was planned: left in place
                continue
            if todo not in ("run", "rerun-stale"):
                continue
            if todo == "rerun-stale":
                set_aside_stale(path)
            rec = copy_twin(p, results) if reuse else None
            if rec is not None:
                say(f"{p.run.id} s{p.seed}: copied from {rec['copied_from']} (same key and seed)")
                out.append(rec)
                continue
            check_stop(KEPT)  # SIGTERM between runs: stop before the next one
            if not claimed:
                _claim_work_dir(group, say)
                claimed = True
            rec = execute(p, results, progress=progress, tensorboard=tensorboard)
            say(f"{p.run.id} s{p.seed}: {rec['status']} in {rec['wall_seconds']:.0f} s")
            out.append(rec)
    return out


def _claim_work_dir(group: list[PlannedRun], say: Callable[[str], None]) -> None:
    work = Path(group[0].train_cfg.out_dir)
    old = work_dir_version(work)
    moved = claim_work_dir(work, code_version())
    if moved is not None:
        ids = ", ".join(f"{p.run.id} s{p.seed}" for p in group)
        say(
            f"{ids}: the training state in {work} was written by other code "
            f"({old or 'unknown version'}); kept as {moved.name}, training again"
        )


class MatrixOutcome(list):  # type: ignore[type-arg]
    """The records of a plan (a list, as before), plus :attr:`unreadable`: the record
    files ``run_matrix`` found unreadable and left alone, and :attr:`stale`: the stale
    records it kept (without ``rerun_stale``)."""

    def __init__(
        self,
        records: list[dict[str, Any]],
        unreadable: list[RecordError],
        stale: list[Path] | None = None,
    ) -> None:
        super().__init__(records)
        self.unreadable = unreadable
        self.stale = stale or []


#: What a matrix stopped by SIGTERM keeps (:mod:`seps.runtime.interrupts`).
KEPT = "every record written so far and each training's checkpoint"


@stop_on_sigterm()  # a SIGTERM stops the matrix at a safe point (seps.runtime.interrupts)
def run_matrix(
    matrix: Matrix,
    profile: Profile,
    seeds: list[int],
    results: Path,
    *,
    backend: str = "local",
    only: str | None = None,
    retry_failed: bool = False,
    rerun_stale: bool = False,
    progress: bool = True,
    ray_address: str | None = None,
    reuse: bool = True,
    say: Callable[[str], None] | None = None,
    tensorboard: bool = True,
    **train_overrides: Any,
) -> MatrixOutcome:
    """Run every pending (run, seed) of ``matrix``; return the records of the plan.

    A run is pending when it has no record, or a failed record whose failure came from
    the environment (or any failed/diverged one with ``retry_failed``). An unreadable
    record is named in the outcome and left in place unless ``retry_failed`` (then it is
    moved aside as ``*.corrupt`` and the run is done again). A record that would be
    skipped but was made by other code (:func:`is_stale`) is kept and counted in one
    line, unless ``rerun_stale``: then it is moved aside as ``*.stale.json`` and the run
    is done again (:func:`decide`). Runs sharing a training are done together under one
    lock; a group another process holds is waited for at the end. With ``reuse`` (the
    default), a run another matrix of the store has already measured (same key and
    seed, this code version) is copied, not evaluated again (:mod:`seps.runs.twins`). With
    ``tensorboard`` (the default) each training writes TensorBoard event files in its
    folder (``_work/<train key>-s<seed>/tensorboard/``); it is no part of any run.
    """
    from tqdm.auto import tqdm

    if backend not in ("local", "ray"):
        raise ValueError(f"--backend: invalid value {backend!r}; allowed: local, ray")
    say = say or tqdm.write
    check_in_force()  # before any run: a record must not claim a pin that did not take
    clean_stale_temps(results)
    planned = plan(matrix, profile, seeds, results, only, **train_overrides)
    groups: dict[tuple[str, int], list[PlannedRun]] = {}
    unreadable: list[RecordError] = []
    stale: list[Path] = []
    kept: list[Path] = []
    for p in planned:
        path = record_path(results, p)
        try:
            todo = _decision(path, retry_failed, rerun_stale)
        except RecordError as exc:
            unreadable.append(exc)
            say(f"{exc}; left in place (--retry-failed moves it aside and runs it again)")
            continue
        if todo in ("stale", "rerun-stale"):
            stale.append(path)
        if todo == "skip":
            kept.append(path)
        if todo in ("run", "rerun-stale"):
            groups.setdefault((p.train_key, p.seed), []).append(p)
    if stale:
        say(stale_message(matrix.name, len(stale), rerun_stale=rerun_stale))
    # Once per recipe, before any run seeds itself and outside every run's clock, for
    # both backends (see seps.runs.prebuild for why); a bad recipe stops here, before training.
    # Once per dataset too: each generated set and tokenizer cache is checked against its
    # seal (seps.io.derived) and made again when damaged.
    recipes = {g[0].train_cfg.pretrain_build: g[0].train_cfg for g in groups.values()}
    for cfg in distinct_inputs(g[0].train_cfg for g in groups.values()):
        prebuild_pretraining(cfg, progress=progress)
    n_todo = sum(len(g) for g in groups.values())
    existing = [r for r in map(read_record, kept) if r is not None]
    recipe = next(iter(recipes)) if len(recipes) == 1 else None
    warning = resume_warning(str(store_dir(results, matrix.name)), existing, n_todo, recipe)
    if warning:
        say(warning)
    if backend == "ray":
        from .ray_backend import run_on_ray  # Ray only when asked for

        run_on_ray(
            run_group,
            list(groups.values()),
            results,
            ray_address,
            retry_failed=retry_failed,
            rerun_stale=rerun_stale,
            reuse=reuse,
            tensorboard=tensorboard,
        )
    else:
        desc = f"{matrix.name} ({profile.name})"
        bar = tqdm(total=n_todo, desc=desc, disable=not progress, unit="run")
        held = []
        run = functools.partial(
            run_group,
            results=results,
            retry_failed=retry_failed,
            rerun_stale=rerun_stale,
            progress=progress,
            reuse=reuse,
            say=say,
            tensorboard=tensorboard,
        )
        for group in groups.values():
            check_stop(KEPT)
            bar.set_postfix_str(f"{group[0].run.id} s{group[0].seed}")
            recs = run(group)
            if recs is None:
                held.append(group)
                ids = ", ".join(f"{p.run.id} s{p.seed}" for p in group)
                say(f"{ids}: another process is training it; coming back to it at the end")
                continue
            _say_failures(recs, say)
            bar.update(len(group))
        for group in held:
            recs = run(group, block=True)
            _say_failures(recs or [], say)
            bar.update(len(group))
        bar.close()
    out = []
    for p in planned:
        with contextlib.suppress(RecordError):  # already in ``unreadable``
            rec = read_record(record_path(results, p))
            if rec is not None:
                out.append(rec)
    return MatrixOutcome(out, unreadable, [] if rerun_stale else stale)


def _say_failures(records: list[dict[str, Any]], say: Callable[[str], None]) -> None:
    for rec in records:
        if rec["status"] != "done":
            say(f"run {rec['run_id']} (seed {rec['seed']}) {rec['status']}: {rec['error']}")


def check_data_dirs(planned: list[PlannedRun]) -> None:
    """Refuse, before any training, data that no run could use (one message for the
    matrix instead of one failed record per run): :func:`seps.runs.data_checks.check_data_dirs`."""
    from .data_checks import check_data_dirs as check

    check(p.train_cfg for p in planned)


__all__ = [
    "SCHEMA",
    "Decision",
    "MatrixOutcome",
    "PlannedRun",
    "check_data_dirs",
    "claim_work_dir",
    "copy_twin",
    "decide",
    "execute",
    "is_stale",
    "labels",
    "plan",
    "read_record",
    "reusable_work_dir",
    "run_group",
    "run_matrix",
    "set_aside_stale",
    "stale_message",
    "stale_path",
    "work_dir_version",
]
