"""The four plots of the loss-study section, drawn from the stored per-step records.

Keep ratio and score-predictor gradient over training (one panel per decision, one line
per ratio criterion), the ratio losses as functions of the keep ratio (analytic curve
and measured steps), and the alignment losses. Every function returns the series it
drew, read back from the artists, so that tests can check that the picture shows the
stored records; a plot with nothing to show removes its file rather than leave it stale.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from ..core.losses import ratio_penalty, ratio_target_bin
from ..io.formatting import LINESTYLES, pyplot, save_png
from ..train.config import TrainConfig
from .bimodal import split_seeds
from .loss_records import (
    CRITERIA,
    DECISIONS,
    PLOT_FORM,
    align_rows,
    flat_levels,
    is_align_variant,
    mean_keep,
    ratio_part,
    steps,
)
from .plots import same_curves

#: One colour per ratio criterion, the same in every plot.
COLORS = {"mse": "tab:blue", "l1": "tab:green", "ce": "tab:red", "off": "tab:gray"}

Lines = dict[str, tuple[list[float], list[float]]]


def _read_lines(ax: Any) -> Lines:
    return {
        line.get_label(): (
            [float(v) for v in line.get_xdata()],
            [float(v) for v in line.get_ydata()],
        )
        for line in ax.get_lines()
        if not line.get_label().startswith("_")
    }


def _step_means(
    sel: pd.DataFrame, value: Callable[[Mapping[str, Any]], Any]
) -> tuple[list[float], list[float]]:
    """Mean over the runs (seeds) of ``value(step)`` at each global step index."""
    per: dict[int, list[float]] = {}
    for hist in sel["history"]:
        for i, rec in enumerate(steps(hist)):
            v = value(rec)
            if v is not None and not (isinstance(v, float) and math.isnan(v)):
                per.setdefault(i, []).append(float(v))
    xs = sorted(per)
    return [float(x) for x in xs], [float(np.mean(per[x])) for x in xs]


def _ratio_part(done: pd.DataFrame, decision: str, crit: str) -> pd.DataFrame:
    form = "off" if crit == "off" else PLOT_FORM
    done = ratio_part(done)
    return done[
        (done["decision"] == decision) & (done["criterion"] == crit) & (done["form"] == form)
    ]


def _target(done: pd.DataFrame) -> float | None:
    """The runs' common selection ratio rho (``None`` if they differ)."""
    rhos = {float(h.get("sparse_ratio")) for h in done["head_config"] if h.get("sparse_ratio")}
    return rhos.pop() if len(rhos) == 1 else None


def plot_keep_ratio(done: pd.DataFrame, path: Path) -> dict[str, dict[str, Any]]:
    """Keep-ratio trajectories per ratio criterion (``separate`` form, mean of the two
    masks, mean over seeds), one panel per decision, the target drawn dashed."""
    return _per_decision_plot(
        done,
        path,
        mean_keep,
        "keep ratio (mean of masks)",
        target=True,
        title="keep ratio over training",
    )


def plot_grad_norm(done: pd.DataFrame, path: Path) -> dict[str, dict[str, Any]]:
    """Score-predictor gradient norm per step: the whole loss (solid) and the ratio loss
    alone (dashed, ``ratio_grad_norm``), per criterion, one panel per decision, the end
    of the warm-up dotted (:func:`warmup_end`)."""
    return _per_decision_plot(
        done,
        path,
        lambda r: r.get("selector_grad_norm"),
        "gradient norm at the score predictor",
        second=lambda r: r.get("ratio_grad_norm"),
        title="score-predictor gradient",
        warmup_end=warmup_end(done),
    )


def warmup_end(done: pd.DataFrame) -> int | None:
    """The global step index at which the runs' warm-up ends (the first step of epoch
    1), or ``None`` when a run does not warm up, trains one epoch, or the runs' epoch
    0 differ in length. During the warm-up the training scales the alignment term by
    ``step / steps per epoch`` (the official recipe, ``TrainConfig.warmup``), so the
    whole loss's gradient rises with the factor from 0, whatever the predictor learns;
    the ratio loss is not scaled."""
    ends = set()
    for train, hist in zip(done["train_config"], done["history"], strict=True):
        t = train if isinstance(train, Mapping) else {}
        if not t.get("warmup", TrainConfig.warmup) or len(hist or []) < 2:
            return None
        ends.add(len(hist[0].get("steps_log") or []))
    return ends.pop() if len(ends) == 1 else None


