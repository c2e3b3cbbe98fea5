"""What a training run builds before its first epoch (:func:`prepare_run`, a
:class:`~.hooks.Run`): the data folder and tokenizer, the model under its protocol, the
training and validation data, the optimiser, the number of steps of an epoch, and what a
checkpoint holds when it resumes. The order is part of the run's bits (the model's
initialisation draws from the run's seeded generators).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..core.config import SEPSConfig
from ..core.evaluate import shuffle_permutation
from ..core.kernels import IMPLEMENTATIONS, unavailable_reason
from ..model.seps_model import (
    ModelSpec,
    SEPSModel,
    build_model,
    freeze_first_layers,
    parameter_groups,
)
from ..runtime.precision import grad_scaler
from .checkpoints import (
    NO_VALIDATION,
    check_same_tokenizer,
    load_run_checkpoint,
    restore_training_state,
    run_checkpoint_path,
)
from .config import TrainConfig
from .data import (
    SplitTensors,
    build_tokenizer,
    load,
    prepare_data_dir,
    split_tensors,
    validation_split,
)
from .distributed import Dist, TrainStep, barrier, data_parallel, init_distributed
from .features import cached_features
from .hooks import Hooks, Run
from .pretrain import load_projections, pretrained_parts
from .run_environment import seed_everything
from .run_state import RunState

__all__ = [
    "build_run",
    "check_kernel",
    "count_batches",
    "dense_rows",
    "optimisation",
    "prepare_run",
    "resume_from_checkpoint",
    "run_model",
    "set_dropout",
    "training_data",
]


def build_run(cfg: TrainConfig, seps_cfg: SEPSConfig) -> tuple[Any, ModelSpec, Path]:
    """The run's tokenizer, model spec and data folder (generated or checked)."""
    data_dir = prepare_data_dir(cfg)
    pretrained, text_backbone = cfg.pretrained, cfg.text_backbone
    if cfg.pretrain is not None:
        pretrained, text_backbone, tokenizer = pretrained_parts(cfg)
    else:
        tokenizer = build_tokenizer(cfg, data_dir)
    spec = ModelSpec(
        backbone=cfg.backbone,
        backbone_source=cfg.backbone_source,
        pretrained=pretrained,
        image_size=cfg.image_size,
        text_backbone=text_backbone,
        vocab_size=len(tokenizer),
    )
    return tokenizer, spec, data_dir


def check_kernel(name: str, device: torch.device) -> None:
    """Refuse, before any work, a ``kernel`` that is unknown or cannot run on ``device``."""
    if name not in IMPLEMENTATIONS:
        raise ValueError(
            f"train config field 'kernel': invalid value {name!r}; allowed: "
            f"{', '.join(IMPLEMENTATIONS)}"
        )
    reason = unavailable_reason(name, str(device))
    if reason is not None:
        raise ValueError(f"train config field 'kernel': {name!r} cannot run here: {reason}")


def set_dropout(module: torch.nn.Module, p: float) -> None:
    """Set every dropout probability of ``module`` (``TrainConfig.dropout``)."""
    for m in module.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = p


def dense_rows(cfg: TrainConfig, n_images: int) -> Tensor | None:
    """Which dense caption goes with each training image under ``cfg.dense_source``:
    ``rows[j]`` is the dense caption used for image ``j``'s row of the batch, or
    ``None`` under ``none`` (the sparse caption stands in).

    ``query`` and ``candidate`` both fetch image ``j``'s own caption, ``rows = arange``;
    they differ in which pairs use it (``query``: every pair of the text whose image is
    ``j``; ``candidate``: every pair of image ``j``, see :class:`TrainStep`).
    ``shuffled``: a fixed derangement of the training images seeded by the run's seed,
    so a text always comes with the same other image's description.
    """
    if cfg.dense_source == "none":
        return None
    if cfg.dense_source == "shuffled":
        return shuffle_permutation(n_images, cfg.seed)
    return torch.arange(n_images)


def run_model(
    cfg: TrainConfig, seps_cfg: SEPSConfig, spec: ModelSpec, device: torch.device
) -> SEPSModel:
    """The model of the run on ``device``: built (drawing its initial weights), with any
    pretrained projections, ``dropout``, and the backbones frozen as the protocol says."""
    model = build_model(spec, seps_cfg)
    model.cross_net.impl = cfg.kernel
    if cfg.pretrain is not None:
        load_projections(model, Path(spec.pretrained).parent)  # type: ignore[arg-type]
    model = model.to(device)
    if cfg.dropout is not None:
        set_dropout(model, cfg.dropout)
    if cfg.protocol == "partial":
        freeze_first_layers(model.img_enc.visual_encoder, cfg.freeze_layers)
        freeze_first_layers(model.txt_enc.bert, cfg.freeze_layers)
    if cfg.protocol == "frozen":
        for m in (model.img_enc.visual_encoder, model.txt_enc.bert):
            m.requires_grad_(False)
    return model


