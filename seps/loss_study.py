"""The loss-function study section of a report (issue 6, matrix ``loss-study``).

The seeds (``000_*``, ``001_*``) argue that SEPS must use MSE for the ratio
constraint and a hinge triplet, not cross-entropy, for alignment. This module turns
the stored per-step records of the ``loss-study`` matrix (``history[*].steps_log``,
written by :func:`seps.train.train`) into tables, four plots and statements that are
generated from the numbers:

- does the ratio loss act at all under each decision (its recorded values and the
  gradient norm it alone sends to the score predictor; SPEC.md finding "The ratio
  loss is a constant");
- where it acts, is MSE better than CE (final keep ratio against the target, rSum);
- does the hardest-negative triplet beat multi-positive InfoNCE here.

A matrix opts in with ``sections: [loss-study]``; :func:`loss_study_section` returns
the markdown lines and the plots, which :func:`seps.report.write_report` places in the
report. Every plot function returns the series it drew, read back from the artists,
so tests can check that the picture shows the stored records.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .config import CHOICES, get_config
from .losses import ratio_penalty, ratio_target_bin
from .report import _save_png, _table, fmt, fmt_ci, mean_ci, paired_test

#: Ratio criteria of the study, ``off`` meaning ``ratio_loss=off``.
CRITERIA = ("mse", "l1", "ce", "off")
DECISIONS = CHOICES["decision"]
FORMS = ("unified", "separate", "eq7")
ALIGN_LOSSES = CHOICES["align_loss"]
#: Below this, a gradient norm is float rounding, not a signal (float32 sums of ~1e4 terms).
GRAD_ZERO = 1e-5
_COLORS = {"mse": "tab:blue", "l1": "tab:green", "ce": "tab:red", "off": "tab:gray"}
_PLOT_FORM = "separate"  # the paper text's form: one keep ratio per mask
_PAPER_RATIO = {
    k: getattr(get_config("paper"), k) for k in ("decision", "ratio_loss", "ratio_criterion")
}


# ------------------------------------------------------------------------ records
def criterion_of(head: Mapping[str, Any]) -> str:
    """``off`` when the ratio loss is off, else the ratio criterion (mse, l1, ce)."""
    return "off" if head.get("ratio_loss") == "off" else str(head.get("ratio_criterion", "mse"))


def steps(history: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The per-step records of a run, in order, each with its ``epoch``."""
    out = []
    for h in history or []:
        for rec in h.get("steps_log") or []:
            out.append({**rec, "epoch": h.get("epoch")})
    return out


def mean_keep(rec: Mapping[str, Any]) -> float:
    """Keep ratio of a step, averaged over the branches."""
    kr = rec.get("keep_ratio") or {}
    return float(np.mean(list(kr.values()))) if kr else math.nan


def _done(cur: pd.DataFrame) -> pd.DataFrame:
    if cur.empty:
        return cur
    done = cur[cur["status"] == "done"]
    # Two run ids with the same resolved config and seed are one run (the paper default
    # is both a ratio cell and the official-triplet cell): count it once.
    done = done.drop_duplicates(["profile", "key", "seed"]).copy()
    done["decision"] = [h.get("decision") for h in done["head_config"]]
    done["criterion"] = [criterion_of(h) for h in done["head_config"]]
    done["form"] = [h.get("ratio_loss") for h in done["head_config"]]
    done["align_loss"] = [h.get("align_loss", "triplet") for h in done["head_config"]]
    return done


def _is_align_variant(head: Mapping[str, Any]) -> bool:
    """A run that differs from the paper preset's ratio setting only by its alignment loss."""
    return all(head.get(k) == v for k, v in _PAPER_RATIO.items())


