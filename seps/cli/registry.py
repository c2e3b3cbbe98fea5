"""The subcommand table: name -> the module that implements it, and its one-line help.

Why a table and not imports: a subcommand module imports what it runs (torch,
transformers: seconds), so ``seps-bench --help`` and a mistyped command would wait for
all of them. Here each command is a name, a module path and a help line;
:func:`load` imports the module only when its command is run or its own ``--help``
is asked for.

**Adding a subcommand is one line in** :data:`COMMANDS`::

    "export": Command("seps.cli.export", "write stored records as one CSV or JSON file"),

and a module ``seps/cli/export.py`` that defines

- ``add_arguments(parser: argparse.ArgumentParser) -> None``: its options. It runs for
  ``seps-bench export --help``, so it must not need torch or transformers: import those
  inside ``run`` (or in the library module ``run`` calls), never at the module's top
  when the parser needs only light names (``tests/test_cli_lazy.py`` checks ``run``);
- ``run(args: argparse.Namespace) -> int``: the exit status. A ``ValueError`` or
  ``OSError`` it raises becomes one line ``seps-bench export: error: ...`` and exit 2.

A module written with other function names gives them: ``Command(module, help,
add_arguments="_add_args", run="_run")``. The global options (``--debug``,
``--quiet``) are added to every command by :mod:`seps.cli`; a command never defines them.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from dataclasses import dataclass

AddArgs = Callable[[argparse.ArgumentParser], None]
Run = Callable[[argparse.Namespace], int]


@dataclass(frozen=True)
class Command:
    """One subcommand: the module that implements it, its one-line help (shown by
    ``seps-bench --help`` without importing the module), and the names of the module's
    two functions."""

    module: str
    help: str
    add_arguments: str = "add_arguments"
    run: str = "run"


#: Subcommand name -> :class:`Command`, in the order ``seps-bench --help`` lists them.
COMMANDS: dict[str, Command] = {
    "presets": Command(
        "seps.cli.presets", "print each preset's switches as a table (fields marked * differ)"
    ),
    "data": Command("seps.cli.data", "create datasets (synth: the built-in synthetic benchmark)"),
    "pretrain": Command(
        "seps.cli.pretrain",
        "pretrain the tiny backbones once on a separate synthetic draw (train --pretrain "
        "RECIPE and runs whose profile names it start from them; built on first use)",
    ),
    "train": Command(
        "seps.cli.train", "train one variant and evaluate it (writes <run-dir>/result.json)"
    ),
    "eval": Command("seps.cli.evaluate", "evaluate a checkpoint under a dense-caption protocol"),
    "run": Command(
        "seps.cli.run", "run a named ablation matrix into the result store, then write its report"
    ),
    "campaign": Command(
        "seps.cli.campaign",
        "run a campaign (an ordered list of matrix steps kept as data, e.g. 'standard') through "
        "seps-bench run; resumes where it stopped",
    ),
    "ratio-scale": Command(
        "seps.cli.ratio_scale",
        "measure each ratio criterion's initial gradient on the score predictor and print the "
        "ratio_weight that matches the reference (mse) criterion's, as loss-study runs",
    ),
    "report": Command(
        "seps.cli.report",
        "regenerate reports/<matrix>.md and its plots from stored results (never trains)",
    ),
    "scorecard": Command(
        "seps.cli.scorecard",
        "write reports/README.md: every claim of ablations/claims.yaml with its measured "
        "effect and verdict, from stored results (never trains)",
    ),
    "same-bits": Command(
        "seps.cli.same_bits",
        "compare two result stores record by record: metrics and training history bitwise "
        "(times left out), and where they differ, whether code version, CPU float path and "
        "pretrained weights match; exit 1 when any record differs",
    ),
    "sequential": Command(
        "seps.cli.sequential",
        "replay a sequential design (seeds added until each row is decided) on the store: "
        "each row's decision, look and repeated interval; --check: the same as the store's",
    ),
    "world": Command(
        "seps.cli.world",
        "measure a world's card (a profile's data: what the dense captions give away without "
        "pixels, the image prior, the headroom) beside Flickr30K's; every page shows it",
    ),
    "text-only": Command(
        "seps.cli.text_only",
        "score a split without pixels: each caption against every image's dense caption "
        "(how much the fair `candidate` protocol's dense captions give away; never trains)",
    ),
    "status": Command(
        "seps.cli.status",
        "what the result store holds per matrix at a profile: done, running (from the lock "
        "files, never taken), failed, diverged, stale, to do, hours spent and left (reads only)",
    ),
    "export": Command(
        "seps.cli.export",
        "write the stored run records as one table, one row per record (CSV or JSON lines)",
    ),
    "bench": Command("seps.cli.bench", "kernel micro-benchmarks and the latency report (--report)"),
}


def load(name: str) -> tuple[AddArgs, Run]:
    """Import command ``name``'s module: its argument builder and its runner."""
    entry = COMMANDS[name]
    module = importlib.import_module(entry.module)
    return getattr(module, entry.add_arguments), getattr(module, entry.run)