def _per_decision_plot(
    done: pd.DataFrame,
    path: Path,
    value: Callable[[Mapping[str, Any]], Any],
    ylabel: str,
    *,
    target: bool = False,
    second: Callable[[Mapping[str, Any]], Any] | None = None,
    title: str,
    warmup_end: int | None = None,
) -> dict[str, dict[str, Any]]:
    panels: dict[str, Lines] = {}
    for decision in DECISIONS:
        lines = {}
        for crit in CRITERIA:
            sel = _ratio_part(done, decision, crit)
            if sel.empty:
                continue
            x, y = _step_means(sel, value)
            if x:
                lines[crit] = (x, y)
            if second is not None:
                x2, y2 = _step_means(sel, second)
                if x2:
                    lines[f"{crit} (ratio loss only)"] = (x2, y2)
        if lines:
            panels[decision] = lines
    if not panels:
        path.unlink(missing_ok=True)
        return {}
    plt = pyplot()
    fig, axes = plt.subplots(
        1, len(panels), figsize=(4.6 * len(panels), 3.6), squeeze=False, layout="constrained"
    )
    out: dict[str, dict[str, Any]] = {}
    rho = _target(done) if target else None
    for ax, (decision, lines) in zip(axes[0], panels.items(), strict=True):
        drawn = _draw_grouped(ax, lines)
        if rho is not None:
            # Below the lines: where a decision holds the ratio at the target by
            # construction, the lines lie on it and must stay visible.
            ax.axhline(rho, color="black", linestyle=":", linewidth=1, label="_target", zorder=1)
        if second is not None:
            ax.set_yscale("symlog", linthresh=1e-6)
        if warmup_end:
            # Shaded, with its meaning in the legend: the rise of the whole loss's
            # gradient over epoch 0 is partly the warm-up factor.
            ax.axvspan(
                0,
                warmup_end,
                color="gray",
                alpha=0.12,
                linewidth=0,
                label="warm-up: alignment term x step / steps per epoch",
            )
        ax.set_title(f"{title}: decision={decision}", fontsize=9)
        ax.set_xlabel("training step")
        ax.set_ylabel(ylabel, fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, frameon=False)
        out[decision] = {"lines": drawn}
        if warmup_end:
            out[decision]["warmup_end"] = warmup_end
        if target:
            out[decision]["target"] = rho
    save_png(fig, path)
    return out


def _draw_grouped(ax: Any, lines: Lines) -> Lines:
    """Draw ``lines`` (label -> (x, y)), identical series once (:func:`same_curves`,
    solid and dashed kept apart): where a decision holds the keep ratio at its target,
    or a ratio loss has no gradient, every criterion's line is the same and each would
    hide the others, so one line carries all their labels ("mse = l1 = ce = off").
    Returns each label's series read back from the line that drew it."""
    only = " (ratio loss only)"
    order = list(lines)
    groups = [
        g
        for dashed in (False, True)
        for g in same_curves({"": {k: v for k, v in lines.items() if (only in k) == dashed}})
    ]
    groups.sort(key=lambda g: order.index(g[0]))  # the drawing order of the labels
    drawn: Lines = {}
    for members in groups:
        x, y = lines[members[0]]
        dashed = members[0].endswith(only)
        text = " = ".join(m.removesuffix(only) for m in members) + (only if dashed else "")
        crit = members[0].split(" ")[0]
        (line,) = ax.plot(
            x, y, "--" if dashed else "-", color=COLORS[crit], label=text, linewidth=1.2
        )
        for m in members:
            drawn[m] = (
                [float(v) for v in line.get_xdata()],
                [float(v) for v in line.get_ydata()],
            )
    return {label: drawn[label] for label in lines}


def _measured_ratio_terms(sel: pd.DataFrame) -> tuple[list[float], list[float]]:
    """(keep ratio of a mask, its ratio-loss term / lambda) of every recorded step."""
    xs, ys = [], []
    for hist, head_cfg in zip(sel["history"], sel["head_config"], strict=True):
        lam = {"sparse": head_cfg["lambda_sparse"], "dense": head_cfg["lambda_dense"]}
        for rec in steps(hist):
            for b, term in (rec.get("ratio_parts") or {}).items():
                if b in rec["keep_ratio"] and lam.get(b):
                    xs.append(float(rec["keep_ratio"][b]))
                    ys.append(float(term) / float(lam[b]))
    return xs, ys


