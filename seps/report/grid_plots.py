"""Plots of a matrix that sweeps one or two head fields, set beside the paper's figures.

Which plot a matrix gets is read off its runs, never its name:

- runs that differ only in the head field ``sparse_ratio`` (:func:`rho_runs`) get
  ``<matrix>-rho.png`` (:func:`plot_rho`): measured rSum against rho, mean ± 95% CI over
  seeds, in one panel; the paper's rSum against rho in a second panel with its own y axis;
- runs that sweep ``lambda_sparse`` and ``lambda_dense`` over at least two values of each,
  possibly once per setting of other head fields (e.g. ``decision``: one group of runs
  per setting; :func:`grid_runs`), get ``<matrix>-grid.png`` (:func:`plot_grid`): a heat
  map of mean rSum over the (l1, l2) grid per profile and group and one of the paper's
  grid, each with its own colour scale (the paper's rSum, ~555 on Flickr30K, and the
  synthetic runs', ~200, share no scale).

The measured numbers are the report's summary (:func:`seps.report.summary.summarise_current`:
mean and :func:`seps.stats.paired.mean_ci` half-width per (profile, run)); the reported ones are
:func:`seps.report.paper.paper_reference` of each run, so a run the paper has no figure
for simply has none here. Each plot function returns the numbers read back from the drawn
artists (tests check the picture, not the input) and ``{}``, writing no file, when no run
has a completed seed. PNGs are written by :func:`seps.io.formatting.save_png` (reproducible
bytes); panels and cells follow sorted axis values, so the same records give the same file.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..experiments.definitions import Matrix
from ..io.formatting import fmt, is_missing, pyplot, save_png
from .paper import paper_decision_note, paper_reference
from .records import profiles
from .summary import metric_cell

#: The head field of the selection-ratio sweep.
RHO_KEY = "sparse_ratio"
#: The head fields of the ratio-loss coefficient grid: rows (l1), columns (l2).
GRID_KEYS = ("lambda_sparse", "lambda_dense")
#: Colour map of the heat maps (perceptually uniform, readable in grey).
GRID_CMAP = "viridis"
#: At most this many measured maps side by side for one profile; more groups wrap.
GRID_MAX_COLUMNS = 3
#: One run of an (l1, l2) grid: its group (``decision=topk``; ``""`` for a single group),
#: l1 and l2.
GridRun = tuple[str, float, float]


# ------------------------------------------------------------------------ detection
def _is_number(v: Any) -> bool:
    # bool is an int to Python, but a switch is not a point on an axis.
    return isinstance(v, int | float) and not isinstance(v, bool)


def _swept(matrix: Matrix, keys: Sequence[str]) -> dict[str, tuple[float, ...]] | None:
    """Run id -> its numeric values of the head fields ``keys``, when the runs differ in
    nothing else (same preset, same train overrides, same other head fields) and no two
    runs share the values; None otherwise (fewer than two runs included)."""
    if len(matrix.runs) < 2:
        return None
    first = matrix.runs[0]
    others = {k: v for k, v in first.set.items() if k not in keys}
    out: dict[str, tuple[float, ...]] = {}
    for run in matrix.runs:
        if run.preset != first.preset or dict(run.train) != dict(first.train):
            return None
        if {k: v for k, v in run.set.items() if k not in keys} != others:
            return None
        values = [run.set.get(k) for k in keys]
        if not all(_is_number(v) for v in values):
            return None
        out[run.id] = tuple(float(v) for v in values)
    return out if len(set(out.values())) == len(out) else None


def rho_runs(matrix: Matrix) -> dict[str, float] | None:
    """Run id -> rho when ``matrix``'s runs differ only in the head's ``sparse_ratio``."""
    swept = _swept(matrix, (RHO_KEY,))
    return None if swept is None else {run: v[0] for run, v in swept.items()}


def _value_text(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _grid(matrix: Matrix) -> tuple[dict[str, GridRun], tuple[str, ...]] | None:
    """:func:`grid_runs` and the head fields that tell its groups apart (sorted)."""
    if len(matrix.runs) < 2:
        return None
    first = matrix.runs[0]
    others: dict[str, dict[str, Any]] = {}
    for run in matrix.runs:
        if run.preset != first.preset or dict(run.train) != dict(first.train):
            return None
        if not all(_is_number(run.set.get(k)) for k in GRID_KEYS):
            return None
        others[run.id] = {k: v for k, v in run.set.items() if k not in GRID_KEYS}
    # A field every run sets alike is part of the setting, not of a group's name.
    fields = sorted({k for o in others.values() for k in o})
    varying = tuple(
        k for k in fields if len({repr(o.get(k, "(preset)")) for o in others.values()}) > 1
    )
    out: dict[str, GridRun] = {}
    for run in matrix.runs:
        group = ", ".join(f"{k}={_value_text(others[run.id].get(k, '(preset)'))}" for k in varying)
        out[run.id] = (group, float(run.set[GRID_KEYS[0]]), float(run.set[GRID_KEYS[1]]))
    for group in dict.fromkeys(g for g, _, _ in out.values()):
        cells = [(l1, l2) for g, l1, l2 in out.values() if g == group]
        if len(set(cells)) != len(cells):  # two runs on one cell: not a grid
            return None
        if min(len({c[i] for c in cells}) for i in (0, 1)) < 2:
            return None
    return out, varying


def grid_runs(matrix: Matrix) -> dict[str, GridRun] | None:
    """Run id -> (group, l1, l2) when ``matrix``'s runs share preset and train overrides,
    set numbers for the head's ``lambda_sparse`` (l1) and ``lambda_dense`` (l2), and each
    group takes at least two values of each with no two runs on one cell (a 2-D grid;
    cells a group leaves out are drawn as missing). A group is the runs that agree in all
    other head fields; its name lists the fields that differ between groups, e.g.
    ``decision=topk`` (``k=(preset)`` where a run leaves ``k`` to its preset), and is
    ``""`` when there is one group. None otherwise."""
    grid = _grid(matrix)
    return None if grid is None else grid[0]


# ------------------------------------------------------------------------ the data
def measured_text(current: pd.DataFrame) -> str:
    """``measured here`` and the datasets of the completed records, e.g. ``measured here
    (synthetic)``: says which panel holds this suite's numbers."""
    done = current[current["status"] == "done"] if len(current) else current
    names = sorted({str(d) for d in done.get("dataset", []) if not is_missing(d)})
    return f"measured here ({', '.join(names)})" if names else "measured here"


