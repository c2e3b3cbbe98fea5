"""The code version of a page's records against this code's: the line every report and
the scorecard print, and the banner of a page written from stale or mixed records.

``seps-bench report`` and ``seps-bench scorecard`` refuse (one line,
:func:`seps.versioning.version.check_versions` with ``current``) to write a page whose records are
at another code version than this code's, or at several, unless given
``--allow-mixed-versions``; a page written that way opens with :func:`version_banner`.
The library functions take the current version as an argument (``None``: not compared,
the page names the records' versions only), so that they stay pure; the commands pass
:func:`seps.versioning.version.code_version`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from ..io.formatting import is_missing


def version_counts(values: Iterable[object]) -> list[tuple[str, int]]:
    """(code version, record count) of the records' ``code_version`` values, most
    frequent first (then by name); a missing value counts as ``unversioned``."""
    counts = Counter("unversioned" if is_missing(v) else str(v) for v in values)
    return sorted(counts.items(), key=lambda i: (-i[1], i[0]))


def is_stale(counts: list[tuple[str, int]], current: str | None) -> bool:
    """Records of several versions, or (``current`` given) of any other version."""
    return len(counts) > 1 or (current is not None and any(v != current for v, _ in counts))


def _listed(counts: list[tuple[str, int]]) -> str:
    return ", ".join(f"{v} ({n})" for v, n in counts)


def version_line(counts: list[tuple[str, int]], current: str | None) -> str:
    """``Code version: X.`` (``current`` None: the records' versions, sorted); else the
    records' versions with their counts against this code's, e.g. ``Code version of the
    records: a1 (12); this code: b2 (stale: the records were made by other code).``"""
    if current is None:
        names = sorted(v for v, _ in counts)
        return f"Code version{'s' * (len(names) > 1)}: {', '.join(names)}."
    plural = "s" * (len(counts) > 1)
    text = f"Code version{plural} of the records: {_listed(counts) or 'none'}; this code: {current}"
    if not counts:
        return text + "."
    if is_stale(counts, current):
        return text + " (stale: records made by other code than this)."
    return text + " (the same)."


def version_banner(
    counts: list[tuple[str, int]], current: str | None, detail: str = ""
) -> list[str]:
    """The banner that opens a page written from stale or mixed records (with
    ``--allow-mixed-versions``), as markdown lines; none when the records are current.
    ``detail``: a sentence inserted after the versions (e.g. which profile holds which)."""
    if not is_stale(counts, current):
        return []
    against = f"; this code is {current}" if current is not None else ""
    return [
        f"> **Stale page.** Its records are at code version{'s' * (len(counts) > 1)} "
        f"{_listed(counts)}{against}: numbers below may not be what this code gives"
        f"{detail}. "
        "Written with `--allow-mixed-versions`; `seps-bench run MATRIX --rerun-stale` "
        "recomputes the stale records.",
        "",
    ]


__all__ = ["is_stale", "version_banner", "version_counts", "version_line"]
