"""The sequential decisions on the pages: phrases, tables and the forest plot.

A row of a sequential design (:mod:`.sequential`) ends as one of four decisions, each
worded as a short phrase (:func:`decision_phrase`): ``detected: paper's choice better``
(or ``code's``; the Δ of the seven differences is always the paper's side minus the
code's), ``bounded ±X`` (its repeated interval rules out effects beyond X rSum),
``open at the cap`` and ``open (look k of K)``. The reason and the numbers go beside it,
never into it.

:func:`decision_lines` is the block a matrix report and the scorecard share: a count
line, the decisions table (one row per difference, both contexts) and the detail table
that puts the plain analysis (seeds independent) beside the build- and CPU-blocked one
the decision rests on. :func:`plot_decisions` is the forest plot of the final repeated
intervals, with each row's claimed size (seed 004's stars times its reference rSum, on
the claimed side) shaded.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..io.formatting import DASH, code, fmt, markdown_table, pyplot, save_png
from ..stats.group_sequential import LookStat
from .power import IMPACT_RANGES
from .sequential import DECISIONS, Analysis, RowResult

__all__ = [
    "counts_line",
    "decision_lines",
    "decision_phrase",
    "difference_decisions",
    "interval_text",
    "plot_decisions",
    "row_index",
]

#: How far the forest plot's axis reaches (rSum): an interval beyond it is drawn to the
#: edge with an arrow, so that one open row's width does not flatten the others.
AXIS_REACH = 120.0


def row_index(analysis: Analysis | None) -> dict[tuple[str, str, str], RowResult]:
    """(matrix, variant, baseline) -> the row's result (empty without an analysis)."""
    if analysis is None:
        return {}
    return {(r.matrix, r.variant, r.baseline): r for r in analysis.rows()}


def decision_phrase(r: RowResult, cap: int, looks: int) -> str:
    """The decision as a short phrase (module docstring)."""
    final = r.final()
    if r.decision == "detected" and final is not None:
        better = "paper's" if final.mean > 0 else "code's"
        return f"detected: {better} choice better"
    if r.decision == "bounded":
        return f"bounded ±{fmt(r.bound(), 1)}"
    if r.decision == "open at the cap":
        return "open at the cap"
    return f"open (look {r.looks_taken} of {looks})"


def interval_text(r: RowResult) -> str:
    """``+39.0 [+21.3, +56.7] (n=10, look 2)``: the decision's estimate, its repeated
    interval and where it was taken (``—`` before any look)."""
    final = r.final()
    if final is None:
        return DASH
    j = r.crossed_look if r.crossed_look is not None else r.looks_taken - 1
    lo, hi = r.intervals[j]
    ci = f"[{fmt(lo, 1, sign=True)}, {fmt(hi, 1, sign=True)}]" if math.isfinite(lo) else "[—]"
    return f"{fmt(final.mean, 1, sign=True)} {ci} (n={final.n}, look {j + 1})"


def _fixed_ci(s: LookStat) -> str:
    """``[lo, hi] (df)``: the 95% interval of one look as a fixed-sample test gives it."""
    from scipy.special import stdtrit

    if math.isnan(s.se) or s.df < 1:
        return f"— (df {s.df})"
    half = float(stdtrit(s.df, 0.975)) * s.se
    return f"[{fmt(s.mean - half, 1, sign=True)}, {fmt(s.mean + half, 1, sign=True)}] (df {s.df})"


def counts_line(analysis: Analysis, matrices: Sequence[str] | None = None) -> str:
    """``decided 4 of 10, bounded 3, open at the cap 1, open 2``."""
    rows = [r for r in analysis.rows() if matrices is None or r.matrix in matrices]
    n = {k: sum(r.decision == k for r in rows) for k in DECISIONS}
    return (
        f"decided {n['detected']} of {len(rows)}, bounded {n['bounded']}, open at the cap "
        f"{n['open at the cap']}, open {n['open']}"
    )


def _row_label(r: RowResult) -> str:
    return f"{code(r.variant)} − {code(r.baseline)}"


