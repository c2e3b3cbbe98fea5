"""What else decides a record's bits: the CPU's float path and the pretrained weights.

Why this exists: a record's numbers are a function of its configs and code version
*and* of the machine's floating-point path. PyTorch dispatches its CPU kernels by
instruction set (``torch.backends.cpu.get_cpu_capability()``: AVX2, AVX512, ...), numpy
its ufuncs by its own dispatch targets, and MKL picks a code path per CPU vendor and
model; each changes the order of float sums, so the same run gives other last bits, and
200 training steps (4,500 for the pretraining) grow last bits into other numbers. Found
on an AMD EPYC (AVX2) machine: the committed `standard` records, made on machines whose
CPU was not recorded, reran with other metrics at the same code version (`laps` seed 0
of `seven-differences`: rSum 173.62 stored, 186.40 rerun; the `synth-48` pretraining
built there differs too). So the runner stamps every record with:

- ``environment.cpu`` (:func:`cpu_identity`): the CPU model and the dispatch levels of
  torch and numpy, plus the environment variables that override them;
- ``pretrain_fingerprint`` (:func:`pretrain_fingerprint`): a hash of the pretrained
  weight files the run started from, so a record says which backbones it fine-tuned.

A bitwise rerun is promised only where both match (``seps.report`` shows the CPUs of
a table's records). Both are stamped by the runner, not by the training modules, so
adding them changed no code version; this module is not hashed (``seps/version.py``).
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
from pathlib import Path
from typing import Any

import torch

from .train.pretrain import is_complete, pretrained_dir

__all__ = [
    "CPU_ENV_OVERRIDES",
    "UNRECORDED_CPU",
    "cpu_identity",
    "cpu_label",
    "pretrain_fingerprint",
    "stamp",
]

#: Environment variables that change which float path runs: ``ATEN_CPU_CAPABILITY``
#: caps PyTorch's kernel dispatch, ``MKL_CBWR`` fixes MKL's code branch,
#: ``NPY_DISABLE_CPU_FEATURES`` turns off numpy dispatch targets. Recorded when set.
CPU_ENV_OVERRIDES = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "NPY_DISABLE_CPU_FEATURES")

#: :func:`cpu_label` of a record made before the runner stamped the CPU.
UNRECORDED_CPU = "not recorded"

#: Weight files of a pretraining folder (:mod:`seps.train.pretrain`), in hashing order;
#: the tokenizer and ``meta.json`` (which holds a time) are left out.
_WEIGHT_FILES = ("vision.safetensors", "projections.safetensors", "text/model.safetensors")


def _cpu_model() -> str:
    """The ``model name`` line of ``/proc/cpuinfo`` (Linux), else ``platform.processor()``."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _numpy_dispatch() -> list[str]:
    """numpy's dispatch targets that this CPU enables (e.g. ``X86_V3``, ``AVX512_SKX``)."""
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    except ImportError:  # numpy < 2 keeps them under numpy.core
        try:
            from numpy.core._multiarray_umath import (  # type: ignore[no-redef]
                __cpu_dispatch__,
                __cpu_features__,
            )
        except ImportError:
            return []
    return sorted(k for k in __cpu_dispatch__ if __cpu_features__.get(k))


@functools.cache
def cpu_identity() -> dict[str, Any]:
    """The CPU facts that decide the float path: ``model``, ``torch_capability``,
    ``numpy_dispatch`` and ``overrides`` (the set variables of :data:`CPU_ENV_OVERRIDES`)."""
    return {
        "model": _cpu_model(),
        "torch_capability": torch.backends.cpu.get_cpu_capability(),
        "numpy_dispatch": _numpy_dispatch(),
        "overrides": {k: os.environ[k] for k in CPU_ENV_OVERRIDES if k in os.environ},
    }


def cpu_label(cpu: dict[str, Any] | None) -> str:
    """One line for a report: ``AMD EPYC (torch AVX2, numpy X86_V3)``;
    :data:`UNRECORDED_CPU` for a record made before the runner stamped the CPU."""
    if not cpu:
        return UNRECORDED_CPU
    numpy_levels = ", ".join(cpu.get("numpy_dispatch") or []) or "baseline"
    label = f"{cpu.get('model')} (torch {cpu.get('torch_capability')}, numpy {numpy_levels}"
    overrides = cpu.get("overrides") or {}
    if overrides:
        label += "; " + ", ".join(f"{k}={v}" for k, v in sorted(overrides.items()))
    return label + ")"


def pretrain_fingerprint(folder: str | Path | None) -> str | None:
    """16 hex digits of a sha256 over the pretraining's weight files (``None`` without a
    folder). Two runs with equal configs and code version start from the same backbones
    exactly when their fingerprints are equal."""
    if folder is None:
        return None
    root = Path(folder)
    h = hashlib.sha256()
    for name in _WEIGHT_FILES:
        path = root / name
        h.update(name.encode() + b"\0")
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()[:16]


def stamp(record: dict[str, Any], pretrain: str | None) -> None:
    """Add ``environment.cpu`` and ``pretrain_fingerprint`` to a run record in place
    (``pretrain``: the run's recipe name, or ``None``). A failed record without an
    environment gets the CPU under a new one."""
    record.setdefault("environment", {})
    if isinstance(record["environment"], dict):
        record["environment"]["cpu"] = cpu_identity()
    folder = None
    if pretrain is not None:
        built = pretrained_dir(pretrain)
        folder = built if is_complete(built) else None
    record["pretrain_fingerprint"] = pretrain_fingerprint(folder)
