"""The loss-function study section of a report (issue 6, matrix ``loss-study``).

The seeds (``000_*``, ``001_*``) argue that SEPS must use MSE for the ratio
constraint and a hinge triplet, not cross-entropy, for alignment. This module turns
the study's rows (:mod:`seps.report.loss_records`) into tables and statements that are
generated from the numbers, beside the plots of :mod:`seps.report.loss_plots`:

- does the ratio loss act at all under each decision (its recorded values and the
  gradient norm it alone sends to the score predictor; SPEC.md finding "The ratio
  loss is a constant");
- where it acts, is MSE better than CE (final keep ratio against the target, rSum);
- does the hardest-negative triplet beat multi-positive InfoNCE here.

Every paired comparison of the section is listed by :func:`loss_study_comparisons`, so
that it joins the report's one correction family; the verdicts ("outside seed noise")
use the corrected p-values, and a cell bit-identical to the other side is said to be
identical, not tested.

A matrix opts in with ``sections: [loss-study]``; :func:`loss_study_section` returns
the markdown lines, the plots and their series, which :func:`seps.report.write_report`
places in the report.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from ..io.formatting import DASH, fmt, fmt_ci, markdown_table
from ..stats.paired import ALPHA, paired_test
from .bimodal import BROKEN_FACTOR, rsum_cell, split_seeds
from .compare import Comparison, Family, compare, family_of
from .loss_plots import plot_alignment, plot_grad_norm, plot_keep_ratio, plot_ratio_curves
from .loss_records import (
    ALIGN_LOSSES,
    CRITERIA,
    DECISIONS,
    FLAT_TOLERANCE,
    FORMS,
    PLOT_FORM,
    SUMMED_TRIPLET,
    align_rows,
    at_paper_weight,
    completed_runs,
    criterion_of,
    flat,
    ratio_rows,
    steps,
)
from .records import DENSE_COLUMN

#: Below this, a gradient norm is float rounding, not a signal (float32 sums of ~1e4 terms).
GRAD_ZERO = 1e-5


# --------------------------------------------------------------------- statements
def _f(x: float, digits: int = 3) -> str:
    return fmt(x, digits)


def _ci(m: tuple[float, float, int], digits: int = 1) -> str:
    return fmt_ci(m[0], m[1], m[2], digits)


def _cell_name(r: dict[str, Any]) -> str:
    """A Table 1 or Table 2 row's name in text."""
    if "align_loss" in r:
        return r["align_loss"]
    name = "/".join(str(r[k]) for k in ("decision", "criterion", "form"))
    return f"{name} (weight {r['weight']:.4g})" if r.get("scaled") else name


def _rsum(r: dict[str, Any]) -> str:
    """A cell's rSum: mean ± CI, or each group's mean when its seeds split into broken
    and functional ones (:func:`seps.report.bimodal.rsum_cell`)."""
    return rsum_cell(_cell_name(r), r.get("by_seed", {}), _ci(r["rsum"]))


def _bimodal_statements(rows: list[dict[str, Any]], arows: list[dict[str, Any]]) -> list[str]:
    """One bullet naming the cells whose seeds split into broken and functional ones."""
    # The paper default is both a Table 1 and a Table 2 row: name each cell once.
    texts = dict.fromkeys(
        s.text()
        for r in [*rows, *arows]
        if (s := split_seeds(_cell_name(r), r.get("by_seed", {}))).bimodal
    )
    if not texts:
        return []
    return [
        f"- **Bimodal cells:** some seeds at chance level (test rSum at most "
        f"{BROKEN_FACTOR:g} × chance), the others above it, so the tables give each "
        "group's mean rSum instead of a mean ± CI, and a Δ with such a cell mixes the two: "
        f"{'; '.join(texts)}."
    ]


def _acts(rows: list[dict[str, Any]], decision: str) -> tuple[bool, list[dict[str, Any]]]:
    rs = [r for r in rows if r["decision"] == decision and r["criterion"] != "off"]
    acts = any(
        (r["ratio_max"] - r["ratio_min"]) > 1e-9
        or (not math.isnan(r["ratio_grad_max"]) and r["ratio_grad_max"] > GRAD_ZERO)
        for r in rs
    )
    return acts, rs


