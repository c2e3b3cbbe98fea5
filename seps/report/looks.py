"""Seeds a sequential design has not read yet stay out of the fixed-sample pages.

A design of ``sequential.yaml`` reads a row's seeds only at its looks (5, 10, 15...
seeds): that is what keeps its error rate. Between two looks the store already holds
some of the next look's seeds. A fixed-sample table or plot over every stored seed would
be a look the design did not plan, with uncorrected verdicts on the very rows the design
decides (a reader would see ``higher *`` at 8 seeds beside ``open`` at 5). So a page
reads a design's matrix, for the design's profile, only up to the seeds the design has
read (the most seeds any of its rows was analysed with, :func:`seeds_read`; none before
its first look), and says
how many records it holds back until their look (:func:`hold_to_looks`). The design's
own section replays the whole store, as ``seps-bench sequential`` does.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .sequential import Analysis, analyse, designs_for

__all__ = ["hold_to_looks", "seeds_read"]


def seeds_read(analysis: Analysis) -> int | None:
    """The most seeds any row of ``analysis`` was analysed with at its last look taken
    (None: no row has a look yet)."""
    ns = [f.n for r in analysis.rows() if (f := r.final()) is not None]
    return max(ns) if ns else None


def hold_to_looks(
    records: pd.DataFrame, matrix: str, results: str | Path, root: Path | None = None
) -> tuple[pd.DataFrame, list[str]]:
    """(``records`` without the seeds a design of ``matrix`` has not read, the page's
    lines saying what was held back); ``records`` as :func:`load_results` gives them."""
    if records.empty:
        return records, []
    keep = pd.Series(True, index=records.index)
    lines: list[str] = []
    for design in designs_for(matrix, root):
        # None: no row has had its first look (fewer seeds than the first look needs, as
        # in a new world): every seed is held back, since a table over 3 seeds would be
        # as much an unplanned look as one over 8.
        n = seeds_read(analyse(design, results, root)) or 0
        seed = pd.to_numeric(records["seed"], errors="coerce")
        late = (records["profile"] == design.profile) & (seed >= n)
        if not late.any():
            continue
        keep &= ~late
        seeds = ", ".join(str(s) for s in sorted({int(s) for s in seed[late]}))
        nxt = next((k for k in design.looks if k > n), None)
        when = f"the next at {nxt} seeds" if nxt is not None else "no look is left"
        stop = f"stop at seed {n - 1}" if n else "show none of them"
        lines += [
            f"**Held back until their look:** {int(late.sum())} records of seeds {seeds} "
            f"(profile `{design.profile}`). The sequential design `{design.name}` has read "
            f"{n} seeds and reads a row's seeds only at its looks ({when}), so this page's "
            f"fixed-sample tables and plots {stop}; the design's decisions "
            "read the whole store.",
            "",
        ]
    return records[keep], lines
