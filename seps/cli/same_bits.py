"""``seps-bench same-bits``: did a rerun give the same bits as the stored records?

Dispatches to :func:`seps.report.same_bits.compare_stores`; this file holds only the
command line (arguments, the table, the exit status).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from tabulate import tabulate

from ..io.formatting import fmt_n

if TYPE_CHECKING:
    from ..report.same_bits import Pair


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("first", help="a result store, e.g. results (the committed records)")
    p.add_argument(
        "second",
        help="another result store, e.g. the --results folder of a rerun "
        "(`seps-bench run MATRIX --only RUN --seeds S --results NEWDIR`)",
    )


def _yes(flag: bool | None) -> str:
    return "not recorded" if flag is None else ("yes" if flag else "no")


def _row(p: Pair) -> list[str]:
    if p.same:
        fields = sorted({k.split(".")[2] for k in p.added})  # history.<epoch>.<field>...
        note = f"(fields in one record only, not compared: {', '.join(fields)})" if fields else ""
        return [p.name, "same bits", note, "", "", ""]
    return [
        p.name,
        "differ",
        p.first_difference or "",
        _yes(p.same_code),
        _yes(p.same_machine) + (f" ({p.cpu_a} / {p.cpu_b})" if p.same_machine is False else ""),
        _yes(p.same_weights),
    ]


def run(args: argparse.Namespace) -> int:
    # Imported here, not at the top: `--help` must not load torch (seps.cli.registry).
    from ..report.same_bits import compare_stores

    pairs, only_a, only_b = compare_stores(args.first, args.second)
    if not pairs:  # "0 records, 0 different" would read as a pass
        raise ValueError(
            f"no record is in both stores ({only_a} only in {args.first}, {only_b} only in "
            f"{args.second}); expected two stores holding the same runs (same file names)"
        )
    headers = ["record", "result", "first difference", "same code", "same machine",
               "same weights"]  # fmt: skip
    if pairs:
        print(tabulate([_row(p) for p in pairs], headers=headers, tablefmt="github"))
    differ = sum(not p.same for p in pairs)
    print(
        f"{fmt_n(len(pairs), 'record')} in both stores: {len(pairs) - differ} with the same "
        f"bits, {differ} different; not compared: {only_a} only in {args.first}, "
        f"{only_b} only in {args.second}"
    )
    return 1 if differ else 0
