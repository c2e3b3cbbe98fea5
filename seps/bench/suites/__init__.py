"""The pytest-benchmark suites (TopK, HRPA, whole head per implementation), shipped with
the package so that ``seps-bench bench`` runs them from an installed wheel. From a
checkout: ``pytest seps/bench/suites --benchmark-only`` (``tox -e bench``)."""

from pathlib import Path

#: The folder of the suites, handed to pytest by ``seps-bench bench``.
SUITES = Path(__file__).resolve().parent
