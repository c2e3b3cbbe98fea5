"""Checkpoints and SIGTERM as hooks of the training loop (:mod:`.hooks`).

:class:`CheckpointHook` writes, after every epoch (rank 0), the best-validation weights
when the epoch improved on them and then the run checkpoint (:mod:`.checkpoints`); once
every epoch is done it drops the optimiser state (unless ``keep_optimizer``).

:class:`InterruptHook` asks, before each step, whether a SIGTERM arrived
(:mod:`seps.runtime.interrupts`); if so it writes the checkpoint at that step, with the epoch's
progress (:func:`partial_epoch`: sums, steps log, random states, and what the other hooks
keep), and raises :class:`seps.runtime.interrupts.StopRequested`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from ..runtime.interrupts import check_stop
from .checkpoints import (
    best_val_epoch,
    drop_training_state,
    run_checkpoint_path,
    save_best_weights,
    save_run_checkpoint,
)
from .hooks import Batch, Epoch, Run, TrainHook
from .run_environment import rng_states

__all__ = ["CheckpointHook", "InterruptHook", "partial_epoch", "save_checkpoint"]


def save_checkpoint(run: Run, partial: dict[str, Any] | None = None) -> None:
    """Write the run checkpoint (``partial``: the progress of an epoch stopped at a step)."""
    save_run_checkpoint(
        run.ckpt_path,
        model=run.model,
        optimizer=run.optimizer,
        scheduler=run.scheduler,
        state=dataclasses.asdict(run.state),
        cfg=run.cfg,
        seps_cfg=run.seps_cfg,
        spec=run.spec,
        tokenizer=run.tokenizer,
        **({} if partial is None else {"partial_epoch": partial}),
    )
    run.ckpt_path = run_checkpoint_path(run.out)  # an older .pt is rewritten as .safetensors


def partial_epoch(run: Run, ep: Epoch, i: int) -> dict[str, Any]:
    """What a checkpoint at step ``i`` of ``ep`` keeps so that the resumed epoch gives
    the uninterrupted one's bits (``partial_epoch``)."""
    return {
        "epoch": ep.epoch,
        "next_step": i,
        "seconds": time.perf_counter() - ep.t0,
        "sums": ep.sums,
        "ratio_sums": ep.ratio_sums,
        "step_log": ep.step_log,
        "steps": ep.steps,
        "rng": rng_states(run.device),
        "text_rng": None if ep.text_rng is None else ep.text_rng.getstate(),
        **run.hooks.partial_state(),
    }


class CheckpointHook(TrainHook):
    """The best-validation weights and the run checkpoint after every epoch; the
    optimiser state dropped once the run is complete."""

    def on_epoch_end(self, run: Run, rec: dict[str, Any]) -> None:
        # The best-validation weights, whatever eval_checkpoint says (an evaluation-only
        # choice: runs differing in it share this training). Written before the run
        # checkpoint, so a stop in between re-runs this epoch and writes them again.
        if "val" in rec and best_val_epoch(run.state.history) == rec["epoch"]:
            save_best_weights(run.out, run.model, rec["epoch"], rec["val"]["rsum"])
        save_checkpoint(run)

    def on_train_end(self, run: Run) -> None:
        if not run.cfg.keep_optimizer and run.ckpt_path.exists():
            drop_training_state(run.ckpt_path)  # complete: resuming needs no optimizer


class InterruptHook(TrainHook):
    """SIGTERM: stop before the next step, with the checkpoint written at that step.

    ``requested`` is :func:`seps.runtime.interrupts.stop_requested` (tests stand in for it).
    Under DDP the checkpoint stays the last epoch's.
    """

    def __init__(self, requested: Callable[[], bool]) -> None:
        self.requested = requested

    def on_step_start(self, run: Run, ep: Epoch, batch: Batch) -> None:
        if not self.requested():
            return
        i = batch.i
        here = i > ep.start and run.dist.world == 1
        if here:  # keep the steps done, at this step
            save_checkpoint(run, partial_epoch(run, ep, i))
        if here or ep.resumed:  # the checkpoint is at step i
            check_stop(f"{run.ckpt_path} at epoch {ep.epoch}, step {i}")
        done = f"{run.ckpt_path} after epoch {run.state.epoch}"
        check_stop(done if run.state.epoch >= 0 else "no checkpoint (no epoch done yet)")

    def on_train_end(self, run: Run) -> None:
        check_stop(f"{run.ckpt_path} after its last epoch ({run.state.epoch})")