def ratio_rows(done: pd.DataFrame) -> list[dict[str, Any]]:
    """One row per (decision, criterion, form) of the ratio part (official triplet)."""
    rows = []
    part = done[done["align_loss"] == "triplet"] if len(done) else done
    for decision in DECISIONS:
        for crit in CRITERIA:
            for form in ("off",) if crit == "off" else FORMS:
                sel = part[
                    (part["decision"] == decision)
                    & (part["criterion"] == crit)
                    & (part["form"] == form)
                ]
                if sel.empty:
                    continue
                values, grads, sgrads, finals, targets = [], [], [], [], []
                for hist, head in zip(sel["history"], sel["head_config"], strict=True):
                    st = steps(hist)
                    values += [s["ratio"] for s in st]
                    grads += [
                        s["ratio_grad_norm"] for s in st if s.get("ratio_grad_norm") is not None
                    ]
                    sgrads += [
                        s["selector_grad_norm"]
                        for s in st
                        if s.get("selector_grad_norm") is not None
                    ]
                    last = [s for s in st if s["epoch"] == st[-1]["epoch"]] if st else []
                    finals.append(
                        float(np.mean([mean_keep(s) for s in last])) if last else math.nan
                    )
                    targets.append(float(head.get("sparse_ratio", math.nan)))
                rsum = mean_ci([float(v) for v in sel["rsum"]])
                rows.append(
                    {
                        "decision": decision,
                        "criterion": crit,
                        "form": form,
                        "seeds": len(sel),
                        "target": float(np.mean(targets)),
                        "keep_final": float(np.nanmean(finals)) if finals else math.nan,
                        "ratio_min": min(values) if values else math.nan,
                        "ratio_max": max(values) if values else math.nan,
                        "ratio_grad_max": max(grads) if grads else math.nan,
                        "selector_grad_mean": float(np.mean(sgrads)) if sgrads else math.nan,
                        "rsum": rsum,
                        "rsum_by_seed": dict(zip(sel["seed"], sel["rsum"], strict=True)),
                    }
                )
    return rows


def align_rows(done: pd.DataFrame) -> list[dict[str, Any]]:
    """One row per alignment loss (paper preset's ratio setting)."""
    rows = []
    if done.empty:
        return rows
    part = done[[_is_align_variant(h) for h in done["head_config"]]]
    for kind in ALIGN_LOSSES:
        sel = part[part["align_loss"] == kind]
        if sel.empty:
            continue
        rows.append(
            {
                "align_loss": kind,
                "seeds": len(sel),
                "rsum": mean_ci([float(v) for v in sel["rsum"]]),
                "rsum_by_seed": dict(zip(sel["seed"], sel["rsum"], strict=True)),
                "run_ids": sorted(set(sel["run_id"])),
            }
        )
    return rows


# -------------------------------------------------------------------------- plots
def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _read_lines(ax: Any) -> dict[str, tuple[list[float], list[float]]]:
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
    form = "off" if crit == "off" else _PLOT_FORM
    return done[
        (done["align_loss"] == "triplet")
        & (done["decision"] == decision)
        & (done["criterion"] == crit)
        & (done["form"] == form)
    ]


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
    alone (dashed, ``ratio_grad_norm``), per criterion, one panel per decision."""
    return _per_decision_plot(
        done,
        path,
        lambda r: r.get("selector_grad_norm"),
        "gradient norm at the score predictor",
        second=lambda r: r.get("ratio_grad_norm"),
        title="score-predictor gradient",
    )


def _per_decision_plot(
    done: pd.DataFrame,
    path: Path,
    value: Callable[[Mapping[str, Any]], Any],
    ylabel: str,
    *,
    target: bool = False,
    second: Callable[[Mapping[str, Any]], Any] | None = None,
    title: str,
) -> dict[str, dict[str, Any]]:

    panels: dict[str, dict[str, tuple[list[float], list[float]]]] = {}
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
    plt = _plt()
    fig, axes = plt.subplots(
        1, len(panels), figsize=(4.6 * len(panels), 3.6), squeeze=False, layout="constrained"
    )
    out: dict[str, dict[str, Any]] = {}
    rho = _target(done) if target else None
    for ax, (decision, lines) in zip(axes[0], panels.items(), strict=True):
        for label, (x, y) in lines.items():
            crit = label.split(" ")[0]
            style = "--" if "only" in label else "-"
            ax.plot(x, y, style, color=_COLORS[crit], label=label, linewidth=1.2)
        drawn = _read_lines(ax)
        if rho is not None:
            ax.axhline(rho, color="black", linestyle=":", linewidth=1, label="_target")
        if second is not None:
            ax.set_yscale("symlog", linthresh=1e-6)
        ax.set_title(f"{title}: decision={decision}", fontsize=9)
        ax.set_xlabel("training step")
        ax.set_ylabel(ylabel, fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, frameon=False)
        out[decision] = {"lines": drawn}
        if target:
            out[decision]["target"] = rho
    _save_png(fig, path)
    plt.close(fig)
    return out


def _target(done: pd.DataFrame) -> float | None:
    """The runs' common selection ratio rho (``None`` if they differ)."""
    rhos = {float(h.get("sparse_ratio")) for h in done["head_config"] if h.get("sparse_ratio")}
    return rhos.pop() if len(rhos) == 1 else None