def training_data(
    cfg: TrainConfig,
    model: SEPSModel,
    spec: ModelSpec,
    data_dir: Path,
    tokenizer: Any,
    dist: Dist,
    device: torch.device,
) -> tuple[SplitTensors, SplitTensors | None, str, Any, Any]:
    """``(train split, validation split, its dense protocol, train features, validation
    features)``: the validation on rank 0 only (``None`` without one), the cached
    backbone features under the ``frozen`` protocol only (else ``None``)."""
    train_split = split_tensors(cfg, load(cfg, data_dir, cfg.train_split), tokenizer, train=True)
    val_split, val_protocol = None, cfg.dense_source
    if dist.main:  # rank 0 validates
        val_split, val_protocol = validation_split(
            cfg, data_dir, tokenizer, model.config.uses_dense
        )
        if val_split is None and cfg.eval_checkpoint == "best_val":  # before any training
            raise ValueError(NO_VALIDATION)
    train_feats = val_feats = None
    if cfg.protocol == "frozen":
        if dist.main:
            cached_features(model, train_split, cfg, spec, device, "train")
        barrier(dist)
        train_feats = cached_features(model, train_split, cfg, spec, device, "train")
        if val_split is not None:
            val_feats = cached_features(model, val_split, cfg, spec, device, "val")
    if cfg.batch_size % dist.world:
        raise ValueError(
            f"train config field 'batch_size': {cfg.batch_size} is not divisible by the "
            f"{dist.world} processes"
        )
    return train_split, val_split, val_protocol, train_feats, val_feats


def optimisation(cfg: TrainConfig, model: SEPSModel) -> tuple[torch.optim.Optimizer, Any]:
    """AdamW over the official parameter groups and its MultiStepLR schedule."""
    optimizer = torch.optim.AdamW(
        parameter_groups(model, cfg.lr, cfg.backbone_lr_mult),
        lr=cfg.lr,
        weight_decay=cfg.weight_decay,
    )
    scheduler = torch.optim.lr_scheduler.MultiStepLR(
        optimizer, milestones=list(cfg.lr_milestones), gamma=cfg.lr_gamma
    )
    return optimizer, scheduler


def count_batches(cfg: TrainConfig, train_split: SplitTensors) -> int:
    """Steps of an epoch: the whole batches of the training captions, at most
    ``max_steps_per_epoch``."""
    n_caps = len(train_split.captions.pieces)
    n_batches = n_caps // cfg.batch_size
    if cfg.max_steps_per_epoch:
        n_batches = min(n_batches, cfg.max_steps_per_epoch)
    if n_batches < 1:
        raise ValueError(
            f"batch_size {cfg.batch_size} is larger than the {n_caps} training captions"
        )
    return n_batches


def prepare_run(
    cfg: TrainConfig,
    seps_cfg: SEPSConfig,
    hooks: Hooks,
    *,
    loss: Callable[[SEPSConfig], Any],
    resume: bool,
) -> Run:
    """Build the run in the order that fixes its bits: seed, data and tokenizer, model,
    training data, optimiser, ``loss(head config)``; then load its checkpoint when
    ``resume`` and there is one."""
    dist, device = init_distributed(cfg.device)
    check_kernel(cfg.kernel, device)
    out = Path(cfg.out_dir)
    if dist.main:
        out.mkdir(parents=True, exist_ok=True)
    seed_everything(cfg.seed)
    if dist.main:  # rank 0 generates the data and trains the tokenizer first
        build_run(cfg, seps_cfg)
    barrier(dist)
    tokenizer, spec, data_dir = build_run(cfg, seps_cfg)
    model = run_model(cfg, seps_cfg, spec, device)
    seps_cfg = model.config
    train_split, val_split, val_protocol, train_feats, val_feats = training_data(
        cfg, model, spec, data_dir, tokenizer, dist, device
    )
    per_image = cfg.dense_source == "candidate"
    step = TrainStep(model, dist.world, cfg.protocol == "frozen", per_image_dense=per_image)
    optimizer, scheduler = optimisation(cfg, model)
    run = Run(
        cfg=cfg,
        seps_cfg=seps_cfg,
        dist=dist,
        device=device,
        out=out,
        tokenizer=tokenizer,
        spec=spec,
        data_dir=data_dir,
        model=model,
        step=data_parallel(step, dist, device),
        optimizer=optimizer,
        scheduler=scheduler,
        scaler=None,
        criterion=loss(seps_cfg),
        # "The score predictor": every learnable parameter of the selection (eq. 1's
        # MLP, the per-patch keep bias); its gradient norm is logged every step.
        selector_params=[p for p in model.cross_net.selectors.parameters() if p.requires_grad],
        train_split=train_split,
        val_split=val_split,
        val_protocol=val_protocol,
        train_feats=train_feats,
        val_feats=val_feats,
        n_batches=0,
        caption_to_image=torch.as_tensor(train_split.data.caption_to_image),
        dense_of=None,
        state=RunState(),
        ckpt_path=run_checkpoint_path(out),
        hooks=hooks,
    )
    if resume and run.ckpt_path.exists():
        resume_from_checkpoint(run)
    run.n_batches = count_batches(cfg, train_split)
    run.dense_of = dense_rows(cfg, train_split.data.n_images)
    # fp16 only. Its scale is not checkpointed: a resumed fp16 run restarts from the
    # initial scale.
    run.scaler = grad_scaler(cfg.precision, device)
    return run


def resume_from_checkpoint(run: Run) -> None:
    """Load the weights, optimiser, scheduler and run state of the run's checkpoint, and
    the progress of an epoch a SIGTERM stopped (``run.partial``)."""
    ckpt = load_run_checkpoint(run.ckpt_path)
    check_same_tokenizer(ckpt, run.tokenizer, run.ckpt_path)
    run.model.load_state_dict(ckpt["model"])
    restore_training_state(ckpt, run.optimizer, run.scheduler, run.cfg.epochs, run.ckpt_path)
    run.state = RunState(**ckpt["state"])
    run.partial = ckpt.get("partial_epoch")
    run.resuming = True