def _paper_rsum(matrix: Matrix, figures: Mapping[str, Any], table: str) -> dict[str, float]:
    """Run id -> the paper's rSum for that run from ``table``, for the runs it reports."""
    out = {}
    for run in matrix.runs:
        ref = paper_reference(run, figures)
        if ref is not None and ref.table == table and "rsum" in ref.values:
            out[run.id] = float(ref.values["rsum"])
    return out


def _paper_text(figures: Mapping[str, Any], table: str) -> str:
    """``reported by the paper (Flickr30K 1K, ViT-Base-224)``: the table's own setting."""
    section = figures.get(table) or {}
    where = [str(section[k]) for k in ("dataset", "backbone") if section.get(k)]
    return f"reported by the paper ({', '.join(where)})" if where else "reported by the paper"


def _measured_rows(summary: pd.DataFrame, runs: Mapping[str, Any]) -> pd.DataFrame:
    """The summary rows of ``runs`` (any profile) with at least one completed seed."""
    return summary[summary["run_id"].isin(list(runs)) & summary["rsum_mean"].notna()]


def _seeds_label(n: Sequence[int]) -> str:
    """How many seeds each point averages: ``n = 3 seeds`` or ``n = 1–3 seeds``."""
    lo, hi = min(n), max(n)
    text = f"n = {lo} seed{'s' if lo != 1 else ''}" if lo == hi else f"n = {lo}–{hi} seeds"
    return text + ("; no bar at n = 1" if lo == 1 else "")


