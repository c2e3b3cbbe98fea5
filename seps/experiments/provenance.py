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
adding them changed no code version; this module is not hashed (``seps/versioning/version.py``).
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ..io.formatting import fmt_n
from ..runtime.float_path import ENV_VAR, FLOAT_PATHS
from ..train.pretrain import is_complete, pretrained_dir

__all__ = [
    "CPU_ENV_OVERRIDES",
    "UNRECORDED_CPU",
    "bits_key",
    "cpu_identity",
    "cpu_label",
    "float_path_key",
    "here_bits_key",
    "pretrain_fingerprint",
    "record_bits_key",
    "record_cpu_model",
    "resume_warning",
    "stamp",
]

#: Environment variables that change which float path runs: ``ATEN_CPU_CAPABILITY``
#: caps PyTorch's kernel dispatch, ``MKL_CBWR`` fixes MKL's code branch,
#: ``ONEDNN_MAX_CPU_ISA`` caps oneDNN's, ``NPY_DISABLE_CPU_FEATURES`` turns off numpy
#: dispatch targets, and ``SEPS_FLOAT_PATH`` sets all four (:mod:`seps.runtime.float_path`).
#: Recorded when set.
CPU_ENV_OVERRIDES = (
    "ATEN_CPU_CAPABILITY",
    "MKL_CBWR",
    "ONEDNN_MAX_CPU_ISA",
    "NPY_DISABLE_CPU_FEATURES",
    ENV_VAR,
)

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
    overrides = _overrides(cpu)
    pinned = _pinned(overrides)
    if pinned:
        # The pin's four variables in one word: labels stay one short line.
        overrides = {k: v for k, v in overrides.items() if k not in FLOAT_PATHS[pinned]}
        overrides.pop(ENV_VAR, None)
        label += f"; float path pinned to {pinned}"
    if overrides:
        label += "; " + ", ".join(f"{k}={v}" for k, v in sorted(overrides.items()))
    return label + ")"


def _overrides(cpu: dict[str, Any]) -> dict[str, str]:
    """The record's overrides, less ``SEPS_FLOAT_PATH=native`` (the same as unset)."""
    out = dict(cpu.get("overrides") or {})
    if (out.get(ENV_VAR) or "native").strip().lower() == "native":
        out.pop(ENV_VAR, None)
    return out


def _pinned(overrides: dict[str, str]) -> str | None:
    """The pinned float path whose every variable ``overrides`` holds, else ``None``."""
    for name, env in FLOAT_PATHS.items():
        if env and all(overrides.get(k) == v for k, v in env.items()):
            return name
    return None


def float_path_key(cpu: dict[str, Any] | None) -> tuple[Any, ...] | None:
    """What decides a record's float path, comparable between records (``None``: not
    recorded). Under a pinned path (:mod:`seps.runtime.float_path`) the libraries' levels and the
    pin; natively also the CPU model, since MKL picks its code by vendor and model."""
    if not cpu:
        return None
    levels = (cpu.get("torch_capability"), tuple(cpu.get("numpy_dispatch") or ()))
    pinned = _pinned(_overrides(cpu))
    if pinned:
        return ("pinned", pinned, *levels)
    overrides = tuple(sorted(_overrides(cpu).items()))
    return ("native", cpu.get("model"), *levels, overrides)


def bits_key(cpu: dict[str, Any] | None) -> tuple[Any, ...] | None:
    """What a bitwise rerun needs of the machine (``None``: not recorded): the float path
    (:func:`float_path_key`) and, even under a pin, the CPU model.

    Why the model counts under a pin too: the pin makes Intel and AMD run the same
    library kernels, but not the same bits. Measured at ``standard``: ``controls/paper``
    seed 2, pinned to ``portable`` on an AMD EPYC and on an Intel Xeon, from the same
    pretrained weights, agrees for two steps, differs in the 8th digit of a gradient norm
    at step 3, and ends 220.8 against 266.2 rSum (docs/across-machines.md). So the runner
    copies a record from another matrix (:mod:`seps.runs.twins`) and resumes a matrix without
    a warning only on the same key. A pretraining build is weights with a fingerprint,
    not a run, so its check (:mod:`seps.runs.prebuild`) keeps :func:`float_path_key`.
    """
    path = float_path_key(cpu)
    return None if path is None else (*path, cpu.get("model"))  # type: ignore[union-attr]


