"""Kernel micro-benchmarks and the latency report: ``seps-bench bench`` (issue 5).

One concept per module, imported one way (each only from the ones below it):

- :mod:`~seps.bench.latency`: the report: render, plot, :func:`run_report`;
- :mod:`~seps.bench.sections`: the measurements of each section of the report;
- :mod:`~seps.bench.flops`: FLOPs of the head by stage and per pair, the SPEC.md minimum;
- :mod:`~seps.bench.stages`: the head's stages (which function is which) and their time;
- :mod:`~seps.bench.settings`: :class:`BenchSettings`, full and quick;
- :mod:`~seps.bench.cases`: the benchmarked calls (TopK, HRPA, whole head in evaluation
  and training), per implementation of :data:`seps.core.kernels.IMPLEMENTATIONS`;
- :mod:`~seps.bench.timing`: timing (best of N, alternating, interleaved) and peak memory;
- :mod:`~seps.bench.workloads`: geometries, caption lengths, inputs, heads, configs and
  the single-difference variants (read from ``ablations/differences.yaml``).

The ``bench`` subcommand is :mod:`seps.cli.bench`. The workloads are shared with
``suites/``, the pytest-benchmark suites.
"""

from __future__ import annotations

from .cases import eval_fn, hrpa_fn, topk_fn, train_fn
from .latency import plot, render_report, run_report, speedups
from .sections import (
    flop_profile_section,
    full_eval_section,
    goal_section,
    micro_section,
    presets_section,
    stage_time_section,
)
from .settings import QUICK_IMPLS, QUICK_SKIPS, BenchSettings
from .stages import STAGES, instrument, stage_seconds
from .timing import (
    measure,
    measure_alternating,
    measure_interleaved,
    round_ratios,
    rss_kb,
    train_fits,
    train_peak_rss_mb,
)
from .workloads import (
    GEOMETRIES,
    VARIANT_FINDINGS,
    VARIANT_LABELS,
    bench_config,
    caption_lengths,
    make_head,
    make_inputs,
    variants,
)

__all__ = [
    "GEOMETRIES",
    "QUICK_IMPLS",
    "QUICK_SKIPS",
    "STAGES",
    "VARIANT_FINDINGS",
    "VARIANT_LABELS",
    "BenchSettings",
    "bench_config",
    "caption_lengths",
    "eval_fn",
    "flop_profile_section",
    "full_eval_section",
    "goal_section",
    "hrpa_fn",
    "instrument",
    "make_head",
    "make_inputs",
    "measure",
    "measure_alternating",
    "measure_interleaved",
    "micro_section",
    "plot",
    "presets_section",
    "render_report",
    "round_ratios",
    "rss_kb",
    "run_report",
    "speedups",
    "stage_seconds",
    "stage_time_section",
    "topk_fn",
    "train_fits",
    "train_fn",
    "train_peak_rss_mb",
    "variants",
]
