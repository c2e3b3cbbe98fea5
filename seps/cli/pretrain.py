"""``seps-bench pretrain``: build (or list) the pretrained backbones of a recipe."""

from __future__ import annotations

import argparse
import json

from ..float_path import check_in_force
from ..prebuild import build_checked
from ..train.pretrain import RECIPES, is_complete, pretrained_dir


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "recipe",
        nargs="?",
        help=f"recipe to build ({', '.join(sorted(RECIPES))}); omit to list the recipes",
    )
    p.add_argument(
        "--root",
        default=None,
        help="folder of pretrained backbones (default data/pretrained, where runs look)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    if args.recipe is None:
        for name, r in sorted(RECIPES.items()):
            folder = pretrained_dir(name, args.root)
            state = "built" if is_complete(folder) else "not built"
            print(f"{name}: {r.description}\n  {folder} ({state})")
        return 0
    if args.recipe not in RECIPES:
        raise ValueError(f"recipe {args.recipe!r}: unknown; known: {', '.join(sorted(RECIPES))}")
    check_in_force()
    folder = build_checked(args.recipe, args.root, progress=not args.no_progress)
    meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    final = meta["final_loss"]  # one number, or one per objective (a unimodal build)
    losses = (
        ", ".join(f"{k} {v:.3f}" for k, v in final.items())
        if isinstance(final, dict)
        else f"{final:.3f}"
    )
    seconds = meta["train_seconds"]
    print(f"{args.recipe}: {folder} (trained in {seconds:.0f} s, final loss {losses})")
    return 0