#: A comparison of the section, by what it compares: ``("mse-ce", decision, form)``,
#: ``("mse-scaled", decision, criterion, form, weight)`` (MSE against a criterion at the
#: weight that matches MSE's initial gradient norm), ``("hardest-infonce",)`` or
#: ``("vs-triplet", alignment loss)``.
Comparisons = dict[tuple[str, ...], Comparison]


def _cell(rows: list[dict[str, Any]], **match: Any) -> dict[str, Any] | None:
    return next((r for r in rows if all(r[k] == v for k, v in match.items())), None)


def comparisons(rows: list[dict[str, Any]], arows: list[dict[str, Any]]) -> Comparisons:
    """Every paired comparison the section prints, by name (see :data:`Comparisons`):
    MSE − CE in each form of each decision where the ratio loss acts, the
    hardest-negative triplet − InfoNCE, and each alignment loss − the official triplet."""
    out: Comparisons = {}
    for decision in DECISIONS:
        acts, rs = _acts(rows, decision)
        if not acts:
            continue
        for form in FORMS:
            m = _cell(rs, criterion="mse", form=form, scaled=False)
            c = _cell(rs, criterion="ce", form=form, scaled=False)
            if m is not None and c is not None:
                out["mse-ce", decision, form] = compare(m["by_seed"], c["by_seed"])
            for r in rs:  # the criteria at the reference's initial gradient norm
                if m is not None and r["scaled"] and r["form"] == form:
                    key = ("mse-scaled", decision, r["criterion"], form, f"{r['weight']:g}")
                    out[key] = compare(m["by_seed"], r["by_seed"])
    by = {r["align_loss"]: r for r in arows}
    if "triplet_hardest" in by and "infonce" in by:
        h, n = by["triplet_hardest"], by["infonce"]
        out["hardest-infonce",] = compare(h["by_seed"], n["by_seed"])
    if "triplet" in by:
        for kind, row in by.items():
            # The summed-every-epoch triplet is triplet_sum's training under another
            # name: one test of it, not two.
            same_as_sum = kind == SUMMED_TRIPLET and "triplet_sum" in by
            if kind != "triplet" and not same_as_sum:
                out["vs-triplet", kind] = compare(row["by_seed"], by["triplet"]["by_seed"])
    return out


def _significant(c: Comparison, family: Family) -> bool:
    """Outside seed noise: a test of the family with corrected p < 0.05."""
    return c.testable and family.p(c) < ALPHA


def _p(p: float) -> str:
    return "< 0.001" if p < 0.001 else f"= {p:.3f}"


def _diff_text(c: Comparison, family: Family) -> str:
    if c.identical:
        why = f": {c.reason}" if c.reason else ""
        return f"identical on every seed (no effect possible{why}; not a test)"
    if c.n < 2:
        n = c.n
        return (
            f"{_f(c.mean, 1)} on {n} paired seed{'s' if n != 1 else ''} (no CI: not a conclusion)"
        )
    verdict = "outside seed noise" if _significant(c, family) else "within seed noise"
    return (
        f"{_f(c.mean, 1)} ± {_f(c.half, 1)} (paired t-test p {_p(c.p)}, Holm-corrected "
        f"p {_p(family.p(c))}, n = {c.n}: {verdict})"
    )


def statements(
    rows: list[dict[str, Any]], arows: list[dict[str, Any]], family: Family | None = None
) -> list[str]:
    """What the data say, each bullet citing the table or plot it rests on; verdicts on
    p-values corrected in ``family`` (default: the family of these comparisons alone)."""
    comps = comparisons(rows, arows)
    family = family if family is not None else family_of(comps.values())
    out: list[str] = []
    for decision in DECISIONS:
        acts, rs = _acts(rows, decision)
        if not rs:
            continue
        lo = min(r["ratio_min"] for r in rs)
        hi = max(r["ratio_max"] for r in rs)
        grads = [r["ratio_grad_max"] for r in rs if not math.isnan(r["ratio_grad_max"])]
        g = max(grads) if grads else math.nan
        if not acts:
            spread = max(r["ratio_max"] - r["ratio_min"] for r in rs)
            out.append(
                f"- **decision={decision}: the ratio loss is a constant.** In every "
                f"criterion and form its recorded value never changed within a run (largest "
                f"within-run spread {spread:.1e}) and the gradient it alone sends to the score "
                f"predictor is at most {g:.1e} (Table 1, column 'max ratio grad'; "
                f"plot 'score-predictor gradient', dashed). This agrees with SPEC.md's finding."
            )
        else:
            out.append(
                f"- **decision={decision}: the ratio loss acts.** Its recorded value moves "
                f"between {lo:.3g} and {hi:.3g} and the gradient it alone sends to the score "
                f"predictor reaches {g:.3g} (Table 1; plot 'score-predictor gradient')."
            )
            out += _mse_vs_ce(rs, decision, comps, family)
            out += _seed_ratio_claim(rs, comps.get(("mse-ce", decision, PLOT_FORM)), family)
    out += _align_statements(arows, comps, family)
    out += _bimodal_statements(rows, arows)
    return out


