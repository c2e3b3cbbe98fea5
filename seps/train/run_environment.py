"""The run environment: seeding, and what a result records about the machine.

- :func:`seed_everything` seeds Python, NumPy and PyTorch; :func:`epoch_seed` derives the
  seed of one epoch from the run's seed, which is what makes a resumed run reproduce the
  uninterrupted one;
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
