"""Stopping at a safe point: SIGTERM (a scheduler's preemption) and Ctrl-C.

SIGTERM does not kill a run that is under :func:`stop_on_sigterm` (``seps-bench run`` and
``train``): the handler only notes it. The training loop asks :func:`stop_requested`
before each step (its interrupt hook, :class:`seps.train.hooks_checkpoint.InterruptHook`);
once it is set, the run writes its checkpoint at that step (weights,
optimiser, the epoch's progress and random states, so a resumed run gives the same bits)
and raises :class:`StopRequested`. The runner asks between runs too. Locks are released
and temporary files removed on the way out (``with`` blocks), and the command exits 143,
so that a requeued job resumes from that step. A second SIGTERM kills at once.

Ctrl-C (SIGINT) stops at once with :class:`KeyboardInterrupt`: what was kept is every
finished record and each training's last checkpoint. :func:`interrupted_line` is the one
line the command prints for either.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator

__all__ = [
    "EXIT_SIGINT",
    "EXIT_SIGTERM",
    "StopRequested",
    "check_stop",
    "interrupted_line",
    "stop_on_sigterm",
    "stop_requested",
]

EXIT_SIGINT = 128 + signal.SIGINT  # 130, the shell's code for a Ctrl-C
EXIT_SIGTERM = 128 + signal.SIGTERM  # 143

_requested = threading.Event()
_depth = 0


class StopRequested(BaseException):
    """A SIGTERM asked the run to stop; raised at a safe point, after its state is saved.

    A ``BaseException``, as :class:`KeyboardInterrupt`: the runner's ``except Exception``
    that records failed runs must not record a preempted run as failed. ``kept`` says what
    was saved (one phrase).
    """

    def __init__(self, kept: str) -> None:
        super().__init__(kept)
        self.kept = kept


def _on_sigterm(signum: int, frame: object) -> None:
    if _requested.is_set():  # a second SIGTERM: the default, at once
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        return
    _requested.set()
    print("SIGTERM: stopping after the current step", file=sys.stderr, flush=True)


@contextlib.contextmanager
def stop_on_sigterm() -> Iterator[None]:
    """Within this block a SIGTERM sets :func:`stop_requested` instead of killing; nested
    blocks share the outer one. Outside the main thread (no signal handling) a no-op."""
    global _depth
    if _depth or threading.current_thread() is not threading.main_thread():
        _depth += 1
        try:
            yield
        finally:
            _depth -= 1
        return
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        signal.signal(signal.SIGTERM, previous)
        _requested.clear()


def stop_requested() -> bool:
    """Whether a SIGTERM asked this process to stop at its next safe point."""
    return _requested.is_set()


def check_stop(kept: str) -> None:
    """Raise :class:`StopRequested` (``kept``: what is saved) if a SIGTERM asked for it."""
    if _requested.is_set():
        raise StopRequested(kept)


def interrupted_line(command: str, exc: BaseException) -> tuple[str, int]:
    """The one line ``seps-bench COMMAND`` prints when ``exc`` (a :class:`StopRequested` or
    a :class:`KeyboardInterrupt`) ended it, and its exit status."""
    again = (
        "run the same command with --resume"
        if command == "train"
        else ("run the same command again")
    )
    if isinstance(exc, StopRequested):
        return f"seps-bench {command}: stopped by SIGTERM; kept: {exc.kept}; to resume, {again}", (
            EXIT_SIGTERM
        )
    kept = "every finished run's record and each training's checkpoint of its last epoch"
    if command == "train":
        kept = "the checkpoint of the last completed epoch"
    return f"seps-bench {command}: interrupted; kept: {kept}; to resume, {again}", EXIT_SIGINT