def _closer(m: dict[str, Any], c: dict[str, Any]) -> tuple[str, str]:
    """Which of MSE (``m``) and CE (``c``) ends with its keep ratio closer to the target:
    a paired t interval over the seeds both have of |keep - target| (MSE - CE).

    Returns ``(short, long)`` phrasings. "Closer" is said only when the 95% interval
    excludes 0; it is descriptive (how the masks end), uncorrected and not a test of
    retrieval, so it stays out of the report's Holm family.
    """
    seeds = sorted(set(m["keep_gap_by_seed"]) & set(c["keep_gap_by_seed"]))
    diffs = [m["keep_gap_by_seed"][s] - c["keep_gap_by_seed"][s] for s in seeds]
    mean, half, _, n = paired_test(diffs)
    if n < 2 or math.isnan(half):
        return (
            "one paired seed: no CI",
            "with one paired seed no criterion can be said to end closer",
        )
    gap = f"|keep − target| MSE − CE = {mean:+.4f} ± {half:.4f}, n = {n}, uncorrected 95% CI"
    if half < abs(mean):
        who = "MSE" if mean < 0 else "CE"
        return (
            f"{who} ends closer: {gap}",
            f"{who} ends with its keep ratio closer to the target ({gap})",
        )
    return (
        f"neither ends detectably closer: {gap}",
        f"neither criterion ends detectably closer to the target keep ratio ({gap})",
    )


def _seed_ratio_claim(rs: list[dict[str, Any]], d: Comparison | None, family: Family) -> list[str]:
    """Seed 000's argument for MSE, checked on the paper's (``separate``) form; ``d`` is
    its MSE − CE comparison."""
    m = _cell(rs, criterion="mse", form=PLOT_FORM, scaled=False)
    c = _cell(rs, criterion="ce", form=PLOT_FORM, scaled=False)
    if m is None or c is None or d is None:
        return []
    if d.identical:
        acc = "rSum is identical on every seed (no effect possible)"
    elif d.n < 2:
        acc = "the rSum difference has no CI (one seed)"
    elif _significant(d, family):
        acc = f"rSum differs outside seed noise ({'MSE' if d.mean > 0 else 'CE'} higher)"
    else:
        acc = "rSum does not differ outside seed noise"
    keep = _closer(m, c)[1]
    if d.identical:
        verdict = "the two criteria trained identically here, so this cannot test the seed"
    elif d.n < 2:
        verdict = "with one seed this cannot test the seed's preference for MSE"
    elif _significant(d, family):
        verdict = (
            "the data support the seed's preference for MSE"
            if d.mean > 0
            else "the data contradict the seed's preference for MSE"
        )
    else:
        verdict = "the data neither support nor refute the seed's preference for MSE"
    return [
        f"  - Seed `000_*` argues that the ratio is a regression target (MSE) and that CE's "
        f"classes make nearby ratios cost very differently; the analytic curves show that "
        f"staircase (plot 'ratio losses vs keep ratio'). In training (form `separate`), "
        f"{keep} and {acc}; {verdict}."
    ]


