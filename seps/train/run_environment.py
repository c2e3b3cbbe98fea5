"""The run environment: seeding, and what a result records about the machine.

- :func:`seed_everything` seeds Python, NumPy and PyTorch; :func:`epoch_seed` derives the
  seed of one epoch from the run's seed, which is what makes a resumed run reproduce the
  uninterrupted one; :func:`rng_states` / :func:`set_rng_states` save and restore the
  random states of a run stopped mid-epoch;
- :func:`environment` records library versions, device and git commit with every result;
- :func:`peak_memory` is the peak memory of the device (CUDA) or the process (CPU).
"""

from __future__ import annotations

import platform
import random
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_states(device: torch.device) -> dict[str, Any]:
    """Every global random state a training step draws from (Python, NumPy, PyTorch's CPU
    and CUDA generators), as tensors and plain data: saved with a run stopped mid-epoch."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    out: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss],
        "torch": torch.get_rng_state(),
    }
    if device.type == "cuda":
        out["cuda"] = torch.cuda.get_rng_state(device)
    return out


def set_rng_states(states: dict[str, Any], device: torch.device) -> None:
    """Restore what :func:`rng_states` saved."""
    random.setstate(states["python"])
    kind, keys, pos, has_gauss, gauss = states["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    torch.set_rng_state(states["torch"])
    if "cuda" in states and device.type == "cuda":
        torch.cuda.set_rng_state(states["cuda"], device)


def epoch_seed(seed: int, epoch: int) -> int:
    return (seed * 1_000_003 + epoch * 7919 + 17) % 2**31


def environment() -> dict[str, Any]:
    """Library versions, device and git commit, recorded with every result."""
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda if torch.cuda.is_available() else None,
        "device_name": torch.cuda.get_device_name(0)
        if torch.cuda.is_available()
        else platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(),
    }
    for mod in ("timm", "transformers", "numpy"):
        try:
            env[mod] = __import__(mod).__version__
        except Exception:  # pragma: no cover - optional
            env[mod] = None
    try:
        env["git_commit"] = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).resolve().parent,
        ).stdout.strip()
    except Exception:
        env["git_commit"] = None
    return env


def peak_memory(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    try:
        # Imported here: ``resource`` exists on POSIX only.
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
    except Exception:  # pragma: no cover - non-POSIX
        return 0
