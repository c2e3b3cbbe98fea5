"""The ``seps-bench`` command line.

Each subcommand is one entry of :data:`COMMANDS` (name -> (help, add_arguments,
run)), so later modules add theirs without touching the parser code.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Sequence

from .config import FIELD_HELP, PRESETS, SEPSConfig, get_config, parse_override

AddArgs = Callable[[argparse.ArgumentParser], None]
Run = Callable[[argparse.Namespace], int]

#: subcommand name -> (one-line help, argument builder, runner)
COMMANDS: dict[str, tuple[str, AddArgs, Run]] = {}


def command(name: str, help: str, add_arguments: AddArgs) -> Callable[[Run], Run]:
    """Register a subcommand."""

    def wrap(run: Run) -> Run:
        COMMANDS[name] = (help, add_arguments, run)
        return run

    return wrap


def presets_table(names: Sequence[str] | None = None, fmt: str = "github") -> str:
    """The presets' switches side by side: one row per config field, one column per preset."""
    from tabulate import tabulate

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


def _add_presets_args(p: argparse.ArgumentParser) -> None:
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
        metavar="FIELD=VALUE",
        help="show the first preset with this override applied (repeatable); validates it",
    )


@command(
    "presets", "print each preset's switches as a table (fields marked * differ)", _add_presets_args
)
def _run_presets(args: argparse.Namespace) -> int:
    if args.set:
        base = args.names[0] if args.names else "code"
        cfg = get_config(base, **dict(parse_override(s) for s in args.set))
        for f in dataclasses.fields(cfg):
            print(f"{f.name} = {getattr(cfg, f.name)!r}")
        return 0
    print(presets_table(args.names, args.format))
    print()
    for name, (desc, _) in PRESETS.items():
        if not args.names or name in args.names:
            print(f"{name}: {desc}")
    return 0


def _add_data_args(p: argparse.ArgumentParser) -> None:
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
    synth.add_argument("--out", required=True, help="output folder (created)")
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
        "--splits", default="0.8,0.1,0.1", help="train,dev,test fractions (default 0.8,0.1,0.1)"
    )
    synth.add_argument("--name", default="synth", help="dataset name used in file names")
    # SUPPRESS: when not given here it must not overwrite ``data --debug``.
    synth.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="full traceback on error"
    )


@command("data", "create datasets (synth: the built-in synthetic benchmark)", _add_data_args)
def _run_data(args: argparse.Namespace) -> int:
    import time

    from .data.synth import generate_synthetic

    try:
        splits = tuple(float(x) for x in args.splits.split(","))
    except ValueError:
        raise ValueError(
            f"--splits: expected three comma-separated numbers, got {args.splits!r}"
        ) from None
    start = time.perf_counter()
    out = generate_synthetic(
        args.out,
        n_images=args.images,
        seed=args.seed,
        image_size=args.image_size,
        hallucination=args.hallucination,
        splits=splits,
        name=args.name,
    )
    print(f"wrote {args.images} images to {out} in {time.perf_counter() - start:.1f} s")
    return 0


#: Modules that register further subcommands with :func:`command` when imported.
COMMAND_MODULES: tuple[str, ...] = ("seps.train", "seps.runner", "seps.report", "seps.bench")


def _load_command_modules() -> None:
    import importlib

    for name in COMMAND_MODULES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:  # a real missing dependency inside the module
                raise


def build_parser() -> argparse.ArgumentParser:
    _load_command_modules()
    parser = argparse.ArgumentParser(
        prog="seps-bench",
        description=(
            "Ablation and reproduction suite for SEPS (Semantic-Enhanced Patch Slimming). "
            "Every difference between the paper and the open-source code is a config switch; "
            "see `seps-bench presets`."
        ),
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (help_, add_args, run) in COMMANDS.items():
        p = sub.add_parser(name, help=help_, description=help_)
        add_args(p)
        p.add_argument(
            "--debug",
            action="store_true",
            help="on an error, print the full Python traceback instead of the one-line message",
        )
        p.set_defaults(_run=run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 0
    try:
        return int(args._run(args) or 0)
    except (ValueError, OSError) as exc:  # bad input or an unusable file: one clear line
        if getattr(args, "debug", False):
            raise
        print(f"seps-bench {args.command}: error: {error_line(exc)}", file=sys.stderr)
        return 2


def error_line(exc: BaseException) -> str:
    """One line for the user: an ``OSError`` as ``<file>: <reason>``, anything else as its
    message with line breaks folded (a long list of keys stays one line)."""
    if isinstance(exc, OSError) and exc.filename is not None:
        text = f"{exc.filename}: {exc.strerror or exc}"
    else:
        text = str(exc)
    return " ".join(text.split())


if __name__ == "__main__":  # pragma: no cover
    # Run through the canonical module: command modules register on ``seps.cli``, not on
    # the ``__main__`` copy that ``python -m seps.cli`` creates.
    from seps.cli import main as _main

    raise SystemExit(_main())
