"""The summary of a matrix: one row per (profile, run) with means, CIs and paired Δ.

Per (profile, run) the seeds are independent repetitions: the summary has the mean and
95% CI half-width of each recall (:func:`seps.stats.mean_ci`) and the rSum difference to
the matrix's baseline paired by seed (:func:`seps.stats.paired_test`). The results,
paper, findings and cost parts of a report, and the Δ plot, are all read from this one
frame; the ``*_text`` functions give the cells of a summary row that several tables share.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from ..ablations import Matrix
from ..formatting import DASH, NA, fmt_ci
from ..stats import mean_ci, paired_mark, paired_test
from .records import METRICS, current_records, profiles, runs_of

#: Columns of :func:`summarise`, in order.
SUMMARY_COLUMNS = (
    "profile",
    "run_id",
    "describe",
    "preset",
    "difference",
    "paper_row",
    "is_baseline",
    "n",
    "n_failed",
    "seeds",
    *(f"{m}_{s}" for m in METRICS for s in ("mean", "ci")),
    "delta_rsum_mean",
    "delta_rsum_ci",
    "delta_p",
    "delta_n",
    "delta_mark",
    "baseline_rsum_mean",
    "train_seconds_mean",
    "train_pairs_per_second_mean",
    "eval_pairs_per_second_mean",
    "parameters",
    "trainable_parameters",
    "peak_memory_bytes",
)


def summarise(df: pd.DataFrame, matrix: Matrix) -> pd.DataFrame:
    """Per (profile, run_id): seeds, mean and 95% CI of the recalls, paired Δ rSum, cost.

    ``df`` is any frame of :func:`~seps.report.records.load_results` (several matrices,
    superseded records): only the current records of ``matrix``'s runs are summarised, by
    :func:`summarise_current`, which has the columns.
    """
    if not df.empty and "matrix" in df:
        df = df[df["matrix"] == matrix.name]
    cur, _ = current_records(runs_of(df, matrix))
    return summarise_current(cur, matrix)


def summarise_current(cur: pd.DataFrame, matrix: Matrix) -> pd.DataFrame:
    """:func:`summarise` of records that are already ``matrix``'s current ones.

    Only runs of ``matrix`` with at least one record appear; profiles are sorted by name
    and runs follow the matrix's order. Columns: ``profile, run_id, describe, preset,
    difference, paper_row, is_baseline, n, n_failed, seeds``, ``<metric>_mean`` and
    ``<metric>_ci`` for the six recalls and ``rsum``, ``delta_rsum_mean, delta_rsum_ci,
    delta_p, delta_n, delta_mark, baseline_rsum_mean`` (the baseline's mean over the
    paired seeds), ``train_seconds_mean, train_pairs_per_second_mean,
    eval_pairs_per_second_mean, parameters, trainable_parameters, peak_memory_bytes``.
    """
    rows: list[dict[str, Any]] = []
    for profile in profiles(cur):
        prof = cur[cur["profile"] == profile]
        base = prof[(prof["run_id"] == matrix.baseline) & (prof["status"] == "done")]
        base_rsum = {int(s): float(v) for s, v in zip(base["seed"], base["rsum"], strict=True)}
        for run in matrix.runs:
            sub = prof[prof["run_id"] == run.id]
            if sub.empty:
                continue
            done = sub[sub["status"] == "done"].sort_values("seed")
            row: dict[str, Any] = {
                "profile": profile,
                "run_id": run.id,
                "describe": run.describe(),
                "preset": run.preset,
                "difference": run.difference,
                "paper_row": run.paper_row,
                "is_baseline": run.id == matrix.baseline,
                "n": len(done),
                "n_failed": int((sub["status"] != "done").sum()),
                "seeds": ",".join(str(int(s)) for s in done["seed"]),
            }
            for m in METRICS:
                mean, half, _ = mean_ci(done[m].tolist())
                row[f"{m}_mean"], row[f"{m}_ci"] = mean, half
            pairs = [
                (float(v), base_rsum[int(s)])
                for s, v in zip(done["seed"], done["rsum"], strict=True)
                if int(s) in base_rsum
            ]
            d_mean, d_half, d_p, d_n = paired_test([v - b for v, b in pairs])
            row.update(
                delta_rsum_mean=d_mean,
                delta_rsum_ci=d_half,
                delta_p=d_p,
                delta_n=d_n,
                delta_mark="baseline" if row["is_baseline"] else paired_mark(d_p, d_n),
                baseline_rsum_mean=float(np.mean([b for _, b in pairs])) if pairs else math.nan,
                train_seconds_mean=_mean(done["train_seconds"]),
                train_pairs_per_second_mean=_mean(done["train_pairs_per_second"]),
                eval_pairs_per_second_mean=_mean(done["eval_pairs_per_second"]),
                parameters=_mean(done["parameters"]),
                trainable_parameters=_mean(done["trainable_parameters"]),
                peak_memory_bytes=_max(done["peak_memory_bytes"]),
            )
            rows.append(row)
    return pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))


def _mean(s: pd.Series) -> float:
    x = pd.to_numeric(s, errors="coerce").dropna()
    return float(np.mean(x.to_numpy(dtype=float))) if len(x) else math.nan


def _max(s: pd.Series) -> float:
    x = pd.to_numeric(s, errors="coerce").dropna()
    return float(np.max(x.to_numpy(dtype=float))) if len(x) else math.nan


# ------------------------------------------------------------- cells of a summary row
def variant_text(row: Mapping[str, Any]) -> str:
    """The run id, with ``(baseline)`` for the matrix's baseline."""
    return f"{row['run_id']} (baseline)" if row["is_baseline"] else str(row["run_id"])


def seeds_text(row: Mapping[str, Any]) -> str:
    """Completed seeds, and how many failed when any did."""
    return f"{row['n']} ({row['n_failed']} failed)" if row["n_failed"] else str(row["n"])


def delta_text(row: Mapping[str, Any]) -> str:
    """Paired Δ rSum ± its CI and the test's mark (``baseline`` for the baseline)."""
    if row["is_baseline"]:
        return "baseline"
    if row["delta_n"] == 0:
        return NA
    text = fmt_ci(row["delta_rsum_mean"], row["delta_rsum_ci"], row["delta_n"], sign=True)
    # One paired seed: "± n/a" already says the test is not possible; no second n/a.
    return text if row["delta_n"] < 2 else f"{text} {row['delta_mark']}"


def p_text(row: Mapping[str, Any]) -> str:
    """The paired test's p-value and number of pairs."""
    if row["is_baseline"] or row["delta_n"] < 2:
        return f"{NA} (n={row['delta_n']})" if not row["is_baseline"] else DASH
    return f"{row['delta_p']:.3f} (n={row['delta_n']})"


__all__ = [
    "SUMMARY_COLUMNS",
    "delta_text",
    "p_text",
    "seeds_text",
    "summarise",
    "summarise_current",
    "variant_text",
]
