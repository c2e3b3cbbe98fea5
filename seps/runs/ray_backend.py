"""The ``ray`` backend of the runner: each group of runs that shares a training is one Ray
task (one GPU each when CUDA is present), on a local Ray or at ``--ray-address``.

Kept apart from :mod:`seps.runs.runner` so that the runner, which every ``run`` imports, stays
one concept and Ray is imported only when asked for. The task receives the runner's
group function as an argument (pickled by reference), so this module imports nothing of
the runner and the import graph stays one way.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..runtime.float_path import ENV_VAR, FLOAT_PATHS


def _execute_group(
    job: Callable[..., Any],
    group: Sequence[Any],
    results: str,
    retry_failed: bool,
    rerun_stale: bool,
    reuse: bool,
    tensorboard: bool = True,
) -> None:
    # Inside the worker: wait for a group another process holds instead of skipping it,
    # since the driver has no second pass over held groups under this backend.
    job(
        group,
        Path(results),
        retry_failed=retry_failed,
        rerun_stale=rerun_stale,
        block=True,
        reuse=reuse,
        tensorboard=tensorboard,
    )


def run_on_ray(
    job: Callable[..., Any],
    groups: Sequence[Sequence[Any]],
    results: Path,
    address: str | None,
    *,
    retry_failed: bool,
    rerun_stale: bool,
    reuse: bool,
    tensorboard: bool = True,
) -> None:
    """Run ``job(group, results, ...)`` for every group as one Ray task each; return when
    all are done. Starts (and stops) a local Ray unless one is already initialised."""
    try:
        import ray
    except ImportError as exc:
        raise ValueError(
            "--backend ray: Ray is not installed (pip install 'seps-bench[ray]')"
        ) from exc
    import torch

    started_here = not ray.is_initialized()
    if started_here:
        # The workers take this process's float path: on a cluster they do not inherit its
        # environment, and importing seps no longer pins (seps.runtime.float_path).
        names = {ENV_VAR, *(k for env in FLOAT_PATHS.values() for k in env)}
        pinned = {k: os.environ[k] for k in sorted(names) if k in os.environ}
        ray.init(
            address=address,
            include_dashboard=False,
            ignore_reinit_error=True,
            log_to_driver=False,
            runtime_env={"env_vars": pinned},
        )
    try:
        gpus = 1 if torch.cuda.is_available() else 0
        task = ray.remote(num_gpus=gpus, num_cpus=1)(_execute_group)
        args = (str(results), retry_failed, rerun_stale, reuse, tensorboard)
        ray.get([task.remote(job, list(g), *args) for g in groups])
    finally:
        if started_here:
            ray.shutdown()


__all__ = ["run_on_ray"]