def decision_lines(
    analysis: Analysis,
    matrix: str,
    impacts: Mapping[str, str],
    png: str | None = None,
) -> list[str]:
    """The decisions of ``matrix``'s rows under ``analysis``: a count line, the decisions
    table (claim, claimed impact, decision, Δ [repeated CI], reference rSum and margin),
    the plain and blocked analyses side by side, and the plot's image line (``png``)."""
    d = analysis.design
    rows = [r for r in analysis.rows() if r.matrix == matrix]
    if not rows:
        return []
    lines = [
        f"**Seeds until decided** (design `{d.name}`, written {d.written}; "
        f"docs/statistics.md, 'Seeds until decided'): {counts_line(analysis, [matrix])}. "
        f"Looks at {', '.join(map(str, d.looks))} seeds; Lan-DeMets {d.spending}-type "
        f"spending, α {d.alpha} per claim over its rows and looks (Holm); a row is bounded "
        f"when its repeated interval lies within ±{round(100 * d.margin)}% of its "
        "reference's rSum. Δ is the paper's choice minus the code's, the interval the "
        "repeated confidence interval of the build- and CPU-blocked analysis at the look "
        "the decision rests on.",
        "",
    ]
    table = []
    for r in rows:
        level = impacts.get(r.claim)
        claimed = f"{'+' if r.direction == '+' else '−'} {level}" if level else DASH
        table.append(
            [
                code(r.claim),
                _row_label(r),
                claimed,
                decision_phrase(r, d.cap, len(d.looks)),
                interval_text(r),
                f"{fmt(r.reference_rsum)} ({code(r.reference)}), ±{fmt(r.margin)}",
            ]
        )
    headers = ["difference", "row", "claimed (seed 004)", "decision", "Δ rSum [repeated CI]"]
    headers += ["reference rSum, margin"]
    lines += [markdown_table(table, headers), ""]
    detail = []
    for r in rows:
        if not r.blocked:
            continue
        p, b = r.plain[-1], r.blocked[-1]
        detail.append(
            [
                _row_label(r),
                str(b.n),
                fmt(b.mean, 1, sign=True),
                _fixed_ci(p),
                _fixed_ci(b),
                f"{b.p:.2g}" if not math.isnan(b.p) else DASH,
                f"{r.levels[-1]:.2g}",
            ]
        )
    lines += [
        "Plain against build-aware, at each row's last look: the 95% interval with the "
        "seeds as independent (n − 1 df) and with the build and CPU type as blocks "
        "(n − blocks df); the decision uses the blocked p against the look's nominal level "
        "(the design's boundary), not these fixed-sample intervals.",
        "",
        markdown_table(
            detail,
            ["row", "seeds", "Δ rSum", "plain 95% CI", "blocked 95% CI", "blocked p", "level"],
        ),
        "",
    ]
    if png:
        lines += [f"![Δ rSum of each difference, final repeated intervals]({png})", ""]
    return lines


def difference_decisions(
    analysis: Analysis,
    matrix: str,
    by_diff: Mapping[str, Mapping[str, Any]],
    frozen: Mapping[str, Mapping[str, str]],
    impacts: Mapping[str, str],
) -> list[list[str]]:
    """One row per difference (``by_diff``: difference -> {preset: fixed-sample
    comparison or None}, :func:`seps.report.differences.difference_cells` of one
    profile): its id, claimed impact, then for the flip on ``code`` and the revert in
    ``paper`` the decision and Δ [repeated CI]. A side the design does not decide says
    why: identical by construction, its learned part did not train, or no record."""
    index = row_index(analysis)
    d = analysis.design
    out = []
    for diff, by_dir in by_diff.items():
        row = [code(diff), impacts.get(diff, DASH)]
        sides = (("code", (f"code+{diff}", "code")), ("paper", ("paper", f"paper-{diff}")))
        for preset, key in sides:
            r = index.get((matrix, *key))
            c = by_dir.get(preset)
            if r is not None:
                row += [decision_phrase(r, d.cap, len(d.looks)), interval_text(r)]
            elif c is None:
                row += ["no record", DASH]
            elif c.identical:
                row += ["identical (no effect possible)", f"0.0 (bit-identical, n={c.n})"]
            elif frozen.get(diff, {}).get(preset):
                row += ["not testable: did not train", f"{fmt(c.mean, 1, sign=True)} (n={c.n})"]
            else:
                row += ["not a test", f"{fmt(c.mean, 1, sign=True)} (n={c.n})"]
        out.append(row)
    return out


