"""How busy the machine was while a run was timed.

A record's timings (``train_seconds``, ``wall_seconds``, pairs per second) are only
comparable between runs that had the machine to themselves. Found on this project's
2-core machine: a run with other work beside it (a profiler, the test suite) took two to
nine times as long as alone (``laps/no-slimming`` of ``regime``: about 100 s alone, 845 s
beside them), and nothing in its record said so. The runner therefore samples the
1-minute load average while each run executes (:class:`LoadWatch`, a daemon thread that
sleeps between samples) and stores
``machine_load`` on the record; :func:`was_busy` reads it back, and the report's cost
table marks the variants whose timings include such records.

*Decision* (SPEC.md is silent; this is about timing, not numbers): a run was timed on a
busy machine when any sample of the 1-minute load average exceeded the CPU count by more
than :data:`BUSY_MARGIN`: more runnable threads than cores. A run alone that uses every
core keeps the load near the CPU count (2.2 measured here on 2 cores); another 1-thread
job on top brings it above 3. The average lags by about a minute, so a short run's first
samples partly reflect what ran before it. Not hashed (``seps/versioning/version.py``): it stamps a
fact about the machine and changes no number.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["BUSY_MARGIN", "LOAD_FIELD", "SAMPLE_SECONDS", "LoadWatch", "was_busy"]

#: The record field :class:`LoadWatch` fills.
LOAD_FIELD = "machine_load"

#: Load above ``cpus + BUSY_MARGIN`` counts as busy.
BUSY_MARGIN = 0.5

#: Seconds between two samples of the load average.
SAMPLE_SECONDS = 15.0


def _load_1min() -> float | None:
    try:
        return float(os.getloadavg()[0])
    except (AttributeError, OSError):  # Windows has no load average
        return None


class LoadWatch:
    """Context manager sampling the 1-minute load average at entry, every
    :data:`SAMPLE_SECONDS` and at exit; :meth:`summary` is what the record stores:
    ``{"cpus", "load_1min_start", "load_1min_end", "load_1min_max", "samples"}`` (loads
    ``None`` where the platform has no load average)."""

    def __init__(
        self, every: float = SAMPLE_SECONDS, read: Callable[[], float | None] = _load_1min
    ) -> None:
        self._every = every
        self._read = read
        self._samples: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        value = self._read()
        if value is not None:
            self._samples.append(value)

    def _loop(self) -> None:
        while not self._stop.wait(self._every):
            self._sample()

    def __enter__(self) -> LoadWatch:
        self._sample()
        self._start = self._samples[-1] if self._samples else None
        self._thread = threading.Thread(target=self._loop, name="load-watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        n = len(self._samples)
        self._sample()
        self._end = self._samples[-1] if len(self._samples) > n else None

    def summary(self) -> dict[str, Any]:
        return {
            "cpus": os.cpu_count(),
            "load_1min_start": self._start,
            "load_1min_end": self._end,
            "load_1min_max": max(self._samples) if self._samples else None,
            "samples": len(self._samples),
        }


def was_busy(record: Mapping[str, Any]) -> bool | None:
    """Whether ``record`` was timed on a busy machine (see the module docstring);
    ``None`` when it carries no load (made before the runner sampled it, or on a
    platform without a load average)."""
    load = record.get(LOAD_FIELD)
    if not isinstance(load, Mapping):
        return None
    peak, cpus = load.get("load_1min_max"), load.get("cpus")
    if peak is None or not cpus:
        return None
    return float(peak) > float(cpus) + BUSY_MARGIN
