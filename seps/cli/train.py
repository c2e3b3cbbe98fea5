"""The ``seps-bench train`` and ``seps-bench eval`` subcommands.

The whole command line of this package lives here: the arguments of both subcommands,
:func:`train_config_from_args` (arguments -> :class:`TrainConfig`), and the two runners,
registered with :func:`seps.cli.command` on import. ``train`` trains one variant and
evaluates it (:func:`seps.train.loop.train`); ``eval`` scores a run checkpoint, or an
official ``model_best.pth`` with ``--official``, under a dense-caption protocol.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from ..config import PRESETS, SEPSConfig, get_config, parse_override
from ..devices import check_device, resolve_device
from ..evaluate import DENSE_SOURCES
from ..float_path import check_in_force
from ..model import ModelSpec, SEPSModel, build_model
from ..official import (
    OFFICIAL_EVAL_MAX_WORDS,
    OFFICIAL_TEXT,
    OFFICIAL_VISION,
    load_checkpoint,
    load_official_tokenizer,
)
from ..prebuild import prebuild_pretraining
from ..report.records import RECALLS
from ..store import atomic_write_json
from ..text import resolve_tokenizer
from ..train.checkpoints import checkpoint_tokenizer, load_run_checkpoint
from ..train.data import build_tokenizer, load, prepare_data_dir, split_tensors
from ..train.evaluation import evaluate_model
from ..train.features import cached_features
from ..train.loop import DivergedError, train
from ..train.run_environment import environment
from ..train_config import DATASETS, TrainConfig
from .options import add_config_flags, config_values
from .registry import command

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
    "backbone",
    "backbone_source",
    "pretrained",
    "image_size",
    "text_backbone",
    "tokenizer",
    "synth_images",
    "max_steps_per_epoch",
    "val_images",
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


def _add_train_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", default="code", help=f"head preset: {', '.join(PRESETS)}")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a head switch or hyper-parameter, e.g. --set hrpa=mean_topk (repeatable)",
    )
    add_config_flags(p, TrainConfig, COMMON_FIELDS + TRAIN_FIELDS)
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue from <out>/checkpoint_last.safetensors (or an older .pt)",
    )


def train_config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The run's :class:`TrainConfig`; a pretrained ``--text-backbone`` without ``--tokenizer``
    gets its own tokenizer (:func:`seps.text.resolve_tokenizer`), never one trained on the
    captions."""
    values = config_values(args, TrainConfig, COMMON_FIELDS + TRAIN_FIELDS)
    if values.get("pretrain") is None:  # a pretraining recipe brings its own tokenizer
        values["tokenizer"] = resolve_tokenizer(
            values.get("tokenizer"), values.get("text_backbone", TrainConfig.text_backbone)
        )
    return TrainConfig(**values)


def _summary(result: dict[str, Any]) -> str:
    m = result["metrics"]
    rec = " ".join(f"{k}={m[k]:.1f}" for k in RECALLS)
    protocol = result.get("eval_dense_source", result["dense_source"])
    return f"rsum={m['rsum']:.1f} {rec} (dense_source={protocol})"


@command("train", "train one variant and evaluate it (writes <out>/result.json)", _add_train_args)
def _run_train(args: argparse.Namespace) -> int:
    check_device(args.device)
    check_in_force()
    seps_cfg = get_config(args.preset, **dict(parse_override(s) for s in args.set))
    cfg = train_config_from_args(args)
    prebuild_pretraining(cfg, progress=cfg.progress)  # never inside the run: seps.prebuild
    try:
        result = train(cfg, seps_cfg, resume=args.resume)
    except DivergedError as exc:
        print(f"seps-bench train: diverged: {exc} -> {cfg.out_dir}/result.json", file=sys.stderr)
        return 1
    if "metrics" not in result:  # a non-zero torchrun rank: rank 0 reports
        return 0
    print(
        _summary(result) + f" | train {result['train_seconds']:.0f}s -> {cfg.out_dir}/result.json"
    )
    return 0