def plot_ratio_curves(done: pd.DataFrame, path: Path) -> dict[str, Any]:
    """The ratio losses as functions of one mask's keep ratio (``separate`` form):
    analytic curves of :func:`seps.core.losses.ratio_penalty` and, on top, the measured
    (keep ratio, per-branch loss term) of every recorded step of the ``separate`` runs.
    Under CE the curve is a staircase: ratios inside the target class cost the same,
    ratios across a class boundary differ sharply."""
    part = ratio_part(done)
    part = part[part["form"] == PLOT_FORM] if len(part) else part
    if part.empty:
        path.unlink(missing_ok=True)
        return {}
    head = part["head_config"].iloc[0]
    rho = float(head["sparse_ratio"])
    bins, temp = int(head.get("ratio_bins", 10)), float(head.get("ratio_ce_temperature", 0.1))
    grid = np.linspace(0.0, 1.0, 401)
    plt = pyplot()
    crits = [c for c in ("mse", "l1", "ce") if (part["criterion"] == c).any()]
    fig, axes = plt.subplots(
        1, len(crits), figsize=(4.4 * len(crits), 3.4), squeeze=False, layout="constrained"
    )
    out: dict[str, Any] = {"target": rho, "bins": bins}
    for ax, crit in zip(axes[0], crits, strict=True):
        curve = [
            float(
                ratio_penalty(
                    torch.tensor(float(r), dtype=torch.float64), rho, crit, 1.0, bins, temp
                )
            )
            for r in grid
        ]
        ax.plot(grid, curve, color=COLORS[crit], linewidth=1.2, label=f"{crit} (analytic)")
        pts: Lines = {}
        sel = part[part["criterion"] == crit]
        for decision, marker in zip(DECISIONS, ("o", "s", "^"), strict=True):
            xs, ys = _measured_ratio_terms(sel[sel["decision"] == decision])
            if xs:
                sc = ax.scatter(
                    xs, ys, s=9, marker=marker, alpha=0.5, label=f"measured, {decision}"
                )
                offs = sc.get_offsets()
                pts[decision] = ([float(v) for v in offs[:, 0]], [float(v) for v in offs[:, 1]])
        ax.axvline(rho, color="black", linestyle=":", linewidth=1)
        if crit == "ce":
            cls = ratio_target_bin(rho, 1.0, bins)
            ax.axvspan(cls / bins, (cls + 1) / bins, color="tab:red", alpha=0.08)
        ax.set_title(f"ratio loss {crit} vs keep ratio (target {rho:g})", fontsize=9)
        ax.set_xlabel("keep ratio of one mask")
        ax.set_ylabel("loss term / lambda", fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, frameon=False)
        out[crit] = {"curve": _read_lines(ax), "points": pts}
    save_png(fig, path)
    return out


#: The batch-level yardsticks of the alignment plot: the triplet summed over every
#: negative and over the hardest one, logged at every step of every run on the batch's
#: similarities with no warm-up factor (``seps.train.loop.FIXED_LOSSES``), so that runs
#: of different losses and epochs share one unit. The loss a run trains with (the
#: records' ``align``) is not plotted: it carries the epoch-0 warm-up factor
#: (``step / steps per epoch``), whose ramp would dominate its curve.
ALIGN_YARDSTICKS = (
    ("align_sum", "triplet summed over negatives"),
    ("align_hardest", "triplet, hardest negative"),
)


