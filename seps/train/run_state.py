"""The state a run carries across epochs and checkpoints (:class:`RunState`), and
:class:`DivergedError`, which ends a run whose numbers stopped being finite.

Both are re-exported by :mod:`seps.train.loop` (and :mod:`seps.train`), where they are
used.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class RunState:
    epoch: int = -1  # last completed epoch
    history: list[dict[str, Any]] = field(default_factory=list)
    nonfinite_steps: int = 0
    train_seconds: float = 0.0
    #: ``{"epoch", "step"}`` of the first step whose loss or gradient was not finite.
    first_nonfinite: dict[str, int] | None = None


class DivergedError(RuntimeError):
    """Training cannot go on: a non-finite loss under ``on_nonfinite="stop"``, an epoch
    whose every step was non-finite, non-finite weights after training, or non-finite
    similarities at validation or evaluation (finite weights so large that scoring
    overflows).

    :attr:`info` is what the run record stores as ``divergence`` (reason, first
    non-finite epoch and step, count of non-finite steps, steps taken, and for
    similarities ``where``: ``{"epoch", "phase"}``, phase ``validation`` or
    ``evaluation``); :attr:`history` holds the completed epochs.
    """

    def __init__(
        self,
        reason: str,
        state: RunState,
        steps_this_epoch: int,
        where: dict[str, Any] | None = None,
    ) -> None:
        first = state.first_nonfinite or {}
        at = f" (first at epoch {first['epoch']}, step {first['step']})" if first else ""
        super().__init__(f"{reason}; {state.nonfinite_steps} non-finite steps{at}")
        self.info: dict[str, Any] = {
            "reason": reason,
            "first_nonfinite": state.first_nonfinite,
            "nonfinite_steps": state.nonfinite_steps,
            "steps_done": sum(h["steps"] for h in state.history) + steps_this_epoch,
        }
        if where is not None:
            self.info["where"] = where
        self.history = state.history