def _mse_vs_ce(
    rs: list[dict[str, Any]], decision: str, comps: Comparisons, family: Family
) -> list[str]:
    out = []
    for form in FORMS:
        m = _cell(rs, criterion="mse", form=form, scaled=False)
        c = _cell(rs, criterion="ce", form=form, scaled=False)
        d = comps.get(("mse-ce", decision, form))
        if m is None or c is None or d is None:
            continue
        closer = _closer(m, c)[0]
        out.append(
            f"  - form={form}: final keep ratio MSE {_f(m['keep_final'])} vs CE "
            f"{_f(c['keep_final'])} (target {m['target']:g}; {closer}; plot "
            f"'keep ratio'). rSum MSE {_rsum(m)} vs CE {_rsum(c)}; MSE − CE = "
            f"{_diff_text(d, family)} (Table 1)."
        )
    out += _scaled_statements(rs, decision, comps, family)
    return out


def _scaled_statements(
    rs: list[dict[str, Any]], decision: str, comps: Comparisons, family: Family
) -> list[str]:
    """The criteria run at the weight that matches MSE's initial gradient norm."""
    out = []
    for r in rs:
        if not r["scaled"]:
            continue
        m = _cell(rs, criterion="mse", form=r["form"], scaled=False)
        key = ("mse-scaled", decision, r["criterion"], r["form"], f"{r['weight']:g}")
        d = comps.get(key)
        if m is None or d is None:
            continue
        out.append(
            f"  - form={r['form']}, `{r['criterion']}` at equal initial gradient norm (weight "
            f"{r['weight']:.4g} instead of {m['weight']:g}; initial ratio gradient "
            f"{r['ratio_grad_initial']:.3g} vs MSE's {m['ratio_grad_initial']:.3g}): rSum "
            f"{_rsum(r)}; MSE − {r['criterion']} = {_diff_text(d, family)} (Table 1)."
        )
    return out


def _align_statements(arows: list[dict[str, Any]], comps: Comparisons, family: Family) -> list[str]:
    by = {r["align_loss"]: r for r in arows}
    out = []
    d = comps.get(("hardest-infonce",))
    if d is not None:
        h, n = by["triplet_hardest"], by["infonce"]
        sig = _significant(d, family)
        better = "higher" if d.mean > 0 else "lower"
        better = better if sig else "not separated from InfoNCE"
        out.append(
            f"- **Hardest-negative triplet vs multi-positive InfoNCE:** rSum "
            f"{_rsum(h)} vs {_rsum(n)}; triplet − InfoNCE = "
            f"{_diff_text(d, family)}: the hardest-negative triplet is {better} here "
            "(Table 2; plot 'alignment losses')."
        )
        if sig and d.mean < 0:
            out.append(
                "  The seeds' claim that cross-entropy cannot serve retrieval with several "
                "captions per image does not hold for the multi-positive form on this data."
            )
        elif d.testable and not sig:
            out.append(
                "  The data do not separate the two: the seeds' argument for the triplet is "
                "neither confirmed nor refuted at this scale."
            )
    out += _flat_statements(arows)
    for kind in by:
        d = comps.get(("vs-triplet", kind))
        if d is not None:
            out.append(
                f"- `{kind}` − official schedule `triplet`: rSum {_diff_text(d, family)} (Table 2)."
            )
    return out


def _flat_statements(arows: list[dict[str, Any]]) -> list[str]:
    """One bullet per alignment cell whose similarities went flat
    (:func:`seps.report.loss_records.flat`), or one saying that none did; nothing when
    the runs do not share a batch size and margin."""
    # Only cells whose records logged both batch triplets were measured (records made
    # before they were logged have none): a "none went flat" must not cover the others.
    checked = [
        r
        for r in arows
        if r.get("flat_levels") and all(math.isfinite(v) for v in r["last_triplets"].values())
    ]
    if not checked:
        return []
    flats = [r for r in checked if flat(r)]
    if not flats:
        return [
            f"- No alignment cell's similarities went flat: in each of the "
            f"{len(checked)} measured, at least one of the last epoch's batch triplets stays "
            f"more than {FLAT_TOLERANCE:.0%} from its value with every similarity of a batch "
            "equal (plot 'alignment losses')."
        ]
    out = []
    for r in flats:
        got, lv = r["last_triplets"], r["flat_levels"]
        out.append(
            f"- **`{r['align_loss']}`: the similarities went flat.** Over the last epoch its "
            f"training batches score as if every similarity were equal (an embedding "
            f"collapse): the triplet summed over negatives {got['align_sum']:.1f} against "
            f"{lv['align_sum']:.1f} (2 B (B − 1) m), over the hardest negative "
            f"{got['align_hardest']:.2f} against {lv['align_hardest']:.2f} (2 B m), mean "
            f"over {r['seeds']} seeds, both within {FLAT_TOLERANCE:.0%}; its rSum is "
            f"{_rsum(r)} (Table 2; plot 'alignment losses')."
        )
    return out


