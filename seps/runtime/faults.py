"""Fault injection for the crash-safety tests: ``SEPS_BENCH_KILL_AT=POINT[:N[:SIGNAL]]``.

A few places that must survive a kill call :func:`kill_point` with their name. When the
environment variable names that point, the process sends itself SIGKILL the N-th time
(default 1) it reaches it, exactly as an out-of-memory killer or a pulled plug would:
no ``finally`` block, no atexit handler runs. ``SIGNAL`` sends another signal instead
(``SIGTERM`` as a scheduler's preemption, ``SIGINT`` as a Ctrl-C), at a known point so
that the interrupt tests are not races. Without the variable the call costs one
dictionary lookup.

Points: ``train_step`` (before each optimiser step), ``eval`` (after the embeddings of
the evaluation split are computed, before the similarities), ``record_write`` (a run
record's temporary file is written but not yet renamed into place).
"""

from __future__ import annotations

import os
import signal

__all__ = ["KILL_POINTS", "kill_point"]

KILL_POINTS = ("train_step", "eval", "record_write")
_seen: dict[str, int] = {}


def kill_point(name: str) -> None:
    """SIGKILL (or the named signal) this process if ``SEPS_BENCH_KILL_AT`` asks for it at
    ``name`` now."""
    spec = os.environ.get("SEPS_BENCH_KILL_AT")
    if not spec:
        return
    point, _, rest = spec.partition(":")
    if point != name:
        return
    nth, _, signame = rest.partition(":")
    _seen[name] = _seen.get(name, 0) + 1
    if _seen[name] == int(nth or 1):
        os.kill(os.getpid(), signal.Signals[signame or "SIGKILL"])
