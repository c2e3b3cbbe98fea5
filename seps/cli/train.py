"""The ``seps-bench train`` subcommand: train one variant and evaluate it.

The command line of training lives here: its arguments, :func:`train_config_from_args`
(arguments -> :class:`TrainConfig`) and the runner, which dispatches to
:func:`seps.train.loop.train`. ``seps-bench eval`` is :mod:`.evaluate`.

The options are built from :class:`TrainConfig`'s fields, so its module (and torch with
it) is imported at the top; the model, data and training code only when the command runs.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..core.config import PRESETS
from ..train.config import TrainConfig
from .options import add_config_flags, config_values, head_and_train_sets

#: TrainConfig fields that are options of both ``train`` and the shared part, in the
#: order ``--help`` lists them.
COMMON_FIELDS = [
    "dataset",
    "data_path",
    "image_dir",
    "skip_bad_images",
    "device",
    "dense_source",
    "out_dir",
    "seed",
    "progress",
]
#: The training options of ``train`` (after the common ones).
TRAIN_FIELDS = [
    "protocol",
    "freeze_layers",
    "epochs",
    "batch_size",
    "lr",
    "backbone_lr_mult",
    "pretrain",
    "backbone",
    "backbone_source",
    "pretrained",
    "image_size",
    "text_backbone",
    "tokenizer",
    "synth_images",
    "max_steps_per_epoch",
    "val_images",
    "eval_checkpoint",
    "max_violation_from",
    "augment",
    "augment_whole_word",
    "image_augment",
    "max_words",
    "max_dense_words",
    "eval_max_words",
    "workers",
    "keep_optimizer",
    "dropout",
    "on_nonfinite",
    "precision",
    "kernel",
]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", default="code", help=f"head preset: {', '.join(PRESETS)}")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="PART.FIELD=VALUE",
        help="change one field, repeatable, as in `seps-bench run`: head.FIELD=VALUE (a head "
        "switch of the preset, e.g. head.hrpa=mean_topk) or train.FIELD=VALUE (a train "
        "config field, e.g. train.epochs=3; it wins over the field's own option)",
    )
    add_config_flags(p, TrainConfig, COMMON_FIELDS + TRAIN_FIELDS)
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue from <run-dir>/checkpoint_last.safetensors (or an older .pt)",
    )
    p.add_argument(
        "--no-tensorboard",
        action="store_true",
        help="write no TensorBoard event files (by default under <run-dir>/tensorboard/); "
        "not part of the run: its result is the same either way",
    )


def train_config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The run's :class:`TrainConfig`; a pretrained ``--text-backbone`` without ``--tokenizer``
    gets its own tokenizer (:func:`seps.data.text.resolve_tokenizer`), never one trained on the
    captions."""
    from ..data.text import resolve_tokenizer

    values = config_values(args, TrainConfig, COMMON_FIELDS + TRAIN_FIELDS)
    values.update(head_and_train_sets(args.set)[1])
    if values.get("pretrain") is None:  # a pretraining recipe brings its own tokenizer
        values["tokenizer"] = resolve_tokenizer(
            values.get("tokenizer"), values.get("text_backbone", TrainConfig.text_backbone)
        )
    return TrainConfig(**values)


def check_pretrain_fits(cfg: TrainConfig) -> None:
    """``--pretrain RECIPE``: the options the recipe fixes must match it, checked here,
    before :func:`seps.runs.prebuild.prebuild_pretraining` spends hours building the recipe
    (the training checks the same fields, too late for that, in
    :func:`seps.train.pretrain.pretrained_parts`; ``seps/train`` is code-versioned, so
    the check is not moved out of it). Raises a ``ValueError`` naming the option."""
    if cfg.pretrain is None:
        return
    from ..train.pretrain import recipe

    try:
        r = recipe(cfg.pretrain)
    except ValueError:
        from ..train.pretrain import RECIPES

        raise ValueError(
            f"--pretrain: unknown recipe {cfg.pretrain!r}; known: {', '.join(sorted(RECIPES))}"
        ) from None
    for field, want in (
        ("backbone", r.backbone),
        ("text_backbone", r.text_backbone),
        ("image_size", r.image_size),
    ):
        if getattr(cfg, field) != want:
            flag = "--" + field.replace("_", "-")
            raise ValueError(
                f"{flag}: {getattr(cfg, field)!r} does not match pretraining recipe "
                f"{cfg.pretrain!r}; pass {flag} {want}"
            )
    for field in ("pretrained", "tokenizer"):
        if getattr(cfg, field) is not None:
            raise ValueError(
                f"--{field}: must be left out with --pretrain (the recipe provides the "
                "weights and the tokenizer)"
            )


def summary(result: dict[str, Any]) -> str:
    """One line of a run's or an evaluation's result: rSum, the recalls, the protocol."""
    from ..report.records import RECALLS

    m = result["metrics"]
    rec = " ".join(f"{k}={m[k]:.1f}" for k in RECALLS)
    protocol = result.get("eval_dense_source", result["dense_source"])
    return f"rsum={m['rsum']:.1f} {rec} (dense_source={protocol})"


def run(args: argparse.Namespace) -> int:
    from ..core.config import get_config
    from ..runs.prebuild import prebuild_pretraining
    from ..runtime.devices import check_device
    from ..runtime.float_path import check_in_force
    from ..train.loop import DivergedError, train

    check_device(args.device)
    check_in_force()
    seps_cfg = get_config(args.preset, **head_and_train_sets(args.set)[0])
    cfg = train_config_from_args(args)
    from ..experiments.definition_checks import config_problem

    problem = config_problem(cfg)  # what TrainConfig accepts but no run can use (lr: inf)
    if problem:
        raise ValueError(problem)
    check_pretrain_fits(cfg)
    prebuild_pretraining(cfg, progress=cfg.progress)  # never inside the run: seps.runs.prebuild
    try:
        result = train(cfg, seps_cfg, resume=args.resume, tensorboard=not args.no_tensorboard)
    except DivergedError as exc:
        print(f"seps-bench train: diverged: {exc} -> {cfg.out_dir}/result.json", file=sys.stderr)
        return 1
    if "metrics" not in result:  # a non-zero torchrun rank: rank 0 reports
        return 0
    print(summary(result) + f" | train {result['train_seconds']:.0f}s -> {cfg.out_dir}/result.json")
    return 0
