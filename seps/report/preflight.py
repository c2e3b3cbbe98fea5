"""What a report reads besides the records, checked before anything trains.

``seps-bench run`` (and a campaign that writes reports) trains first and writes the
report last; a definition the report step reads that cannot be used (``paper_figures.yaml``
not valid YAML or a row that is not a mapping, ``differences.yaml``'s claimed impacts,
and for a matrix with the ``differences`` section its sequential design and the claims it
names) would otherwise stop the command after every run had trained.
:func:`check_report_definitions` reads them all, as the report step will, and raises
the first fault as one ``ValueError`` naming the file, before the first run.
:func:`seps.report.paper.figures_problem` is the check the reports apply to the figures
file.
"""

from __future__ import annotations

from pathlib import Path

from ..experiments.definitions import Matrix

__all__ = ["check_report_definitions"]


def check_report_definitions(matrix: Matrix, root: Path | None) -> None:
    """Read what the report of ``matrix`` reads besides its records, as it will (see the
    module docstring); the first fault is a ``ValueError`` of one line."""
    from .paper import load_claims, load_paper_figures
    from .sequential import check_design, designs_for

    load_claims(root, load_paper_figures(root))
    if "differences" in matrix.sections:
        for design in designs_for(matrix.name, root):  # every design of the file is read
            check_design(design, root)
