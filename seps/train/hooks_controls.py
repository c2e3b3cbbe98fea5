"""The selection controls of training as a hook (:mod:`.hooks`; the controls themselves:
:mod:`seps.train.controls`, docs/controls.md).

Under ``selection="random"`` every step's prior is uniform noise from the step's own
generator (:func:`seps.train.controls.step_generator`: fresh per step, so a resumed epoch draws
the same, and never the run's shared generators); under ``oracle`` it is the patches of
the objects each caption names (:func:`seps.train.controls.oracle_prior` of the training
split's scene table). Under ``learned`` the hook does nothing.
"""

from __future__ import annotations

import torch

from ..core.config import SEPSConfig
from .config import TrainConfig
from .controls import OracleTable, oracle_prior, oracle_table, step_generator
from .hooks import Batch, Epoch, Run, TrainHook

__all__ = ["SelectionControl"]


class SelectionControl(TrainHook):
    """Sets ``batch.prior`` ``(B, B, N)`` under a selection control. Refuses, when built
    (before any work), the oracle on a dataset without scene layouts."""

    def __init__(self, cfg: TrainConfig, seps_cfg: SEPSConfig) -> None:
        self.selection = seps_cfg.selection
        if self.selection == "oracle" and cfg.dataset != "synthetic":
            raise ValueError(
                f"config field 'selection': oracle needs the synthetic dataset (scene "
                f"layouts), got dataset {cfg.dataset!r}"
            )
        self.oracle: OracleTable | None = None

    def on_run_start(self, run: Run) -> None:
        if self.selection == "oracle":
            d = run.train_split.data
            self.oracle = oracle_table(
                d.data_dir, d.image_ids, d.captions, run.seps_cfg.num_patches
            )

    def on_step_start(self, run: Run, ep: Epoch, batch: Batch) -> None:
        if self.selection == "random":
            shape = (len(batch.imgs), len(batch.caps), run.seps_cfg.num_patches)
            gen = step_generator(run.cfg.seed, ep.epoch, batch.i)
            batch.prior = torch.rand(shape, generator=gen)
        elif self.oracle is not None:
            imgs, caps = torch.tensor(batch.imgs), torch.tensor(batch.caps)
            batch.prior = oracle_prior(self.oracle, imgs, caps)
