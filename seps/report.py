"""Reports regenerated from the result store: ``seps-bench report [MATRIX ...]``.

A report is a pure function of the stored run records (``results/<matrix>/*.json``, schema
``seps-bench/run/1``, written by :mod:`seps.runner`), the matrix definition and the
paper's reported figures (``ablations/paper_figures.yaml``). Nothing here trains or
evaluates. The same records give a byte-identical ``reports/<matrix>.md`` and the same PNG
plots: rows follow the matrix's run order, floats have fixed formats, no clock is read,
and files are written atomically (temp file + ``os.replace``).

Statistics. Per (profile, run) the seeds are independent repetitions: the table shows the
mean and the 95% confidence half-width ``t(0.975, n-1) * sd / sqrt(n)``. A variant is
compared with the matrix's baseline *paired by seed* (the same seed gives the same data
order and initial weights, so the per-seed difference removes most seed noise); its
paired t-test marks ``*`` when the two-sided p < 0.05. Student t quantiles and p-values
are computed here from the regularised incomplete beta function, so SciPy is not needed.

The ``Cost`` section (timings, throughput, memory, parameter counts) is the last one, so
the accuracy part of two reports can be compared as ``text.split("\\n## Cost")[0]`` even
when the records come from machines with different speeds.
"""

from __future__ import annotations

import argparse
import io
import math
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from .ablations import Matrix, RunSpec, default_root, load_matrix
from .cli import command
from .store import RECORD_NAME, RecordError, atomic_write_bytes, atomic_write_text, scan_records

#: The six recalls in the paper's column order, then their sum.
RECALLS = ("i2t_r1", "i2t_r5", "i2t_r10", "t2i_r1", "t2i_r5", "t2i_r10")
METRICS = (*RECALLS, "rsum")
LABELS = {
    "i2t_r1": "i2t R@1",
    "i2t_r5": "i2t R@5",
    "i2t_r10": "i2t R@10",
    "t2i_r1": "t2i R@1",
    "t2i_r5": "t2i R@5",
    "t2i_r10": "t2i R@10",
    "rsum": "rSum",
}
#: Label of the paper's Table 1 figure shown beside the code and paper presets.
PAPER_LABEL = "paper/README reported, Flickr30K ViT-224"
#: Significance level of the paired test and of the confidence intervals.
ALPHA = 0.05
#: Fixed plot resolution: with the Agg backend and no "Software" metadata the PNG bytes
#: depend only on the plotted numbers (and the matplotlib version).
PLOT_DPI = 100
NA = "n/a"
DASH = "—"

_REPO_FIGURES = Path(__file__).resolve().parents[1] / "ablations" / "paper_figures.yaml"


# ------------------------------------------------------------------------- statistics
def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz method)."""
    tiny, eps = 1e-300, 1e-16
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        for aa in (
            m * (b - m) * x / ((qam + m2) * (a + m2)),
            -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)),
        ):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta ``I_x(a, b)``."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    front = math.exp(log_front)
    # The continued fraction converges fast only on this side of the mean; use symmetry.
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_two_sided_p(t: float, df: float) -> float:
    """Two-sided p-value ``P(|T| >= |t|)`` of Student's t with ``df`` degrees of freedom."""
    if math.isnan(t) or df <= 0:
        return math.nan
    if math.isinf(t):
        return 0.0
    return _betainc(df / 2.0, 0.5, df / (df + t * t))


@lru_cache(maxsize=256)
def t_quantile(q: float, df: float) -> float:
    """The ``q`` quantile (``0.5 < q < 1``) of Student's t, by bisection on the CDF."""
    if not 0.5 < q < 1.0 or df <= 0:
        raise ValueError(f"t_quantile: need 0.5 < q < 1 and df > 0, got q={q}, df={df}")
    target = 2.0 * (1.0 - q)
    lo, hi = 0.0, 1.0
    while t_two_sided_p(hi, df) > target:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_two_sided_p(mid, df) > target:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-14 * hi:
            break
    return 0.5 * (lo + hi)


def mean_ci(values: Iterable[float]) -> tuple[float, float, int]:
    """(mean, 95% CI half-width, n) of independent values; the half-width is NaN for n < 2."""
    x = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    n = len(x)
    if n == 0:
        return math.nan, math.nan, 0
    mean = float(np.mean(x))
    if n < 2:
        return mean, math.nan, n
    half = t_quantile(1.0 - ALPHA / 2.0, n - 1) * float(np.std(x, ddof=1)) / math.sqrt(n)
    return mean, half, n


def paired_test(diffs: Sequence[float]) -> tuple[float, float, float, int]:
    """(mean, 95% CI half-width, two-sided p, n) of per-seed differences (paired t-test).

    With fewer than 2 differences the half-width and p are NaN. Identical non-zero
    differences (sd 0) give p = 0: every seed moved the same way by the same amount.
    """
    d = np.asarray(diffs, dtype=float)
    n = len(d)
    if n == 0:
        return math.nan, math.nan, math.nan, 0
    mean = float(np.mean(d))
    if n < 2:
        return mean, math.nan, math.nan, n
    se = float(np.std(d, ddof=1)) / math.sqrt(n)
    if se == 0.0:
        return mean, 0.0, (0.0 if mean != 0.0 else 1.0), n
    half = t_quantile(1.0 - ALPHA / 2.0, n - 1) * se
    return mean, half, t_two_sided_p(abs(mean) / se, n - 1), n


def paired_mark(p: float, n: int) -> str:
    """``*`` (p < 0.05), ``ns`` (not significant) or ``n/a`` (fewer than 2 paired seeds)."""
    if n < 2 or math.isnan(p):
        return NA
    return "*" if p < ALPHA else "ns"


