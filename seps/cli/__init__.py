"""The ``seps-bench`` command line: all argument parsing lives in this package.

One module per subcommand (``presets``, ``data``, ``train`` + ``eval``, ``run``,
``campaign``, ``ratio-scale``, ``report``, ``bench``), each parsing its options and
dispatching to the library modules (:mod:`seps.train`, :mod:`seps.runner`,
:mod:`seps.report`, :mod:`seps.bench`, :mod:`seps.ratio_scale`, :mod:`seps.campaign`),
which never import this package.
:mod:`.options` builds ``train``'s flags from the fields of
:class:`seps.train_config.TrainConfig`, so no default is written twice.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from ..float_path import ENV_VAR
from ..interrupts import StopRequested, interrupted_line
from . import (  # noqa: F401  (each registers its command)
    bench,
    campaign,
    data,
    export,
    presets,
    pretrain,
    ratio_scale,
    report,
    run,
    same_bits,
    scorecard,
    text_only,
    train,
)
from .presets import presets_table
from .registry import COMMANDS, command

__all__ = ["COMMANDS", "build_parser", "command", "error_line", "main", "presets_table"]


#: Commands whose numbers depend on the CPU's float path (their ``--help`` says how to pin it).
COMPUTING_COMMANDS = ("run", "train", "eval", "pretrain")

FLOAT_PATH_HELP = (
    f"environment: {ENV_VAR}=portable, the default on x86-64, pins the CPU float path "
    "(PyTorch and oneDNN kernels at AVX2, MKL on its vendor-neutral COMPATIBLE branch, numpy "
    "without AVX-512), meant to give the same bits on any x86-64 CPU with AVX2 (checked on "
    "one CPU type so far); measured on AMD EPYC it costs about 1.2x the time of a standard "
    "code run and about 1.5-1.9x that of the synth-48 pretraining; 'native' lets each "
    "library pick its kernels for this CPU. The path in force is stamped on every record "
    "(environment.cpu). See README, 'Across machines'."
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="seps-bench",
        description=(
            "Ablation and reproduction suite for SEPS (Semantic-Enhanced Patch Slimming). "
            "Every difference between the paper and the open-source code is a config switch; "
            "see `seps-bench presets`."
        ),
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (help_, add_args, runner) in COMMANDS.items():
        epilog = FLOAT_PATH_HELP if name in COMPUTING_COMMANDS else None
        p = sub.add_parser(name, help=help_, description=help_, epilog=epilog)
        add_args(p)
        p.add_argument(
            "--debug",
            action="store_true",
            help="on an error, print the full Python traceback instead of the one-line message",
        )
        p.set_defaults(_run=runner)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 0
    if getattr(args, "no_progress", False):
        quiet_hub_progress()
    try:
        return int(args._run(args) or 0)
    except (ValueError, OSError) as exc:  # bad input or an unusable file: one clear line
        if getattr(args, "debug", False):
            raise
        print(f"seps-bench {args.command}: error: {error_line(exc)}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, StopRequested) as exc:  # Ctrl-C or SIGTERM: one line, 130/143
        if getattr(args, "debug", False):
            raise
        line, code = interrupted_line(args.command, exc)
        print(line, file=sys.stderr)
        return code


def quiet_hub_progress() -> None:
    """``--no-progress`` silences Hugging Face's bars too: transformers draws one per
    model it loads ("Loading weights"), hundreds in the log of a long matrix. The
    environment variable reaches worker processes (Ray, DataLoader); a variable the user
    set is left alone."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] not in ("1", "true", "TRUE", "yes"):
        return
    if "huggingface_hub" in sys.modules:
        sys.modules["huggingface_hub"].utils.disable_progress_bars()
    if "transformers" in sys.modules:
        sys.modules["transformers"].utils.logging.disable_progress_bar()


def error_line(exc: BaseException) -> str:
    """One line for the user: an ``OSError`` as ``<file>: <reason>``, anything else as its
    message with line breaks folded (a long list of keys stays one line)."""
    if isinstance(exc, OSError) and exc.filename is not None:
        text = f"{exc.filename}: {exc.strerror or exc}"
    else:
        text = str(exc)
    return " ".join(text.split())
