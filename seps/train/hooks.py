"""The one interface through which everything that is not the method attaches to a
training run: the selection controls, the movement meter, interrupts, checkpoints and
logging (:func:`seps.train.loop.train` reads as SPEC.md's loop; these live beside it).

A hook is a :class:`TrainHook`: it overrides the callbacks it needs, each a no-op by
default. :class:`Hooks` holds the run's hooks in order and calls each callback on every
hook in that order. What a callback sees:

- :class:`Run`: the run being trained (configs, model, optimiser, data, run state);
- :class:`Epoch`: the epoch in progress (its seed, caption order, running sums, and the
  progress of an epoch resumed mid-way, ``resumed``);
- :class:`Batch`: the dataset indices of one step's captions and images, and the
  selection prior a control may add (``prior``).

Callbacks, in the order a run calls them::

    on_run_start(run)                   model, optimiser and any checkpoint are loaded
      on_epoch_start(run, ep)           the epoch is seeded, before its first step
        on_step_start(run, ep, batch)   before the step loads its batch: may stop the
                                        run (SIGTERM) or set batch.prior (controls)
        on_gradients(run, ep)           after backward (fp16 unscaled), before clipping
        on_step_end(run, ep, logged)    the optimiser stepped; ``logged`` is the step's
                                        entry of the history's ``steps_log``
      epoch_fields(run, ep) -> dict     fields the hook adds to the epoch's record
      on_epoch_end(run, rec)            the record (validation included) is in the
                                        history (rank 0 only)
    on_train_end(run)                   every epoch done, before the final evaluation
    on_run_end(run, result)             ``result.json`` is about to be written; called
                                        with ``None`` when the run ends otherwise
    partial_state() -> dict             what the hook keeps in a mid-epoch checkpoint

A hook must not change what the run computes: it may read the weights and gradients but
not write them, and it must not draw from a shared random generator (a control draws
from its own, :func:`seps.train.controls.step_generator`). The selection prior is the one input
a hook gives the step, and only the selection controls give it.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..core.config import SEPSConfig
from ..core.losses import SEPSLoss
from ..model.seps_model import ModelSpec, SEPSModel
from .config import TrainConfig
from .data import SplitTensors
from .distributed import Dist
from .run_state import RunState

__all__ = ["Batch", "Epoch", "Hooks", "Run", "TrainHook"]


@dataclass
class Run:
    """Everything a training run holds, built once before its first epoch."""

    cfg: TrainConfig
    seps_cfg: SEPSConfig
    dist: Dist
    device: torch.device
    out: Path
    tokenizer: Any
    spec: ModelSpec
    data_dir: Path
    model: SEPSModel
    step: torch.nn.Module  # encoders + head for one batch (TrainStep, DDP under torchrun)
    optimizer: torch.optim.Optimizer
    scheduler: Any
    scaler: Any  # fp16 loss scaling (a disabled scaler passes through)
    criterion: SEPSLoss
    #: the score predictor: every learnable parameter of the selection
    selector_params: list[torch.nn.Parameter]
    train_split: SplitTensors
    val_split: SplitTensors | None
    val_protocol: str
    train_feats: dict[str, Tensor] | None  # frozen protocol: cached backbone tokens
    val_feats: dict[str, Tensor] | None
    n_batches: int
    caption_to_image: Tensor
    dense_of: Tensor | None  # the dense caption of each training image (dense_rows)
    state: RunState
    ckpt_path: Path
    #: whether this call continues from a checkpoint (``resume`` and one was there)
    resuming: bool = False
    #: the checkpoint's ``partial_epoch``: an epoch a SIGTERM stopped at a step
    partial: dict[str, Any] | None = None
    hooks: Hooks = field(default_factory=lambda: Hooks())

    def global_step(self, epoch: int, i: int) -> int:
        """Step ``i`` of ``epoch`` counted from the run's first step (every batch counts,
        a skipped one too)."""
        return epoch * self.n_batches + i


@dataclass
class Epoch:
    """One epoch in progress: its seed, caption order and running sums."""

    epoch: int
    seed: int
    order: Tensor  # caption indices in this epoch's order
    text_rng: random.Random | None  # caption augmentation (None: off)
    start: int  # the first step run in this call (> 0: resumed mid-epoch)
    t0: float  # perf_counter at its start (less the seconds of an earlier part)
    max_violation: bool
    sums: dict[str, float]
    ratio_sums: dict[str, float]
    step_log: list[dict[str, Any]]
    steps: int = 0  # steps taken (a non-finite step is not taken)
    images: Iterator[Tensor] | None = None  # the images of each step (None: frozen)
    #: the ``partial_epoch`` this epoch resumes from (None: it starts at step 0)
    resumed: dict[str, Any] | None = None


@dataclass
class Batch:
    """The dataset indices of one step; a selection control sets ``prior``."""

    i: int  # the step within the epoch
    caps: list[int]  # caption indices, the whole batch
    imgs: list[int]  # the image of each caption
    prior: Tensor | None = None  # (B, B, N) selection prior of a control


class TrainHook:
    """A part of a run that is not the method (see the module docstring); every
    callback is a no-op here."""

    def on_run_start(self, run: Run) -> None:
        pass

    def on_epoch_start(self, run: Run, ep: Epoch) -> None:
        pass

    def on_step_start(self, run: Run, ep: Epoch, batch: Batch) -> None:
        pass

    def on_gradients(self, run: Run, ep: Epoch) -> None:
        pass

    def on_step_end(self, run: Run, ep: Epoch, logged: dict[str, Any]) -> None:
        pass

    def epoch_fields(self, run: Run, ep: Epoch) -> dict[str, Any]:
        return {}

    def on_epoch_end(self, run: Run, rec: dict[str, Any]) -> None:
        pass

    def on_train_end(self, run: Run) -> None:
        pass

    def on_run_end(self, run: Run, result: dict[str, Any] | None) -> None:
        pass

    def partial_state(self) -> dict[str, Any]:
        return {}


class Hooks(TrainHook):
    """The run's hooks, called in order; itself a hook (each callback calls them all;
    ``epoch_fields`` and ``partial_state`` merge what they return)."""

    def __init__(self, hooks: Iterable[TrainHook] = ()) -> None:
        self.hooks = list(hooks)

    def __iter__(self) -> Iterator[TrainHook]:
        return iter(self.hooks)

    def on_run_start(self, run: Run) -> None:
        for h in self.hooks:
            h.on_run_start(run)

    def on_epoch_start(self, run: Run, ep: Epoch) -> None:
        for h in self.hooks:
            h.on_epoch_start(run, ep)

    def on_step_start(self, run: Run, ep: Epoch, batch: Batch) -> None:
        for h in self.hooks:
            h.on_step_start(run, ep, batch)

    def on_gradients(self, run: Run, ep: Epoch) -> None:
        for h in self.hooks:
            h.on_gradients(run, ep)

    def on_step_end(self, run: Run, ep: Epoch, logged: dict[str, Any]) -> None:
        for h in self.hooks:
            h.on_step_end(run, ep, logged)

    def epoch_fields(self, run: Run, ep: Epoch) -> dict[str, Any]:
        return {k: v for h in self.hooks for k, v in h.epoch_fields(run, ep).items()}

    def on_epoch_end(self, run: Run, rec: dict[str, Any]) -> None:
        for h in self.hooks:
            h.on_epoch_end(run, rec)

    def on_train_end(self, run: Run) -> None:
        for h in self.hooks:
            h.on_train_end(run)

    def on_run_end(self, run: Run, result: dict[str, Any] | None) -> None:
        for h in self.hooks:
            h.on_run_end(run, result)

    def partial_state(self) -> dict[str, Any]:
        return {k: v for h in self.hooks for k, v in h.partial_state().items()}