def plot_alignment(done: pd.DataFrame, path: Path) -> dict[str, Any]:
    """Left and middle: the two batch yardsticks (:data:`ALIGN_YARDSTICKS`) per
    training step, mean over seeds, one line per alignment loss, with their level when
    every similarity of a batch is equal (:func:`flat_levels`) dashed; cells with
    identical curves and seed rSums (``triplet`` summed every epoch is ``triplet_sum``'s
    training) share one line, labelled with both. Right: test rSum per alignment loss, bar the
    mean with its 95% CI over seeds, a dot per seed; a bimodal cell
    (:mod:`seps.report.bimodal`) has a faint bar, no interval, a line at each group's mean
    and says ``k of n functional``."""
    rows = align_rows(done)
    if not rows:
        path.unlink(missing_ok=True)
        return {}
    part = done[[is_align_variant(h) for h in done["head_config"]]]
    levels = flat_levels(part)
    curves = {
        field: {
            r["align_loss"]: _step_means(
                part[part["align_cell"] == r["align_loss"]], lambda s, f=field: s.get(f)
            )
            for r in rows
        }
        for field, _ in ALIGN_YARDSTICKS
    }
    groups = _trained_alike(rows, curves)
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(15, 3.8), layout="constrained")
    out: dict[str, Any] = {}
    for ax, (field, title) in zip(axes[:2], ALIGN_YARDSTICKS, strict=True):
        out[field] = {}
        for i, members in enumerate(groups):
            x, y = curves[field][members[0]]
            (line,) = ax.plot(
                x,
                y,
                linewidth=1.2,
                color=f"C{i}",
                linestyle=LINESTYLES[i % len(LINESTYLES)],
                label=" = ".join(members),
            )
            for m in members:
                out[field][m] = (
                    [float(v) for v in line.get_xdata()],
                    [float(v) for v in line.get_ydata()],
                )
        if levels is not None:
            # Beneath the lines: a cell that collapsed lies on this level.
            ax.axhline(
                levels[field], color="0.5", linestyle="--", linewidth=0.8, label="_flat", zorder=1
            )
            ax.annotate(
                "all similarities equal",
                (0.01, levels[field]),
                xycoords=("axes fraction", "data"),
                fontsize=7,
                va="bottom",
            )
        ax.set_title(f"{title} on each training batch (no warm-up factor)", fontsize=9)
        ax.set_xlabel("training step")
        ax.set_ylim(0, ax.get_ylim()[1] * 1.06)
        ax.grid(alpha=0.3)
    # One legend for both panels (the same cells, colours and styles), where the middle
    # panel has room: below the flat level.
    axes[1].legend(fontsize=7, frameon=False, loc="lower right")
    out.update(_rsum_bars(axes[2], rows, groups))
    out["flat"] = levels
    out["seeds"] = {r["align_loss"]: r["seeds"] for r in rows}
    save_png(fig, path)
    return out


def _trained_alike(rows: list[dict[str, Any]], curves: dict[str, Lines]) -> list[list[str]]:
    """The alignment cells grouped where both batch curves and every seed's rSum are
    equal (one training under two labels); a cell with no logged curve stays alone, since
    empty curves are equal without saying anything."""
    panels: dict[str, Any] = {**curves, "rsum": {}}
    for r in rows:
        name = r["align_loss"]
        seeds = sorted(r["rsum_by_seed"].items())
        logged = any(curves[f][name][0] for f in curves)
        # An unlogged cell's own name in its key keeps it from matching another.
        panels["rsum"][name] = ([s for s, _ in seeds], [v for _, v in seeds]) + (
            () if logged else ([name],)
        )
    return same_curves(panels)


def _rsum_bars(ax: Any, rows: list[dict[str, Any]], groups: list[list[str]]) -> dict[str, Any]:
    """The rSum panel of :func:`plot_alignment`: one bar per group of cells that trained
    alike, in the groups' colours; returns each cell's bar height and seed dots."""
    by = {r["align_loss"]: r for r in rows}
    heights: dict[str, float] = {}
    dots: dict[str, list[float]] = {}
    ticks = []
    for i, members in enumerate(groups):
        r = by[members[0]]
        mean, half, n = r["rsum"]
        split = split_seeds(members[0], r["by_seed"])
        bimodal = split.bimodal
        # A bimodal cell's mean is a value no seed reached: its bar is faint, each
        # group's mean a short black line.
        ax.bar(i, mean, color=f"C{i}", alpha=0.2 if bimodal else 0.6)
        if bimodal:
            for m in (split.functional_mean, split.broken_mean):
                ax.plot([i - 0.3, i + 0.3], [m, m], color="black", linewidth=1.5, label="_group")
        elif n > 1:
            ax.errorbar(i, mean, yerr=half, color="black", capsize=4, linewidth=1)
        ys = [float(v) for v in r["rsum_by_seed"].values()]
        ax.plot([i] * len(ys), ys, "o", color="black", markersize=3, label="_seeds")
        name = "\n= ".join(members)
        ticks.append(
            f"{name}\n({len(split.functional)} of {split.n} functional)" if bimodal else name
        )
        for m in members:
            heights[m], dots[m] = float(mean), ys
    ax.set_xticks(range(len(groups)), ticks, rotation=25, ha="right", fontsize=8)
    ax.set_title("test rSum per alignment loss (bar: mean, 95% CI; dots: seeds)", fontsize=9)
    ax.grid(alpha=0.3, axis="y")
    return {"rsum": heights, "rsum_seeds": dots}


__all__ = [
    "ALIGN_YARDSTICKS",
    "COLORS",
    "plot_alignment",
    "plot_grad_norm",
    "plot_keep_ratio",
    "plot_ratio_curves",
    "warmup_end",
]
