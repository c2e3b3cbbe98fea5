"""The two plots of every matrix report: paired Δ rSum per variant, and training curves.

Each plot function returns the series *read back from the drawn artists*, not the
numbers it was given, so that tests check the picture against the stored records. PNGs
are written by :func:`seps.formatting.save_png` (reproducible bytes).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..ablations import Matrix
from ..formatting import is_missing, pyplot, save_png
from .records import profiles

#: {profile: {"loss" | "val_rsum": {run_id: (epochs, values)}}}, as drawn by plot_curves.
Curves = dict[str, dict[str, dict[str, tuple[list[float], list[float]]]]]


def run_colors(matrix: Matrix) -> dict[str, Any]:
    """One fixed colour per run (by matrix position), the same in every plot."""
    cmap = pyplot().colormaps["tab20"]
    # tab20 comes in dark/light pairs: take the ten dark shades first, then the light ones,
    # so that neighbouring runs get clearly different colours.
    return {r.id: cmap((2 * i) % 20 + (i // 10) % 2) for i, r in enumerate(matrix.runs)}


def plot_delta(summary: pd.DataFrame, matrix: Matrix, path: Path) -> dict[str, dict[str, Any]]:
    """Δ rSum per variant with 95% CI error bars (baseline line at 0), one panel per profile.

    Returns, per profile, the series *read back from the drawn artists*: ``labels`` (top
    to bottom), ``delta`` (bar lengths) and ``ci`` (error-bar half-widths, NaN where no
    bar was drawn because fewer than 2 seeds are paired). Variants identical to the
    baseline on every seed are labelled so (their 0 bar is not a measured null effect), and
    so are text-blind ones (:mod:`seps.report.blind`: no bar, nothing was measured) and
    those whose learned part did not train (:mod:`seps.report.frozen`: a bar, no test).
    An empty dict means nothing to plot, and no file is written.
    """
    blind = summary["blind"].notna() if "blind" in summary else False
    data = summary[~summary["is_baseline"] & (summary["delta_rsum_mean"].notna() | blind)]
    panels = [p for p in profiles(summary) if (data["profile"] == p).any()]
    if not panels:
        return {}
    plt = pyplot()
    colors = run_colors(matrix)
    heights = [max(1.5, 0.35 * int((data["profile"] == p).sum()) + 1.0) for p in panels]
    # Long run ids (findings' "paper/dense_source=query/eval_dense_source=candidate") take
    # the width from the axes, and the two-line x label then ran off the right edge: keep
    # about 5.8 in for the axes beside the labels (8 in, as before, for short ids).
    longest = max(len(str(r)) for r in data["run_id"])
    fig, axes = plt.subplots(
        len(panels),
        1,
        figsize=(max(8.0, 5.8 + 0.075 * longest), sum(heights)),
        squeeze=False,
        gridspec_kw={"height_ratios": heights},
        layout="constrained",
    )
    out: dict[str, dict[str, Any]] = {}
    for ax, profile in zip(axes[:, 0], panels, strict=True):
        sub = data[data["profile"] == profile]
        labels = sub["run_id"].tolist()
        refs = [None if is_missing(r) else str(r) for r in sub["reference"]]
        y = np.arange(len(labels), dtype=float)
        # A text-blind run measured nothing (seps.report.blind): no bar, only its label.
        no_text = sub["blind"].notna().to_numpy() if "blind" in sub else np.zeros(len(sub), bool)
        delta = np.where(no_text, 0.0, sub["delta_rsum_mean"].to_numpy(dtype=float))
        ci = np.where(no_text, np.nan, sub["delta_rsum_ci"].to_numpy(dtype=float))
        bars = ax.barh(y, delta, color=[colors[r] for r in labels], height=0.6)
        has_ci = ~np.isnan(ci)
        err = None
        if has_ci.any():
            err = ax.errorbar(
                delta[has_ci], y[has_ci], xerr=ci[has_ci], fmt="none", ecolor="black", capsize=3
            )
        same = sub["identical"].tolist()
        # A comparison whose learned part did not train (seps.report.frozen) keeps its bar,
        # labelled as no test.
        untrained = sub["frozen"].notna().tolist() if "frozen" in sub else [False] * len(sub)
        # The note goes on the wider side of its bar's end: at the axes' edge (an identical
        # run's 0 when every other bar is negative) it used to run off the figure.
        lo, hi = ax.get_xlim()
        for yi, di, ci_i, ident, nt, frozen in zip(
            y, delta, ci, same, no_text, untrained, strict=True
        ):
            right = hi - di >= di - lo
            # Say why the bar has no (visible) error bar, or why it is no test.
            if ident or nt or frozen or np.isnan(ci_i):
                ax.annotate(
                    " identical to its reference"
                    if ident
                    else " text-blind: not measured"
                    if nt
                    else " did not train: not a test"
                    if frozen
                    else " 1 seed, no CI",
                    # Beyond the error bar's cap where there is one (an untrained run's).
                    (float(di) + (0.0 if np.isnan(ci_i) else ci_i if right else -ci_i), float(yi)),
                    xytext=(4 if right else -4, 0),
                    textcoords="offset points",
                    ha="left" if right else "right",
                    va="center",
                    fontsize=8,
                )
        ax.axvline(0.0, color="black", linewidth=1.0)
        # A revert's Δ is against its own preset (Matrix.reference): said in its label.
        ax.set_yticks(y, [f"{a} (vs {r})" if r else a for a, r in zip(labels, refs, strict=True)])
        ax.invert_yaxis()
        # Two lines: with a long baseline id one line overran a narrow figure.
        ax.set_xlabel(
            f"Δ rSum vs {matrix.baseline}{' (unless the label says)' if any(refs) else ''}\n"
            "(paired by seed; per-test 95% CI, not adjusted for multiple comparisons)"
        )
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
    save_png(fig, path)
    return out


def _epoch_means(
    records: pd.DataFrame, value: Callable[[Mapping[str, Any]], Any]
) -> tuple[list[float], list[float]]:
    """Per-epoch mean over seeds of ``value(history entry)`` (entries without it skipped)."""
    per_epoch: dict[int, list[float]] = {}
    for hist in records["history"]:
        for h in hist or []:
            v = value(h)
            if v is not None and not is_missing(v) and "epoch" in h:
                per_epoch.setdefault(int(h["epoch"]), []).append(float(v))
    epochs = sorted(per_epoch)
    return [float(e) for e in epochs], [float(np.mean(per_epoch[e])) for e in epochs]


def _val_rsum(h: Mapping[str, Any]) -> Any:
    val = h.get("val")
    return val.get("rsum") if isinstance(val, Mapping) else None


def _fixed_loss(h: Mapping[str, Any]) -> Any:
    """The epoch's hardest-negative triplet, logged under one definition for the whole
    run (the trained term ``loss`` changes definition with the warm-up and the schedule,
    so its curve mixes two losses); ``loss`` for records made before it was logged."""
    return h.get("align_hardest", h.get("loss"))


def _curve_series(df: pd.DataFrame, matrix: Matrix) -> Curves:
    """Per profile and panel, the mean curve of every run with a recorded history."""
    done = df[(df["status"] == "done") & df["run_id"].isin([r.id for r in matrix.runs])]
    series: Curves = {}
    for profile in profiles(done):
        prof = done[done["profile"] == profile]
        panels: dict[str, dict[str, tuple[list[float], list[float]]]] = {}
        for name, value in (("loss", _fixed_loss), ("val_rsum", _val_rsum)):
            lines = {}
            for run in matrix.runs:
                x, y = _epoch_means(prof[prof["run_id"] == run.id].sort_values("seed"), value)
                if x:
                    lines[run.id] = (x, y)
            if lines:
                panels[name] = lines
        if panels:
            series[profile] = panels
    return series


def plot_curves(df: pd.DataFrame, matrix: Matrix, path: Path) -> Curves:
    """Training curves: loss per epoch and validation rSum per epoch (when recorded).

    One row of panels per profile; one line per variant, the mean over its completed
    seeds at each epoch. Returns ``{profile: {"loss" | "val_rsum": {run_id: (epochs,
    values)}}}`` read back from the drawn lines; empty (no file) without any history.
    """
    series = _curve_series(df, matrix)
    if not series:
        return {}
    plt = pyplot()
    ncols = 2 if any("val_rsum" in p for p in series.values()) else 1
    colors = run_colors(matrix)
    height = 3.5 * len(series)
    # One legend entry at fontsize 8 takes about 0.17 in: a long matrix (loss-study has
    # 41 runs) gets more legend columns, each 3 in wide, rather than entries cut off below.
    n_runs = len({run_id for panels in series.values() for p in panels.values() for run_id in p})
    legend_cols = max(1, math.ceil(n_runs / max(1, int((height - 0.4) / 0.17))))
    fig, axes = plt.subplots(
        len(series),
        ncols,
        figsize=(6 * ncols + 3 * legend_cols, height),
        squeeze=False,
        layout="constrained",
    )
    # The loss panel plots ``align_hardest``, a diagnostic logged for every run whatever it
    # trains (InfoNCE at `standard`), so the title must not read as the trained loss.
    titles = {
        "loss": "hardest-negative triplet, logged (whatever the run trains)",
        "val_rsum": "validation rSum",
    }
    out: Curves = {}
    handles: dict[str, Any] = {}
    for row, (profile, panels) in enumerate(series.items()):
        out[profile] = {}
        for col, name in enumerate(("loss", "val_rsum")[:ncols]):
            ax = axes[row, col]
            ax.set_title(f"{titles[name]} — profile {profile}", fontsize=10)
            ax.set_xlabel("epoch")
            ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
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
        [handles[r] for r in order],
        order,
        loc="outside right upper",
        fontsize=8,
        frameon=False,
        ncols=legend_cols,
    )
    save_png(fig, path)
    return out


__all__ = ["Curves", "plot_curves", "plot_delta", "run_colors"]
