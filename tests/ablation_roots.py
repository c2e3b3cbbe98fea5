"""A temporary ablation root for report tests: the repository's ``differences.yaml`` and
``paper_figures.yaml`` (claimed impacts and reported figures) beside the test's own
matrices, so a report reads what it would in the repository but only the test's runs."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]


def make_ablation_root(
    root: Path,
    matrices: Mapping[str, Mapping[str, Any] | str] = {},
    repo_matrices: tuple[str, ...] = (),
    profiles: str | None = None,
) -> Path:
    """Create ``root`` with the repository's differences and paper figures, each of
    ``matrices`` (name -> matrix YAML document, or its YAML text), copies of the
    repository's ``repo_matrices`` and, given, ``profiles`` (the text of
    ``profiles.yaml``); return ``root``."""
    (root / "matrices").mkdir(parents=True)
    for name in ("differences.yaml", "paper_figures.yaml"):
        (root / name).write_bytes((REPO / "ablations" / name).read_bytes())
    for name in repo_matrices:
        src = REPO / "ablations" / "matrices" / f"{name}.yaml"
        (root / "matrices" / src.name).write_bytes(src.read_bytes())
    for name, doc in matrices.items():
        text = doc if isinstance(doc, str) else yaml.safe_dump(dict(doc), sort_keys=False)
        (root / "matrices" / f"{name}.yaml").write_text(text)
    if profiles is not None:
        (root / "profiles.yaml").write_text(profiles)
    return root
