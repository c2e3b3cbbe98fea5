"""Timing and peak memory of benchmark calls.

Timing: wall clock after one warm-up call, best of ``repeats`` (:func:`measure`); on
CUDA with CUDA events after warm-up. Speed-up goals call two implementations in
alternation (:func:`measure_alternating`) or interleave the slow one's shards with
whole calls of the fast one (:func:`measure_interleaved`), so that both see the same
machine load.

Peak memory: CUDA max allocated during the call; on CPU the growth of the peak RSS
(``VmHWM``, reset through ``/proc/self/clear_refs``), which reads low once an earlier
call grew the heap; hence :func:`train_peak_rss_mb`, one training step in a fresh
process. :func:`train_fits` estimates whether a training step fits in memory at all.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from .workloads import GEOMETRIES


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def rss_kb(field: str) -> int:
    """A field of ``/proc/self/status`` in kB (``VmRSS``, ``VmHWM``); 0 where unreadable."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def measure(
    fn: Callable[[], Any], device: str = "cpu", repeats: int = 3, warmup: bool = True
) -> dict[str, Any]:
    """Best time (s) of ``repeats`` calls after a warm-up, the peak memory (MB) and the
    last call's output (``out``).

    Hand-written rather than ``torch.utils.benchmark.Timer``, which does not fit:

    - each call's peak memory is read around that very call (CUDA max allocated, or the
      peak RSS after resetting it), which Timer has no hook for;
    - the callers need the output of the timed call (the goal compares the loop's and
      the batched outputs; :func:`measure_interleaved` keeps every part's), which Timer
      discards;
    - on CUDA the time is that of CUDA events recorded around the call, whereas Timer
      times the host clock between synchronisations (launch overhead included), and
      Timer runs on its own thread count (``num_threads=1`` by default), not torch's:
      either would change what the committed report measured;
    - the kept time is the best single call of ``repeats``, where Timer's
      ``blocked_autorange`` reports means of blocks and their median.
    """
    if warmup:
        fn()  # also compiles under impl="compiled"
    _sync(device)
    times = []
    peak = 0.0
    for _ in range(repeats):
        if device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
            peak = max(peak, (torch.cuda.max_memory_allocated() - base) / 2**20)
        else:
            base = rss_kb("VmRSS")
            # Reset the peak RSS (VmHWM) to the current RSS (Linux only).
            with contextlib.suppress(OSError):
                Path("/proc/self/clear_refs").write_text("5")
            t0 = time.perf_counter()
            out = fn()
            times.append(time.perf_counter() - t0)
            peak = max(peak, (rss_kb("VmHWM") - base) / 1024)
    return {"seconds": min(times), "peak_mb": peak, "out": out}


