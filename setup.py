"""Build hook: the top-level ablations/ and benchmarks/ go into the wheel inside the package.

Git holds one copy of the ablation definitions and of the benchmark suites, at the top of
the repository, where a reader looks for them; an installed ``seps-bench`` has no
checkout, so the wheel carries them as ``seps/_ablations/`` and ``seps/_benchmarks/``
(:func:`seps.experiments.ablation_index.shipped` looks there first). An editable install
reads them from the checkout and copies nothing. Everything else is in pyproject.toml.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SHIPPED = ("ablations", "benchmarks")


class BuildWithDefinitions(build_py):
    """``build_py`` that also copies :data:`SHIPPED` into the built package."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        for name in SHIPPED:
            dest = Path(self.build_lib) / "seps" / f"_{name}"
            shutil.rmtree(dest, ignore_errors=True)
            shutil.copytree(name, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(cmdclass={"build_py": BuildWithDefinitions})
