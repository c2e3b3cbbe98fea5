"""The ``seps-bench bench`` subcommand: options, their value parsers and the run.

Without ``--report`` it runs the pytest-benchmark suites shipped in
``benchmarks/`` (:func:`seps.experiments.ablation_index.shipped`); with it,
the latency report (:func:`seps.bench.latency.run_report`) with the settings of
:func:`bench_settings`. Listed in :mod:`seps.cli.registry`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from ..bench.latency import run_report
from ..bench.settings import QUICK_IMPLS, BenchSettings
from ..bench.workloads import GEOMETRIES
from ..core.kernels import IMPLEMENTATIONS
from ..runtime.devices import check_device
from .options import add_reports_option, deprecated_alias


# One parser per kind of value. They run inside the command (not as argparse ``type=``) so
# that a bad value is one ``ValueError`` line naming the option, which ``seps.cli.main``
# prints with exit code 2, like every other invalid input of ``seps-bench``.
def _invalid(option: str, value: str, expected: str) -> ValueError:
    return ValueError(f"{option}: invalid value {value!r}; expected {expected}")


def _positive_int(option: str, value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n <= 0:
        raise _invalid(option, value, "a positive integer")
    return n


def _positive_ints(option: str, value: str) -> tuple[int, ...]:
    """Comma-separated positive integers, e.g. ``32,64,128`` (at least one)."""
    expected = "comma-separated positive integers, e.g. 32,64,128"
    try:
        out = tuple(_positive_int(option, v) for v in value.split(",") if v.strip())
    except ValueError:
        raise _invalid(option, value, expected) from None
    if not out:
        raise _invalid(option, value, expected)
    return out


def _shard(option: str, value: str) -> tuple[int, int]:
    """``IMAGESxTEXTS``, e.g. ``100x500`` (``X`` works too)."""
    expected = "IMAGESxTEXTS with two positive integers, e.g. 100x500"
    try:
        images, texts = (_positive_int(option, v) for v in value.lower().split("x"))
    except ValueError:  # also a count of parts other than two
        raise _invalid(option, value, expected) from None
    return images, texts


def _names(option: str, value: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
    names = tuple(v for v in value.split(",") if v)
    for name in names:
        if name not in allowed:
            raise ValueError(f"{option}: invalid value {name!r}; allowed: {', '.join(allowed)}")
    return names


def _defaults(full: object, quick: object) -> str:
    return f"(default {full}; with --quick {quick})"


_FULL = BenchSettings()
_QUICK = BenchSettings.quick_settings("cpu")


def add_arguments(p: argparse.ArgumentParser) -> None:
    # The size options default to None so that --quick can tell the sizes the user gave
    # (applied on top of the quick ones) from the ones left out; the defaults are in
    # BenchSettings and BenchSettings.quick_settings, quoted in each help.
    def shard(s: BenchSettings, kind: str) -> str:
        return f"{getattr(s, kind + '_images')}x{getattr(s, kind + '_texts')}"

    p.description = (
        "Micro-benchmarks of the TopK (patch selection) and HRPA kernels and of the whole head, "
        "per implementation (loop, batched, compiled, triton), and with --report the latency "
        "report reports/latency.md + reports/latency.png. Without --report it runs the "
        "pytest-benchmark suites shipped in benchmarks/ (like `tox -e bench`)."
    )
    p.add_argument(
        "--report",
        action="store_true",
        help="measure everything in one run and write latency.md and latency.png in the "
        "--reports folder (written atomically)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="check the pipeline: tiny sizes (C=64, a few pairs; the size options below "
        "override them when given), only the implementations "
        f"{','.join(QUICK_IMPLS)} unless --impls names others, and CPU peak memory read "
        "in-process instead of from a fresh process per step. Measured on this project's "
        "2-core CPU: about 8 s when idle, 16-40 s while other jobs kept the cores busy (8 s "
        "with --threads 1 under the same load); "
        "naming compiled in --impls adds torch.compile's set-up (about 6 s with a warm "
        "compile cache, 26 s cold). The numbers are not meaningful",
    )
    p.add_argument(
        "--device",
        default="cuda" if torch.cuda.is_available() else "cpu",
        help="device to benchmark on: cpu, cuda, cuda:N or auto (default: cuda if available, "
        "else cpu); refused before any work if this machine lacks it",
    )
    p.add_argument(
        "--impls",
        default=None,
        help="comma-separated implementations for the micro-benchmarks "
        f"{_defaults('all: ' + ','.join(_FULL.impls), ','.join(_QUICK.impls))}; "
        "unavailable ones are skipped with their reason",
    )
    p.add_argument(
        "--geometries",
        default=None,
        help=f"comma-separated geometries out of {','.join(GEOMETRIES)} "
        f"{_defaults(','.join(_FULL.geometries), ','.join(_QUICK.geometries))}",
    )
    p.add_argument(
        "--eval-shard",
        default=None,
        metavar="IMAGESxTEXTS",
        help="evaluation shard of the goal measurement "
        f"{_defaults(shard(_FULL, 'eval'), shard(_QUICK, 'eval'))}",
    )
    p.add_argument(
        "--micro-shard",
        default=None,
        metavar="IMAGESxTEXTS",
        help="shard of the micro-benchmarks "
        f"{_defaults(shard(_FULL, 'micro'), shard(_QUICK, 'micro'))}; the pytest suites use "
        "128x1024 on CUDA",
    )
    p.add_argument(
        "--train-batches",
        default=None,
        help="comma-separated training batch sizes of the micro-benchmarks "
        + _defaults(
            ",".join(map(str, _FULL.train_batches)), ",".join(map(str, _QUICK.train_batches))
        ),
    )
    p.add_argument(
        "--threads",
        default=None,
        help="torch CPU threads (default: torch's default, the number of cores)",
    )
    p.add_argument(
        "--repeats",
        default=None,
        help="timed calls per measurement after the warm-up; the best is kept (loop: 1) "
        f"{_defaults(_FULL.repeats, _QUICK.repeats)}. "
        "The goals use it as their number of rounds: evaluation rounds interleave the "
        f"loop's {BenchSettings.eval_parts} text shards with whole batched calls and "
        "report means; training rounds alternate one step of each and report the best",
    )
    add_reports_option(p)
    deprecated_alias(p, "--out", "--reports")
    p.add_argument(
        "--json",
        metavar="PATH",
        default=None,
        help="also write the numbers as JSON: with --report the latency report's (settings, "
        "goals, presets, micro-benchmarks); without it, pytest-benchmark's --benchmark-json",
    )
    p.add_argument("pytest_args", nargs="*", help="extra arguments passed to pytest (no --report)")


def bench_settings(args: argparse.Namespace) -> BenchSettings:
    """The report's settings: the full or the quick defaults, then every size option the
    user gave. Raises ``ValueError`` naming the option for a device this machine lacks or
    an invalid value, before any work."""
    device = check_device(args.device)
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    impls = None if args.impls is None else _names("--impls", args.impls, IMPLEMENTATIONS)
    if args.quick:
        s = BenchSettings.quick_settings(device, impls)
    else:
        s = BenchSettings(device=device, impls=IMPLEMENTATIONS if impls is None else impls)
    if args.geometries is not None:
        s.geometries = _names("--geometries", args.geometries, tuple(GEOMETRIES))
    if args.eval_shard is not None:
        s.eval_images, s.eval_texts = _shard("--eval-shard", args.eval_shard)
    if args.micro_shard is not None:
        s.micro_images, s.micro_texts = _shard("--micro-shard", args.micro_shard)
    if args.train_batches is not None:
        s.train_batches = _positive_ints("--train-batches", args.train_batches)
    if args.repeats is not None:
        s.repeats = _positive_int("--repeats", args.repeats)
    return s


def _check_outputs(args: argparse.Namespace) -> None:
    """Refuse, before minutes of measuring, outputs that cannot be written: a ``--json``
    that is a folder, a ``--reports`` that is a file."""
    if args.json is not None and Path(args.json).is_dir():
        raise ValueError(f"--json: {args.json}: is a folder; expected a file to write")
    if args.report and Path(args.reports).exists() and not Path(args.reports).is_dir():
        raise ValueError(f"--reports: {args.reports}: is a file; expected a folder")


def run(args: argparse.Namespace) -> int:
    s = bench_settings(args)  # validates everything before any work
    _check_outputs(args)
    if args.threads is not None:
        torch.set_num_threads(_positive_int("--threads", args.threads))
    if not args.report:
        import pytest  # an optional dependency (the "test" extra): only this path needs it

        from ..experiments.ablation_index import shipped

        SUITES = shipped("benchmarks")

        extra = [] if args.json is None else [f"--benchmark-json={args.json}"]
        return int(pytest.main([str(SUITES), "--benchmark-only", "-q", *extra, *args.pytest_args]))
    cmd = (
        "seps-bench " + " ".join(sys.argv[1:])
        if sys.argv[0].endswith("seps-bench")
        else ("seps-bench bench --report" + (" --quick" if args.quick else ""))
    )
    json_path = None if args.json is None else Path(args.json)
    md = run_report(s, Path(args.reports), cmd, lambda m: print(m, flush=True), json_path=json_path)
    print(f"wrote {md} and {md.with_suffix('.png')}" + (f" and {json_path}" if json_path else ""))
    return 0