# ---------------------------------------------------------------------------- loading
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
    "nonfinite_steps",
    "torch",
    "device_name",
    "git_commit",
    "history",
    "environment",
    "head_config",
    "train_config",
)


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
        head_config=rec.get("head_config") or {},
        train_config=train_cfg,
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


def current_records(df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(current, superseded): one record per (profile, run_id, seed), the latest started.

    Two records for the same run and seed exist when its resolved config changed between
    invocations (a new key); the newer one is what the matrix means now. Ties on the
    start time fall back to the file name, so the choice is deterministic.
    """
    if df.empty:
        return df, df.iloc[0:0]
    order = df.assign(_started=pd.to_numeric(df["started"], errors="coerce").fillna(-math.inf))
    order = order.sort_values(["profile", "run_id", "seed", "_started", "file"], kind="stable")
    last = ~order.duplicated(["profile", "run_id", "seed"], keep="last")
    cur = order[last].drop(columns="_started")
    old = order[~last].drop(columns="_started")
    key = ["profile", "run_id", "seed", "file"]
    return (
        cur.sort_values(key, kind="stable").reset_index(drop=True),
        old.sort_values(key, kind="stable").reset_index(drop=True),
    )


# -------------------------------------------------------------------------- summary
def _profiles(df: pd.DataFrame) -> list[str]:
    return sorted(str(p) for p in df["profile"].dropna().unique())


def summarise(df: pd.DataFrame, matrix: Matrix) -> pd.DataFrame:
    """Per (profile, run_id): seeds, mean and 95% CI of the recalls, paired Δ rSum, cost.

    Only runs of ``matrix`` with at least one record appear; profiles are sorted by name
    and runs follow the matrix's order. Columns: ``profile, run_id, describe, preset,
    difference, paper_row, is_baseline, n, n_failed, seeds``, ``<metric>_mean`` and
    ``<metric>_ci`` for the six recalls and ``rsum``, ``delta_rsum_mean, delta_rsum_ci,
    delta_p, delta_n, delta_mark, baseline_rsum_mean`` (the baseline's mean over the
    paired seeds), ``train_seconds_mean, train_pairs_per_second_mean,
    eval_pairs_per_second_mean, parameters, trainable_parameters, peak_memory_bytes``.
    """
    if not df.empty and "matrix" in df:
        df = df[df["matrix"] == matrix.name]
    df = df[df["run_id"].isin([r.id for r in matrix.runs])]
    cur, _ = current_records(df)
    rows: list[dict[str, Any]] = []
    for profile in _profiles(cur):
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
    columns = [
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
    ]
    return pd.DataFrame(rows, columns=columns)


def _mean(s: pd.Series) -> float:
    x = pd.to_numeric(s, errors="coerce").dropna()
    return float(np.mean(x.to_numpy(dtype=float))) if len(x) else math.nan


def _max(s: pd.Series) -> float:
    x = pd.to_numeric(s, errors="coerce").dropna()
    return float(np.max(x.to_numpy(dtype=float))) if len(x) else math.nan


# ----------------------------------------------------------------------- formatting
def _isnan(x: Any) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def fmt(x: Any, digits: int = 1, sign: bool = False) -> str:
    """Fixed-point text of ``x``; NaN as ``—``; never ``-0.0`` (rounding must not invent a sign)."""
    if _isnan(x):
        return DASH
    x = float(x)
    if round(x, digits) == 0.0:
        x = 0.0
    return f"{x:+.{digits}f}" if sign and x != 0.0 else f"{x:.{digits}f}"


def fmt_ci(mean: Any, half: Any, n: int, digits: int = 1, sign: bool = False) -> str:
    """``mean ± half``; ``± n/a`` for one seed; ``—`` without data."""
    if n == 0 or _isnan(mean):
        return DASH
    return f"{fmt(mean, digits, sign)} ± {NA if _isnan(half) else fmt(half, digits)}"


def fmt_count(x: Any) -> str:
    """Parameter counts in millions (three decimals keep small heads distinguishable)."""
    return DASH if _isnan(x) else f"{float(x) / 1e6:.3f}M"


def _cell(text: Any) -> str:
    """A markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _table(rows: list[list[Any]], headers: Sequence[str]) -> str:
    from tabulate import tabulate

    cells = [[_cell(c) for c in r] for r in rows]
    # disable_numparse: every cell is already text with its final format; tabulate must
    # neither re-format nor re-align numbers.
    return tabulate(cells, headers=list(headers), tablefmt="github", disable_numparse=True)


def _code(x: Any) -> str:
    return f"`{x}`"


# ----------------------------------------------------------------- paper references
def load_paper_figures(root: Path | None = None) -> dict[str, Any]:
    """``paper_figures.yaml`` of the ablation root, else the repository's (or ``{}``)."""
    for path in ((root or default_root()) / "paper_figures.yaml", _REPO_FIGURES):
        if path.exists():
            doc = yaml.safe_load(path.read_text())
            return doc if isinstance(doc, dict) else {}
    return {}


@dataclass(frozen=True)
class PaperRef:
    """A reported figure matched to one run of a matrix.

    ``kind`` is ``modules`` (four recalls of the module-ablation table), ``rsum`` (a row
    of the selection-ratio or coefficient table, or Table 1) or ``impact`` (the claimed
    impact of a documented difference); ``table`` names the source table.
    """

    kind: str
    table: str
    values: Mapping[str, float]
    text: str


def _close(a: Any, b: Any) -> bool:
    try:
        return abs(float(a) - float(b)) < 1e-9
    except (TypeError, ValueError):
        return False


def _rows(figures: Mapping[str, Any], table: str) -> list[Mapping[str, Any]]:
    return list((figures.get(table) or {}).get("rows") or [])


def paper_reference(
    run: RunSpec, figures: Mapping[str, Any], claims: Mapping[str, str] | None = None
) -> PaperRef | None:
    """The paper's figure for ``run``, matched by what the run is, first match wins.

    1. ``paper_row`` -> that row of the module-ablation table;
    2. ``difference`` with a claimed impact -> the claim (seed 004);
    3. the paper preset with only ``sparse_ratio`` set -> the selection-ratio row of rho;
    4. the paper preset with only ``lambda_sparse``/``lambda_dense`` set -> the
       coefficient row (l1, l2);
    5. a bare ``code`` or ``paper`` preset -> Table 1 SEPS, ViT-Base-224, Flickr30K 1K
       (the repository README reports the same figures); ``laps`` -> Table 1 LAPS.
    """
    if run.paper_row:
        for row in _rows(figures, "module_ablations"):
            if row.get("setting") == run.paper_row:
                vals = {k: float(row[k]) for k in ("i2t_r1", "i2t_r5", "t2i_r1", "t2i_r5")}
                return PaperRef("modules", "module_ablations", vals, str(run.paper_row))
        return None
    claims = claims or {}
    if run.difference and claims.get(run.difference):
        scale = (figures.get("claimed_impacts") or {}).get("scale") or {}
        level = claims[run.difference]
        text = f"{level} ({scale[level]})" if level in scale else level
        return PaperRef("impact", "claimed_impacts", {}, text)
    keys = set(run.set)
    if run.preset == "paper" and not run.train and keys == {"sparse_ratio"}:
        for row in _rows(figures, "selection_ratio"):
            if _close(row.get("rho"), run.set["sparse_ratio"]):
                return PaperRef(
                    "rsum", "selection_ratio", _metric_values(row), f"rho={row['rho']:g}"
                )
    if run.preset == "paper" and not run.train and keys == {"lambda_sparse", "lambda_dense"}:
        for row in _rows(figures, "coefficients"):
            if _close(row.get("l1"), run.set["lambda_sparse"]) and _close(
                row.get("l2"), run.set["lambda_dense"]
            ):
                text = f"l1={float(row['l1']):g}, l2={float(row['l2']):g}"
                return PaperRef("rsum", "coefficients", _metric_values(row), text)
    if not keys and not run.train and run.preset in ("code", "paper", "laps"):
        method = "LAPS" if run.preset == "laps" else "SEPS"
        for row in _rows(figures, "table1"):
            if (
                row.get("method") == method
                and row.get("backbone") == "ViT-Base-224"
                and row.get("dataset") == "Flickr30K 1K"
            ):
                text = f"Table 1 {method}"
                if run.preset == "paper":
                    for est in _rows(figures, "seed004_estimates"):
                        if est.get("dataset") == "Flickr30K 1K":
                            text += f"; seed 004 estimate {fmt(est['rsum'])}, not measured"
                return PaperRef("rsum", "table1", _metric_values(row), text)
    return None


def _metric_values(row: Mapping[str, Any]) -> dict[str, float]:
    return {m: float(row[m]) for m in METRICS if m in row}


def _claims(root: Path | None, figures: Mapping[str, Any]) -> dict[str, str]:
    """Difference id -> claimed impact: ``paper_figures.yaml``, else ``differences.yaml``."""
    out: dict[str, str] = {}
    path = (root or default_root()) / "differences.yaml"
    if path.exists():
        doc = yaml.safe_load(path.read_text()) or {}
        for section in ("differences", "findings"):
            for e in doc.get(section) or []:
                if isinstance(e, Mapping) and e.get("claimed_impact"):
                    out[str(e["id"])] = str(e["claimed_impact"])
    for row in _rows(figures, "claimed_impacts"):
        if row.get("id") and row.get("claimed_impact"):
            out[str(row["id"])] = str(row["claimed_impact"])
    return out


# ---------------------------------------------------------------------------- plots
def _run_colors(matrix: Matrix) -> dict[str, Any]:
    """One fixed colour per run (by matrix position), the same in every plot."""
    import matplotlib

    cmap = matplotlib.colormaps["tab20"]
    # tab20 comes in dark/light pairs: take the ten dark shades first, then the light ones,
    # so that neighbouring runs get clearly different colours.
    return {r.id: cmap((2 * i) % 20 + (i // 10) % 2) for i, r in enumerate(matrix.runs)}


def _save_png(fig: Any, path: Path) -> None:
    # metadata Software=None drops the matplotlib version string; with a fixed dpi the
    # bytes then depend only on the plotted numbers.
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=PLOT_DPI, metadata={"Software": None})
    atomic_write_bytes(path, buf.getvalue())


def plot_delta(summary: pd.DataFrame, matrix: Matrix, path: Path) -> dict[str, dict[str, Any]]:
    """Δ rSum per variant with 95% CI error bars (baseline line at 0), one panel per profile.

    Returns, per profile, the series *read back from the drawn artists*: ``labels`` (top
    to bottom), ``delta`` (bar lengths) and ``ci`` (error-bar half-widths, NaN where no
    bar was drawn because fewer than 2 seeds are paired). An empty dict means nothing to
    plot, and no file is written.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = summary[~summary["is_baseline"] & summary["delta_rsum_mean"].notna()]
    profiles = [p for p in _profiles(summary) if (data["profile"] == p).any()]
    if not profiles:
        return {}
    colors = _run_colors(matrix)
    heights = [max(1.5, 0.35 * int((data["profile"] == p).sum()) + 1.0) for p in profiles]
    fig, axes = plt.subplots(
        len(profiles),
        1,
        figsize=(8, sum(heights)),
        squeeze=False,
        gridspec_kw={"height_ratios": heights},
        layout="constrained",
    )
    out: dict[str, dict[str, Any]] = {}
    for ax, profile in zip(axes[:, 0], profiles, strict=True):
        sub = data[data["profile"] == profile]
        labels = sub["run_id"].tolist()
        y = np.arange(len(labels), dtype=float)
        delta = sub["delta_rsum_mean"].to_numpy(dtype=float)
        ci = sub["delta_rsum_ci"].to_numpy(dtype=float)
        bars = ax.barh(y, delta, color=[colors[r] for r in labels], height=0.6)
        has_ci = ~np.isnan(ci)
        err = None
        if has_ci.any():
            err = ax.errorbar(
                delta[has_ci], y[has_ci], xerr=ci[has_ci], fmt="none", ecolor="black", capsize=3
            )
        for yi, di, ci_i in zip(y, delta, ci, strict=True):
            if np.isnan(ci_i):  # say why the bar has no error bar
                ax.annotate(
                    " 1 seed, no CI",
                    (float(di), float(yi)),
                    xytext=(4 if di >= 0 else -4, 0),
                    textcoords="offset points",
                    ha="left" if di >= 0 else "right",
                    va="center",
                    fontsize=8,
                )
        ax.axvline(0.0, color="black", linewidth=1.0)
        ax.set_yticks(y, labels)
        ax.invert_yaxis()
        ax.set_xlabel(f"Δ rSum vs {matrix.baseline} (paired by seed, 95% CI)")
        ax.set_title(f"{matrix.name} — profile {profile}", fontsize=10)
        ax.grid(axis="x", alpha=0.3)
        # Read the plotted numbers back from the artists, so callers check the figure.
        drawn_ci = [math.nan] * len(labels)
        if err is not None:
            for seg in err.lines[2][0].get_segments():
                (x0, y0), (x1, _) = seg
                drawn_ci[round(float(y0))] = (float(x1) - float(x0)) / 2.0
        out[profile] = {
            "labels": [ax.get_yticklabels()[i].get_text() for i in range(len(labels))],
            "delta": [float(p.get_width()) for p in bars.patches],
            "ci": drawn_ci,
        }
    _save_png(fig, path)
    plt.close(fig)
    return out


def _epoch_means(
    records: pd.DataFrame, value: Callable[[Mapping[str, Any]], Any]
) -> tuple[list[float], list[float]]:
    """Per-epoch mean over seeds of ``value(history entry)`` (entries without it skipped)."""
    per_epoch: dict[int, list[float]] = {}
    for hist in records["history"]:
        for h in hist or []:
            v = value(h)
            if v is not None and not _isnan(v) and "epoch" in h:
                per_epoch.setdefault(int(h["epoch"]), []).append(float(v))
    epochs = sorted(per_epoch)
    return [float(e) for e in epochs], [float(np.mean(per_epoch[e])) for e in epochs]


def _val_rsum(h: Mapping[str, Any]) -> Any:
    val = h.get("val")
    return val.get("rsum") if isinstance(val, Mapping) else None


def plot_curves(
    df: pd.DataFrame, matrix: Matrix, path: Path
) -> dict[str, dict[str, dict[str, tuple[list[float], list[float]]]]]:
    """Training curves: loss per epoch and validation rSum per epoch (when recorded).

    One row of panels per profile; one line per variant, the mean over its completed
    seeds at each epoch. Returns ``{profile: {"loss" | "val_rsum": {run_id: (epochs,
    values)}}}`` read back from the drawn lines; empty (no file) without any history.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    done = df[(df["status"] == "done") & df["run_id"].isin([r.id for r in matrix.runs])]
    series: dict[str, dict[str, dict[str, tuple[list[float], list[float]]]]] = {}
    for profile in _profiles(done):
        prof = done[done["profile"] == profile]
        panels: dict[str, dict[str, tuple[list[float], list[float]]]] = {}
        for name, value in (("loss", lambda h: h.get("loss")), ("val_rsum", _val_rsum)):
            lines = {}
            for run in matrix.runs:
                x, y = _epoch_means(prof[prof["run_id"] == run.id].sort_values("seed"), value)
                if x:
                    lines[run.id] = (x, y)
            if lines:
                panels[name] = lines
        if panels:
            series[profile] = panels
    if not series:
        return {}
    ncols = 2 if any("val_rsum" in p for p in series.values()) else 1
    colors = _run_colors(matrix)
    fig, axes = plt.subplots(
        len(series),
        ncols,
        figsize=(6 * ncols + 3, 3.5 * len(series)),
        squeeze=False,
        layout="constrained",
    )
    titles = {"loss": "training loss", "val_rsum": "validation rSum"}
    out: dict[str, dict[str, dict[str, tuple[list[float], list[float]]]]] = {}
    handles: dict[str, Any] = {}
    for row, (profile, panels) in enumerate(series.items()):
        out[profile] = {}
        for col, name in enumerate(("loss", "val_rsum")[:ncols]):
            ax = axes[row, col]
            ax.set_title(f"{titles[name]} — profile {profile}", fontsize=10)
            ax.set_xlabel("epoch")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.grid(alpha=0.3)
            if name not in panels:
                ax.text(0.5, 0.5, "not recorded", ha="center", va="center", transform=ax.transAxes)
                continue
            drawn = {}
            for run_id, (x, y) in panels[name].items():
                (line,) = ax.plot(
                    x, y, marker="o", markersize=3, color=colors[run_id], label=run_id
                )
                handles.setdefault(run_id, line)
                drawn[line.get_label()] = (
                    [float(v) for v in line.get_xdata()],
                    [float(v) for v in line.get_ydata()],
                )
            out[profile][name] = drawn
    order = [r.id for r in matrix.runs if r.id in handles]
    fig.legend(
        [handles[r] for r in order], order, loc="outside right upper", fontsize=8, frameon=False
    )
    _save_png(fig, path)
    plt.close(fig)
    return out


# ---------------------------------------------------------------------------- report
def _value_counts(values: Iterable[Any]) -> str:
    """``v`` when all records agree, else ``varies: a (2 records); b (1 record)``."""
    counts: dict[str, int] = {}
    for v in values:
        key = DASH if _isnan(v) or v == "" else str(v)
        counts[key] = counts.get(key, 0) + 1
    if not counts:
        return DASH
    if len(counts) == 1:
        return next(iter(counts))
    parts = [f"{k} ({n} record{'s' if n > 1 else ''})" for k, n in sorted(counts.items())]
    return "varies: " + "; ".join(parts)


def _dataset_text(r: Mapping[str, Any]) -> str:
    ds = r.get("dataset")
    if ds == "synthetic" and not _isnan(r.get("synth_images")):
        return f"synthetic (built-in, {int(r['synth_images'])} images)"
    return str(ds)


def _backbones(r: Mapping[str, Any]) -> str:
    return f"{r.get('backbone')} / {r.get('text_backbone')}"


def _protocol_lines(cur: pd.DataFrame) -> list[str]:
    recs = cur.to_dict("records")

    def col(f: Callable[[Mapping[str, Any]], Any]) -> str:
        return _value_counts(f(r) for r in recs)

    def opt_int(x: Any) -> str:
        return "no limit" if _isnan(x) else str(int(x))

    seeds = sorted({int(r["seed"]) for r in recs if not _isnan(r.get("seed"))})
    commit = col(lambda r: (r.get("git_commit") or "unknown")[:12])
    return [
        f"- **profile**: {col(lambda r: r['profile'])}",
        f"- **dataset**: {col(_dataset_text)}",
        "- **evaluation**: "
        + col(
            lambda r: (
                f"{r.get('eval_split')} split"
                + ("" if _isnan(r.get("eval_images")) else f", {int(r['eval_images'])} images")
            )
        ),
        f"- **dense caption at test time** (`dense_source`): {col(lambda r: r['dense_source'])}",
        f"- **training protocol**: {col(lambda r: r['protocol'])}",
        "- **training**: "
        + col(
            lambda r: (
                f"{r.get('epochs')} epochs, batch {r.get('batch_size')}, "
                f"max steps/epoch {opt_int(r.get('max_steps_per_epoch'))}"
            )
        ),
        f"- **backbones** (image / text): {col(_backbones)}",
        f"- **seeds**: {', '.join(str(s) for s in seeds) or DASH}",
        f"- **device**: {col(lambda r: r.get('device_name') or 'unknown')}",
        f"- **torch**: {col(lambda r: r.get('torch') or 'unknown')}",
        f"- **git commit**: {commit}",
    ]


def _variant(row: Mapping[str, Any]) -> str:
    return f"{row['run_id']} (baseline)" if row["is_baseline"] else str(row["run_id"])


def _n_text(row: Mapping[str, Any]) -> str:
    return f"{row['n']} ({row['n_failed']} failed)" if row["n_failed"] else str(row["n"])


def _delta_text(row: Mapping[str, Any]) -> str:
    if row["is_baseline"]:
        return "baseline"
    if row["delta_n"] == 0:
        return NA
    text = fmt_ci(row["delta_rsum_mean"], row["delta_rsum_ci"], row["delta_n"], sign=True)
    # One paired seed: "± n/a" already says the test is not possible; no second n/a.
    return text if row["delta_n"] < 2 else f"{text} {row['delta_mark']}"


def _p_text(row: Mapping[str, Any]) -> str:
    if row["is_baseline"] or row["delta_n"] < 2:
        return f"{NA} (n={row['delta_n']})" if not row["is_baseline"] else DASH
    return f"{row['delta_p']:.3f} (n={row['delta_n']})"


def _results_table(summary: pd.DataFrame) -> str:
    headers = [
        "variant",
        "what differs",
        "seeds",
        *(LABELS[m] for m in METRICS),
        "Δ rSum",
        "p (paired t)",
    ]
    rows = []
    for r in summary.to_dict("records"):
        rows.append(
            [
                _variant(r),
                r["describe"],
                _n_text(r),
                *(fmt_ci(r[f"{m}_mean"], r[f"{m}_ci"], r["n"]) for m in METRICS),
                _delta_text(r),
                _p_text(r),
            ]
        )
    return _table(rows, headers)


def _paper_sections(
    summary: pd.DataFrame, matrix: Matrix, figures: Mapping[str, Any], claims: Mapping[str, str]
) -> list[str]:
    """Tables of reported figures beside measured ones, one per kind of reference."""
    refs = {r.id: paper_reference(r, figures, claims) for r in matrix.runs}
    if not any(refs.values()):
        return []
    base_ref = refs.get(matrix.baseline)
    lines = [
        "## Reported by the paper",
        "",
        "The reported figures come from Flickr30K (or COCO) with ViT-Base/Swin-Base and "
        "BERT-base trained for 30 epochs: a different dataset and a much larger scale than "
        "the measured runs above. Compare the direction and relative size of effects, not "
        "absolute values.",
        "",
    ]
    for profile in _profiles(summary):
        prof = [r for r in summary.to_dict("records") if r["profile"] == profile]
        by_kind: dict[str, list[list[str]]] = {"impact": [], "rsum": [], "modules": []}
        for r in prof:
            ref = refs.get(r["run_id"])
            if ref is None:
                continue
            if ref.kind == "impact":
                rel = math.nan
                if r["delta_n"] and not _isnan(r["baseline_rsum_mean"]):
                    rel = 100.0 * r["delta_rsum_mean"] / r["baseline_rsum_mean"]
                by_kind["impact"].append(
                    [
                        _variant(r),
                        str(r["difference"]),
                        _delta_text(r),
                        DASH if _isnan(rel) else f"{fmt(rel, 2, sign=True)}%",
                        ref.text,
                    ]
                )
            elif ref.kind == "rsum":
                paper_delta = DASH
                if (
                    base_ref is not None
                    and base_ref.table == ref.table
                    and ref.table != "table1"
                    and "rsum" in base_ref.values
                ):
                    paper_delta = fmt(ref.values["rsum"] - base_ref.values["rsum"], sign=True)
                source = (
                    f"{PAPER_LABEL} ({ref.text})"
                    if ref.table == "table1"
                    else f"paper appendix, Flickr30K ({ref.text})"
                )
                by_kind["rsum"].append(
                    [
                        _variant(r),
                        fmt_ci(r["rsum_mean"], r["rsum_ci"], r["n"]),
                        _delta_text(r),
                        fmt(ref.values.get("rsum")),
                        paper_delta,
                        source,
                    ]
                )
            else:
                cells = []
                for m in ("i2t_r1", "i2t_r5", "t2i_r1", "t2i_r5"):
                    cells += [fmt_ci(r[f"{m}_mean"], r[f"{m}_ci"], r["n"]), fmt(ref.values[m])]
                by_kind["modules"].append([_variant(r), ref.text, *cells])
        if not any(by_kind.values()):
            continue
        lines += [f"### Profile `{profile}`", ""]
        if by_kind["impact"]:
            lines += [
                "Claimed impact of each documented difference (seed 004; a claim, not a "
                "measurement; it does not say of which quantity the percentage is taken). "
                "Measured: Δ rSum paired by seed, and that Δ as a percentage of the "
                "baseline's rSum.",
                "",
                _table(
                    by_kind["impact"],
                    [
                        "variant",
                        "difference",
                        "measured Δ rSum",
                        "measured Δ / baseline rSum",
                        "claimed impact",
                    ],
                ),
                "",
            ]
        if by_kind["rsum"]:
            lines += [
                "rSum measured here beside the rSum reported on Flickr30K, ViT-Base-224. "
                "Reported Δ is against the reported figure of the same table's baseline row.",
                "",
                _table(
                    by_kind["rsum"],
                    [
                        "variant",
                        "measured rSum",
                        "measured Δ rSum",
                        "reported rSum",
                        "reported Δ rSum",
                        "reported by",
                    ],
                ),
                "",
            ]
        if by_kind["modules"]:
            note = (figures.get("module_ablations") or {}).get("note")
            headers = ["variant", "paper row"]
            for m in ("i2t_r1", "i2t_r5", "t2i_r1", "t2i_r5"):
                headers += [f"{LABELS[m]} measured", f"{LABELS[m]} reported"]
            lines += [
                "Module-ablation rows (the paper reports R@1 and R@5 only; Flickr30K, "
                "ViT-Base-224)." + (f" Note: {' '.join(str(note).split())}" if note else ""),
                "",
                _table(by_kind["modules"], headers),
                "",
            ]
    return lines


def _names(rows: Sequence[Mapping[str, Any]], detail: Callable[[Mapping[str, Any]], str]) -> str:
    return ", ".join(f"`{r['run_id']}` ({detail(r)})" for r in rows)


def _one_seed(r: Mapping[str, Any]) -> str:
    return f"Δ {fmt(r['delta_rsum_mean'], sign=True)} from one seed"


def _findings_lines(summary: pd.DataFrame, matrix: Matrix) -> list[str]:
    """What the numbers support, per profile, without going beyond them."""
    lines = ["## What this run shows", ""]
    if summary.empty:
        return [*lines, "No completed runs: nothing can be concluded yet.", ""]
    for profile in _profiles(summary):
        prof = [r for r in summary.to_dict("records") if r["profile"] == profile]
        base = next((r for r in prof if r["is_baseline"]), None)
        others = [r for r in prof if not r["is_baseline"]]
        lines.append(f"Profile `{profile}`:")
        lines.append("")
        if base is None or base["n"] == 0:
            lines.append(
                f"- The baseline `{matrix.baseline}` has no completed run, so no variant "
                "can be compared with it."
            )
        else:
            lines.append(
                f"- Baseline `{matrix.baseline}`: rSum "
                f"{fmt_ci(base['rsum_mean'], base['rsum_ci'], base['n'])} over {base['n']} "
                f"seed{'s' if base['n'] > 1 else ''}."
            )

        def d(r: Mapping[str, Any]) -> str:
            return (
                f"Δ {fmt_ci(r['delta_rsum_mean'], r['delta_rsum_ci'], r['delta_n'], sign=True)}, "
                f"n={r['delta_n']}"
            )

        testable = [r for r in others if r["delta_n"] >= 2]
        outside = [r for r in testable if r["delta_mark"] == "*"]
        within = [r for r in testable if r["delta_mark"] != "*"]
        single = [r for r in others if r["delta_n"] == 1]
        unpaired = [r for r in others if r["delta_n"] == 0 and r["n"] > 0]
        all_failed = [r for r in others if r["n"] == 0]
        higher = [r for r in outside if r["delta_rsum_mean"] > 0]
        lower = [r for r in outside if r["delta_rsum_mean"] < 0]
        if higher:
            lines.append(
                "- Higher rSum than the baseline beyond seed noise (paired 95% CI excludes "
                f"0): {_names(higher, d)}."
            )
        if lower:
            lines.append(
                "- Lower rSum than the baseline beyond seed noise (paired 95% CI excludes "
                f"0): {_names(lower, d)}."
            )
        if within:
            lines.append(
                "- Within seed noise (the CI includes 0: no difference detected with this "
                f"many seeds, which does not show the variants are equal): {_names(within, d)}."
            )
        if testable and not outside:
            lines.append(
                "- No variant differs from the baseline beyond seed noise at this number of seeds."
            )
        if len(testable) > 1:
            lines.append(
                f"- {len(testable)} paired tests at p < 0.05 without correction: about "
                f"{len(testable) * ALPHA:.1f} would cross the threshold by chance alone."
            )
        if single:
            lines.append(
                "- Single paired seed, not testable (one seed cannot separate an effect "
                f"from seed noise): {_names(single, _one_seed)}."
            )
        if unpaired:
            lines.append(
                "- No paired comparison (the baseline has no completed run on the same "
                f"seeds): {', '.join(_code(r['run_id']) for r in unpaired)}."
            )
        if all_failed:
            lines.append(
                f"- Every seed failed: {', '.join(_code(r['run_id']) for r in all_failed)}."
            )
        lines.append(
            "- These statements hold for this profile and dataset only (see Protocol); "
            "they are not measurements of the paper's Flickr30K setting."
        )
        lines.append("")
    return lines


def _failed_lines(cur: pd.DataFrame, matrix: Matrix) -> list[str]:
    failed = cur[cur["status"] != "done"]
    lines = ["## Failed runs", ""]
    if failed.empty:
        return [*lines, "None.", ""]
    order = {r.id: i for i, r in enumerate(matrix.runs)}
    failed = failed.assign(_o=failed["run_id"].map(order)).sort_values(
        ["profile", "_o", "seed"], kind="stable"
    )
    rows = []
    for r in failed.to_dict("records"):
        # The first line of the error ("Type: message"); the traceback stays in the record.
        first = str(r["error"] or "").strip().splitlines()
        seed = DASH if _isnan(r["seed"]) else int(r["seed"])
        rows.append(
            [r["run_id"], r["profile"] or DASH, seed, r["status"], first[0] if first else DASH]
        )
    return [*lines, _table(rows, ["variant", "profile", "seed", "status", "error"]), ""]


def _other_lines(
    matrix: Matrix, all_recs: pd.DataFrame, cur: pd.DataFrame, superseded: pd.DataFrame
) -> list[str]:
    lines: list[str] = []
    missing = []
    for profile in _profiles(cur):
        have = set(cur[cur["profile"] == profile]["run_id"])
        absent = [r.id for r in matrix.runs if r.id not in have]
        if absent:
            missing.append(f"- profile `{profile}`: {', '.join(_code(a) for a in absent)}")
    if missing:
        lines += ["## Not run yet", "", "Runs of the matrix without a stored record:", ""]
        lines += [*missing, ""]
    ids = {r.id for r in matrix.runs}
    stray = sorted(set(all_recs["run_id"].dropna()) - ids)
    if stray or not superseded.empty:
        lines += ["## Records not used", ""]
        if stray:
            lines.append(
                "- Records of runs that are not in the matrix (any more): "
                + ", ".join(_code(s) for s in stray)
                + "."
            )
        if not superseded.empty:
            lines.append(
                "- Superseded by a newer record of the same run, profile and seed (the "
                "run's config changed): " + ", ".join(_code(f) for f in superseded["file"]) + "."
            )
        lines.append("")
    return lines


def _cost_lines(summary: pd.DataFrame) -> list[str]:
    lines = [
        "## Cost",
        "",
        "Machine- and load-dependent (means over completed seeds); kept apart from the "
        "accuracy sections above.",
        "",
    ]
    if summary.empty:
        return [*lines, "No completed runs.", ""]
    headers = [
        "profile",
        "variant",
        "parameters",
        "trainable",
        "train time (s)",
        "train pairs/s",
        "eval pairs/s",
        "peak memory (MiB)",
    ]
    rows = []
    for r in summary.to_dict("records"):
        mem = r["peak_memory_bytes"]
        rows.append(
            [
                r["profile"],
                _variant(r),
                fmt_count(r["parameters"]),
                fmt_count(r["trainable_parameters"]),
                fmt(r["train_seconds_mean"]),
                fmt(r["train_pairs_per_second_mean"], 0),
                fmt(r["eval_pairs_per_second_mean"], 0),
                DASH if _isnan(mem) else fmt(mem / 2**20, 0),
            ]
        )
    return [*lines, _table(rows, headers), ""]


def render_report(
    matrix: Matrix,
    df: pd.DataFrame,
    figures: Mapping[str, Any],
    claims: Mapping[str, str],
    plots: Mapping[str, str],
    extra: Sequence[str] = (),
) -> str:
    """The markdown of one matrix's report (``plots``: caption -> PNG file name;
    ``extra``: the lines of the matrix's extra sections, placed before the cost)."""
    in_matrix = df[df["run_id"].isin([r.id for r in matrix.runs])] if len(df) else df
    cur, superseded = current_records(in_matrix)
    summary = summarise(df, matrix)
    lines = [f"# Report: {matrix.name}", ""]
    if matrix.description:
        lines += [matrix.description, ""]
    lines += [
        f"Regenerated from the stored run records by `seps-bench report {matrix.name}` "
        f"({len(cur)} current record{'s' if len(cur) != 1 else ''}); never edit by hand.",
        "",
    ]
    if cur.empty:
        return "\n".join([*lines, "No stored results for this matrix yet.", ""])
    # Failed records never evaluated; describe the protocol of the numbers shown.
    done = cur[cur["status"] == "done"]
    lines += ["## Protocol", "", *_protocol_lines(done if len(done) else cur), ""]
    lines += [
        "## Results",
        "",
        "Percentages; mean ± 95% CI half-width over seeds (Student t, n−1 degrees of "
        "freedom; `n/a` with one seed). Δ rSum: mean of the per-seed differences to the "
        f"baseline `{matrix.baseline}` on the same seed, ± its 95% CI; `*` paired t-test "
        "two-sided p < 0.05, `ns` p ≥ 0.05, `n/a` fewer than 2 paired seeds.",
        "",
    ]
    for profile in _profiles(summary):
        lines += [
            f"### Profile `{profile}`",
            "",
            _results_table(summary[summary["profile"] == profile]),
            "",
        ]
    lines += _paper_sections(summary, matrix, figures, claims)
    lines += _findings_lines(summary, matrix)
    lines += _failed_lines(cur, matrix)
    lines += _other_lines(matrix, df, cur, superseded)
    if plots:
        lines += ["## Plots", ""]
        for caption, name in plots.items():
            lines += [f"![{caption}]({name})", ""]
    lines += list(extra)
    lines += _cost_lines(summary)
    return "\n".join(lines)


def write_report(
    matrix_name: str,
    results_dir: str | Path,
    reports_dir: str | Path,
    root: Path | None = None,
) -> Path:
    """Regenerate ``<reports_dir>/<matrix>.md`` and its plots from stored records alone.

    ``matrix_name`` is a matrix of ``root/matrices/`` (default :func:`default_root`) or a
    path to a matrix file; its records are read from ``<results_dir>/<matrix name>/``.
    Plots are ``<matrix>-delta.png`` and ``<matrix>-curves.png`` beside the markdown; a
    plot with nothing to show is removed rather than left stale. Returns the markdown path.
    """
    matrix = load_matrix(matrix_name, root)
    figures = load_paper_figures(root)
    claims = _claims(root, figures)
    df = load_results(results_dir, matrix.name)
    out_dir = Path(reports_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    plots: dict[str, str] = {}
    if not df.empty:
        in_matrix = df[df["run_id"].isin([r.id for r in matrix.runs])]
        cur, _ = current_records(in_matrix)
        summary = summarise(df, matrix)
        targets: list[tuple[str, str, Callable[[], dict[str, Any]]]] = [
            (
                "Δ rSum per variant with 95% CI",
                f"{matrix.name}-delta.png",
                lambda: plot_delta(summary, matrix, out_dir / f"{matrix.name}-delta.png"),
            ),
            (
                "training curves",
                f"{matrix.name}-curves.png",
                lambda: plot_curves(cur, matrix, out_dir / f"{matrix.name}-curves.png"),
            ),
        ]
        for caption, name, draw in targets:
            if draw():
                plots[caption] = name
    for name in (f"{matrix.name}-delta.png", f"{matrix.name}-curves.png"):
        if name not in plots.values():
            (out_dir / name).unlink(missing_ok=True)
    extra: list[str] = []
    for section in matrix.sections:
        cur = (
            df
            if df.empty
            else current_records(df[df["run_id"].isin([r.id for r in matrix.runs])])[0]
        )
        lines, _, _ = SECTIONS[section](cur, matrix.name, out_dir)
        extra += lines
    path = out_dir / f"{matrix.name}.md"
    atomic_write_text(path, render_report(matrix, df, figures, claims, plots, extra))
    return path


def _loss_study(cur: pd.DataFrame, name: str, out_dir: Path) -> tuple[list[str], Any, Any]:
    from .loss_study import loss_study_section

    return loss_study_section(cur, name, out_dir)


#: Extra sections a matrix asks for with ``sections: [...]`` (see
#: :data:`seps.ablations.REPORT_SECTIONS`): ``(current records, matrix name, report
#: folder) -> (markdown lines, plots, plotted series)``.
SECTIONS: dict[str, Callable[[pd.DataFrame, str, Path], tuple[list[str], Any, Any]]] = {
    "loss-study": _loss_study,
}


# ------------------------------------------------------------------------------- CLI
def matrices_with_records(results_dir: str | Path) -> list[str]:
    """Names of the folders under ``results_dir`` that hold at least one run record."""
    df = load_results(results_dir)
    return sorted(str(m) for m in df["matrix"].dropna().unique()) if len(df) else []


def _add_report_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "matrices",
        nargs="*",
        metavar="MATRIX",
        help="matrix names (ablations/matrices/<name>.yaml) or matrix files; default: every "
        "matrix that has records under --results",
    )
    p.add_argument("--results", default="results", help="result store to read (default: results/)")
    p.add_argument(
        "--reports",
        default="reports",
        help="folder for <matrix>.md and its PNG plots (default: reports/)",
    )
    p.add_argument(
        "--ablations",
        help="ablation definitions folder with matrices/, differences.yaml and "
        "paper_figures.yaml (default: $SEPS_ABLATIONS, else ./ablations)",
    )


@command(
    "report",
    "regenerate reports/<matrix>.md and its plots from stored results (never trains)",
    _add_report_args,
)
def _run_report(args: argparse.Namespace) -> int:
    root = Path(args.ablations) if args.ablations else default_root()
    names = list(args.matrices) or matrices_with_records(args.results)
    if not names:
        print(f"no run records under {args.results}/: nothing to report", file=sys.stderr)
        return 1
    known = {p.stem for p in (root / "matrices").glob("*.yaml")}
    status = 0
    for name in names:
        if not args.matrices and name not in known:
            # Discovered from the store but no longer defined: say so, report the rest.
            print(f"skipping {name}: no matrix file {root}/matrices/{name}.yaml", file=sys.stderr)
            status = 1
            continue
        for err in scan_records(Path(args.results) / name)[1]:
            print(f"warning: {err}; listed under 'Failed runs'", file=sys.stderr)
        path = write_report(name, args.results, args.reports, root=root)
        print(f"report: {path}")
    return status


__all__ = [
    "PAPER_LABEL",
    "PaperRef",
    "current_records",
    "load_paper_figures",
    "load_results",
    "mean_ci",
    "paired_mark",
    "paired_test",
    "paper_reference",
    "plot_curves",
    "plot_delta",
    "render_report",
    "summarise",
    "t_quantile",
    "t_two_sided_p",
    "write_report",
]