# ------------------------------------------------------------------------ rho plot
def _no_paper_figure(ax: Any) -> None:
    """Blank the paper's panel and say why (the paper reports nothing for these runs)."""
    ax.axis("off")
    ax.text(
        0.5, 0.5, "no reported figure for these runs", ha="center", va="center",
        transform=ax.transAxes,
    )  # fmt: skip


def plot_rho(
    summary: pd.DataFrame,
    matrix: Matrix,
    figures: Mapping[str, Any],
    path: Path,
    measured: str = "measured here",
) -> dict[str, Any]:
    """rSum against the selection ratio rho: measured (left) and the paper's (right).

    Left panel: one line per profile, the mean rSum over completed seeds at each rho
    with a 95% CI error bar (none where one seed); right panel: the paper's rSum at the
    same runs (``selection_ratio`` table), or a note when it reports none. Each panel has
    its own y axis: the two differ in dataset and scale. ``measured`` titles the left
    panel (:func:`measured_text`). Returns ``{"measured": {profile: {"rho", "rsum",
    "ci"}}, "paper": {"rho", "rsum"}}`` read back from the drawn artists (CI NaN where no
    bar); ``{}`` and no file when ``matrix`` is no rho sweep or no run has a completed seed.
    """
    runs = rho_runs(matrix)
    if runs is None:
        return {}
    rows = _measured_rows(summary, runs)
    if rows.empty:
        return {}
    paper = _paper_rsum(matrix, figures, "selection_ratio")
    plt = pyplot()
    cmap = plt.colormaps["tab10"]
    fig, (ax_m, ax_p) = plt.subplots(1, 2, figsize=(11, 4.8), layout="constrained")
    ticks = sorted(set(runs.values()))
    out: dict[str, Any] = {"measured": {}, "paper": {}}
    for i, profile in enumerate(profiles(rows)):
        sub = rows[rows["profile"] == profile]
        order = np.argsort([runs[r] for r in sub["run_id"]], kind="stable")
        x = np.array([runs[r] for r in sub["run_id"]], dtype=float)[order]
        y = sub["rsum_mean"].to_numpy(dtype=float)[order]
        # A bimodal point (some seeds at chance, seps/report/bimodal.py) has no interval:
        # its CI would measure the split, not seed noise; it is labelled instead.
        split = [None if is_missing(v) else v for v in sub["split"]] if "split" in sub else []
        ci = sub["rsum_ci"].to_numpy(dtype=float).copy()
        ci[[i for i, v in enumerate(split) if v is not None]] = math.nan
        ci = ci[order]
        n = [int(v) for v in sub["n"].to_numpy()[order]]
        color = cmap(i % 10)
        # Each curve and the paper's state their span: on separate y axes, a 2% bump in
        # the paper's curve fills as much height as a trend of tens of rSum here.
        (line,) = ax_m.plot(
            x, y, marker="o", color=color,
            label=f"profile {profile} ({_seeds_label(n)}{_span(y)})",
        )  # fmt: skip
        for j, s in enumerate(split):
            if s is not None:
                at = (runs[sub["run_id"].iloc[j]], float(sub["rsum_mean"].iloc[j]))
                ax_m.annotate(
                    f"bimodal: {len(s.functional)} of {s.n} functional",
                    at, textcoords="offset points", xytext=(4, 6), fontsize=7, color=color,
                )  # fmt: skip
        drawn_ci = [math.nan] * len(x)
        has_ci = ~np.isnan(ci)
        if has_ci.any():
            err = ax_m.errorbar(
                x[has_ci], y[has_ci], yerr=ci[has_ci], fmt="none", ecolor=color, capsize=3
            )
            # Read the bars back: each segment runs from mean - CI to mean + CI at one rho.
            xs = [float(v) for v in line.get_xdata()]
            for seg in err.lines[2][0].get_segments():
                (x0, y0), (_, y1) = seg
                drawn_ci[xs.index(float(x0))] = (float(y1) - float(y0)) / 2.0
        out["measured"][profile] = {
            "rho": [float(v) for v in line.get_xdata()],
            "rsum": [float(v) for v in line.get_ydata()],
            "ci": drawn_ci,
        }
    ax_m.set_title(f"{measured}\nmean rSum ± 95% CI over seeds", fontsize=10)
    ax_m.set_ylabel("rSum (%), measured")
    # Below the panels: inside, a legend can hide a point or an error bar.
    fig.legend(loc="outside lower center", ncols=min(len(out["measured"]), 3), fontsize=8)
    if paper:
        pairs = sorted((runs[r], v) for r, v in paper.items())
        (pline,) = ax_p.plot(
            [p[0] for p in pairs], [p[1] for p in pairs], marker="s", color="black"
        )
        out["paper"] = {
            "rho": [float(v) for v in pline.get_xdata()],
            "rsum": [float(v) for v in pline.get_ydata()],
        }
    else:
        _no_paper_figure(ax_p)
    pspan = _span(list(paper.values())) if paper else ""
    ax_p.set_title(
        f"{_paper_text(figures, 'selection_ratio')}\nrSum, one training per rho{pspan}",
        fontsize=10,
    )
    ax_p.set_ylabel("rSum (%), reported")
    for ax in (ax_m, ax_p):
        ax.set_xlabel(f"selection ratio ρ (head {RHO_KEY})")
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.grid(alpha=0.3)
    fig.suptitle(
        f"{matrix.name}: rSum against the selection ratio ρ. Left: measured here; right: "
        "reported by the paper.\nDifferent data and scale (separate y axes): compare the "
        "shapes of the curves, not their values.",
        fontsize=11,
    )
    save_png(fig, path)
    return out


