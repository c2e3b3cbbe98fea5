"""Build a variant of a pretraining recipe into a scratch folder, under the folder name
of the recipe it varies, so that unmodified `seps-bench run` commands started in that
folder fine-tune from it (the runner looks for ``data/pretrained/<recipe>-<key>/``).

An experiment tool, not part of the suite: it lets a question about the pretraining
("how much does a run's rSum depend on the build?") be answered without changing a
hashed module, so the committed records stay current. Records made this way are honest
about it: their ``pretrain_fingerprint`` is the variant's, and the variant's
``meta.json`` names its values. Example (a build from recipe seed 1, then a run on it):

    python experiments/build_variant.py --root /tmp/b1 --set seed=1
    cd /tmp/b1 && seps-bench run seven-differences --profile standard --only laps --seeds 0

``--keep-tokens 0.5`` changes the objective rather than a recipe field (see
:func:`token_subset_objective`); the build's ``meta.json`` then says so under
``objective``.

The data folders the runs need are linked from ``--data`` (default ``data/`` here), so
nothing is generated twice.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path

import torch
from torch import Tensor

from seps.selection import split_cls_token
from seps.train import pretrain as P


def _value(text: str) -> object:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def token_subset_objective(keep: float):
    """A late interaction over a random ``keep`` share of each image's patch tokens.

    Replaces :func:`seps.train.pretrain.late_interaction` for the build only: each step,
    every image of the batch keeps ``ceil(keep * N)`` of its ``N`` patch tokens, drawn
    uniformly from the torch generator the build seeds (so the build stays
    deterministic), plus its ``[CLS]`` token when the backbone has one (SEPS never
    drops it). The question it answers: does a backbone whose tokens must retrieve
    from a random half of themselves make SEPS's patch slimming cheaper, as a ViT
    pretrained at scale (whose patch tokens carry their context) does?
    """
    full = P.late_interaction

    def late_interaction(img: Tensor, words: Tensor, lens: Tensor) -> Tensor:
        if not torch.is_grad_enabled():
            return full(img, words, lens)
        cls, x = split_cls_token(img)
        k = math.ceil(keep * x.shape[1])
        order = torch.rand(x.shape[:2]).argsort(dim=1)[:, :k]
        kept = x.gather(1, order[..., None].expand(-1, -1, x.shape[2]))
        return full(kept if cls is None else torch.cat([cls[:, None], kept], 1), words, lens)

    return late_interaction


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", required=True, help="scratch folder (created; must not hold a build)")
    ap.add_argument("--recipe", default="synth-48", help="recipe to vary (default synth-48)")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="a recipe field to change (repeatable), e.g. seed=1",
    )
    ap.add_argument(
        "--keep-tokens",
        type=float,
        default=None,
        metavar="SHARE",
        help="pretrain the late interaction over a random SHARE of each image's patch "
        "tokens per step (token_subset_objective); default: all tokens, as the recipe",
    )
    ap.add_argument("--data", default="data", help="folder whose synth-* datasets are linked")
    ap.add_argument("--progress", action="store_true", help="show the build's progress bar")
    args = ap.parse_args(argv)
    base = P.recipe(args.recipe)
    changes = {}
    for item in args.set:
        field, _, value = item.partition("=")
        if field not in {f.name for f in dataclasses.fields(base)}:
            ap.error(f"--set {item}: unknown recipe field {field!r}")
        changes[field] = _value(value)
    variant = dataclasses.replace(base, **changes)
    name = f"{args.recipe}-variant"
    P.RECIPES[name] = variant
    root = Path(args.root)
    target = root / "data" / "pretrained" / P.pretrained_dir(args.recipe).name
    if target.exists():
        ap.error(f"--root {root}: {target} exists; choose an empty folder")
    root.joinpath("data").mkdir(parents=True, exist_ok=True)
    for d in sorted(Path(args.data).glob("synth-*")):
        link = root / "data" / d.name
        if not link.exists():
            link.symlink_to(d.resolve())
    # Built under its own name (meta.json says "synth-48-variant" and lists the values),
    # then placed where the runner looks for the recipe it varies.
    if args.keep_tokens is not None:
        if not 0.0 < args.keep_tokens <= 1.0:
            ap.error(f"--keep-tokens {args.keep_tokens}: expected a share in (0, 1]")
        P.late_interaction = token_subset_objective(args.keep_tokens)
    P._build(name, target, args.progress)
    if args.keep_tokens is not None:
        # The objective is not a recipe field: say so where the build describes itself
        # (meta.json is not among the fingerprinted weight files).
        meta_path = target / "meta.json"
        meta = json.loads(meta_path.read_text())
        meta["objective"] = {"token_subset_objective": {"keep": args.keep_tokens}}
        meta_path.write_text(json.dumps(meta, indent=2))
        changes["keep_tokens"] = args.keep_tokens
    print(f"{target}: {changes}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
