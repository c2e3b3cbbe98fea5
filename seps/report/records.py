"""Run records as a table: what a report reads, and which records are current.

:func:`load_results` turns the stored run records (``results/<matrix>/*.json``, schema
``seps-bench/run/1``, written by :mod:`seps.runs.runner`) into one pandas row per record, with
the metrics as float columns. :func:`current_records` picks the record each (profile,
run, seed) stands for now. Everything else in a report is computed from these frames,
which are sorted deterministically so that the same records give the same bytes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from ..experiments.definitions import Matrix
from ..experiments.provenance import UNRECORDED_CPU, cpu_label
from ..io.formatting import fmt_n, is_missing
from ..io.store import RECORD_NAME, RecordError, scan_records
from ..runtime.machine_load import was_busy
from .definition import off_definition

#: The six recalls in the paper's column order, then their sum.
RECALLS = ("i2t_r1", "i2t_r5", "i2t_r10", "t2i_r1", "t2i_r5", "t2i_r10")
METRICS = (*RECALLS, "rsum")
#: Column headers of the metrics.
LABELS = {
    "i2t_r1": "i2t R@1",
    "i2t_r5": "i2t R@5",
    "i2t_r10": "i2t R@10",
    "t2i_r1": "t2i R@1",
    "t2i_r5": "t2i R@5",
    "t2i_r10": "t2i R@10",
    "rsum": "rSum",
}

#: Columns of :func:`load_results` besides the metric columns, in order.
RECORD_COLUMNS = (
    "matrix",
    "file",
    "profile",
    "run_id",
    "describe",
    "preset",
    "difference",
    "paper_row",
    "seed",
    "key",
    "status",
    "error",
    "started",
    "dense_source",
    "protocol",
    "code_version",
    "dataset",
    "synth_images",
    "eval_split",
    "eval_images",
    "epochs",
    "batch_size",
    "max_steps_per_epoch",
    "backbone",
    "text_backbone",
    "train_seconds",
    "eval_seconds",
    "eval_pairs_per_second",
    "train_pairs_per_second",
    "parameters",
    "trainable_parameters",
    "peak_memory_bytes",
    "wall_seconds",
    "busy",
    "copied_from",
    "nonfinite_steps",
    "torch",
    "device_name",
    "git_commit",
    "history",
    "environment",
    "head_config",
    "train_config",
    "metrics",
    "train_dense_source",
    "eval_dense_source",
    # Per learned part: relative change and gradient share (seps.train.movement).
    "movement",
)

#: The dense-caption protocols (``dense_source``) as every report labels them.
DENSE_LABELS = {
    "query": "official, leaks the ground-truth image's dense caption",
    "candidate": "fair",
    "none": "no dense caption",
    "shuffled": "control: another image's dense caption",
}

#: Header of the per-row dense-caption protocol column of a matrix that mixes protocols.
DENSE_COLUMN = "dense caption (train / eval)"


def _text(x: Any) -> str | None:
    return None if is_missing(x) or x == "" else str(x)


def train_dense_of(rec: Mapping[str, Any]) -> str | None:
    """The dense-caption protocol a run was trained with: ``train_config.dense_source``
    (a record without a train config: its top-level ``dense_source``)."""
    return _text((rec.get("train_config") or {}).get("dense_source")) or _text(
        rec.get("dense_source")
    )


def eval_dense_of(rec: Mapping[str, Any]) -> str | None:
    """The dense-caption protocol of a run's evaluation: the record's ``eval_dense_source``
    when it has one (else its train config's), else the training protocol
    (:func:`train_dense_of`)."""
    return (
        _text(rec.get("eval_dense_source"))
        or _text((rec.get("train_config") or {}).get("eval_dense_source"))
        or train_dense_of(rec)
    )


def dense_label(source: Any) -> str:
    """``query (official, leaks the ground-truth image's dense caption)``, ``candidate
    (fair)``, ...: a protocol with what it means (``unknown`` when missing)."""
    src = _text(source)
    if src is None:
        return "unknown"
    return f"{src} ({DENSE_LABELS[src]})" if src in DENSE_LABELS else src


def dense_pair(rec: Mapping[str, Any]) -> str:
    """``<training protocol> / <evaluation protocol>`` of one record or row."""
    return f"{train_dense_of(rec) or 'unknown'} / {eval_dense_of(rec) or 'unknown'}"


def _record_row(rec: Mapping[str, Any], file: str, matrix_dir: str) -> dict[str, Any]:
    train_cfg = rec.get("train_config") or {}
    env = rec.get("environment") or {}
    row: dict[str, Any] = {c: rec.get(c) for c in RECORD_COLUMNS}
    row.update(
        matrix=rec.get("matrix") or matrix_dir,
        file=file,
        # A failed record has no top-level protocol fields; its train config still says
        # which protocol the run would have used.
        dense_source=rec.get("dense_source") or train_cfg.get("dense_source"),
        protocol=rec.get("protocol") or train_cfg.get("protocol"),
        eval_split=train_cfg.get("eval_split"),
        history=rec.get("history") or [],
        environment=env,
        # Run records say head_config; a trainer result.json says seps_config.
        head_config=rec.get("head_config") or rec.get("seps_config") or {},
        train_config=train_cfg,
        metrics=dict(rec.get("metrics") or {}),
        train_dense_source=train_dense_of(rec),
        eval_dense_source=eval_dense_of(rec),
        # The test split's text-only matcher (seps.data.baselines), a reference, not a metric.
        text_only_rsum=rec.get("text_only_rsum"),
        # ... and its headroom: chance and the scene-reading oracle (seps.data.oracle).
        chance_rsum=rec.get("chance_rsum"),
        oracle_rsum=rec.get("oracle_rsum"),
        # Timed while other work ran (seps.runtime.machine_load); None: not sampled.
        busy=was_busy(rec),
        torch=env.get("torch"),
        device_name=env.get("device_name"),
        git_commit=env.get("git_commit"),
    )
    for k in (
        "dataset",
        "synth_images",
        "epochs",
        "batch_size",
        "max_steps_per_epoch",
        "backbone",
        "text_backbone",
    ):
        row[k] = train_cfg.get(k)
    for k, v in (rec.get("metrics") or {}).items():
        row[k] = v
    return row


def _unreadable_row(err: RecordError, matrix_dir: str) -> dict[str, Any]:
    """A row for a record file that cannot be read: never hidden, it is reported as
    ``status = "unreadable"`` with the run and seed its file name gives."""
    m = RECORD_NAME.match(err.path.name)
    row: dict[str, Any] = {c: None for c in RECORD_COLUMNS}
    row.update(
        matrix=matrix_dir,
        file=f"{matrix_dir}/{err.path.name}",
        status="unreadable",
        error=f"unreadable record {err.path.name} ({err.reason})",
        run_id=m.group("run") if m else err.path.stem,
        key=m.group("key") if m else None,
        seed=int(m.group("seed")) if m else None,
        history=[],
        environment={},
        head_config={},
        train_config={},
        metrics={},
    )
    return row


def load_results(results_dir: str | Path, matrix: str | None = None) -> pd.DataFrame:
    """One row per stored run record under ``results_dir`` (or ``results_dir/<matrix>``).

    Metrics become columns (``i2t_r1`` ... ``rsum``, ``i2t_medr`` ...), ``history`` stays a
    list per row. A ``*.json`` file that cannot be read as a ``seps-bench/run/1`` record
    (truncated, not JSON, another schema) becomes a row with ``status = "unreadable"``
    and the reason in ``error``; hidden or temp files and folders starting with ``_``
    (``_work/``: checkpoints and feature caches) are skipped. Rows are sorted by (matrix,
    profile, run_id, seed, file) so that everything built from the frame is deterministic.
    """
    root = Path(results_dir)
    if matrix is not None:
        dirs = [root / matrix]
    elif root.is_dir():
        dirs = sorted(d for d in root.iterdir() if d.is_dir() and not d.name.startswith(("_", ".")))
    else:
        dirs = []
    rows = []
    for d in dirs:
        good, bad = scan_records(d)
        for f, rec in good:
            rows.append(_record_row(rec, f"{d.name}/{f.name}", d.name))
        rows += [_unreadable_row(err, d.name) for err in bad]
    metric_cols = list(METRICS)
    extra = sorted({k for r in rows for k in r} - set(RECORD_COLUMNS) - set(METRICS))
    df = pd.DataFrame(rows, columns=[*RECORD_COLUMNS, *metric_cols, *extra])
    for m in (*metric_cols, *extra):
        df[m] = pd.to_numeric(df[m], errors="coerce").astype(float)
    if len(df):
        df = df.sort_values(["matrix", "profile", "run_id", "seed", "file"], kind="stable")
    return df.reset_index(drop=True)


def machines_line(df: pd.DataFrame) -> str:
    """One sentence naming the CPUs the records of ``df`` were made on, with counts (most
    first), and why it matters: a rerun gives the same bits only on the same CPU type and
    float path from the same pretrained weights (:func:`seps.experiments.provenance.bits_key`)."""
    counts: dict[str, int] = {}
    per_profile: dict[Any, set[str]] = {}
    profiles_ = df["profile"] if "profile" in df else [None] * len(df)
    for env, profile in zip(df["environment"], profiles_, strict=True):
        label = cpu_label(env.get("cpu") if isinstance(env, Mapping) else None)
        counts[label] = counts.get(label, 0) + 1
        per_profile.setdefault(profile, set()).add(label)

    def part(label: str, n: int) -> str:
        records = fmt_n(n, "record")
        if label == UNRECORDED_CPU:
            return f"{records} made before the runner stamped the CPU"
        return f"{label}: {records}"

    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    # Runs are paired within a profile only, so only a profile that spans machines mixes.
    mixed = (
        " **Mixed machines** within a profile: a paired difference between records of two "
        "machines includes the machine's own effect on the numbers."
        if any(len(labels) > 1 for labels in per_profile.values())
        else ""
    )
    return (
        f"Machines: {'; '.join(part(label, n) for label, n in ordered)}.{mixed} A rerun "
        "reproduces a record bit for bit only on the same CPU type and float path and from "
        'the same pretrained weights (`pretrain_fingerprint`; docs/guarantees.md, "Bit for bit").'
    )


def matrices_with_records(results_dir: str | Path) -> list[str]:
    """Names of the folders under ``results_dir`` that hold at least one run record."""
    df = load_results(results_dir)
    return sorted(str(m) for m in df["matrix"].dropna().unique()) if len(df) else []


def runs_of(df: pd.DataFrame, matrix: Matrix) -> pd.DataFrame:
    """The rows of ``df`` whose run is one of ``matrix``'s runs (by id)."""
    return df[df["run_id"].isin([r.id for r in matrix.runs])] if len(df) else df


def current_records(
    df: pd.DataFrame, matrix: Matrix | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(current, superseded): one record per (profile, run_id, seed), the latest started.

    Two records for the same run and seed exist when its resolved config changed between
    invocations (a new key); the newer one is what the matrix means now. Ties on the
    start time fall back to the file name, so the choice is deterministic. With
    ``matrix``, a record that stores another value than the matrix and its profile now
    define (:func:`seps.report.definition.off_definition`) is superseded even when no
    newer record replaces it: a run not yet made again under a changed definition has
    no current record.
    """
    if df.empty:
        return df, df.iloc[0:0]
    stale = df.iloc[0:0]
    if matrix is not None:
        off = off_definition(df, matrix)
        stale, df = df[off], df[~off]
    order = df.assign(_started=pd.to_numeric(df["started"], errors="coerce").fillna(-math.inf))
    order = order.sort_values(["profile", "run_id", "seed", "_started", "file"], kind="stable")
    last = ~order.duplicated(["profile", "run_id", "seed"], keep="last")
    cur = order[last].drop(columns="_started")
    old = order[~last].drop(columns="_started")
    if len(stale):
        old = pd.concat([old, stale]) if len(old) else stale
    key = ["profile", "run_id", "seed", "file"]
    return (
        cur.sort_values(key, kind="stable").reset_index(drop=True),
        old.sort_values(key, kind="stable").reset_index(drop=True),
    )


def profiles(df: pd.DataFrame) -> list[str]:
    """The profiles present in ``df``, sorted by name: the order of every per-profile part."""
    return sorted(str(p) for p in df["profile"].dropna().unique())


__all__ = [
    "DENSE_COLUMN",
    "DENSE_LABELS",
    "LABELS",
    "METRICS",
    "RECALLS",
    "RECORD_COLUMNS",
    "current_records",
    "dense_label",
    "dense_pair",
    "eval_dense_of",
    "load_results",
    "matrices_with_records",
    "profiles",
    "runs_of",
    "train_dense_of",
]
