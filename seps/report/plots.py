"""The two plots of every matrix report: paired Δ rSum per variant, and training curves.

Each plot function returns the series *read back from the drawn artists*, not the
numbers it was given, so that tests check the picture against the stored records. PNGs
are written by :func:`seps.io.formatting.save_png` (reproducible bytes).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..experiments.definitions import Matrix
from ..io.formatting import LINESTYLES, is_missing, pyplot, save_png
from .records import profiles

#: {profile: {"loss" | "val_rsum": {run_id: (epochs, values)}}}, as drawn by plot_curves.
Curves = dict[str, dict[str, dict[str, tuple[list[float], list[float]]]]]


def run_colors(matrix: Matrix) -> dict[str, Any]:
    """One fixed colour per run (by matrix position), the same in every plot."""
    cmap = pyplot().colormaps["tab20"]
    # tab20 comes in dark/light pairs: take the ten dark shades first, then the light ones,
    # so that neighbouring runs get clearly different colours.
    return {r.id: cmap((2 * i) % 20 + (i // 10) % 2) for i, r in enumerate(matrix.runs)}


def run_linestyles(matrix: Matrix) -> dict[str, str]:
    """One fixed line style per run (by matrix position), the next style every twenty
    runs: tab20 has 20 colours, and a matrix with more runs (loss-study 41, coefficients
    24) would otherwise give two runs one look. With :func:`run_colors`, a (colour,
    style) pair no other run of the matrix has, up to 80 runs."""
    return {r.id: LINESTYLES[(i // 20) % len(LINESTYLES)] for i, r in enumerate(matrix.runs)}


def same_curves(panels: Mapping[str, Mapping[str, Any]]) -> list[list[str]]:
    """The runs of one profile grouped by identical curves in every panel (first-seen
    order): runs that trained the same (an evaluation-only variant and its training, a
    switch that cannot act) draw one line, which a second line would hide."""
    groups: dict[Any, list[str]] = {}
    runs = list(dict.fromkeys(r for lines in panels.values() for r in lines))
    for run_id in runs:
        key = tuple(
            (name, tuple(map(tuple, lines[run_id])) if run_id in lines else None)
            for name, lines in panels.items()
        )
        groups.setdefault(key, []).append(run_id)
    return list(groups.values())


def _same_numbers(sub: pd.DataFrame) -> list[str | None]:
    """Per row, the first earlier variant with exactly the same rSum mean and CI and Δ
    mean and CI over at least 2 seeds, or ``None``: switches that cannot act under a
    setting (the ratio coefficients under ``topk``) give one training several ids, and
    their bars, drawn alike, would read as independent results. The note says what is
    compared ("same numbers"), not that the records are one training; with one seed (no
    CI) equal means are too likely by chance to be marked."""
    cols = ["rsum_mean", "rsum_ci", "delta_rsum_mean", "delta_rsum_ci", "n"]
    seen: dict[tuple[float, ...], str] = {}
    out: list[str | None] = []
    for run_id, *vals in zip(sub["run_id"], *(sub[c] for c in cols), strict=True):
        if any(is_missing(v) for v in vals) or int(vals[-1]) < 2:
            out.append(None)
            continue
        key = tuple(float(v) for v in vals)
        out.append(seen.get(key))
        seen.setdefault(key, str(run_id))
    return out


def _bar_notes(sub: pd.DataFrame, ref_splits: Mapping[str, Any] | None = None) -> list[str | None]:
    """Per bar of one panel, why it has no (visible) error bar, why it is no test, that
    it repeats an earlier bar's numbers (one training under several ids), or that its
    seeds split into broken and functional ones (its interval then spans both), or that
    its reference's do (``ref_splits``: per row's run id, the reference's bimodal
    :class:`~seps.report.bimodal.Split`, or None)."""
    blind = sub["blind"].notna().tolist() if "blind" in sub else [False] * len(sub)
    # A comparison whose learned part did not train (seps.report.frozen) keeps its bar.
    frozen = sub["frozen"].notna().tolist() if "frozen" in sub else [False] * len(sub)
    # A bimodal run (seps.report.bimodal): its Δ's mean and CI mix two groups.
    splits = sub["split"].tolist() if "split" in sub else [None] * len(sub)
    cis = sub["delta_rsum_ci"].to_numpy(dtype=float)
    out: list[str | None] = []
    for ident, nt, fr, twin, ci, sp in zip(
        sub["identical"].tolist(), blind, frozen, _same_numbers(sub), cis, splits, strict=True
    ):
        out.append(
            "identical to its reference"
            if ident
            else "text-blind: not measured"
            if nt
            else "did not train: not a test"
            if fr
            else f"same numbers as {twin}"
            if twin
            else "1 seed, no CI"
            if np.isnan(ci)
            else f"bimodal: {len(sp.functional)} of {sp.n} seeds functional"
            if not is_missing(sp)
            else None
        )
    for i, run_id in enumerate(sub["run_id"]):
        ref = (ref_splits or {}).get(run_id)
        if out[i] is None and not is_missing(ref):
            out[i] = f"vs a bimodal {ref.run}: {len(ref.functional)} of {ref.n} seeds functional"
    return out


def _reference_splits(summary: pd.DataFrame, matrix: Matrix, profile: str) -> dict[str, Any]:
    """Per run of ``profile``, the bimodal split of the run its Δ is measured against
    (the baseline, or a revert's own preset), or None."""
    prof = summary[summary["profile"] == profile]
    splits = dict(zip(prof["run_id"], prof["split"], strict=True)) if "split" in prof else {}
    refs = prof["reference"] if "reference" in prof else [None] * len(prof)
    return {
        run: splits.get(matrix.baseline if is_missing(ref) else ref)
        for run, ref in zip(prof["run_id"], refs, strict=True)
    }


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
    notes = {
        p: _bar_notes(data[data["profile"] == p], _reference_splits(summary, matrix, p))
        for p in panels
    }
    note_width = max((len(n) for per in notes.values() for n in per if n), default=0)
    fig, axes = plt.subplots(
        len(panels),
        1,
        figsize=(max(8.0, 5.8 + 0.075 * longest) + 0.065 * note_width, sum(heights)),
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
        # Notes in a column right of the axes, level with their bars: at a bar's end they
        # ran over the tick labels or off the figure when the axes were narrow.
        for yi, note in zip(y, notes[profile], strict=True):
            if note:
                ax.annotate(
                    note,
                    (1.0, float(yi)),
                    xycoords=("axes fraction", "data"),
                    xytext=(6, 0),
                    textcoords="offset points",
                    ha="left",
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


def _plotted(df: pd.DataFrame, matrix: Matrix) -> pd.DataFrame:
    """The records the curves draw: the completed ones of the matrix's runs."""
    return df[(df["status"] == "done") & df["run_id"].isin([r.id for r in matrix.runs])]


def _curve_series(done: pd.DataFrame, matrix: Matrix) -> Curves:
    """Per profile and panel, the mean curve of every run of ``done`` (:func:`_plotted`)
    with a recorded history."""
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


def _val_sizes(df: pd.DataFrame) -> dict[str, str]:
    """Per profile, " (<split> split, up to <n> images)" of its records' validation (the
    requested ``val_images``; a smaller split gives fewer): a validation rSum over a few
    hundred images sits far above the test split's, and a reader must not compare the
    numbers."""
    out: dict[str, set[tuple[str, int]]] = {}
    for profile, train in zip(df["profile"], df["train_config"], strict=True):
        if isinstance(train, Mapping) and train.get("val_images"):
            split = str(train.get("val_split", "dev"))
            out.setdefault(str(profile), set()).add((split, int(train["val_images"])))
    return {
        p: " (" + ", ".join(f"{split} split, up to {n} images" for split, n in sorted(v)) + ")"
        for p, v in out.items()
    }


def plot_curves(df: pd.DataFrame, matrix: Matrix, path: Path) -> Curves:
    """Training curves: loss per epoch and validation rSum per epoch (when recorded).

    One row of panels per profile; one line per variant, the mean over its completed
    seeds at each epoch; variants with identical curves share one line, whose legend
    entry names them all (:func:`same_curves`), and colour and line style together tell
    the runs apart (:func:`run_colors`, :func:`run_linestyles`). Returns ``{profile:
    {"loss" | "val_rsum": {run_id: (epochs, values)}}}`` read back from the drawn lines
    (a group's members read its one line); empty (no file) without any history.
    """
    done = _plotted(df, matrix)
    series = _curve_series(done, matrix)
    if not series:
        return {}
    plt = pyplot()
    ncols = 2 if any("val_rsum" in p for p in series.values()) else 1
    colors, styles = run_colors(matrix), run_linestyles(matrix)
    groups = {profile: same_curves(panels) for profile, panels in series.items()}
    labels = {
        profile: {g[0]: "\n= ".join(g) for g in profile_groups}
        for profile, profile_groups in groups.items()
    }
    # One legend per profile (its groups are its own), beside its row, never cut off:
    # each row is as tall as its legend needs (about 0.17 in a text line at fontsize 8).
    legend_cols, heights = _legend_layout(
        [[t.count("\n") + 1 for t in per.values()] for per in labels.values()]
    )
    fig, axes = plt.subplots(
        len(series),
        ncols,
        figsize=(6 * ncols + 3.6 * legend_cols, sum(heights)),
        squeeze=False,
        layout="constrained",
        gridspec_kw={"height_ratios": heights},
    )
    # The loss panel plots ``align_hardest``, a diagnostic logged for every run whatever it
    # trains (InfoNCE at `standard`), so the title must not read as the trained loss.
    titles = {
        "loss": "hardest-negative triplet, logged (whatever the run trains)",
        "val_rsum": "validation rSum",
    }
    val_sizes = _val_sizes(done)
    position = {r.id: i for i, r in enumerate(matrix.runs)}
    out: Curves = {}
    for row, (profile, panels) in enumerate(series.items()):
        out[profile] = {}
        handles: dict[str, Any] = {}
        for col, name in enumerate(("loss", "val_rsum")[:ncols]):
            ax = axes[row, col]
            size = val_sizes.get(profile, "") if name == "val_rsum" else ""
            ax.set_title(f"{titles[name]}{size} — profile {profile}", fontsize=10)
            ax.set_xlabel("epoch")
            ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
            ax.grid(alpha=0.3)
            if name not in panels:
                ax.text(0.5, 0.5, "not recorded", ha="center", va="center", transform=ax.transAxes)
                continue
            drawn = {}
            for group in groups[profile]:
                if group[0] not in panels[name]:
                    continue
                x, y = panels[name][group[0]]
                label = labels[profile][group[0]]
                (line,) = ax.plot(
                    x,
                    y,
                    marker="o",
                    markersize=3,
                    color=colors[group[0]],
                    linestyle=styles[group[0]],
                    label=label,
                )
                handles.setdefault(group[0], (line, label))
                # Every member of a group reads the one drawn line.
                for run_id in group:
                    drawn[run_id] = (
                        [float(v) for v in line.get_xdata()],
                        [float(v) for v in line.get_ydata()],
                    )
            out[profile][name] = {r: drawn[r] for r in panels[name]}
            # The epochs themselves as ticks: with one epoch the integer locator still
            # labelled fractions of it.
            ax.set_xticks(sorted({x for xs, _ in panels[name].values() for x in xs}))
        order = sorted(handles, key=position.__getitem__)
        texts = [handles[r][1] for r in order]
        axes[row, ncols - 1].legend(
            [handles[r][0] for r in order],
            texts,
            loc="upper left",
            bbox_to_anchor=(1.02, 1.0),
            fontsize=8,
            frameon=False,
            ncols=legend_cols,
        )
    save_png(fig, path)
    return out


def _legend_layout(lines: list[list[int]]) -> tuple[int, list[float]]:
    """Legend columns and each row's height (in) for legends of entries of ``lines[p]``
    text lines each, one legend per row: matplotlib fills columns by entry count
    (``np.array_split`` of the entries), so a column is as tall as its entries' lines
    (about 0.17 in each at fontsize 8). The fewest columns (at most 3) whose tallest
    column fits 7 in; each row at least 3.5 in."""

    def height(entries: list[int], cols: int) -> float:
        column = max((sum(c) for c in np.array_split(np.array(entries), cols)), default=0)
        return max(3.5, 0.4 + 0.17 * float(column))

    cols = next((c for c in (1, 2) if all(height(p, c) <= 7.0 for p in lines)), 3)
    return cols, [height(p, cols) for p in lines]


__all__ = [
    "Curves",
    "plot_curves",
    "plot_delta",
    "run_colors",
    "run_linestyles",
    "same_curves",
]
