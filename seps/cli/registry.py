"""The subcommand registry: name -> (one-line help, argument builder, runner).

Each module of :mod:`seps.cli` registers its subcommand(s) with :func:`command`; the
package imports every such module once, statically, so the registry is complete before
the parser is built.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

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
