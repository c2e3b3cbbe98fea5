"""Text and picture output shared by every report: number formats, markdown tables, PNGs.

A report must be a pure function of its records, byte for byte. This module holds the
three places where bytes are chosen, so that every report makes them the same way:

- numbers have fixed formats (:func:`fmt`, :func:`fmt_ci`, :func:`fmt_count`), missing
  values print as ``—`` and rounding never invents a sign (no ``-0.0``);
- markdown tables (:func:`markdown_table`) take cells that are already final text, one
  line each, pipes escaped;
- plots use the Agg backend (:func:`pyplot`) and are saved by :func:`save_png` at a fixed
  dpi without the "Software" metadata, so the PNG bytes depend only on the plotted numbers
  (and the matplotlib version), and atomically (temp file + ``os.replace``).
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tabulate import tabulate

from .store import atomic_write_bytes

#: Text of a missing value (no record, no seed completed, not measured).
DASH = "—"
#: Text of a value that cannot exist (a CI or test from one seed).
NA = "n/a"
#: Fixed plot resolution: part of what makes the PNG bytes reproducible.
PLOT_DPI = 100
#: Line styles the plots cycle through where colours alone would repeat or lines coincide.
LINESTYLES = ("-", "--", ":", "-.")


def is_missing(x: Any) -> bool:
    """``None`` or a float NaN: a value the records do not have."""
    return x is None or (isinstance(x, float) and math.isnan(x))


def fmt(x: Any, digits: int = 1, sign: bool = False) -> str:
    """Fixed-point text of ``x``; NaN as ``—``; never ``-0.0`` (rounding must not invent a sign)."""
    if is_missing(x):
        return DASH
    x = float(x)
    if round(x, digits) == 0.0:
        x = 0.0
    return f"{x:+.{digits}f}" if sign and x != 0.0 else f"{x:.{digits}f}"


def fmt_ci(mean: Any, half: Any, n: int, digits: int = 1, sign: bool = False) -> str:
    """``mean ± half``; ``± n/a`` for one seed; ``—`` without data."""
    if n == 0 or is_missing(mean):
        return DASH
    return f"{fmt(mean, digits, sign)} ± {NA if is_missing(half) else fmt(half, digits)}"


def fmt_count(x: Any) -> str:
    """Parameter counts in millions (three decimals keep small heads distinguishable)."""
    return DASH if is_missing(x) else f"{float(x) / 1e6:.3f}M"


def fmt_n(n: int, one: str, many: str | None = None) -> str:
    """``1 record``, ``1,200 records``, ``1 matrix``, ``3 matrices`` (``many`` defaults to
    ``one`` + s)."""
    return f"{n:,} {one if n == 1 else many or one + 's'}"


def code(x: Any) -> str:
    """``x`` as inline markdown code."""
    return f"`{x}`"


def _cell(text: Any) -> str:
    """A markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def markdown_table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> str:
    """A GitHub markdown table of ``rows`` (each cell made one line, pipes escaped)."""
    cells = [[_cell(c) for c in r] for r in rows]
    # disable_numparse: every cell is already text with its final format; tabulate must
    # neither re-format nor re-align numbers.
    return tabulate(cells, headers=list(headers), tablefmt="github", disable_numparse=True)


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the non-interactive Agg backend.

    Imported on first use, not with this module: the command line imports the reports to
    register their subcommand, and most commands never draw."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(fig: Any, path: Path) -> None:
    """Write ``fig`` to ``path`` as a reproducible PNG, then close it."""
    # metadata Software=None drops the matplotlib version string; with a fixed dpi the
    # bytes then depend only on the plotted numbers.
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=PLOT_DPI, metadata={"Software": None})
    atomic_write_bytes(path, buf.getvalue())
    pyplot().close(fig)


__all__ = [
    "DASH",
    "LINESTYLES",
    "NA",
    "PLOT_DPI",
    "code",
    "fmt",
    "fmt_ci",
    "fmt_count",
    "fmt_n",
    "is_missing",
    "markdown_table",
    "pyplot",
    "save_png",
]
