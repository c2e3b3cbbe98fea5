"""``seps-bench status [MATRIX ...]``: what a result store holds and lacks, per matrix at
one profile (:mod:`seps.runs.status`). Reads only; never trains, writes or locks.

Only the definitions' folder helpers are imported at the top (``status --help`` lists the
matrices); the store is read by :func:`run`. Neither loads torch.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import sys
from collections.abc import Iterator
from pathlib import Path

from ..experiments.ablation_index import default_root, list_matrices, profile_summaries
from ..versioning.version import code_version  # light (no torch); tests replace it here
from .options import add_results_option


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "matrices",
        nargs="*",
        metavar="MATRIX",
        help="matrix names or matrix files; default: every matrix of the definitions ("
        f"{', '.join(list_matrices())})",
    )
    add_results_option(p, "to read")
    p.add_argument(
        "--profile",
        help="the profile whose seeds and settings make the plan ("
        + ", ".join(profile_summaries())
        + "); default: the profile most of the matrices' records were run at, else smoke",
    )
    p.add_argument(
        "--ablations",
        metavar="DIR",
        help="ablation definitions folder (default: $SEPS_ABLATIONS, else ./ablations when "
        "present, else the definitions shipped in the package, ablations/)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print the same as one JSON object (for scripts) instead of the table",
    )


def run(args: argparse.Namespace) -> int:
    from ..runs.status import collect_status, status_json, status_text

    results = Path(args.results)
    if not results.is_dir():
        raise ValueError(f"--results: {results}: not a folder; expected a result store")
    root = Path(args.ablations) if args.ablations else default_root()
    if not root.is_dir():
        raise ValueError(f"--ablations: {root}: not a folder; expected ablation definitions")
    with _without_cyclic_gc():
        version = code_version()
        status = collect_status(results, args.matrices, args.profile, root, version=version)
    sys.stdout.write(status_json(status) if args.json else status_text(status) + "\n")
    return 0


@contextlib.contextmanager
def _without_cyclic_gc() -> Iterator[None]:
    """The cyclic garbage collector off while status reads: it makes about a million small
    objects that live until the answer (the syntax trees behind the code version, the
    fields of every record) and no cycles, so each collection would walk them for
    nothing: 0.2 s of the 2 s this command is allowed, on this loaded 2-core machine.
    Reference counting still frees what is dropped."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
