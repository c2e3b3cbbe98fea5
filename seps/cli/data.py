"""``seps-bench data synth``: render the built-in synthetic dataset."""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from ..data.captions import GRAMMARS
from ..data.synth import DEFAULT_DENSE_NOISE, generate_synthetic
from .options import deprecated_alias


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    synth = sub.add_parser(
        "synth",
        help="render the built-in synthetic dataset in the official Flickr30K/COCO layout",
        description=(
            "Render scenes of 1-4 shapes on textured backgrounds with 5 short captions and one "
            "dense MLLM-style caption per image, written as {split}_caps.txt, {split}_ids.txt, "
            "<name>_{split}.jsonl, id_mapping.json and images/."
        ),
    )
    synth.add_argument(
        "--output", metavar="DIR", help="the dataset folder to write (created; required)"
    )
    deprecated_alias(synth, "--out", "--output")
    synth.add_argument("--images", type=int, default=5000, help="number of images (default 5000)")
    synth.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    synth.add_argument("--image-size", type=int, default=64, help="square image side in pixels")
    synth.add_argument(
        "--hallucination",
        type=float,
        default=0.0,
        help="fraction of dense captions that state a false object or attribute (default 0)",
    )
    synth.add_argument(
        "--dense-noise",
        type=float,
        default=DEFAULT_DENSE_NOISE,
        help=(
            "MLLM-like noise of the dense captions: share of object mentions hallucinated, "
            "with omissions and attribute, position and background errors scaled to it "
            f"(default {DEFAULT_DENSE_NOISE:g}; 0: perfect captions, as before)"
        ),
    )
    synth.add_argument(
        "--grammar",
        choices=GRAMMARS,
        default="v1",
        help="caption grammar: v1 (default, as before) or v2 (distinct, Flickr-length sparse "
        "captions; dense captions with vague positions and sizes)",
    )
    synth.add_argument(
        "--splits", default="0.8,0.1,0.1", help="train,dev,test fractions (default 0.8,0.1,0.1)"
    )
    synth.add_argument("--name", default="synth", help="dataset name used in file names")


def run(args: argparse.Namespace) -> int:
    if not args.output:  # not argparse's required=: the old spelling --out counts too
        raise ValueError("--output: required, the dataset folder to write")
    try:
        splits = tuple(float(x) for x in args.splits.split(","))
    except ValueError:
        raise ValueError(
            f"--splits: expected three comma-separated numbers, got {args.splits!r}"
        ) from None
    target = Path(args.output)
    if os.path.lexists(target) and not target.exists():  # a broken link or a link loop
        raise ValueError(f"--output {args.output!r}: a link that leads nowhere; expected a folder")
    start = time.perf_counter()
    out = generate_synthetic(
        args.output,
        n_images=args.images,
        seed=args.seed,
        image_size=args.image_size,
        hallucination=args.hallucination,
        dense_noise=args.dense_noise,
        grammar=args.grammar,
        splits=splits,
        name=args.name,
    )
    print(f"wrote {args.images} images to {out} in {time.perf_counter() - start:.1f} s")
    return 0
