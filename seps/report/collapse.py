"""Collapsed runs: a validation rSum that ends far below the run's best epoch.

When a dev split is evaluated after every epoch, each ``history`` entry of a record has
``val.rsum``. A run whose *final* validation rSum is more than :data:`COLLAPSE_DROP` (10%)
below its best epoch's has collapsed: its test metrics are those of the final weights
(the trainer evaluates the weights training ends with, not the best epoch's), so a mean
over seeds that includes it mixes a failure of training with the effect of a switch.
:func:`collapsed` decides it for one history; :func:`collapsed_runs` lists the current
records that collapsed, :func:`plot_collapsed` draws their validation curves and
:func:`collapsed_lines` writes the report's "Collapsed runs" section.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ..experiments.definitions import Matrix
from ..io.formatting import fmt, is_missing, markdown_table, pyplot, save_png

#: A final validation rSum more than this fraction below the best epoch's is a collapse.
COLLAPSE_DROP = 0.10

#: {"<profile> / <run id>": {"seed <s>": (epochs, validation rSum)}}, as drawn.
CollapseSeries = dict[str, dict[str, tuple[list[float], list[float]]]]


def val_curve(history: Sequence[Mapping[str, Any]] | None) -> list[tuple[int, float]]:
    """(epoch, validation rSum) of every history entry that has a finite ``val.rsum``;
    an entry without ``epoch`` counts by its position."""
    out = []
    for i, h in enumerate(history or []):
        val = h.get("val") if isinstance(h, Mapping) else None
        v = val.get("rsum") if isinstance(val, Mapping) else None
        if v is None or isinstance(v, bool) or is_missing(v) or not math.isfinite(float(v)):
            continue
        out.append((int(h.get("epoch", i)), float(v)))
    return out


def collapsed(history: Sequence[Mapping[str, Any]] | None) -> dict[str, Any] | None:
    """The collapse of one run's validation curve, or ``None`` when it did not collapse.

    Collapsed: the last recorded validation rSum is more than 10% below the best one,
    ``best - final > 0.10 * best`` (exactly 10% below is not a collapse). Entries without
    a finite ``val.rsum`` are skipped (a run that diverged is reported as such elsewhere);
    fewer than 2 such entries, or a best rSum of 0, cannot collapse. Returns ``best``,
    ``best_epoch`` (the first epoch reaching it), ``final``, ``final_epoch``, ``drop``
    (the fraction lost, ``(best - final) / best``) and the whole curve (``epochs``,
    ``values``).
    """
    curve = val_curve(history)
    if len(curve) < 2:
        return None
    best_epoch, best = max(curve, key=lambda t: t[1])  # the first maximum
    final_epoch, final = curve[-1]
    # Multiplying by 10 rather than 0.1 keeps the boundary exact for round numbers.
    if best <= 0.0 or not (best - final) * (1.0 / COLLAPSE_DROP) > best:
        return None
    return {
        "best": best,
        "best_epoch": best_epoch,
        "final": final,
        "final_epoch": final_epoch,
        "drop": (best - final) / best,
        "epochs": [e for e, _ in curve],
        "values": [v for _, v in curve],
    }


def collapsed_runs(cur: pd.DataFrame, matrix: Matrix) -> tuple[list[dict[str, Any]], int]:
    """(collapsed runs, number of runs checked): every current record with at least 2
    validation points is checked; the collapsed ones come in (profile, matrix order,
    seed) order, each with ``profile``, ``run_id``, ``seed``, ``status`` and the fields of
    :func:`collapsed`."""
    if cur.empty:
        return [], 0
    order = {r.id: i for i, r in enumerate(matrix.runs)}
    recs = sorted(
        cur.to_dict("records"),
        key=lambda r: (
            str(r["profile"]),
            order.get(r["run_id"], len(order)),
            -1 if is_missing(r["seed"]) else int(r["seed"]),
        ),
    )
    out, checked = [], 0
    for r in recs:
        if len(val_curve(r["history"])) < 2:
            continue
        checked += 1
        c = collapsed(r["history"])
        if c is not None:
            out.append(
                {
                    "profile": r["profile"],
                    "run_id": r["run_id"],
                    "seed": int(r["seed"]),
                    "status": r["status"],
                    **c,
                }
            )
    return out, checked


def plot_collapsed(runs: Sequence[Mapping[str, Any]], path: Path) -> CollapseSeries:
    """Small multiples of the validation curves of the collapsed runs: one panel per
    (profile, run), one line per collapsed seed, its best epoch circled and its final
    epoch crossed. Returns the drawn lines read back from the artists; empty (no file
    written) when nothing collapsed."""
    panels: dict[str, list[Mapping[str, Any]]] = {}
    for r in runs:
        panels.setdefault(f"{r['profile']} / {r['run_id']}", []).append(r)
    if not panels:
        return {}
    plt = pyplot()
    ncols = min(4, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(
        nrows,
        ncols,
        figsize=(max(3.2 * ncols, 4.8), 2.4 * nrows + 0.3),  # room for the title
        squeeze=False,
        layout="constrained",
    )
    out: CollapseSeries = {}
    for ax, (title, rs) in zip(axes.flat, panels.items(), strict=False):
        drawn = {}
        for r in rs:
            color = f"C{int(r['seed']) % 10}"  # one colour per seed, in every panel
            (line,) = ax.plot(
                r["epochs"], r["values"], marker=".", color=color, label=f"seed {r['seed']}"
            )
            ax.plot([r["best_epoch"]], [r["best"]], "o", mfc="none", color=color, label="_best")
            ax.plot([r["final_epoch"]], [r["final"]], "x", color=color, label="_final")
            # The line a final epoch must fall below to count, on an axis from 0: a
            # 13% drop on an axis cut to the curve's own range read as a cliff.
            ax.axhline(
                r["best"] * (1 - COLLAPSE_DROP), color=color, linestyle=":", linewidth=0.8,
                label=f"_{COLLAPSE_DROP:.0%} below best",
            )  # fmt: skip
            drawn[line.get_label()] = (
                [float(v) for v in line.get_xdata()],
                [float(v) for v in line.get_ydata()],
            )
        out[title] = drawn
        ax.set_title(title, fontsize=8)
        ax.set_xlabel("epoch", fontsize=7)
        ax.set_ylabel("val rSum", fontsize=7)
        ax.tick_params(labelsize=7)
        ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.set_ylim(0, ax.get_ylim()[1])
        ax.legend(fontsize=6, frameon=False, loc="lower left")
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_axis_off()
    fig.suptitle(
        f"collapsed runs: validation rSum (o best, x final; dotted: {COLLAPSE_DROP:.0%} below "
        "best)",
        fontsize=9,
    )
    save_png(fig, path)
    return out


def collapsed_lines(runs: Sequence[Mapping[str, Any]], checked: int, plot: str | None) -> list[str]:
    """The "Collapsed runs" section: definition, count, one table row per collapsed run
    and its plot (``plot``: the PNG's file name, ``None`` without one)."""
    lines = [
        "## Collapsed runs",
        "",
        f"A run has *collapsed* when its final validation rSum (dev split, after the last "
        f"epoch) is more than {COLLAPSE_DROP:.0%} below its best epoch's. Its test metrics "
        "above are those of the final weights, so a collapse moves its variant's mean "
        "for a reason other than the switch it tests.",
        "",
    ]
    if checked == 0:
        return [
            *lines,
            "Not checked: no record has a validation rSum for at least 2 epochs (no dev "
            "split evaluated during training).",
            "",
        ]
    if not runs:
        return [*lines, f"None of the {checked} runs with a validation curve collapsed.", ""]
    body = [
        [
            r["run_id"],
            r["profile"],
            r["seed"],
            f"{fmt(r['best'])} (epoch {r['best_epoch']})",
            f"{fmt(r['final'])} (epoch {r['final_epoch']})",
            f"-{fmt(100.0 * r['drop'])}%",
        ]
        for r in runs
    ]
    headers = ["run", "profile", "seed", "best val rSum", "final val rSum", "drop"]
    lines += [
        f"{len(runs)} of the {checked} runs with a validation curve collapsed:",
        "",
        markdown_table(body, headers),
        "",
    ]
    if plot:
        lines += [f"![validation rSum of the collapsed runs]({plot})", ""]
    return lines


__all__ = [
    "COLLAPSE_DROP",
    "CollapseSeries",
    "collapsed",
    "collapsed_lines",
    "collapsed_runs",
    "plot_collapsed",
    "val_curve",
]