# ------------------------------------------------------------------------- tables
def ratio_table(rows: list[dict[str, Any]], dense_column: bool = False) -> str:
    """Table 1: one line per (decision, criterion, form) of :func:`ratio_rows`
    (``dense_column``: each row's dense-caption protocols, when the study mixes them)."""
    body = [
        [
            r["decision"],
            f"{r['criterion']} (weight {r['weight']:.4g})" if r["scaled"] else r["criterion"],
            r["form"],
            *([r["dense"]] if dense_column else []),
            r["seeds"],
            _f(r["keep_final"]),
            f"{r['ratio_min']:.4g} .. {r['ratio_max']:.4g}",
            DASH if math.isnan(r["ratio_grad_initial"]) else f"{r['ratio_grad_initial']:.2e}",
            DASH if math.isnan(r["ratio_grad_max"]) else f"{r['ratio_grad_max']:.2e}",
            DASH if math.isnan(r["selector_grad_mean"]) else f"{r['selector_grad_mean']:.2e}",
            _rsum(r),
        ]
        for r in rows
    ]
    headers = [
        "decision",
        "criterion",
        "form",
        *([DENSE_COLUMN] if dense_column else []),
        "seeds",
        "final keep ratio",
        "ratio loss min .. max (all steps)",
        "initial ratio grad",
        "max ratio grad",
        "mean predictor grad",
        "rSum",
    ]
    return markdown_table(body, headers)


def _untested(kind: str, arows: list[dict[str, Any]]) -> str:
    """Table 2's Δ cell of a row with no comparison of its own."""
    if kind == "triplet":
        return "baseline"
    if kind == SUMMED_TRIPLET and any(r["align_loss"] == "triplet_sum" for r in arows):
        return "the training of triplet_sum (one test, on that row)"
    return DASH


def align_table(
    arows: list[dict[str, Any]], family: Family | None = None, dense_column: bool = False
) -> str:
    """Table 2: one line per alignment loss of :func:`align_rows`, Δ paired by seed with
    its raw and corrected p (``family``; default: these comparisons alone)."""
    comps = comparisons([], arows)
    family = family if family is not None else family_of(comps.values())
    body = []
    for r in arows:
        d = comps.get(("vs-triplet", r["align_loss"]))
        dense = [r["dense"]] if dense_column else []
        delta = _diff_text(d, family) if d else _untested(r["align_loss"], arows)
        body.append([r["align_loss"], *dense, r["seeds"], _rsum(r), delta])
    headers = ["alignment loss", "seeds", "rSum", "Δ rSum vs triplet (official)"]
    if dense_column:
        headers.insert(1, DENSE_COLUMN)
    return markdown_table(body, headers)


# ------------------------------------------------------------------------ section
#: (caption, file-name suffix, draw) of each plot, in the section's order.
PLOTS = (
    ("keep ratio", "keep-ratio", plot_keep_ratio),
    ("ratio losses vs keep ratio", "ratio-curves", plot_ratio_curves),
    ("alignment losses", "align", plot_alignment),
    ("score-predictor gradient", "grad-norm", plot_grad_norm),
)


def plot_files(matrix_name: str, profile: str) -> list[str]:
    """The PNG names of one profile's loss-study plots."""
    return [f"{matrix_name}-{profile}-{suffix}.png" for _, suffix, _ in PLOTS]


def loss_study_comparisons(cur: pd.DataFrame) -> list[Comparison]:
    """Every paired comparison the section prints, over all profiles (for the report's
    correction family)."""
    done = completed_runs(cur)
    if done.empty:
        return []
    out: list[Comparison] = []
    for profile in sorted(str(p) for p in done["profile"].dropna().unique()):
        sub = done[done["profile"] == profile]
        out += comparisons(ratio_rows(sub), align_rows(sub)).values()
    return out