def plot_ratio_curves(done: pd.DataFrame, path: Path) -> dict[str, Any]:
    """The ratio losses as functions of one mask's keep ratio (``separate`` form):
    analytic curves of :func:`seps.losses.ratio_penalty` and, on top, the measured
    (keep ratio, per-branch loss term) of every recorded step of the ``separate`` runs.
    Under CE the curve is a staircase: ratios inside the target class cost the same,
    ratios across a class boundary differ sharply."""
    import torch

    part = done[(done["align_loss"] == "triplet") & (done["form"] == _PLOT_FORM)]
    if part.empty:
        path.unlink(missing_ok=True)
        return {}
    head = part["head_config"].iloc[0]
    rho = float(head["sparse_ratio"])
    bins, temp = int(head.get("ratio_bins", 10)), float(head.get("ratio_ce_temperature", 0.1))
    grid = np.linspace(0.0, 1.0, 401)
    plt = _plt()
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
        ax.plot(grid, curve, color=_COLORS[crit], linewidth=1.2, label=f"{crit} (analytic)")
        pts: dict[str, tuple[list[float], list[float]]] = {}
        sel = part[part["criterion"] == crit]
        for decision, marker in zip(DECISIONS, ("o", "s", "^"), strict=True):
            xs, ys = [], []
            for hist, head_cfg in zip(
                sel[sel["decision"] == decision]["history"],
                sel[sel["decision"] == decision]["head_config"],
                strict=True,
            ):
                lam = {"sparse": head_cfg["lambda_sparse"], "dense": head_cfg["lambda_dense"]}
                for rec in steps(hist):
                    for b, term in (rec.get("ratio_parts") or {}).items():
                        if b in rec["keep_ratio"] and lam.get(b):
                            xs.append(float(rec["keep_ratio"][b]))
                            ys.append(float(term) / float(lam[b]))
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
    _save_png(fig, path)
    plt.close(fig)
    return out


def plot_alignment(done: pd.DataFrame, path: Path) -> dict[str, Any]:
    """Left: the alignment loss per step (mean over seeds, each loss divided by its
    first logged value so that different scales share an axis). Right: test rSum per
    alignment loss, mean with 95% CI over seeds."""

    rows = align_rows(done)
    if not rows:
        path.unlink(missing_ok=True)
        return {}
    part = done[[_is_align_variant(h) for h in done["head_config"]]]
    plt = _plt()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.6), layout="constrained")
    for row in rows:
        sel = part[part["align_loss"] == row["align_loss"]]
        x, y = _step_means(sel, lambda r: r.get("align"))
        first = next((v for v in y if v), 1.0)
        ax1.plot(x, [v / first for v in y], linewidth=1.1, label=row["align_loss"])
    ax1.set_title("alignment loss / its first nonzero value", fontsize=9)
    ax1.set_xlabel("training step")
    ax1.grid(alpha=0.3)
    ax1.legend(fontsize=7, frameon=False)
    names = [r["align_loss"] for r in rows]
    means = [r["rsum"][0] for r in rows]
    halves = [r["rsum"][1] if r["rsum"][2] > 1 else 0.0 for r in rows]
    bars = ax2.bar(range(len(rows)), means, yerr=halves, capsize=4, color="tab:blue", alpha=0.7)
    ax2.set_xticks(range(len(rows)), names, rotation=20, fontsize=8)
    ax2.set_title("test rSum per alignment loss (95% CI over seeds)", fontsize=9)
    ax2.grid(alpha=0.3, axis="y")
    out = {
        "loss": _read_lines(ax1),
        "rsum": {n: float(b.get_height()) for n, b in zip(names, bars.patches, strict=True)},
        "seeds": {r["align_loss"]: r["seeds"] for r in rows},
    }
    _save_png(fig, path)
    plt.close(fig)
    return out


