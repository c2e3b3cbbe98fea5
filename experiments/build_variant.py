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

``--keep-tokens SHARE`` is ``--set keep_tokens=SHARE``: the share of patch tokens each
pretraining step sees (``seps.train.pretrain.token_subset``). It was an objective of this
script's own before it became a recipe field (``synth-48`` now pretrains on a quarter),
and the builds under ``experiments/`` were made so: their ``meta.json`` names it under
``objective``, and the recipe field gives the same weights bit for bit (checked on a
6-step build). The plain recipe of those experiments is now ``--keep-tokens 1``.

The data folders the runs need are linked from ``--data`` (default ``data/`` here), so
nothing is generated twice.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from seps.train import pretrain as P


def _value(text: str) -> object:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


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
        help="the same as --set keep_tokens=SHARE: pretrain the late interaction over a "
        "random SHARE of each image's patch tokens per step (1: all of them)",
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
    if args.keep_tokens is not None:
        changes["keep_tokens"] = args.keep_tokens
    try:
        variant = dataclasses.replace(base, **changes)
    except ValueError as exc:
        ap.error(str(exc))
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
    P._build(name, target, args.progress)
    print(f"{target}: {changes}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
