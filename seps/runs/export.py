"""The stored run records as one flat table: ``seps-bench export`` (CSV or JSON lines).

:func:`export_table` reads the store with the reports' loader
(:func:`seps.report.records.load_results`), so it sees the same records a report does,
unreadable ones included (``status = "unreadable"``), and makes one row per record:
the run (matrix, run id, seed, profile, status, protocol, code version, ...), its
metrics as columns, then its head and train configs and its machine/environment
flattened with dotted keys (``head.sparse_ratio``, ``train.epochs``,
``environment.cpu.model``). The per-epoch history (loss curves, step logs) is left out:
it is a list per record, read from the JSON records themselves.

:func:`render_export` writes the table as CSV (a list value, e.g.
``environment.cpu.numpy_dispatch``, as its JSON text) or as JSON lines (one object per
record, lists kept). The same records give the same bytes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ..experiments.definitions import load_matrix
from ..report.records import METRICS, load_results, matrices_with_records

#: Formats of :func:`render_export`.
EXPORT_FORMATS = ("csv", "jsonl")
#: Nested record fields flattened into dotted columns, with the prefix each gets.
NESTED = {"head_config": "head", "train_config": "train", "environment": "environment"}
#: Columns of the loader dropped from the export: the per-epoch history and the metrics
#: mapping (each metric is its own column), and the loader's copies of nested fields
#: (``epochs`` is ``train.epochs``, ``torch`` is ``environment.torch``, ...).
DROPPED = (
    "history",
    "metrics",
    "dataset",
    "synth_images",
    "eval_split",
    "epochs",
    "batch_size",
    "max_steps_per_epoch",
    "backbone",
    "text_backbone",
    "torch",
    "device_name",
    "git_commit",
)
#: Columns that lead every row, in this order (when present).
LEADING = ("matrix", "run_id", "seed", "profile", "status", "protocol", "code_version")


def flatten(value: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """``{"cpu": {"model": m}}`` under ``environment`` -> ``{"environment.cpu.model": m}``;
    lists stay values."""
    out: dict[str, Any] = {}
    for key, v in value.items():
        name = f"{prefix}.{key}"
        if isinstance(v, Mapping) and v:
            out.update(flatten(v, name))
        else:
            out[name] = v
    return out


def resolve_matrices(results_dir: str | Path, matrices: Sequence[str]) -> list[str]:
    """The store folders to export: each MATRIX given (a matrix name, or a matrix file whose
    ``name`` says the folder), else every matrix that has records. Raises ``ValueError``
    naming the store and the matrices it holds for one without records."""
    held = matrices_with_records(results_dir)
    if not matrices:
        return held
    names = []
    for m in matrices:
        name = load_matrix(m).name if m.endswith((".yaml", ".yml")) else m
        if name not in held:
            known = ", ".join(held) or "none"
            raise ValueError(
                f"{Path(results_dir) / name}: no run records of matrix {name!r}; "
                f"matrices with records under {results_dir}: {known}"
            )
        names.append(name)
    return names


def export_table(results_dir: str | Path, matrices: Sequence[str] = ()) -> pd.DataFrame:
    """One row per stored record of ``matrices`` (default: every matrix of the store), the
    nested configs and environment flattened to dotted columns (module docstring)."""
    names = resolve_matrices(results_dir, matrices)
    frames = [load_results(results_dir, name) for name in names]
    df = pd.concat(frames, ignore_index=True) if frames else load_results(results_dir)
    nested = [
        pd.DataFrame(
            [flatten(v if isinstance(v, Mapping) else {}, prefix) for v in df[col]],
            index=df.index,
        )
        for col, prefix in NESTED.items()
    ]
    flat = [c for c in df.columns if c not in DROPPED and c not in NESTED]
    leading = [c for c in LEADING if c in flat]
    metrics = [c for c in METRICS if c in flat]
    rest = [c for c in flat if c not in leading and c not in metrics]
    out = pd.concat([df[leading + metrics + rest], *nested], axis=1)
    if "seed" in out:
        out["seed"] = out["seed"].astype("Int64")
    return out


def _jsonable(v: Any) -> Any:
    if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
        return None
    if hasattr(v, "item") and not isinstance(v, (list, dict, str)):
        return v.item()  # numpy scalar
    return v


def render_export(df: pd.DataFrame, fmt: str) -> str:
    """The table as CSV or JSON lines (``fmt`` of :data:`EXPORT_FORMATS`)."""
    if fmt == "csv":
        text = df.map(lambda v: json.dumps(v) if isinstance(v, (list, dict)) else v).to_csv(
            index=False, lineterminator="\n"
        )
        return text
    if fmt == "jsonl":
        lines = [
            json.dumps({k: _jsonable(v) for k, v in row.items()}, default=str)
            for row in df.to_dict(orient="records")
        ]
        return "".join(line + "\n" for line in lines)
    raise ValueError(
        f"--format: invalid value {fmt!r}; expected one of {', '.join(EXPORT_FORMATS)}"
    )


__all__ = [
    "EXPORT_FORMATS",
    "export_table",
    "flatten",
    "render_export",
    "resolve_matrices",
]