# --------------------------------------------------------------------- statements
def _f(x: float, digits: int = 3) -> str:
    return fmt(x, digits)


def _ci(m: tuple[float, float, int], digits: int = 1) -> str:
    return fmt_ci(m[0], m[1], m[2], digits)


def _acts(rows: list[dict[str, Any]], decision: str) -> tuple[bool, list[dict[str, Any]]]:
    rs = [r for r in rows if r["decision"] == decision and r["criterion"] != "off"]
    acts = any(
        (r["ratio_max"] - r["ratio_min"]) > 1e-9
        or (not math.isnan(r["ratio_grad_max"]) and r["ratio_grad_max"] > GRAD_ZERO)
        for r in rs
    )
    return acts, rs


def _paired(a: Mapping[Any, float], b: Mapping[Any, float]) -> tuple[float, float, float, int]:

    seeds = sorted(set(a) & set(b))
    return paired_test([float(a[s]) - float(b[s]) for s in seeds])


def _diff_text(d: tuple[float, float, float, int]) -> str:
    mean, half, p, n = d
    if n < 2:
        return f"{_f(mean, 1)} on {n} paired seed{'s' if n != 1 else ''} (no CI: not a conclusion)"
    verdict = "outside seed noise" if p < 0.05 else "within seed noise"
    return f"{_f(mean, 1)} ± {_f(half, 1)} (paired t-test p = {p:.3f}, n = {n}: {verdict})"


def statements(rows: list[dict[str, Any]], arows: list[dict[str, Any]]) -> list[str]:
    """What the data say, each bullet citing the table or plot it rests on."""
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
            out += _mse_vs_ce(rs, decision)
            out += _seed_ratio_claim(rs)
    out += _align_statements(arows)
    return out


