"""The console log of a training run as a hook (:mod:`.hooks`): a progress bar over each
epoch's steps with the running mean loss, and one line per epoch (rank 0, with
``progress`` on: ``--no-progress`` and ``--quiet`` turn both off).
"""

from __future__ import annotations

from typing import Any

from tqdm.auto import tqdm

from .hooks import Epoch, Run, TrainHook

__all__ = ["ConsoleLog", "epoch_line"]


def epoch_line(rec: dict[str, Any]) -> str:
    """``epoch 3 | loss 0.512 | val rsum 312.4 | 41s``: one epoch's history record."""
    parts = [f"epoch {rec['epoch']}", f"loss {rec['loss']:.3f}"]
    if "val" in rec:
        parts.append(f"val rsum {rec['val']['rsum']:.1f}")
    parts.append(f"{rec['seconds']:.0f}s")
    return " | ".join(parts)


class ConsoleLog(TrainHook):
    """A tqdm bar per epoch and :func:`epoch_line` after it."""

    def __init__(self) -> None:
        self.bar: Any = None

    def on_epoch_start(self, run: Run, ep: Epoch) -> None:
        self._close()
        self.bar = tqdm(
            total=run.n_batches,
            initial=ep.start,
            desc=f"epoch {ep.epoch}",
            disable=not run.cfg.progress,
            leave=False,
        )

    def on_step_end(self, run: Run, ep: Epoch, logged: dict[str, Any]) -> None:
        self.bar.update(logged["step"] + 1 - self.bar.n)
        self.bar.set_postfix(loss=f"{ep.sums['loss'] / ep.steps:.2f}")
        if logged["step"] + 1 == run.n_batches:
            self._close()

    def on_epoch_end(self, run: Run, rec: dict[str, Any]) -> None:
        self._close()
        if run.cfg.progress:
            print(epoch_line(rec), flush=True)

    def on_run_end(self, run: Run, result: dict[str, Any] | None) -> None:
        self._close()

    def _close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