def measure_alternating(
    fns: dict[str, Callable[[], Any]],
    device: str = "cpu",
    rounds: int = 3,
    warmup: tuple[str, ...] = (),
) -> dict[str, dict[str, Any]]:
    """Times of several implementations called in alternation, ``rounds`` times each.

    Speed-up goals compare two implementations; on a shared machine the speed drifts
    by 10-20% over minutes, so timing one after the other would fold that drift into
    the ratio. Alternating calls see the same drift, and the best time of each (as
    :func:`measure`) drops the rounds that something else slowed down. Returns per
    name ``seconds`` (best), ``samples`` (every round, in order), ``peak_mb`` (largest)
    and the last ``out``.
    ``warmup`` names the implementations that get one untimed call first.
    """
    for name in warmup:
        fns[name]()
    _sync(device)
    res: dict[str, dict[str, Any]] = {k: {"samples": []} for k in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            m = measure(fn, device, repeats=1, warmup=False)
            res[name]["samples"].append(m["seconds"])
            res[name]["peak_mb"] = max(res[name].get("peak_mb", 0.0), m["peak_mb"])
            res[name]["out"] = m["out"]
    for r in res.values():
        r["seconds"] = min(r["samples"])
    return res


def measure_interleaved(
    parts: list[Callable[[], Any]],
    whole: Callable[[], Any],
    device: str = "cpu",
    rounds: int = 3,
) -> dict[str, dict[str, Any]]:
    """A slow implementation cut into ``parts`` interleaved with whole calls of a fast one.

    ``parts`` together do the work of one ``whole`` call (the loop on text shards: it
    loops over texts, so its time adds up over shards). Each part is followed by one
    whole call. Per round, the slow time is the sum of its parts and the fast time
    the mean of its calls, so both are measured over the same minutes of machine
    load.

    Why not :func:`measure_alternating`: at 100 x 500 pairs the loop takes about a
    minute and the batched head a few seconds, so with one call of each per round a
    change of machine load lasting tens of seconds falls on one and not on the other
    (speed-ups of 8.4-12.2x per round were measured that way in one run on this
    project's shared 2-core CPU). Returns, for ``slow`` and ``fast``: ``seconds`` (mean
    over rounds), ``samples`` (per round), ``peak_mb`` and ``out`` (the last round's:
    the list of part outputs for ``slow``).
    """
    slow: dict[str, Any] = {"samples": [], "peak_mb": 0.0}
    fast: dict[str, Any] = {"samples": [], "peak_mb": 0.0}
    _sync(device)
    for _ in range(rounds):
        slow_s, fast_s, outs = 0.0, 0.0, []
        for part in parts:
            m = measure(part, device, repeats=1, warmup=False)
            slow_s += m["seconds"]
            outs.append(m["out"])
            slow["peak_mb"] = max(slow["peak_mb"], m["peak_mb"])
            m = measure(whole, device, repeats=1, warmup=False)
            fast_s += m["seconds"]
            fast["out"] = m["out"]
            fast["peak_mb"] = max(fast["peak_mb"], m["peak_mb"])
        slow["samples"].append(slow_s)
        slow["out"] = outs
        fast["samples"].append(fast_s / len(parts))
    for r in (slow, fast):
        r["seconds"] = sum(r["samples"]) / len(r["samples"])
    return {"slow": slow, "fast": fast}


def round_ratios(base: dict[str, Any], other: dict[str, Any]) -> list[float]:
    """Per-round speed-ups ``base / other`` of :func:`measure_alternating` (or
    :func:`measure_interleaved`) samples."""
    return [a / b for a, b in zip(base["samples"], other["samples"], strict=True)]


# The fresh process of train_peak_rss_mb: one training step of the benchmark head.
_PEAK_SCRIPT = """
import json, sys, torch
from seps.bench.cases import train_fn
from seps.bench.timing import rss_kb
from seps.bench.workloads import bench_config, make_head, make_inputs
preset, geometry, impl, b, c, threads, over = sys.argv[1:8]
torch.set_num_threads(int(threads))
head = make_head(bench_config(preset, geometry, int(c), **json.loads(over)), impl)
fn = train_fn(head, make_inputs(geometry, int(b), int(b), embed_size=int(c)))
base = rss_kb("VmRSS")
fn()
print((rss_kb("VmHWM") - base) / 1024)
"""


def train_peak_rss_mb(
    preset: str,
    geometry: str,
    impl: str,
    batch: int,
    embed_size: int,
    overrides: dict[str, Any] | None = None,
) -> float:
    """Peak RSS growth (MB) of one training step in a fresh process (CPU).

    In-process RSS is unreliable for this: the allocator keeps freed pages, so a run
    after a larger one shows no growth. A fresh interpreter starts from the same
    baseline for every implementation.
    """
    args = [preset, geometry, impl, str(batch), str(embed_size), str(torch.get_num_threads())]
    args.append(json.dumps(overrides or {}))
    proc = subprocess.run(
        [sys.executable, "-c", _PEAK_SCRIPT, *args], capture_output=True, text=True, check=True
    )
    return float(proc.stdout.strip().splitlines()[-1])


def train_fits(impl: str, geometry: str, batch: int, embed_size: int, device: str) -> bool:
    """Whether a training step is expected to fit in half the machine's memory.

    Measured on ViT-224 at C = 512 (``reports/latency.md``): the loop keeps the
    autograd graph of every per-text MLP run, about 1.7 MB per pair, the batched
    head about 0.3 MB per pair; both grow roughly with N (patches) and C.
    """
    if device.startswith("cuda"):
        total = torch.cuda.get_device_properties(0).total_memory
    else:
        try:
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            return True
    per_pair = (1.7e6 if impl == "loop" else 0.3e6) * GEOMETRIES[geometry][0] / 196
    return batch * batch * per_pair * embed_size / 512 < 0.5 * total
