"""The summary of a matrix: one row per (profile, run) with means, CIs and paired Δ.

Per (profile, run) the seeds are independent repetitions: the summary has the mean and
95% CI half-width of each recall (:func:`seps.stats.paired.mean_ci`) and the rSum difference to
the matrix's baseline paired by seed (:func:`seps.report.compare.compare`), its raw
p-value and its p-value corrected in the report's family (:func:`with_family`; by default
the family of the summary's own tests). A variant bit-identical to the baseline on every
seed is marked ``identical`` with the reason when known, and is not a test. The results,
paper, findings and cost parts of a report, and the Δ plot, are all read from this one
frame; the ``*_text`` functions give the cells of a summary row that several tables share.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from ..experiments.definitions import Matrix
from ..io.formatting import DASH, NA, fmt, fmt_ci, is_missing
from ..stats.paired import ALPHA, mean_ci, paired_mark
from .bimodal import split_seeds
from .blind import BLIND, text_blind_reason
from .compare import Comparison, Family, compare, family_of
from .frozen import with_frozen
from .records import METRICS, current_records, dense_pair, profiles, runs_of

#: The mark of a variant whose comparison tests a learned part that did not train
#: (:func:`seps.report.frozen.with_frozen`): no test, left out of the family.
DID_NOT_TRAIN = "did not train"
#: Columns of :func:`summarise`, in order.
SUMMARY_COLUMNS = (
    "profile",
    "run_id",
    "describe",
    "preset",
    "difference",
    "paper_row",
    "is_baseline",
    "reference",
    "n",
    "n_failed",
    "seeds",
    *(f"{m}_{s}" for m in METRICS for s in ("mean", "ci")),
    "split",
    "delta_rsum_mean",
    "delta_rsum_ci",
    "delta_p",
    "delta_p_adj",
    "delta_n",
    "delta_mark",
    "identical",
    "identical_reason",
    "blind",
    "frozen",
    "comparison",
    "dense_protocol",
    "baseline_rsum_mean",
    "train_seconds_mean",
    "wall_seconds_mean",
    "wall_seconds_sum",
    "busy_n",
    "copied_n",
    "train_pairs_per_second_mean",
    "eval_pairs_per_second_mean",
    "parameters",
    "trainable_parameters",
    "peak_memory_bytes",
)


def summarise(df: pd.DataFrame, matrix: Matrix, family: Family | None = None) -> pd.DataFrame:
    """Per (profile, run_id): seeds, mean and 95% CI of the recalls, paired Δ rSum, cost.

    ``df`` is any frame of :func:`~seps.report.records.load_results` (several matrices,
    superseded records): only the current records of ``matrix``'s runs are summarised, by
    :func:`summarise_current`, which has the columns.
    """
    if not df.empty and "matrix" in df:
        df = df[df["matrix"] == matrix.name]
    cur, _ = current_records(runs_of(df, matrix), matrix)
    return summarise_current(cur, matrix, family)


def summarise_current(
    cur: pd.DataFrame, matrix: Matrix, family: Family | None = None
) -> pd.DataFrame:
    """:func:`summarise` of records that are already ``matrix``'s current ones.

    Only runs of ``matrix`` with at least one record appear; profiles are sorted by name
    and runs follow the matrix's order. Columns: ``profile, run_id, describe, preset,
    difference, paper_row, is_baseline, reference`` (None, or the run the Δ is measured
    against when it is not the baseline: :meth:`~seps.experiments.definitions.Matrix.reference`, a
    revert's own preset), ``n, n_failed, seeds``, ``<metric>_mean`` and
    ``<metric>_ci`` for the six recalls and ``rsum``, ``split`` (the run's
    :class:`~seps.report.bimodal.Split` when some seeds are broken and others functional,
    else None: the tables then give each group's mean of every metric,
    :func:`metric_cell`), ``delta_rsum_mean, delta_rsum_ci, delta_p`` (raw),
    ``delta_p_adj`` (corrected in ``family``, default: the family of this summary's tests;
    NaN when not a test), ``delta_n, delta_mark`` (``baseline``,
    ``identical``, ``text-blind``, ``n/a``, ``*`` or ``ns`` on the corrected p),
    ``identical, identical_reason``, ``blind`` (why the run's scores, or for a variant
    its reference's, cannot depend on the text: :mod:`seps.report.blind`; None when they
    can), ``frozen`` (why a variant's comparison tests a learned part that did not
    train: :func:`~seps.report.frozen.with_frozen`; None otherwise: not a test, its mark
    ``did not train``), ``comparison`` (the :class:`~seps.report.compare.Comparison`),
    ``dense_protocol`` (``<train> / <eval>`` dense-caption protocol of the completed
    records, ``varies`` when they differ), ``baseline_rsum_mean`` (the reference's mean over
    the paired seeds), ``train_seconds_mean``, ``wall_seconds_mean, wall_seconds_sum``
    (the runner's wall clock per completed record: mean, and total over the records
    computed in this matrix, not copied from another: :mod:`seps.runs.twins`), ``busy_n`` (completed
    records timed on a busy machine: :mod:`seps.runtime.machine_load`), ``copied_n`` (completed
    records copied from another matrix), ``train_pairs_per_second_mean,
    eval_pairs_per_second_mean, parameters, trainable_parameters, peak_memory_bytes``.
    """
    rows: list[dict[str, Any]] = []
    for profile in profiles(cur):
        prof = cur[cur["profile"] == profile]
        done_prof = prof[prof["status"] == "done"]
        for run in matrix.runs:
            sub = prof[prof["run_id"] == run.id]
            if sub.empty:
                continue
            done = sub[sub["status"] == "done"].sort_values("seed")
            ref = matrix.reference(run.id)
            base = done_prof[done_prof["run_id"] == ref]
            base_by_seed = {int(r["seed"]): r for r in base.to_dict("records")}
            row: dict[str, Any] = {
                "profile": profile,
                "run_id": run.id,
                "describe": run.describe(),
                "preset": run.preset,
                "difference": run.difference,
                "paper_row": run.paper_row,
                "is_baseline": run.id == matrix.baseline,
                # None: the matrix's baseline; else the run this one is compared with.
                "reference": None if ref == matrix.baseline else ref,
                "n": len(done),
                "n_failed": int((sub["status"] != "done").sum()),
                "seeds": ",".join(str(int(s)) for s in done["seed"]),
            }
            for m in METRICS:
                mean, half, _ = mean_ci(done[m].tolist())
                row[f"{m}_mean"], row[f"{m}_ci"] = mean, half
            by_seed = {int(r["seed"]): r for r in done.to_dict("records")}
            split = split_seeds(run.id, by_seed, METRICS)
            row["split"] = split if split.bimodal else None
            c = with_frozen(compare(by_seed, base_by_seed), base_by_seed, by_seed)
            paired = [float(base_by_seed[s]["rsum"]) for s in by_seed if s in base_by_seed]
            protocols = sorted({dense_pair(r) for r in by_seed.values()})
            row.update(
                delta_rsum_mean=c.mean,
                delta_rsum_ci=c.half,
                delta_p=c.p,
                delta_p_adj=math.nan,
                delta_n=c.n,
                delta_mark="",
                identical=c.identical and not row["is_baseline"],
                identical_reason=None if row["is_baseline"] else c.reason,
                blind=_blind(by_seed) if row["is_baseline"] else c.blind,
                frozen=None if row["is_baseline"] else c.frozen,
                comparison=None if row["is_baseline"] else c,
                dense_protocol=_one_or_varies(protocols),
                baseline_rsum_mean=float(np.mean(paired)) if paired else math.nan,
                train_seconds_mean=_mean(done["train_seconds"]),
                wall_seconds_mean=_mean(done["wall_seconds"]),
                wall_seconds_sum=float(
                    pd.to_numeric(
                        done.loc[done["copied_from"].isna(), "wall_seconds"], errors="coerce"
                    ).sum(min_count=1)
                ),
                busy_n=int(sum(b is True for b in done["busy"])),  # None: not sampled
                copied_n=int(done["copied_from"].notna().sum()),
                train_pairs_per_second_mean=_mean(done["train_pairs_per_second"]),
                eval_pairs_per_second_mean=_mean(done["eval_pairs_per_second"]),
                parameters=_mean(done["parameters"]),
                trainable_parameters=_mean(done["trainable_parameters"]),
                peak_memory_bytes=_max(done["peak_memory_bytes"]),
            )
            rows.append(row)
    summary = pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))
    return with_family(
        summary, family if family is not None else family_of(summary_comparisons(summary))
    )


def _blind(by_seed: Mapping[int, Mapping[str, Any]]) -> str | None:
    """Why these records' scores cannot depend on the text (None when they can)."""
    return next((b for r in by_seed.values() if (b := text_blind_reason(r))), None)


def _one_or_varies(values: list[str]) -> str:
    return DASH if not values else values[0] if len(values) == 1 else "varies"


def summary_comparisons(summary: pd.DataFrame) -> list[Comparison]:
    """The comparisons of a summary's variants with the baseline, in row order."""
    return [c for c in summary["comparison"] if c is not None]


def with_family(summary: pd.DataFrame, family: Family) -> pd.DataFrame:
    """``summary`` with ``delta_p_adj`` and ``delta_mark`` from ``family``'s corrected
    p-values (the report's one family, which may hold tests of other sections too)."""
    out = summary.copy()
    adj, marks = [], []
    for r in out.to_dict("records"):
        c = r["comparison"]
        if r["is_baseline"]:
            adj.append(math.nan)
            marks.append("baseline")
        elif r["identical"]:
            adj.append(math.nan)
            marks.append("identical")
        elif r["blind"]:
            adj.append(math.nan)
            marks.append(BLIND)
        elif r.get("frozen"):
            adj.append(math.nan)
            marks.append(DID_NOT_TRAIN)
        else:
            p = family.p(c) if c is not None else math.nan
            adj.append(p)
            marks.append(paired_mark(p, r["delta_n"]))
    out["delta_p_adj"] = pd.Series(adj, index=out.index, dtype=float)
    out["delta_mark"] = pd.Series(marks, index=out.index, dtype=object)
    # A reason is text or None (pandas would turn a None beside strings into NaN).
    for col in ("identical_reason", "blind", "frozen", "reference"):
        texts = [None if is_missing(v) else str(v) for v in out[col]]
        out[col] = pd.Series(texts, index=out.index, dtype=object)
    return out


def _mean(s: pd.Series) -> float:
    x = pd.to_numeric(s, errors="coerce").dropna()
    return float(np.mean(x.to_numpy(dtype=float))) if len(x) else math.nan


def _max(s: pd.Series) -> float:
    x = pd.to_numeric(s, errors="coerce").dropna()
    return float(np.max(x.to_numpy(dtype=float))) if len(x) else math.nan


# ------------------------------------------------------------- cells of a summary row
def variant_text(row: Mapping[str, Any]) -> str:
    """The run id, with ``(baseline)`` for the matrix's baseline and ``(text-blind)`` for
    a run whose own scores cannot depend on the text (:mod:`seps.report.blind`)."""
    marks = [m for m, on in (("baseline", row["is_baseline"]), (BLIND, _own_blind(row))) if on]
    return f"{row['run_id']} ({', '.join(marks)})" if marks else str(row["run_id"])


def _own_blind(row: Mapping[str, Any]) -> bool:
    """Whether the row's own records are text-blind (a variant's ``blind`` may instead
    be its reference's)."""
    if row["is_baseline"] or not row.get("blind"):
        return bool(row.get("blind"))
    c = row.get("comparison")
    return c is None or c.blind_side != "reference"


def seeds_text(row: Mapping[str, Any]) -> str:
    """Completed seeds, and how many failed when any did."""
    return f"{row['n']} ({row['n_failed']} failed)" if row["n_failed"] else str(row["n"])


def p_value_text(p: float) -> str:
    """A p-value with three decimals, ``< 0.001`` below that (never a bare ``0.000``)."""
    return DASH if is_missing(p) else ("< 0.001" if p < 0.001 else f"{p:.3f}")


def metric_cell(row: Mapping[str, Any], metric: str) -> str:
    """A results table's cell for ``metric`` (a recall or ``rsum``) of one summary row:
    its mean ± CI, or for a bimodal run each group's mean
    (:meth:`seps.report.bimodal.Split.metric_cell`), which a mean ± CI would hide."""
    split = row.get("split")
    cell = None if is_missing(split) else split.metric_cell(metric)
    if cell is not None:
        return cell
    return fmt_ci(row[f"{metric}_mean"], row[f"{metric}_ci"], row["n"])


def delta_text(row: Mapping[str, Any], mark: bool = True) -> str:
    """Paired Δ rSum ± its CI, then (``mark``) the corrected test's mark; ``baseline`` for
    the baseline, ``0.0 (identical)`` for a variant identical to it."""
    if row["is_baseline"]:
        return "baseline"
    if row["identical"]:
        return f"{fmt(0.0)} (identical)"
    if row.get("blind"):
        return f"{NA} ({BLIND})"
    if row["delta_n"] == 0:
        return NA
    text = fmt_ci(row["delta_rsum_mean"], row["delta_rsum_ci"], row["delta_n"], sign=True)
    if not is_missing(row.get("reference")):
        text += f" vs {row['reference']}"
    # One paired seed: "± n/a" already says the test is not possible; no second n/a.
    return text if row["delta_n"] < 2 or not mark else f"{text} {row['delta_mark']}"


def p_text(row: Mapping[str, Any]) -> str:
    """The paired test's raw p-value and number of pairs; ``identical (no effect
    possible)`` instead of the p = 1 of a test on all-zero differences."""
    if row["is_baseline"]:
        return DASH
    if row["identical"]:
        return "identical (no effect possible)"
    if row.get("blind"):
        return f"not a test ({BLIND})"
    if row.get("frozen"):
        return f"not a test ({DID_NOT_TRAIN}; raw p {p_value_text(row['delta_p'])})"
    if row["delta_n"] < 2:
        return f"{NA} (n={row['delta_n']})"
    return f"{p_value_text(row['delta_p'])} (n={row['delta_n']})"


def p_adj_text(row: Mapping[str, Any]) -> str:
    """The corrected p-value; ``not a test`` for identical and text-blind variants and
    for one whose learned part did not train."""
    if row["is_baseline"]:
        return DASH
    if row["identical"] or row.get("blind") or row.get("frozen"):
        return "not a test"
    return NA if row["delta_n"] < 2 else p_value_text(row["delta_p_adj"])


def verdict_text(row: Mapping[str, Any]) -> str:
    """The verdict on the *corrected* p: ``higher *``/``lower *``, ``ns`` (with ``raw p <
    0.05`` when only the raw p crossed), ``n/a (…)``, ``identical: <reason>``,
    ``text-blind: <reason>`` (the baseline too, when its scores cannot read the text)."""
    if row["is_baseline"]:
        return f"baseline, {BLIND}: {row['blind']}" if row["blind"] else "baseline"
    if row["identical"]:
        reason = row["identical_reason"]
        return f"identical: {reason}" if reason else "identical"
    if row.get("blind"):
        return f"{BLIND}: {row['blind']}"
    if row.get("frozen"):
        return f"not testable here: {row['frozen']}"
    if row["delta_n"] < 2:
        return f"{NA} ({row['delta_n']} paired seed{'s' if row['delta_n'] != 1 else ''})"
    if row["delta_mark"] == "*":
        return f"{'higher' if row['delta_rsum_mean'] > 0 else 'lower'} *"
    return "ns (raw p < 0.05)" if row["delta_p"] < ALPHA else "ns"


__all__ = [
    "DID_NOT_TRAIN",
    "SUMMARY_COLUMNS",
    "delta_text",
    "metric_cell",
    "p_adj_text",
    "p_text",
    "p_value_text",
    "seeds_text",
    "summarise",
    "summarise_current",
    "summary_comparisons",
    "variant_text",
    "verdict_text",
    "with_family",
]
