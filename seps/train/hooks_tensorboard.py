"""TensorBoard event files of a training run, as a hook (:mod:`.hooks`).

Written by rank 0 under ``<out_dir>/tensorboard/`` (for ``seps-bench run``: the run's
training folder, ``<results>/_work/<train key>-s<seed>/tensorboard/``), with
:class:`torch.utils.tensorboard.SummaryWriter`. Every value is one the run's history
stores, logged as it is stored (float64 scalars, ``new_style`` tensors, so that the files
and the record hold the same numbers; read them with ``EventAccumulator.Tensors``):

- ``step/...``: each taken step's ``steps_log`` entry (losses, ratio-loss parts, keep
  ratios, the score predictor's gradient norms), at the run's global step
  ``epoch * n_batches + step``;
- ``epoch/...``: each epoch's record (mean losses and gradient norm, keep ratios, steps,
  non-finite steps, ``lr/<parameter group>``, seconds, pairs per second,
  ``grad_share/<part>``), ``val/...`` its validation (recalls, rSum) and
  ``time/seconds_per_step`` (its seconds over its steps), at the global step of the
  epoch's last batch.

A resumed run purges what an earlier process logged from the step it resumes at on
(``purge_step``: the steps a killed process logged after its last checkpoint), so
TensorBoard shows a re-run step once (its own readers honour the purge; the older
``event_accumulator.EventAccumulator`` purges no tensor events). The writer is opened at the first
value, so a run that only evaluates again writes no file. Without the ``tensorboard``
package the run says so in one line and trains without the files. Logging reads the
record only: it is not part of the run (``seps-bench run --no-tensorboard`` or
``train(..., tensorboard=False)`` leaves it out; neither changes the run key).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from .hooks import Epoch, Run, TrainHook

__all__ = ["TENSORBOARD_DIR", "TensorBoardLog", "epoch_scalars", "flat_scalars", "step_scalars"]

#: The folder of the event files in the run's ``out_dir``.
TENSORBOARD_DIR = "tensorboard"
#: Said once per process when the package is missing.
MISSING = (
    "tensorboard is not installed: training without TensorBoard event files "
    "(pip install tensorboard, or pass --no-tensorboard)"
)
_said_missing = False


def flat_scalars(prefix: str, values: Any) -> Iterator[tuple[str, float]]:
    """``(tag, value)`` of every number in ``values`` (nested dicts and lists; ``None``
    and flags left out), tagged ``prefix/key/...``."""
    if isinstance(values, bool) or values is None:
        return
    if isinstance(values, int | float):
        yield prefix, float(values)
    elif isinstance(values, Mapping):
        for k, v in values.items():
            yield from flat_scalars(f"{prefix}/{k}", v)
    elif isinstance(values, list | tuple):
        for k, v in enumerate(values):
            yield from flat_scalars(f"{prefix}/{k}", v)


def step_scalars(logged: Mapping[str, Any]) -> Iterator[tuple[str, float]]:
    """The scalars of one ``steps_log`` entry."""
    yield from flat_scalars("step", {k: v for k, v in logged.items() if k != "step"})


def epoch_scalars(rec: Mapping[str, Any], lr_names: list[str]) -> Iterator[tuple[str, float]]:
    """The scalars of one epoch's history record (``lr_names``: the optimiser's parameter
    groups, in the order of ``rec["lr"]``)."""
    skip = ("epoch", "steps_log", "lr", "val", "val_dense_source")
    yield from flat_scalars("epoch", {k: v for k, v in rec.items() if k not in skip})
    for name, lr in zip(lr_names, rec["lr"], strict=True):
        yield f"epoch/lr/{name}", float(lr)
    yield from flat_scalars("val", rec.get("val"))
    if rec.get("steps"):
        yield "time/seconds_per_step", rec["seconds"] / rec["steps"]


class TensorBoardLog(TrainHook):
    """Writes the history's values as TensorBoard scalars (see the module docstring)."""

    def __init__(self) -> None:
        self.writer: Any = None
        self._writer_class: Any = None
        self.purge_step: int | None = None
        self.off = False

    def on_run_start(self, run: Run) -> None:
        global _said_missing
        self.off = not run.dist.main
        if self.off:
            return
        try:
            from torch.utils.tensorboard import SummaryWriter  # optional, and slow to import
        except ImportError:
            if not _said_missing:
                print(MISSING, file=sys.stderr, flush=True)
                _said_missing = True
            self.off = True
            return
        self._writer_class = SummaryWriter

    def on_epoch_start(self, run: Run, ep: Epoch) -> None:
        if self.purge_step is None:  # where this process starts: later events go
            self.purge_step = run.global_step(ep.epoch, ep.start)

    def on_step_end(self, run: Run, ep: Epoch, logged: dict[str, Any]) -> None:
        self._write(run, step_scalars(logged), run.global_step(ep.epoch, logged["step"]))

    def on_epoch_end(self, run: Run, rec: dict[str, Any]) -> None:
        names = [str(g.get("name", k)) for k, g in enumerate(run.optimizer.param_groups)]
        step = run.global_step(rec["epoch"], run.n_batches - 1)
        self._write(run, epoch_scalars(rec, names), step)
        if self.writer is not None:
            self.writer.flush()

    def on_run_end(self, run: Run, result: dict[str, Any] | None) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    def _write(self, run: Run, scalars: Iterator[tuple[str, float]], step: int) -> None:
        if self.off:
            return
        if self.writer is None:
            log_dir = Path(run.out) / TENSORBOARD_DIR
            self.writer = self._writer_class(log_dir=str(log_dir), purge_step=self.purge_step)
        for tag, value in scalars:
            self.writer.add_scalar(tag, value, step, new_style=True, double_precision=True)