def loss_study_section(
    cur: pd.DataFrame, matrix_name: str, out_dir: Path, family: Family | None = None
) -> tuple[list[str], dict[str, str], dict[str, Any]]:
    """Markdown lines, plots (caption -> file) and the plotted series of the study,
    one subsection per profile (``<matrix>-<profile>-<plot>.png``). Verdicts use the
    p-values corrected in ``family``, the report's (default: the family of the section's
    own comparisons, :func:`loss_study_comparisons`). Plot files of profiles without
    records are removed rather than left stale."""
    family = family if family is not None else family_of(loss_study_comparisons(cur))
    done = completed_runs(cur)
    profiles = sorted(str(p) for p in done["profile"].dropna().unique()) if len(done) else []
    keep = {f for p in profiles for f in plot_files(matrix_name, p)}
    for stale in out_dir.glob(f"{matrix_name}-*.png"):
        ours = any(stale.name.endswith(f"-{suffix}.png") for _, suffix, _ in PLOTS)
        if ours and stale.name not in keep:
            stale.unlink()
    if not profiles:
        return [], {}, {}
    lines = [
        "## Loss study",
        "",
        f"Paired comparisons: raw p and p {family.sentence()} (the same family as the "
        "results table's; a comparison that also appears there is one test); 'outside "
        "seed noise' means a corrected p < 0.05.",
        "",
    ]
    plots: dict[str, str] = {}
    series: dict[str, Any] = {}
    for profile in profiles:
        sub, sub_plots, sub_series = _profile_section(
            done[done["profile"] == profile], matrix_name, profile, out_dir, family
        )
        lines += [f"### Profile `{profile}`", "", *sub]
        plots.update(sub_plots)
        series[profile] = sub_series
    return lines, plots, series


def _profile_section(
    done: pd.DataFrame, matrix_name: str, profile: str, out_dir: Path, family: Family
) -> tuple[list[str], dict[str, str], dict[str, Any]]:
    plots: dict[str, str] = {}
    series: dict[str, Any] = {}
    for caption, suffix, draw in PLOTS:
        name = f"{matrix_name}-{profile}-{suffix}.png"
        drawn = draw(at_paper_weight(done), out_dir / name)  # one curve per criterion
        if drawn:
            plots[f"{caption} ({profile})"] = name
            series[suffix] = drawn
    rows, arows = ratio_rows(done), align_rows(done)
    cells = {r["dense"] for r in [*rows, *arows]}
    dense = len(cells) > 1 or "varies" in cells  # mixed protocols: a column per table
    lines = ["#### What the data show", "", *statements(rows, arows, family), ""]
    if rows:
        lines += [
            "#### Table 1: ratio constraint",
            "",
            "Final keep ratio: mean over the last epoch's steps of the masks' mean keep ratio. "
            "'max ratio grad': the largest L2 norm, over all steps, of the gradient of "
            "`ratio_weight × L_ratio` alone with respect to the score predictor's parameters "
            "(exactly 0 when the ratio loss has no graph); 'initial ratio grad': the same "
            "at the first step, mean over seeds. 'mean predictor grad': the whole "
            "loss's gradient there. Alignment loss: the profile's triplet schedule. A criterion "
            "shown with a weight is run at the `ratio_weight` that gives it MSE's initial "
            "gradient norm in the same form (`seps-bench ratio-scale`), so it is compared "
            "with MSE at equal scale.",
            "",
            ratio_table(rows, dense),
            "",
        ]
    if arows:
        lines += [
            "#### Table 2: alignment losses",
            "",
            "Paper preset's ratio setting; rSum mean ± 95% CI over seeds; Δ is paired by seed.",
            "",
            align_table(arows, family, dense),
            "",
        ]
    for caption, name in plots.items():
        lines += [f"![{caption}]({name})", ""]
    return lines, plots, series


__all__ = [
    "ALIGN_LOSSES",
    "CRITERIA",
    "PLOTS",
    "Comparisons",
    "align_rows",
    "align_table",
    "comparisons",
    "criterion_of",
    "loss_study_comparisons",
    "loss_study_section",
    "plot_alignment",
    "plot_files",
    "plot_grad_norm",
    "plot_keep_ratio",
    "plot_ratio_curves",
    "ratio_rows",
    "ratio_table",
    "statements",
    "steps",
]
