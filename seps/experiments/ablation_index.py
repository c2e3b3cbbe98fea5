"""Where the ablation definitions live, and what ``--help`` lists from them.

Kept apart from :mod:`seps.experiments.definitions` (which resolves matrices into configs, and
so loads
the config classes and torch with them) because ``seps-bench run --help`` names the
matrices and profiles: building that help must read two folders and one YAML file,
nothing more (see :mod:`seps.cli.registry`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

__all__ = ["default_root", "list_matrices", "packaged_root", "profile_summaries", "shipped"]

#: The package folder (``seps/``).
_PACKAGE = Path(__file__).resolve().parents[1]


def shipped(name: str) -> Path:
    """The repository's top-level folder ``name`` (``ablations``: the definitions;
    ``benchmarks``: the pytest-benchmark suites). Git holds one copy, at the top of the
    checkout; a wheel carries it inside the package as ``seps/_<name>/``, copied there
    when the wheel is built (``setup.py``), so an installed ``seps-bench`` needs no
    checkout."""
    inside = _PACKAGE / f"_{name}"
    return inside if inside.is_dir() else _PACKAGE.parent / name


def packaged_root() -> Path:
    """The definitions shipped with the suite (:func:`shipped` ``ablations``)."""
    return shipped("ablations")


def default_root() -> Path:
    """``$SEPS_ABLATIONS``, else ``./ablations`` when present (a user's own definitions in
    the working folder), else the package's own (:func:`packaged_root`)."""
    env = os.environ.get("SEPS_ABLATIONS")
    if env:
        return Path(env)
    local = Path.cwd() / "ablations"
    if (local / "differences.yaml").exists():
        return local
    return packaged_root()


def list_matrices(root: Path | None = None) -> list[str]:
    return sorted(p.stem for p in ((root or default_root()) / "matrices").glob("*.yaml"))


def profile_summaries(root: Path | None = None) -> dict[str, str]:
    """Profile name -> its one-line ``summary`` from profiles.yaml, in file order.

    For ``--help`` texts, which would otherwise repeat (and go stale beside) profiles.yaml.
    An unreadable file gives an empty dict: a help text must not fail.
    """
    from .definition_checks import read_yaml_file

    try:  # not UTF-8, a YAML alias bomb, ...: ValueError (seps.experiments.definition_checks)
        doc = read_yaml_file((root or default_root()) / "profiles.yaml")
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, Mapping):
        return {}
    out = {}
    for name, entry in doc.items():
        summary = entry.get("summary", "") if isinstance(entry, Mapping) else ""
        out[str(name)] = summary if isinstance(summary, str) else ""
    return out
