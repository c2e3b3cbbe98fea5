"""Training and evaluation of the full model (the ``train`` / ``eval`` commands are in
:mod:`seps.cli.train`).

One concept per module, imported one way only (top to bottom)::

    loop             the training loop: train() (the epoch and the step), run_hooks()
    hooks            the one hook interface of the loop: TrainHook, Hooks, Run, Epoch, Batch
    hooks_*          the hooks: controls (selection priors), checkpoint (checkpoints,
                     SIGTERM), log (console), tensorboard (event files)
    prepare          what a run builds before its first epoch (data, model, optimiser)
    result           the final evaluation and result.json: finish()
    run_state        RunState, DivergedError
    evaluation       encode_split(), evaluate_model()
    features         frozen-backbone features and their on-disk cache
    data             dataset folder, tokenizer, image and caption tensors of a split
    distributed      torchrun set-up (Dist, init_distributed) and the DDP TrainStep
    checkpoints      writing and reading run checkpoints and their tokenizer
    movement         how far each learned part moved, its gradient share (MovementMeter,
                     attached as MovementHook)
    run_environment  seeding, environment() record, peak memory

This package re-exports the public API, so ``from seps.train import train`` etc. work.
"""

from __future__ import annotations

from .checkpoints import (
    CHECKPOINT_FORMAT,
    CHECKPOINT_NAME,
    check_same_tokenizer,
    checkpoint_tokenizer,
    load_run_checkpoint,
    run_checkpoint_path,
    save_run_checkpoint,
)
from .config import DATASETS, PROTOCOLS, TrainConfig
from .data import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    ImageStore,
    SplitTensors,
    TextTable,
    build_tokenizer,
    check_data_dir,
    check_training_files,
    load,
    prepare_data_dir,
    split_tensors,
    subset,
    synthetic_path,
)
from .distributed import Dist, TrainStep, barrier, data_parallel, init_distributed
from .evaluation import encode_split, evaluate_model
from .features import backbone_features, cached_features
from .hooks import Hooks, TrainHook
from .loop import (
    DivergedError,
    RunState,
    build_run,
    finish,
    grad_norm,
    ratio_grad_norm,
    run_hooks,
    set_dropout,
    train,
)
from .run_environment import environment, epoch_seed, peak_memory, seed_everything

__all__ = [
    "CHECKPOINT_FORMAT",
    "CHECKPOINT_NAME",
    "DATASETS",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "PROTOCOLS",
    "Dist",
    "DivergedError",
    "Hooks",
    "ImageStore",
    "RunState",
    "SplitTensors",
    "TextTable",
    "TrainConfig",
    "TrainHook",
    "TrainStep",
    "backbone_features",
    "barrier",
    "build_run",
    "build_tokenizer",
    "cached_features",
    "check_data_dir",
    "check_same_tokenizer",
    "check_training_files",
    "checkpoint_tokenizer",
    "data_parallel",
    "encode_split",
    "environment",
    "epoch_seed",
    "evaluate_model",
    "finish",
    "grad_norm",
    "init_distributed",
    "load",
    "load_run_checkpoint",
    "peak_memory",
    "prepare_data_dir",
    "ratio_grad_norm",
    "run_checkpoint_path",
    "run_hooks",
    "save_run_checkpoint",
    "seed_everything",
    "set_dropout",
    "split_tensors",
    "subset",
    "synthetic_path",
    "train",
]
