"""The ``seps-bench eval`` subcommand: score a run's checkpoint, or an official
``model_best.pth`` with ``--official``, under a dense-caption protocol.

Only the command line lives here; the model, data and evaluation code is imported when
the command runs.
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path
from typing import Any

from ..core.evaluate import DENSE_SOURCES
from ..train.config import DATASETS, TrainConfig
from ..train.official_backbones import OFFICIAL_TEXT, OFFICIAL_VISION
from .train import summary


def add_arguments(p: argparse.ArgumentParser) -> None:
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
    p.add_argument(
        "--output",
        metavar="PATH",
        help="the result JSON file (default eval-SPLIT-PROTOCOL.json next to the checkpoint)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def _eval_setup(args: argparse.Namespace) -> tuple[TrainConfig, Any, Any, Path]:
    """Config, model, tokenizer and data folder for ``seps-bench eval``."""
    from ..core.config import SEPSConfig
    from ..model.seps_model import ModelSpec, build_model
    from ..runs.prebuild import check_dataset
    from ..runtime.devices import check_device
    from ..train.checkpoints import checkpoint_tokenizer, load_run_checkpoint
    from ..train.data import build_tokenizer, prepare_data_dir
    from ..train.official import load_checkpoint
    from ..train.official_backbones import OFFICIAL_EVAL_MAX_WORDS, load_official_tokenizer

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
    check_dataset(cfg)  # a generated set damaged on disk is made again (seps.io.derived)
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


def run(args: argparse.Namespace) -> int:
    from ..io.store import atomic_write_json
    from ..model.seps_model import ModelSpec
    from ..runtime.devices import resolve_device
    from ..runtime.float_path import check_in_force
    from ..train.data import load, split_tensors
    from ..train.evaluation import evaluate_model
    from ..train.features import cached_features
    from ..train.run_environment import environment

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
    print(summary(result) + f" -> {out}")
    return 0
