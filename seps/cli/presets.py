"""``seps-bench presets``: the registered presets' switches side by side."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence

from tabulate import tabulate, tabulate_formats

from ..core.config import FIELD_HELP, PRESETS, SEPSConfig, get_config
from .options import head_and_train_sets


def presets_table(names: Sequence[str] | None = None, fmt: str = "github") -> str:
    """The presets' switches side by side: one row per config field, one column per preset."""
    if fmt not in tabulate_formats:  # tabulate would fall back to 'simple' silently
        raise ValueError(
            f"--format: unknown table format {fmt!r}; known: {', '.join(tabulate_formats)}"
        )
    names = list(names or PRESETS)
    unknown = [n for n in names if n not in PRESETS]
    if unknown:
        raise ValueError(f"unknown preset(s) {unknown}; known: {', '.join(PRESETS)}")
    configs = [get_config(n) for n in names]
    rows = []
    for f in dataclasses.fields(SEPSConfig):
        values = [getattr(c, f.name) for c in configs]
        differs = "*" if len({repr(v) for v in values}) > 1 else ""
        rows.append([f.name + differs, *values, FIELD_HELP.get(f.name, "")])
    return tabulate(rows, headers=["field", *names, "meaning"], tablefmt=fmt)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "names",
        nargs="*",
        metavar="PRESET",
        help=f"presets to show (default: all of {', '.join(PRESETS)})",
    )
    p.add_argument(
        "--format",
        default="github",
        help="table format understood by tabulate, e.g. github, plain, simple (default: github)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="head.FIELD=VALUE",
        help="show the first preset with this head switch changed (repeatable), as --set "
        "head.FIELD=VALUE of train and run; validates it",
    )


def run(args: argparse.Namespace) -> int:
    if args.set:
        base = args.names[0] if args.names else "code"
        head, train = head_and_train_sets(args.set)
        if train:
            raise ValueError(
                f"--set: presets holds head switches only; got train field(s) {', '.join(train)}"
            )
        cfg = get_config(base, **head)
        for f in dataclasses.fields(cfg):
            print(f"{f.name} = {getattr(cfg, f.name)!r}")
        return 0
    print(presets_table(args.names, args.format))
    print()
    for name, (desc, _) in PRESETS.items():
        if not args.names or name in args.names:
            print(f"{name}: {desc}")
    return 0