def _claimed_band(r: RowResult, level: str | None) -> tuple[float, float] | None:
    """The claimed effect's range in rSum on the claimed side, or None."""
    if level not in IMPACT_RANGES or math.isnan(r.reference_rsum):
        return None
    lo, hi, _ = IMPACT_RANGES[level]
    a = lo * r.reference_rsum
    b = AXIS_REACH if hi is None else hi * r.reference_rsum
    return (a, b) if r.direction == "+" else (-b, -a)


def plot_decisions(
    analysis: Analysis, matrix: str, path: Path, impacts: Mapping[str, str]
) -> list[tuple[str, float, float, float]]:
    """The forest plot of ``matrix``'s rows: the decision's estimate with its repeated
    interval (a filled marker: detected; open: bounded or open), each row's claimed size
    shaded, 0 marked, and each decision's phrase at the right. Returns the plotted
    ``(row, Δ, lo, hi)``; removes ``path`` and returns ``[]`` without rows."""
    rows = [r for r in analysis.rows() if r.matrix == matrix and r.final() is not None]
    if not rows:
        Path(path).unlink(missing_ok=True)
        return []
    d = analysis.design
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(rows) + 1.8), layout="constrained")
    drawn, phrases = [], []
    for i, r in enumerate(rows):
        y = len(rows) - 1 - i
        band = _claimed_band(r, impacts.get(r.claim))
        if band is not None:
            ax.fill_betweenx([y - 0.3, y + 0.3], *band, color="tab:orange", alpha=0.18, lw=0)
        final = r.final()
        assert final is not None
        j = r.crossed_look if r.crossed_look is not None else r.looks_taken - 1
        lo, hi = r.intervals[j]
        drawn.append((_row_label(r).replace("`", ""), final.mean, lo, hi))
        shown_lo, shown_hi = max(lo, -AXIS_REACH), min(hi, AXIS_REACH)
        filled = r.decision == "detected"
        ax.errorbar(
            [final.mean], [y], xerr=[[final.mean - shown_lo], [shown_hi - final.mean]],
            fmt="o", color="tab:blue", mfc="tab:blue" if filled else "white", capsize=3,
        )  # fmt: skip
        if lo < -AXIS_REACH:
            ax.plot([shown_lo], [y], marker="<", color="tab:blue")
        if hi > AXIS_REACH:
            ax.plot([shown_hi], [y], marker=">", color="tab:blue")
        phrases.append(f"{decision_phrase(r, d.cap, len(d.looks))} (n={final.n})")
    ax.axvline(0.0, color="gray", linewidth=1)
    ax.set_xlim(-AXIS_REACH, AXIS_REACH)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.set_yticks(range(len(rows)), [t[0] for t in reversed(drawn)])
    # The decisions as the right-hand tick labels: the layout makes room for them.
    right = ax.twinx()
    right.set_ylim(ax.get_ylim())
    right.set_yticks(range(len(rows)), list(reversed(phrases)), fontsize=8)
    ax.set_xlabel("Δ rSum, the paper's choice minus the code's (repeated confidence interval)")
    ax.set_title(
        # two lines: a long matrix name would push one line past the figure's edge
        f"{matrix}, world {d.profile} (design {d.name}): each difference at the look "
        "its decision rests on\n(shaded: the claimed size; filled: detected)",
        fontsize=10,
    )
    ax.grid(axis="x", alpha=0.3)
    save_png(fig, Path(path))
    return drawn