def _span(values: Any) -> str:
    """ "; span <max - min> rSum" of the finite values, or "" with fewer than two."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    return f"; span {float(v.max() - v.min()):.1f} rSum" if v.size > 1 else ""


# ------------------------------------------------------------------------ grid plot
#: One cell of a heat map with a value: (value, annotation).
Cell = tuple[float, str]


def _heat_map(
    fig: Any,
    ax: Any,
    cells: Mapping[tuple[float, float], Cell],
    axes: tuple[list[float], list[float]],
    missing: Mapping[tuple[float, float], str],
    bar_label: str,
    absent: str = "no records",
) -> dict[str, Any]:
    """Draw ``cells`` on the (l1 rows, l2 columns) grid ``axes`` with its own colour scale
    and colour bar; cells without a value are hatched and labelled ``missing[cell]``, else
    ``absent`` (a map of hatched cells only has no colour bar). Returns the drawn
    ``values`` ({(l1, l2): value} from the image), ``labels`` ({(l1, l2): annotation
    text}) and ``clim`` (the colour scale's limits)."""
    plt = pyplot()
    rows, cols = axes
    z = np.full((len(rows), len(cols)), np.nan)
    for (l1, l2), cell in cells.items():
        z[rows.index(l1), cols.index(l2)] = cell[0]
    finite = z[~np.isnan(z)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 0.0)
    one_value = finite.size > 0 and hi - lo < 1e-9
    if hi - lo < 1e-9:  # one value: a flat scale around it rather than a zero-width one
        lo, hi = lo - 0.5, hi + 0.5
    cmap = plt.colormaps[GRID_CMAP]
    im = ax.imshow(np.ma.masked_invalid(z), cmap=cmap, vmin=lo, vmax=hi, aspect="auto")
    if one_value:
        # A colour bar spanning an invented ±0.5 would suggest variation there is none of.
        ax.text(
            1.03,
            0.5,
            f"{bar_label}: one value in every measured cell,\nno colour scale",
            transform=ax.transAxes,
            rotation=90,
            va="center",
            ha="left",
            fontsize=8,
        )
    elif finite.size:  # every cell hatched: a colour bar would have nothing to explain
        fig.colorbar(im, ax=ax, label=bar_label, shrink=0.9)
    labels: dict[tuple[float, float], str] = {}
    for i, l1 in enumerate(rows):
        for j, l2 in enumerate(cols):
            cell = cells.get((l1, l2))
            if cell is None:
                ax.add_patch(
                    plt.Rectangle(
                        (j - 0.5, i - 0.5),
                        1,
                        1,
                        facecolor="white",
                        edgecolor="0.7",
                        hatch="///",
                        linewidth=0.0,
                    )
                )
                text = missing.get((l1, l2), absent)
                ax.text(
                    j,
                    i,
                    text,
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="0.3",
                    bbox={"facecolor": "white", "edgecolor": "none", "pad": 1.5},
                )
            else:
                # Dark text on the light end of the map, white on the dark end.
                r, g, b, _ = cmap(im.norm(cell[0]))
                color = "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white"
                text = cell[1]
                ax.text(j, i, text, ha="center", va="center", fontsize=8.5, color=color)
            labels[(l1, l2)] = text
    ax.set_xticks(range(len(cols)), [f"{v:g}" for v in cols])
    ax.set_yticks(range(len(rows)), [f"{v:g}" for v in rows])
    ax.set_xlabel(f"λ_dense = l2 (head {GRID_KEYS[1]})")
    ax.set_ylabel(f"λ_sparse = l1 (head {GRID_KEYS[0]})")
    drawn = im.get_array()
    values = {
        (l1, l2): float(drawn[i, j])
        for i, l1 in enumerate(rows)
        for j, l2 in enumerate(cols)
        if not np.ma.is_masked(drawn[i, j])
    }
    clim = im.get_clim()
    return {"values": values, "labels": labels, "clim": (float(clim[0]), float(clim[1]))}


def _layout(n_profiles: int, n_groups: int) -> tuple[int, int, int]:
    """(rows, columns, rows per profile) of the figure: each profile's measured maps side
    by side (at most :data:`GRID_MAX_COLUMNS`, wrapping), one profile below the other, and
    one more column for the paper's map, at the top."""
    cols = min(n_groups, GRID_MAX_COLUMNS)
    per_profile = math.ceil(n_groups / cols)
    return n_profiles * per_profile, cols + 1, per_profile


def _span_text(cells: Iterable[Cell], halves: Sequence[float]) -> str:
    """A title line saying how far apart the colours are, beside the seeds' spread: each
    map has its own colour scale, so a grid whose means differ by a fraction of their CIs
    still spans the whole colour bar (empty with fewer than two cells)."""
    means = [mean for mean, _ in cells]
    if len(means) < 2:
        return ""
    text = f"\ncolours span {max(means) - min(means):.1f} rSum"
    return text + (f"; CI half-widths up to {max(halves):.1f}" if halves else "")


def plot_grid(
    summary: pd.DataFrame,
    matrix: Matrix,
    figures: Mapping[str, Any],
    path: Path,
    measured: str = "measured here",
) -> dict[str, Any]:
    """Heat maps of mean rSum over the (l1, l2) grid: one per profile and group (see
    :func:`grid_runs`), then the paper's.

    Each profile's maps sit side by side in the groups' matrix order (wrapping after
    :data:`GRID_MAX_COLUMNS`), profiles one below the other, the paper's map at the top
    right; every map has the same rows (l1) and columns (l2), the union of the groups'.
    A measured cell shows ``mean ± 95% CI half-width`` and ``n = <seeds>``; a cell without
    a completed seed is hatched and says ``no records`` (``all seeds failed`` when records
    exist but none completed). The paper's map (``coefficients`` table) shows its rSum,
    ``not reported`` where it has none, and says which decision the paper measured it
    under when the runs set another (:func:`seps.report.paper.paper_decision_note`).
    Every map has its own colour scale and colour bar. ``measured`` titles the measured
    maps (:func:`measured_text`). Returns ``{"measured": {profile: {group: panel}},
    "paper": panel or {}}`` with each ``panel`` as drawn (``values``, ``labels``, ``clim``:
    see :func:`_heat_map`; and ``title``); ``{}`` and no file when ``matrix`` is no
    (l1, l2) grid or no run has a completed seed.
    """
    grid = _grid(matrix)
    if grid is None:
        return {}
    runs, varying = grid
    rows = _measured_rows(summary, runs)
    if rows.empty:
        return {}
    axes = (sorted({v[1] for v in runs.values()}), sorted({v[2] for v in runs.values()}))
    groups = list(dict.fromkeys(v[0] for v in runs.values()))
    paper = _paper_rsum(matrix, figures, "coefficients")
    notes = sorted({n for r in matrix.runs if r.id in paper if (n := paper_decision_note(r))})
    shown = profiles(rows)
    n_rows, n_cols, per_profile = _layout(len(shown), len(groups))
    plt = pyplot()
    width = 1.0 * len(axes[1]) + 2.6
    height = 0.75 * len(axes[0]) + (2.5 if varying else 2.2)
    fig, grid_axes = plt.subplots(
        n_rows,
        n_cols,
        figsize=(width * n_cols, height * n_rows),
        squeeze=False,
        layout="constrained",
    )
    used = {(0, n_cols - 1)}
    out: dict[str, Any] = {"measured": {}, "paper": {}}
    for p, profile in enumerate(shown):
        prof = summary[summary["profile"] == profile]
        out["measured"][profile] = {}
        for g, group in enumerate(groups):
            at = (p * per_profile + g // (n_cols - 1), g % (n_cols - 1))
            used.add(at)
            ax = grid_axes[at]
            cells: dict[tuple[float, float], Cell] = {}
            missing: dict[tuple[float, float], str] = {}
            halves: list[float] = []
            for r in prof[prof["run_id"].isin(list(runs))].to_dict("records"):
                run_group, l1, l2 = runs[r["run_id"]]
                if run_group != group:
                    continue
                if r["n"] and not is_missing(r["rsum_mean"]):
                    # A bimodal cell gives each group's mean and no interval (bimodal.py).
                    bimodal = not is_missing(r.get("split"))
                    cell = metric_cell(r, "rsum").replace(": ", ":\n", 1)
                    cells[(l1, l2)] = (float(r["rsum_mean"]), f"{cell}\nn = {r['n']}")
                    if not bimodal and not is_missing(r["rsum_ci"]):
                        halves.append(float(r["rsum_ci"]))
                else:
                    missing[(l1, l2)] = "all seeds\nfailed"
            # A group may have no completed seed in a profile where others do: all hatched.
            panel = _heat_map(fig, ax, cells, axes, missing, "mean rSum (%), measured")
            title = f"{measured}, profile {profile}\n"
            title += f"{group}\n" if group else ""
            title += "mean rSum ± 95% CI half-width, n seeds"
            ax.set_title(title + _span_text(cells.values(), halves), fontsize=10)
            panel["title"] = ax.get_title()
            out["measured"][profile][group] = panel
    ax_p = grid_axes[0, -1]
    if paper:
        cells = {runs[r][1:]: (v, fmt(v)) for r, v in paper.items()}
        out["paper"] = _heat_map(
            fig,
            ax_p,
            cells,
            axes,
            {},
            "rSum (%), reported",
            absent="not\nreported",
        )
    else:
        _no_paper_figure(ax_p)
    paper_title = f"{_paper_text(figures, 'coefficients')}\nrSum, one training each"
    paper_title += "".join(f"\n{n}" for n in notes)
    ax_p.set_title(paper_title, fontsize=10)
    if out["paper"]:
        out["paper"]["title"] = ax_p.get_title()
    for at in np.ndindex(n_rows, n_cols):
        if at not in used:
            grid_axes[at].axis("off")
    where = "right" if n_rows == 1 else "top right"
    per = " and ".join(["profile", *varying])
    fig.suptitle(
        f"{matrix.name}: rSum over the ratio-loss coefficients (λ_sparse = l1, λ_dense = l2)."
        f"\nMeasured here: one map per {per}; {where}: reported by the paper. Each map has "
        "its own colour scale (different data and scale).",
        fontsize=11,
    )
    save_png(fig, path)
    return out


__all__ = [
    "GRID_KEYS",
    "GRID_MAX_COLUMNS",
    "RHO_KEY",
    "GridRun",
    "grid_runs",
    "measured_text",
    "plot_grid",
    "plot_rho",
    "rho_runs",
]