def _seed_ratio_claim(rs: list[dict[str, Any]]) -> list[str]:
    """Seed 000's argument for MSE, checked on the paper's (``separate``) form."""
    m = next((r for r in rs if r["criterion"] == "mse" and r["form"] == _PLOT_FORM), None)
    c = next((r for r in rs if r["criterion"] == "ce" and r["form"] == _PLOT_FORM), None)
    if m is None or c is None:
        return []
    em, ec = abs(m["keep_final"] - m["target"]), abs(c["keep_final"] - c["target"])
    d = _paired(m["rsum_by_seed"], c["rsum_by_seed"])
    if d[3] < 2:
        acc = "the rSum difference has no CI (one seed)"
    elif d[2] < 0.05:
        acc = f"rSum differs outside seed noise ({'MSE' if d[0] > 0 else 'CE'} higher)"
    else:
        acc = "rSum does not differ outside seed noise"
    keep = (
        "MSE holds the keep ratio closer to the target"
        if em + 5e-4 < ec
        else "CE holds the keep ratio closer to the target"
        if ec + 5e-4 < em
        else "both hold the keep ratio equally close to the target"
    )
    if d[3] < 2:
        verdict = "with one seed this cannot test the seed's preference for MSE"
    elif d[2] < 0.05:
        verdict = (
            "the data support the seed's preference for MSE"
            if d[0] > 0
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


def _mse_vs_ce(rs: list[dict[str, Any]], decision: str) -> list[str]:
    out = []
    for form in FORMS:
        m = next((r for r in rs if r["criterion"] == "mse" and r["form"] == form), None)
        c = next((r for r in rs if r["criterion"] == "ce" and r["form"] == form), None)
        if m is None or c is None:
            continue
        em, ec = abs(m["keep_final"] - m["target"]), abs(c["keep_final"] - c["target"])
        closer = (
            "both end equally close"
            if abs(em - ec) < 5e-4
            else ("MSE ends closer" if em < ec else "CE ends closer")
        )
        d = _paired(m["rsum_by_seed"], c["rsum_by_seed"])
        out.append(
            f"  - form={form}: final keep ratio MSE {_f(m['keep_final'])} vs CE "
            f"{_f(c['keep_final'])} (target {m['target']:g}; {closer}; plot "
            f"'keep ratio'). rSum MSE {_ci(m['rsum'])} vs CE {_ci(c['rsum'])}; MSE − CE = "
            f"{_diff_text(d)} (Table 1)."
        )
    return out


def _align_statements(arows: list[dict[str, Any]]) -> list[str]:
    by = {r["align_loss"]: r for r in arows}
    out = []
    if "triplet_hardest" in by and "infonce" in by:
        h, n = by["triplet_hardest"], by["infonce"]
        d = _paired(h["rsum_by_seed"], n["rsum_by_seed"])
        better = "higher" if d[0] > 0 else "lower" if d[0] < 0 else "equal"
        out.append(
            f"- **Hardest-negative triplet vs multi-positive InfoNCE:** rSum "
            f"{_ci(h['rsum'])} vs {_ci(n['rsum'])}; triplet − InfoNCE = {_diff_text(d)}: the "
            f"hardest-negative triplet is {better} here (Table 2; plot 'alignment losses')."
        )
        if d[3] >= 2 and d[2] < 0.05 and d[0] < 0:
            out.append(
                "  The seeds' claim that cross-entropy cannot serve retrieval with several "
                "captions per image does not hold for the multi-positive form on this data."
            )
        elif d[3] >= 2 and d[2] >= 0.05:
            out.append(
                "  The data do not separate the two: the seeds' argument for the triplet is "
                "neither confirmed nor refuted at this scale."
            )
    if "triplet" in by:
        base = by["triplet"]
        for kind, row in by.items():
            if kind == "triplet":
                continue
            d = _paired(row["rsum_by_seed"], base["rsum_by_seed"])
            out.append(f"- `{kind}` − official schedule `triplet`: rSum {_diff_text(d)} (Table 2).")
    return out


# ------------------------------------------------------------------------- tables
def ratio_table(rows: list[dict[str, Any]]) -> str:

    body = [
        [
            r["decision"],
            r["criterion"],
            r["form"],
            r["seeds"],
            _f(r["keep_final"]),
            f"{r['ratio_min']:.4g} .. {r['ratio_max']:.4g}",
            "—" if math.isnan(r["ratio_grad_max"]) else f"{r['ratio_grad_max']:.2e}",
            "—" if math.isnan(r["selector_grad_mean"]) else f"{r['selector_grad_mean']:.2e}",
            _ci(r["rsum"]),
        ]
        for r in rows
    ]
    headers = [
        "decision",
        "criterion",
        "form",
        "seeds",
        "final keep ratio",
        "ratio loss min .. max (all steps)",
        "max ratio grad",
        "mean predictor grad",
        "rSum",
    ]
    return _table(body, headers)


def align_table(arows: list[dict[str, Any]]) -> str:

    base = next((r for r in arows if r["align_loss"] == "triplet"), None)
    body = []
    for r in arows:
        d = (
            _diff_text(_paired(r["rsum_by_seed"], base["rsum_by_seed"]))
            if base is not None and r is not base
            else "baseline"
        )
        body.append([r["align_loss"], r["seeds"], _ci(r["rsum"]), d])
    return _table(body, ["alignment loss", "seeds", "rSum", "Δ rSum vs triplet (official)"])


# ------------------------------------------------------------------------ section
PLOTS = (
    ("keep ratio", "keep-ratio", plot_keep_ratio),
    ("ratio losses vs keep ratio", "ratio-curves", plot_ratio_curves),
    ("alignment losses", "align", plot_alignment),
    ("score-predictor gradient", "grad-norm", plot_grad_norm),
)


def plot_files(matrix_name: str, profile: str) -> list[str]:
    """The PNG names of one profile's loss-study plots."""
    return [f"{matrix_name}-{profile}-{suffix}.png" for _, suffix, _ in PLOTS]


def loss_study_section(
    cur: pd.DataFrame, matrix_name: str, out_dir: Path
) -> tuple[list[str], dict[str, str], dict[str, Any]]:
    """Markdown lines, plots (caption -> file) and the plotted series of the study,
    one subsection per profile (``<matrix>-<profile>-<plot>.png``). Plot files of
    profiles without records are removed rather than left stale."""
    done = _done(cur)
    profiles = sorted(str(p) for p in done["profile"].dropna().unique()) if len(done) else []
    keep = {f for p in profiles for f in plot_files(matrix_name, p)}
    for stale in out_dir.glob(f"{matrix_name}-*.png"):
        ours = any(stale.name.endswith(f"-{suffix}.png") for _, suffix, _ in PLOTS)
        if ours and stale.name not in keep:
            stale.unlink()
    if not profiles:
        return [], {}, {}
    lines = ["## Loss study", ""]
    plots: dict[str, str] = {}
    series: dict[str, Any] = {}
    for profile in profiles:
        sub, sub_plots, sub_series = _profile_section(
            done[done["profile"] == profile], matrix_name, profile, out_dir
        )
        lines += [f"### Profile `{profile}`", "", *sub]
        plots.update(sub_plots)
        series[profile] = sub_series
    return lines, plots, series


def _profile_section(
    done: pd.DataFrame, matrix_name: str, profile: str, out_dir: Path
) -> tuple[list[str], dict[str, str], dict[str, Any]]:
    plots: dict[str, str] = {}
    series: dict[str, Any] = {}
    for caption, suffix, draw in PLOTS:
        name = f"{matrix_name}-{profile}-{suffix}.png"
        drawn = draw(done, out_dir / name)
        if drawn:
            plots[f"{caption} ({profile})"] = name
            series[suffix] = drawn
    rows, arows = ratio_rows(done), align_rows(done)
    lines = ["#### What the data show", "", *statements(rows, arows), ""]
    if rows:
        lines += [
            "#### Table 1: ratio constraint",
            "",
            "Final keep ratio: mean over the last epoch's steps of the masks' mean keep ratio. "
            "'max ratio grad': the largest L2 norm, over all steps, of the gradient of "
            "`ratio_weight × L_ratio` alone with respect to the score predictor's parameters "
            "(exactly 0 when the ratio loss has no graph). 'mean predictor grad': the whole "
            "loss's gradient there. Alignment loss: official triplet schedule.",
            "",
            ratio_table(rows),
            "",
        ]
    if arows:
        lines += [
            "#### Table 2: alignment losses",
            "",
            "Paper preset's ratio setting; rSum mean ± 95% CI over seeds; Δ is paired by seed.",
            "",
            align_table(arows),
            "",
        ]
    for caption, name in plots.items():
        lines += [f"![{caption}]({name})", ""]
    return lines, plots, series


__all__ = [
    "ALIGN_LOSSES",
    "CRITERIA",
    "align_rows",
    "criterion_of",
    "loss_study_section",
    "plot_alignment",
    "plot_files",
    "plot_grad_norm",
    "plot_keep_ratio",
    "plot_ratio_curves",
    "ratio_rows",
    "statements",
    "steps",
]