def here_bits_key() -> tuple[Any, ...] | None:
    """:func:`bits_key` of this machine, as the runner would stamp it now."""
    return bits_key(cpu_identity())


def record_bits_key(record: dict[str, Any]) -> tuple[Any, ...] | None:
    """:func:`bits_key` of the machine that made ``record`` (its ``environment.cpu``)."""
    return bits_key(_cpu_of(record))


def resume_warning(
    where: str, existing: list[dict[str, Any]], to_run: int, pretrain: str | None
) -> str | None:
    """One line when runs about to be made here will sit beside records made on another
    machine (:func:`bits_key`) or from other pretrained weights, else ``None``.

    Args:
        where: the store folder, named in the line.
        existing: the records already there for the matrix's other planned runs.
        to_run: how many runs are about to be made (no line when 0).
        pretrain: the runs' pretraining recipe (built by now), or ``None``.

    A matrix is compared pair by pair, so a store resumed on another machine mixes the
    machine's effect into its differences; measured: about +8 rSum on every preset
    between two CPU types on their native paths, and as much as two seeds apart (220.8
    against 266.2 rSum) between a pinned AMD and a pinned Intel run of one config at
    `standard` (docs/across-machines.md). The runner says so once, before it
    starts; it does not refuse, since the numbers may still be wanted.
    """
    if not to_run or not existing:
        return None
    here_cpu = here_bits_key()
    here_weights = None
    if pretrain is not None and is_complete(pretrained_dir(pretrain)):
        here_weights = pretrain_fingerprint(pretrained_dir(pretrain))
    parts = []
    for what, mine, theirs in (
        ("machine", here_cpu, [record_bits_key(r) for r in existing]),
        ("pretrained weights", here_weights, [_weights_of(r, pretrain) for r in existing]),
    ):
        if mine is None:
            continue
        theirs = [t for t in theirs if t != _NOT_COMPARED]
        unknown = sum(t is None for t in theirs)
        other = sum(t is not None and t != mine for t in theirs)
        if unknown or other:
            parts.append(f"{what}: {other} other, {unknown} not recorded")
    if not parts:
        return None
    return (
        f"{where}: {fmt_n(to_run, 'run')} to make here beside {fmt_n(len(existing), 'record')} "
        f"that may differ in {'; '.join(parts)}. Paired differences between them include the "
        "machine's own effect (docs/across-machines.md); a fresh --results folder avoids it"
    )


def _weights_of(record: dict[str, Any], pretrain: str | None) -> str | None:
    """The record's pretrain fingerprint when it started from recipe ``pretrain``; a
    record of another recipe (or none) is not compared: its fingerprint is not missing."""
    cfg = record.get("train_config")
    if not isinstance(cfg, dict) or cfg.get("pretrain") != pretrain:
        return _NOT_COMPARED
    return record.get("pretrain_fingerprint")


#: :func:`_weights_of` of a record that started from other (or no) pretraining.
_NOT_COMPARED = "not compared"


def _cpu_of(record: Mapping[str, Any]) -> dict[str, Any] | None:
    env = record.get("environment")
    return env.get("cpu") if isinstance(env, Mapping) else None


#: What :func:`record_cpu_model` names for a record made before the runner stamped its CPU.
NO_CPU = "CPU not recorded"


def record_cpu_model(record: Mapping[str, Any]) -> str:
    """The CPU model that made ``record`` (its ``environment.cpu.model``), or
    :data:`NO_CPU` for a record made before the runner stamped it."""
    cpu = _cpu_of(record)
    return str(cpu.get("model")) if isinstance(cpu, Mapping) else NO_CPU


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
        if name == "projections.safetensors" and not path.is_file():
            continue  # a unimodal build keeps no projections (seps.train.unimodal)
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
