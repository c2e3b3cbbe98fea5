"""The ``differences`` report section: each documented difference measured both ways.

`seven-differences` holds every documented difference twice: flipped alone on the code
preset (``code+X``, the code with the paper's choice for X) and reverted alone in the
paper preset (``paper-X``, the paper with the code's choice for X). The results table
compares every run with the matrix's one baseline (``code``), which is right for a flip
but, for a revert, measures the other six differences at once. This section pairs each
revert with its own preset instead, and puts the two measurements of one difference side
by side: an effect detected in both contexts with one sign does not hinge on what else
the head does; one detected in a single context may interact with the other differences,
or the other test may lack the power (the section says which statements its corrected
tests support, and no more).

*Sign* (a decision, so the two columns read alike): every Δ is the effect of adopting the
paper's choice, rSum(paper's side) − rSum(code's side), paired by seed: ``code+X −
code`` for a flip, ``paper − paper-X`` for a revert. A positive Δ in both columns says
the paper's choice helps in both contexts. The scorecard words its revert rows the same
way (``ablations/claims.yaml``: baseline ``paper-X``, variant ``paper``).

*Which runs* (the convention of ``{expand: flip | revert}`` in :mod:`seps.experiments.definitions`):
a run with a ``difference`` whose preset is ``code`` holds the paper's value of it (a
flip from code), one whose preset is ``paper`` holds the code's (a revert); its base is
the run whose id is its preset's name (``code``, ``paper``). A difference without the base
run or the variant's records shows ``no record``.

*Tests*: every cell is a paired t-test and joins the report's correction family; a flip
is the results table's own test (the same records on both sides: one test, counted
once), a revert is a new one. The claimed impact is seed 004's, from
``ablations/differences.yaml`` (or ``paper_figures.yaml``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from ..experiments.definitions import load_differences
from ..io.formatting import DASH, code, markdown_table, pyplot, save_png
from ..stats.paired import paired_mark
from .compare import Comparison, Family, compare
from .frozen import frozen_reason, with_frozen
from .paper import load_claims, load_paper_figures
from .records import profiles
from .sequential import Design, analyse, designs_for
from .sequential_section import decision_lines, plot_decisions
from .summary import DID_NOT_TRAIN, delta_text, p_adj_text, verdict_text
from .verdicts import UNTESTABLE

#: The two contexts in column order: (preset of the variant run, label).
DIRECTIONS = (("code", "flipped on `code`"), ("paper", "reverted in `paper`"))
#: {profile: {difference: {preset: Comparison (paper's side − code's side) or None}}}.
Cells = dict[str, dict[str, dict[str, Comparison | None]]]


def _by_seed(done: pd.DataFrame, run_id: str) -> dict[int, dict[str, Any]]:
    sub = done[done["run_id"] == run_id]
    return {int(r["seed"]): r for r in sub.to_dict("records")}


def _sides(current: pd.DataFrame) -> dict[str, dict[str, dict[str, tuple[dict, dict]]]]:
    """Per profile and difference (``differences.yaml`` order, then unknown ids by name),
    per direction (the variant's preset): ``(base, variant)``, each ``{seed: record}`` of
    the completed records."""
    out: dict[str, dict[str, dict[str, tuple[dict, dict]]]] = {}
    if current.empty:
        return out
    rank = {d.id: i for i, d in enumerate(load_differences())}
    done = current[current["status"] == "done"]
    for profile in profiles(done):
        prof = done[done["profile"] == profile]
        runs = prof.drop_duplicates("run_id")
        sides: dict[str, dict[str, tuple[dict, dict]]] = {}
        for r in runs.to_dict("records"):
            diff, preset = r["difference"], str(r["preset"])
            if not isinstance(diff, str) or preset not in dict(DIRECTIONS):
                continue
            sides.setdefault(diff, {})[preset] = (
                _by_seed(prof, preset),
                _by_seed(prof, str(r["run_id"])),
            )
        if sides:
            out[profile] = {
                d: sides[d] for d in sorted(sides, key=lambda d: (rank.get(d, len(rank)), d))
            }
    return out


def difference_cells(current: pd.DataFrame) -> Cells:
    """Per profile and difference (``differences.yaml`` order, then unknown ids by name),
    the comparison of each direction:
    ``compare(paper's side, code's side)`` over the completed records; ``None`` when
    either side has no completed record."""
    out: Cells = {}
    for profile, by_diff in _sides(current).items():
        out[profile] = {}
        for diff, by_dir in by_diff.items():
            out[profile][diff] = {}
            for preset, (base, variant) in by_dir.items():
                paper_side, code_side = (variant, base) if preset == "code" else (base, variant)
                ok = any(s in code_side for s in paper_side)
                c = with_frozen(compare(paper_side, code_side), base, variant) if ok else None
                out[profile][diff][preset] = c
    return out


def difference_frozen(current: pd.DataFrame) -> dict[str, dict[str, dict[str, str]]]:
    """Per profile, difference and direction, why the cell tests a learned part that did
    not train (:func:`~seps.report.frozen.frozen_reason`, the scorecard's rule, base side
    first); only such cells are listed. The table calls them *not testable here*, as the
    scorecard does: the runs compare an untrained network with its absence."""
    out: dict[str, dict[str, dict[str, str]]] = {}
    for profile, by_diff in _sides(current).items():
        for diff, by_dir in by_diff.items():
            for preset, (base, variant) in by_dir.items():
                reason = frozen_reason([base, variant])
                if reason:
                    out.setdefault(profile, {}).setdefault(diff, {})[preset] = reason
    return out


def _designs(current: pd.DataFrame, root: Path | None) -> list[Design]:
    """The sequential designs (one per world) of the records' matrix."""
    if current.empty:
        return []
    names = sorted({str(m) for m in current["matrix"].dropna()})
    return [d for n in names for d in designs_for(n, root)]


def difference_comparisons(current: pd.DataFrame, root: Path | None = None) -> list[Comparison]:
    """Every comparison the section prints (they join the report's family): none under
    a sequential design, whose decisions are the design's, not the report's tests."""
    if _designs(current, root):
        return []
    return [
        c
        for by_diff in difference_cells(current).values()
        for by_dir in by_diff.values()
        for c in by_dir.values()
        if c is not None
    ]


def _row(c: Comparison | None, family: Family | None) -> dict[str, Any] | None:
    """A summary-like row of ``c`` for the shared cell formatters (``summary.delta_text``
    and friends); ``None`` when there is no comparison."""
    if c is None:
        return None
    p_adj = family.p(c) if family is not None else math.nan
    return {
        "is_baseline": False,
        "identical": c.identical,
        "identical_reason": c.reason,
        "blind": c.blind,
        "frozen": c.frozen,
        "delta_n": c.n,
        "delta_rsum_mean": c.mean,
        "delta_rsum_ci": c.half,
        "delta_p": c.p,
        "delta_p_adj": p_adj,
        "delta_mark": "identical"
        if c.identical
        else (DID_NOT_TRAIN if c.frozen else paired_mark(p_adj, c.n)),
    }


def _status(c: Comparison | None, family: Family | None) -> str:
    """``missing``, ``identical``, ``higher``/``lower`` (corrected p < ALPHA) or ``ns``
    (not detected, or fewer than 2 paired seeds)."""
    if c is None:
        return "missing"
    if c.identical:
        return "identical"
    if c.frozen:
        return "ns"  # not a test: nothing detected
    p = family.p(c) if family is not None else math.nan
    if paired_mark(p, c.n) == "*":
        return "higher" if c.mean > 0 else "lower"
    return "ns"


def difference_rows(
    by_diff: dict[str, dict[str, Comparison | None]],
    family: Family | None,
    claims: dict[str, str],
    frozen: dict[str, dict[str, str]] | None = None,
) -> list[list[str]]:
    """One table row per difference of one profile: its id, seed 004's claimed impact,
    then for each of :data:`DIRECTIONS` Δ rSum ± CI, the corrected p and the verdict
    (``no record``, ``—``, ``—`` without a comparison). A cell in ``frozen`` (one
    profile's part of :func:`difference_frozen`) keeps its Δ and p but its verdict is
    *not testable here*, whatever p says. Shared by the report section and the README's
    headline block (:mod:`seps.report.headline`)."""
    rows = []
    for diff, by_dir in by_diff.items():
        row = [code(diff), claims.get(diff, DASH)]
        for preset, _ in DIRECTIONS:
            r = _row(by_dir.get(preset), family)
            if r is None:
                row += ["no record", DASH, DASH]
                continue
            untrained = (frozen or {}).get(diff, {}).get(preset)
            verdict = f"{UNTESTABLE}: the module did not train" if untrained else verdict_text(r)
            row += [delta_text(r, mark=False), p_adj_text(r), verdict]
        rows.append(row)
    return rows


def _frozen_lines(frozen: dict[str, dict[str, str]]) -> list[str]:
    """The cells :func:`difference_rows` calls not testable, each with its reason."""
    labels = dict(DIRECTIONS)
    # The reason reads "the module did not train (relative parameter change: ...)": the
    # line says the first half once, each cell gives its measurement.
    cells = [
        f"`{diff}` {labels[preset]} ({reason.split(' (', 1)[-1].rstrip(')')})"
        for diff, by_dir in frozen.items()
        for preset, reason in by_dir.items()
    ]
    if not cells:
        return []
    return [
        f"- {UNTESTABLE.capitalize()} (the learned part the switch acts through did not "
        "train, so the runs compare an untrained network with its absence; the "
        f"scorecard's rule, `seps.report.frozen`): {'; '.join(cells)}.",
        "",
    ]


def _summary_lines(
    by_diff: dict[str, dict[str, Comparison | None]], family: Family | None
) -> list[str]:
    """What the table shows, in words, stating only what the corrected tests support."""
    groups: dict[str, list[str]] = {}
    for diff, by_dir in by_diff.items():
        flip, revert = (_status(by_dir.get(preset), family) for preset, _ in DIRECTIONS)
        detected = [s for s in (flip, revert) if s in ("higher", "lower")]
        if "missing" in (flip, revert):
            kind = "missing"
        elif len(detected) == 2:
            kind = "both, same sign" if flip == revert else "both, opposite signs"
        elif len(detected) == 1:
            kind = "one"
        else:
            kind = "neither"
        groups.setdefault(kind, []).append(f"`{diff}`")
    words = {
        "both, same sign": "Detected in both contexts with the same sign (the paper's "
        "choice moves rSum the same way whatever the rest of the head)",
        "both, opposite signs": "Detected in both contexts with opposite signs (its "
        "effect depends on the rest of the head)",
        "one": "Detected in one context only (an interaction, or too little power in the other)",
        "neither": "Detected in neither context (or identical by construction; this does "
        "not show the effect is zero)",
        "missing": "Not yet measured in both contexts",
    }
    out = [f"- {words[k]}: {', '.join(groups[k])}." for k in words if k in groups]
    return [*out, ""] if out else []


def _point_note(c: Comparison | None) -> str | None:
    """The forest plot's note beside a point that is not an ordinary estimate."""
    if c is None:
        return None
    if c.identical:
        # "No effect possible" only where the configs show why (Comparison.reason).
        return "identical: no effect possible" if c.reason else "identical to the other side"
    if c.blind:
        return "text-blind: not measured"
    if c.frozen:
        return "did not train: not a test"
    if math.isnan(c.half):
        return f"{c.n} seed, no CI" if c.n == 1 else "no CI"
    return None


def plot_differences(cells: Cells, path: Path) -> dict[str, dict[str, list[float]]]:
    """Forest plot: per profile panel, one line per difference, Δ rSum (paper's side −
    code's side) with its 95% CI, one marker per direction. Returns ``{profile:
    {preset: Δ means in difference order}}`` (NaN where no comparison); ``{}`` when
    nothing is drawn. A point that is no ordinary estimate says so beside it
    (identical, did not train, no CI)."""
    if not cells:
        return {}
    plt = pyplot()
    panels = list(cells)
    height = max(len(cells[p]) for p in panels)
    fig, axes = plt.subplots(
        len(panels), 1, figsize=(8, (0.55 * height + 1.6) * len(panels)), squeeze=False,
        layout="constrained",
    )  # fmt: skip
    drawn: dict[str, dict[str, list[float]]] = {}
    for ax, profile in zip(axes[:, 0], panels, strict=True):
        diffs = list(cells[profile])
        drawn[profile] = {}
        for i, (preset, label) in enumerate(DIRECTIONS):
            comps = [cells[profile][d].get(preset) for d in diffs]
            means = [math.nan if c is None else c.mean for c in comps]
            halves = [0.0 if c is None or math.isnan(c.half) else c.half for c in comps]
            ys = [len(diffs) - 1 - j + (0.15 if i == 0 else -0.15) for j in range(len(diffs))]
            ax.errorbar(
                means, ys, xerr=halves, fmt="o" if i == 0 else "s", capsize=3,
                label=label.replace("`", ""),
            )  # fmt: skip
            drawn[profile][preset] = means
            # Say why a point has no error bar, or why it is no test: an identical cell's
            # 0 is not a precise null, and an untrained cell's Δ measures no learning.
            for c, mean, half, y in zip(comps, means, halves, ys, strict=True):
                note = _point_note(c)
                if note:
                    ax.annotate(
                        note, (mean + half, y), xytext=(4, 0), textcoords="offset points",
                        va="center", fontsize=7, color="dimgray",
                    )  # fmt: skip
        ax.axvline(0.0, color="gray", linewidth=1)
        ax.set_yticks(range(len(diffs)), list(reversed(diffs)))
        ax.set_xlabel("Δ rSum from adopting the paper's choice (paper's side − code's side)")
        ax.set_title(f"profile {profile}: each difference in both contexts (95% CI)")
        ax.legend(loc="best")
        ax.grid(axis="x", alpha=0.3)
    save_png(fig, path)
    plt.close(fig)
    return drawn


def sequential_section(
    designs: list[Design], matrix_name: str, out_dir: Path, results: Path, root: Path | None
) -> tuple[list[str], dict[str, str], Any]:
    """The section under sequential designs: each world's decisions for this matrix
    (:func:`~seps.report.sequential_section.decision_lines`) and their forest plot (the
    first design's is ``<matrix>-differences.png``, another world's
    ``<matrix>-differences-<profile>.png``)."""
    impacts = load_claims(root, load_paper_figures(root))
    blocks, plots, drawn_all = [], {}, {}
    for i, design in enumerate(designs):
        analysis = analyse(design, results, root)
        suffix = "" if i == 0 else f"-{design.profile}"
        png = Path(out_dir) / f"{matrix_name}-differences{suffix}.png"
        drawn = plot_decisions(analysis, matrix_name, png, impacts)
        rows = decision_lines(analysis, matrix_name, impacts, png.name if drawn else None)
        if rows:
            title = f"### World `{design.profile}`" if len(designs) > 1 else None
            blocks += ([title, ""] if title else []) + rows
        if drawn:
            plots[f"Δ rSum of each difference, final repeated intervals ({design.profile})"] = (
                png.name
            )
            drawn_all[design.profile] = drawn
    lines = [
        "## Each difference in both directions",
        "",
        "Δ rSum of adopting the paper's choice for one difference, paired by seed: flipped "
        "alone on the code preset (`code+X` − `code`) and reverted alone in the paper "
        "preset (`paper` − `paper-X`). Seeds are added look by look until each row is "
        "decided; a row that is identical by construction or whose learned part did not "
        "train is not a test and is not listed (the scorecard says why).",
        "",
        *blocks,
    ]
    return lines, plots, drawn_all


def difference_section(
    current: pd.DataFrame,
    matrix_name: str,
    out_dir: Path,
    family: Family | None,
    root: Path | None = None,
    results: Path | None = None,
) -> tuple[list[str], dict[str, str], Any]:
    """The section's markdown lines, ``{caption: png}`` and the plotted series: the
    sequential design's decisions when one names the matrix (and ``results`` is given),
    else each difference's fixed-sample tests in the report's family."""
    designs = _designs(current, root)
    if designs and results is not None:
        return sequential_section(designs, matrix_name, out_dir, results, root)
    cells = difference_cells(current)
    png = Path(out_dir) / f"{matrix_name}-differences.png"
    if not cells:
        png.unlink(missing_ok=True)
        return [], {}, {}
    drawn = plot_differences(cells, png)
    claims = load_claims(None, load_paper_figures(None))
    lines = [
        "## Each difference in both directions",
        "",
        "Δ rSum of adopting the paper's choice for one difference, paired by seed, ± its "
        "95% CI and the verdict on the report's corrected p: flipped alone on the code "
        "preset (`code+X` − `code`, the results table's test) and reverted alone in the "
        "paper preset (`paper` − `paper-X`: the paper's own run is the base here, not "
        "the table's baseline). Detected in both columns with the same sign: the "
        "paper's choice moves rSum the same way whatever the rest of the head; detected "
        "in one column only: it may interact with the other differences, or the other "
        "test may lack the power; these numbers cannot tell which "
        "(`seps.report.differences`).",
        "",
    ]
    headers = ["difference", "claimed impact (seed 004)"]
    for _, label in DIRECTIONS:
        headers += [f"{label}: Δ rSum", "p (Holm)", "verdict"]
    frozen = difference_frozen(current)
    for profile, by_diff in cells.items():
        rows = difference_rows(by_diff, family, claims, frozen.get(profile))
        lines += [f"### Profile `{profile}`", "", markdown_table(rows, headers), ""]
        lines += _summary_lines(by_diff, family) + _frozen_lines(frozen.get(profile, {}))
    caption = "Δ rSum of each difference, flipped on code and reverted in paper"
    lines += [f"![{caption}]({png.name})", ""]
    return lines, {caption: png.name}, drawn


__all__ = [
    "DIRECTIONS",
    "difference_cells",
    "difference_comparisons",
    "difference_rows",
    "difference_section",
    "plot_differences",
]
