"""``seps-bench pretrain``: build (or list) the pretrained backbones of a recipe."""

from __future__ import annotations

import argparse
import json


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "recipe",
        nargs="?",
        help="recipe to build, or build B of one as RECIPE@B (its seeds and draw moved by "
        "B: what train.pretrain_builds starts seed s from, B = s mod the number of builds); "
        "omit it to list the recipes, each with its folder and whether it is built",
    )
    p.add_argument(
        "--root",
        default=None,
        help="folder of pretrained backbones (default data/pretrained, where runs look)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    # Imported here, not at the top: `--help` must not load torch (seps.cli.registry).
    from ..runs.prebuild import build_checked
    from ..runtime.float_path import check_in_force
    from ..train.pretrain import RECIPES, is_complete, pretrained_dir, recipe

    if args.recipe is None:
        for name, r in sorted(RECIPES.items()):
            folder = pretrained_dir(name, args.root)
            state = "built" if is_complete(folder) else "not built"
            print(f"{name}: {r.description}\n  {folder} ({state})")
        return 0
    try:
        recipe(args.recipe)
    except ValueError as exc:  # the message names the config field; here it is the argument
        raise ValueError(str(exc).replace("train config field 'pretrain'", "recipe")) from None
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
