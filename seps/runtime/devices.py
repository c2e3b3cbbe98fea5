"""Device names as the command line takes them: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.

One place for the check, so that ``train``, ``eval``, ``run`` and ``bench`` all refuse a
device this machine does not have with the same one-line message, before any work
starts (a run that fails later would leave a record behind; see ``seps.runs.runner``).
"""

from __future__ import annotations

import torch

__all__ = ["check_device", "resolve_device", "valid_device_name"]


def valid_device_name(name: str) -> bool:
    """True for ``auto``, ``cpu``, ``cuda`` and ``cuda:N`` (N a non-negative integer)."""
    if name in ("auto", "cpu", "cuda"):
        return True
    return name.startswith("cuda:") and name[5:].isdigit()


def check_device(name: str, option: str = "--device") -> str:
    """Return ``name`` if this machine can use it, else raise a ``ValueError`` naming
    ``option``: unknown names, CUDA without CUDA, and a CUDA index past the last GPU."""
    if not valid_device_name(name):
        raise ValueError(f"{option}: invalid value {name!r}; expected auto, cpu, cuda or cuda:N")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ValueError(
                f"{option}: {name!r} requested but CUDA is not available on this machine "
                "(torch.cuda.is_available() is False); use --device cpu or auto"
            )
        index = int(name[5:]) if ":" in name else 0
        count = torch.cuda.device_count()
        if index >= count:
            raise ValueError(
                f"{option}: {name!r} requested but this machine has {count} CUDA device(s)"
            )
    return name


def resolve_device(name: str, option: str = "--device") -> torch.device:
    """The ``torch.device`` of ``name``; ``auto`` picks CUDA when it exists."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(check_device(name, option))