def _add_eval_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--checkpoint",
        required=True,
        help="a run's checkpoint_last.safetensors (or an older checkpoint_last.pt), or an "
        "official model_best.pth with --official",
    )
    p.add_argument(
        "--official", action="store_true", help="the checkpoint is an official SEPS model_best.pth"
    )
    p.add_argument("--split", default="test", help="split to evaluate (default test)")
    p.add_argument(
        "--dense-source",
        default=None,
        choices=DENSE_SOURCES,
        help="dense-caption protocol of this evaluation: query (official, leaks the "
        "ground-truth image's dense caption), candidate (fair), none, shuffled (control); "
        "default: the one the checkpoint was trained under (query for --official)",
    )
    p.add_argument(
        "--dataset",
        default=None,
        choices=DATASETS,
        help="dataset kind (default: the run's; f30k for --official)",
    )
    p.add_argument("--data-path", help="dataset folder (default: the one the run trained on)")
    p.add_argument("--image-dir", help="image folder (default <data-path>/images)")
    p.add_argument(
        "--skip-bad-images",
        action="store_true",
        help="drop missing or unreadable images with their captions instead of stopping",
    )
    p.add_argument(
        "--preset",
        default="code",
        help="--official only: head preset whose naming the checkpoint uses",
    )
    p.add_argument(
        "--vision",
        help="--official only: vision backbone, one of "
        f"{', '.join(OFFICIAL_VISION)} or a transformers config folder or hub name (default: "
        "the checkpoint's opt.vit_type, as the official code; no download)",
    )
    p.add_argument(
        "--text",
        help="--official only: BERT config folder or hub name (default: the architecture of "
        f"{OFFICIAL_TEXT}, which the official code always uses, whatever opt.bert_path says)",
    )
    p.add_argument(
        "--tokenizer",
        help="--official only: folder (vocab.txt or tokenizer.json) or hub name of the "
        f"vocabulary, tokenised as the official loader does (default {OFFICIAL_TEXT})",
    )
    p.add_argument("--device", default="auto", help="auto, cpu, cuda[:N]")
    p.add_argument("--output", help="result JSON path (default next to the checkpoint)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def _eval_setup(args: argparse.Namespace) -> tuple[TrainConfig, SEPSModel, Any, Path]:
    """Config, model, tokenizer and data folder for ``seps-bench eval``."""
    check_device(args.device)
    common = dict(
        skip_bad_images=args.skip_bad_images,
        eval_split=args.split,
        device=args.device,
        progress=not args.no_progress,
    )
    if args.official:
        if not args.data_path:
            raise ValueError(
                "--data-path: required with --official (a folder in the official layout)"
            )
        model = load_checkpoint(
            args.checkpoint, vision=args.vision, text=args.text, preset=args.preset
        )
        cfg = TrainConfig(
            dataset=args.dataset or "f30k",
            data_path=args.data_path,
            image_dir=args.image_dir,
            image_size=model.img_enc.image_size,
            tokenizer=args.tokenizer or OFFICIAL_TEXT,
            dense_source=args.dense_source or "query",
            # The official evaluation's truncation: BERT reads every caption whole, then
            # the first 90 token features are kept (seps.train.data.keep_first_tokens).
            max_words=0,
            max_dense_words=0,
            eval_max_words=OFFICIAL_EVAL_MAX_WORDS,
            **common,
        )
        data_dir = prepare_data_dir(cfg)
        return cfg, model, load_official_tokenizer(cfg.tokenizer), data_dir
    ckpt = load_run_checkpoint(Path(args.checkpoint))
    tc = dict(ckpt["train_config"])
    tc["lr_milestones"] = tuple(tc["lr_milestones"])
    tc.update(common)
    # The checkpoint keeps the protocol it was trained under; --dense-source says how
    # to evaluate it.
    tc["eval_dense_source"] = args.dense_source
    tc.setdefault("dense_source", "query")  # checkpoints from before training protocols
    for key in ("data_path", "image_dir", "dataset"):
        if getattr(args, key):
            tc[key] = getattr(args, key)
    cfg = TrainConfig(**tc)
    model = build_model(ModelSpec(**ckpt["model_spec"]), SEPSConfig(**ckpt["seps_config"]))
    model.load_state_dict(ckpt["model"])
    data_dir = prepare_data_dir(cfg)
    tokenizer = checkpoint_tokenizer(ckpt, Path(args.checkpoint))
    if tokenizer is None:  # an older checkpoint: rebuild it from the training captions
        warnings.warn(
            f"checkpoint {args.checkpoint!r} holds no tokenizer (written by an older "
            "seps-bench); rebuilding it from the training captions",
            stacklevel=1,
        )
        tokenizer = build_tokenizer(cfg, data_dir)
    return cfg, model, tokenizer, data_dir


@command("eval", "evaluate a checkpoint under a dense-caption protocol", _add_eval_args)
def _run_eval(args: argparse.Namespace) -> int:
    check_in_force()
    cfg, model, tokenizer, data_dir = _eval_setup(args)
    device = resolve_device(cfg.device)
    model = model.to(device)
    split = split_tensors(cfg, load(cfg, data_dir, cfg.eval_split), tokenizer)
    feats = None
    if cfg.protocol == "frozen":
        spec = ModelSpec(image_size=cfg.image_size)
        feats = cached_features(model, split, cfg, spec, device, "eval")
    t0 = time.perf_counter()
    metrics = evaluate_model(model, split, device, cfg, feats=feats, progress=cfg.progress)
    result = {
        "metrics": metrics,
        "dense_source": cfg.dense_source,
        "eval_dense_source": cfg.eval_protocol,
        "split": cfg.eval_split,
        "checkpoint": str(args.checkpoint),
        "official": bool(args.official),
        "eval_seconds": time.perf_counter() - t0,
        "seps_config": model.config.to_dict(),
        "environment": environment(),
    }
    out = Path(
        args.output
        or Path(args.checkpoint).with_name(f"eval-{cfg.eval_split}-{cfg.eval_protocol}.json")
    )
    atomic_write_json(out, result)
    print(_summary(result) + f" -> {out}")
    return 0
