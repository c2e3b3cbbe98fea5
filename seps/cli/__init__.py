"""The ``seps-bench`` command line: all argument parsing lives in this package.

One module per subcommand, listed by name in :data:`.registry.COMMANDS` and imported only
when its command runs or its ``--help`` is asked for (so ``seps-bench --help`` does not
load torch). Each parses its options and dispatches to the library modules
(:mod:`seps.train`, :mod:`seps.runs.runner`, :mod:`seps.report`, :mod:`seps.bench`, ...), which
never import this package. :mod:`.options` builds ``train``'s flags from the fields of
:class:`seps.train.config.TrainConfig`, so no default is written twice.

:func:`main` pins the CPU float path (:func:`seps.runtime.float_path.apply_requested`) before
anything imports torch: this package imports nothing that loads it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable, Sequence
from typing import NoReturn

from ..runtime.float_path import ENV_VAR, apply_requested
from ..runtime.interrupts import StopRequested, interrupted_line
from .registry import COMMANDS, Command, load

__all__ = ["COMMANDS", "Command", "build_parser", "error_line", "main"]


#: Commands whose numbers depend on the CPU's float path (their ``--help`` says how to pin it).
COMPUTING_COMMANDS = ("run", "train", "eval", "pretrain")

FLOAT_PATH_HELP = (
    f"environment: {ENV_VAR}=portable, the default on x86-64, pins the CPU float path "
    "(PyTorch and oneDNN kernels at AVX2, MKL on its vendor-neutral COMPATIBLE branch, numpy "
    "without AVX-512): the same kernels on any x86-64 CPU with AVX2, but the same bits only "
    "on the same CPU model (pinned Intel and AMD runs differ); measured on AMD EPYC it "
    "makes a run of the code preset at the standard profile about 1.2x slower and the "
    "synth-48 pretraining about 1.5-1.9x; 'native' lets each "
    "library pick its kernels for this CPU. The path in force is stamped on every record "
    "(environment.cpu). See docs/across-machines.md."
)

#: Options of every command, given before or after the command's name.
GLOBAL_OPTIONS = {
    "--debug": "on an error, print the full Python traceback instead of the one-line message",
    "--quiet": "no progress bars (ours and Hugging Face's) and no per-epoch log lines; "
    "results, warnings and errors are still printed",
}


def _add_global_options(parser: argparse.ArgumentParser, top: bool) -> None:
    # Below the top level the default is SUPPRESS: a subparser's defaults would otherwise
    # overwrite what was given before the command's name (`seps-bench --debug run ...`).
    for flag, help_ in GLOBAL_OPTIONS.items():
        default = False if top else argparse.SUPPRESS
        parser.add_argument(flag, action="store_true", default=default, help=help_)


def _subparsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Every parser below ``parser`` (e.g. ``data synth``), recursively."""
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):  # aliases repeat a parser
                out += [child, *_subparsers(child)]
    return out


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors are one line (the option, what was expected,
    where the help is) instead of the usage block and the line; exit status 2 as before.
    The command parsers are of this class too (``add_subparsers`` uses the parent's)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")

    def parse_args(self, args=None, namespace=None):  # type: ignore[no-untyped-def,override]
        # An unknown option is found by the top-level parser: name the command it follows.
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            command = getattr(ns, "command", None)
            prog = f"{self.prog} {command}" if command else self.prog
            msg = f"unrecognized arguments: {' '.join(extras)} (see `{prog} --help`)"
            self.exit(2, f"{prog}: error: {msg}\n")
        return ns


def build_parser(load_commands: Iterable[str] | None = None) -> argparse.ArgumentParser:
    """The parser. Every command is listed; only those of ``load_commands`` (default: all)
    have their module imported and their options built: enough to parse a command line
    that names one command, or to print the top-level help with none."""
    loaded = set(COMMANDS) if load_commands is None else set(load_commands)
    parser = _Parser(
        prog="seps-bench",
        description=(
            "Ablation and reproduction suite for SEPS (Semantic-Enhanced Patch Slimming). "
            "Every difference between the paper and the open-source code is a config switch; "
            "see `seps-bench presets`. Global options go before or after the command; "
            "`seps-bench COMMAND --help` shows a command's options."
        ),
    )
    _add_global_options(parser, top=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, entry in COMMANDS.items():
        epilog = FLOAT_PATH_HELP if name in COMPUTING_COMMANDS else None
        p = sub.add_parser(name, help=entry.help, description=entry.help, epilog=epilog)
        if name not in loaded:
            continue
        add_args, runner = load(name)
        add_args(p)
        for q in [p, *_subparsers(p)]:
            _add_global_options(q, top=False)
        p.set_defaults(_run=runner)
    return parser


def _named_command(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names: its first word that is not an option (the global
    options take no value, so nothing before the command's name is a value)."""
    for word in argv:
        if word == "--":
            return None
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


#: Commands that measure speed and write no record: they run on the machine's native
#: float path unless ``SEPS_FLOAT_PATH`` says otherwise, since the portable pin exists for
#: records' bits and puts MKL on its SSE2 branch, about 2.8x slower GEMMs on AMD EPYC
#: (seps.runtime.float_path), which would time a slowed BLAS instead of the head.
NATIVE_COMMANDS = frozenset({"bench"})


def main(argv: Sequence[str] | None = None) -> int:
    # First: the float path is pinned through environment variables that torch, MKL,
    # oneDNN and numpy read once, when they load (seps.runtime.float_path). Nothing above imports
    # them; the command's module, imported by build_parser, may.
    argv = list(sys.argv[1:] if argv is None else argv)
    name = _named_command(argv)
    if name in NATIVE_COMMANDS and not (os.environ.get(ENV_VAR) or "").strip():
        os.environ[ENV_VAR] = "native"
    apply_requested()
    parser = build_parser([name] if name else [])
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 0
    if args.quiet:
        args.no_progress = True  # --quiet implies the per-command --no-progress
    if getattr(args, "no_progress", False):
        quiet_hub_progress()
    try:
        return int(args._run(args) or 0)
    except (ValueError, OSError) as exc:  # bad input or an unusable file: one clear line
        if args.debug:
            raise
        print(f"seps-bench {args.command}: error: {error_line(exc)}", file=sys.stderr)
        return 2
    except ImportError as exc:  # an optional dependency this command needs is missing
        if args.debug:
            raise
        missing = getattr(exc, "name", None) or str(exc)
        print(
            f"seps-bench {args.command}: error: needs the package {missing!r}, which is not "
            "installed; install the suite's extras: pip install 'seps-bench[all]' "
            "(docs/install.md)",
            file=sys.stderr,
        )
        return 2
    except (KeyboardInterrupt, StopRequested) as exc:  # Ctrl-C or SIGTERM: one line, 130/143
        if getattr(args, "debug", False):
            raise
        line, code = interrupted_line(args.command, exc)
        print(line, file=sys.stderr)
        return code


def quiet_hub_progress() -> None:
    """``--quiet`` (``--no-progress``) silences Hugging Face's bars too: transformers
    draws one per model it loads ("Loading weights"), hundreds in the log of a long
    matrix. The environment variable reaches worker processes (Ray, DataLoader); a
    variable the user set is left alone."""
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
