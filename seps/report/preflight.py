"""What a report reads besides the records, checked before anything trains.

``seps-bench run`` (and a campaign that writes reports) trains first and writes the
report last; a definition the report step reads that cannot be used (``paper_figures.yaml``
not valid YAML or a row that is not a mapping, ``differences.yaml``'s claimed impacts,
and for a matrix with the ``differences`` section its sequential design and the claims it
names) would otherwise stop the command after every run had trained.
:func:`check_report_definitions` reads them all, as the report step will, and raises
the first fault as one ``ValueError`` naming the file, before the first run.
:func:`figures_problem` is the check :func:`seps.report.paper.load_paper_figures` applies
to the figures file.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..ablations import Matrix
from ..definition_checks import short

__all__ = ["check_report_definitions", "figures_problem"]


def figures_problem(doc: Any) -> str | None:
    """What makes ``doc`` (a parsed ``paper_figures.yaml``) unusable by the reports, or
    ``None``: each table a mapping, its ``rows`` a list of mappings whose metrics are
    numbers."""
    from .records import METRICS

    if not isinstance(doc, Mapping):
        return f"expected a mapping of tables, got {short(doc)}"
    for table, entry in doc.items():
        if not isinstance(entry, Mapping):
            return f"table {table!r}: expected a mapping with 'rows', got {short(entry)}"
        rows = entry.get("rows") or []
        if not isinstance(rows, list):
            return f"table {table!r}: field 'rows': expected a list, got {short(rows)}"
        for i, row in enumerate(rows):
            if not isinstance(row, Mapping):
                return f"table {table!r}: rows[{i}]: expected a mapping, got {short(row)}"
            for m in METRICS:
                v = row.get(m)
                if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
                    where = f"table {table!r}: rows[{i}]: field {m!r}"
                    return f"{where}: expected a number, got {short(v)}"
    return None


def check_report_definitions(matrix: Matrix, root: Path | None) -> None:
    """Read what the report of ``matrix`` reads besides its records, as it will (see the
    module docstring); the first fault is a ``ValueError`` of one line."""
    from .paper import load_claims, load_paper_figures
    from .sequential import check_design, design_for

    load_claims(root, load_paper_figures(root))
    if "differences" in matrix.sections:
        design = design_for(matrix.name, root)  # every design of the file is checked
        if design is not None:
            check_design(design, root)
