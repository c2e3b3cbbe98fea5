"""Pinning the CPU float path: the same library kernels on every x86-64 CPU with AVX2.

What the pin does not give: the same bits on another CPU model. A pinned AMD EPYC and a
pinned Intel Xeon run of one `standard` config agree for two training steps and end
45 rSum apart (docs/across-machines.md), so a record reproduces bit for bit on its own
CPU model (:func:`seps.experiments.provenance.bits_key`). What it does give: one float path for a
pretraining build's check (:mod:`seps.runs.prebuild`), so a build made on one CPU type is
used on another, and the same kernels wherever a record is rerun.

Why: PyTorch, MKL, oneDNN and numpy each pick their CPU kernels by instruction set
(and MKL also by CPU vendor and model). The kernels sum in different orders, so the same
run gives other last bits on another CPU, and a few hundred training steps grow them
into other metrics (:mod:`seps.experiments.provenance` has the measured case). Each library can be
told which path to take, through an environment variable read when it first computes:

============================  ======================  ====================================
variable                      ``portable``            effect
============================  ======================  ====================================
``ATEN_CPU_CAPABILITY``       ``avx2``                PyTorch's CPU kernels: the AVX2 build
``MKL_CBWR``                  ``COMPATIBLE,STRICT``   MKL's reproducibility mode on its
                                                      one SSE2 branch for every vendor
``ONEDNN_MAX_CPU_ISA``        ``AVX2``                oneDNN (convolutions): at most AVX2
``NPY_DISABLE_CPU_FEATURES``  ``X86_V4 ...``          numpy: no AVX-512 dispatch targets
============================  ======================  ====================================

MKL is the narrow one: its documentation offers branches other than ``AUTO`` and
``COMPATIBLE`` on Intel CPUs only and silently takes ``AUTO`` elsewhere (measured here:
``MKL_CBWR=AVX2`` on AMD EPYC changes a run's last bits against the native path, as
``AUTO``'s reproducibility mode does), so only ``COMPATIBLE`` names the same code on
both vendors. What it costs depends on how much of the work is GEMMs, MKL's SSE2 ones
being about 2.8x slower than its AVX2 ones. Pinned over native on AMD EPYC: 1.09x wall
(paired whole-process runs, idle machine, median of 6 pairs, 1.05-1.29) for the
``laps``, ``code`` and ``paper`` heads' evaluation of 200 images under ``candidate``;
1.02x (5 pairs, 0.86-1.11) for a smoke-sized ``paper`` run (40 training steps at 48 px
and its evaluation); but about 1.9x for the ``synth-48`` pretraining, batch-96 backbone
GEMMs throughout (3,920 s against 2,066 s on the builds' own clocks, one build each,
niced tests beside part of the pinned one: not a benchmark); and 1.22x for a whole
``standard`` ``code`` run (200 steps and the 1,000-image evaluation; 296.5 s against
242.5 s, medians of 2 alternating pairs, 1.19-1.25).

``SEPS_FLOAT_PATH=portable`` in the environment asks for all four: :func:`apply_requested`
sets those not already set. The command line (``seps-bench``, ``python -m seps``) calls it
first thing, before anything imports torch (:func:`seps.cli.main`), so it always gets
it; ``import seps`` changes nothing, ``os.environ`` included. A program that uses the
library and wants the command line's numbers calls :func:`pin` before it imports torch
(or anything that does: ``seps.core.head``, ``seps.train``, ...)::

    import seps.runtime.float_path
    seps.runtime.float_path.pin()  # before torch loads
    import torch, seps

``seps-bench bench`` is the exception: it times kernels and writes no record, so unless
``SEPS_FLOAT_PATH`` is set it runs natively (``seps.cli.NATIVE_COMMANDS``), and its report
says which path it ran on.

``SEPS_FLOAT_PATH=native`` leaves every library to its own choice. Unset, the path is
:func:`default_path`'s, which :func:`apply_requested` writes into the environment (so
worker processes inherit the same decision): ``portable`` on x86-64 when it runs before
torch is imported (always so on the command line), ``native`` elsewhere (another
architecture has no AVX2 to pin; a program that imported torch first can no longer pin
torch's kernels, and its records say ``native``, which is what they are). A program
that never calls it runs natively unless its environment asks otherwise, and its
records say so too: :mod:`seps.experiments.provenance` stamps the variables in force, whoever set
them (``environment.cpu.overrides``).
:func:`check_in_force` is the runner's guard: it refuses a run whose pin did not take
effect (torch imported earlier by a host program, a variable set to something else, a
CPU without AVX2), since the record would claim a float path it did not have.

*Decision* (nothing in SPEC.md is about this): AVX2 is the level of PyTorch's and
oneDNN's kernels because every x86-64 CPU of the last decade has it. The pin is the
default since the recompute that came with the token-subset pretraining (README,
"Across machines"): the committed records are gathered over several sessions, not all on
one CPU type, and a pinned run is a float path of its own (it differs from the native
one even on an AVX2 CPU, through MKL), so records made natively on two CPU types would
come from two pretraining builds. What it costs is above. Not yet checked on a second
CPU type: that a pinned run on an Intel CPU equals one on an AMD CPU is what MKL's and
PyTorch's documentation promise, not something measured here.
This module imports nothing heavy: it must run before torch is imported.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping, MutableMapping

__all__ = [
    "ENV_VAR",
    "FLOAT_PATHS",
    "apply_requested",
    "check_in_force",
    "default_path",
    "pin",
    "requested",
]

#: The environment variable that names the float path.
ENV_VAR = "SEPS_FLOAT_PATH"

#: Each float path's environment: the variables it sets, with their values.
FLOAT_PATHS: dict[str, dict[str, str]] = {
    "native": {},
    "portable": {
        "ATEN_CPU_CAPABILITY": "avx2",
        "MKL_CBWR": "COMPATIBLE,STRICT",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        # numpy 2 groups AVX-512 as X86_V4 and two later targets; a name this CPU lacks is
        # ignored, so the same value serves every machine.
        "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR",
    },
}

#: torch's ``get_cpu_capability()`` under each pinned path.
_TORCH_CAPABILITY = {"portable": "AVX2"}


def requested(environ: Mapping[str, str] | None = None) -> str:
    """The float path ``SEPS_FLOAT_PATH`` asks for (``native`` when unset or empty: the
    command line, and :func:`pin`, set it by :func:`apply_requested`).

    Raises:
        ValueError: an unknown name, with the allowed ones.
    """
    env = os.environ if environ is None else environ
    name = (env.get(ENV_VAR) or "native").strip().lower()
    if name not in FLOAT_PATHS:
        raise ValueError(
            f"environment variable {ENV_VAR}: invalid value {env.get(ENV_VAR)!r}; "
            f"allowed: {', '.join(FLOAT_PATHS)}"
        )
    return name


#: Machine names (``platform.machine()``, lower case) of x86-64, the architecture the
#: ``portable`` pin is defined on.
_X86_64 = frozenset({"x86_64", "amd64"})


def default_path(machine: str | None = None, torch_imported: bool | None = None) -> str:
    """The float path when ``SEPS_FLOAT_PATH`` is unset: ``portable`` on x86-64 while
    torch is not imported yet, else ``native`` (see the module docstring)."""
    machine = platform.machine() if machine is None else machine
    if torch_imported is None:
        torch_imported = "torch" in sys.modules
    return "portable" if machine.lower() in _X86_64 and not torch_imported else "native"


def apply_requested(environ: MutableMapping[str, str] | None = None) -> None:
    """Write :func:`default_path` into ``SEPS_FLOAT_PATH`` when it is unset or empty, then
    set the requested path's variables that are not set yet; never raises (an unknown
    name or a conflicting value is reported by :func:`check_in_force`, where a one-line
    error can be shown)."""
    env = os.environ if environ is None else environ
    if not (env.get(ENV_VAR) or "").strip():
        env[ENV_VAR] = default_path()
    try:
        name = requested(env)
    except ValueError:
        return
    for key, value in FLOAT_PATHS[name].items():
        env.setdefault(key, value)


def pin() -> str:
    """Pin the float path the command line would (:func:`apply_requested` on
    ``os.environ``) and check that it took effect; call it before torch is imported.

    Returns:
        the path in force, ``portable`` or ``native``.

    Raises:
        ValueError: as :func:`check_in_force` (e.g. ``SEPS_FLOAT_PATH=portable`` asked
            for after torch was imported).
    """
    apply_requested()
    return check_in_force()


def check_in_force(environ: Mapping[str, str] | None = None) -> str:
    """The float path in force, after checking that the requested one took effect.

    Returns:
        the path's name (``native`` or ``portable``).

    Raises:
        ValueError: a variable set to another value than the pin's (named, with the value
            expected), or torch not running its AVX2 kernels (torch was
            imported before ``SEPS_FLOAT_PATH`` was applied, or the CPU has no AVX2) under
            ``portable``.
    """
    env = os.environ if environ is None else environ
    name = requested(env)
    for key, value in FLOAT_PATHS[name].items():
        if env.get(key) != value:
            raise ValueError(
                f"{ENV_VAR}={name} needs environment variable {key}={value!r}, found "
                f"{env.get(key)!r}; unset {key} or {ENV_VAR}"
            )
    want = _TORCH_CAPABILITY.get(name)  # MKL's branch cannot be read back from Python
    if want is not None and "torch" in sys.modules:
        have = sys.modules["torch"].backends.cpu.get_cpu_capability()
        if have != want:
            raise ValueError(
                f"{ENV_VAR}={name}: torch runs its {have} kernels, expected {want} (set "
                f"{ENV_VAR} before Python imports torch, e.g. on the command line, or call "
                "seps.runtime.float_path.pin() before importing torch; a CPU without AVX2 "
                f"cannot take this path: set {ENV_VAR}=native)"
            )
    return name
