"""What the paper reports, matched to the runs of a matrix and set beside the measurements.

The reported figures are read from ``paper_figures.yaml`` (an ablation root's, else the
package's ``ablations/paper_figures.yaml``) and the claimed impacts of the documented
differences from ``differences.yaml``. :func:`paper_reference` says which reported figure,
if any, a run corresponds to; :func:`paper_sections` writes the report's "Reported by the
paper" tables from those references and the matrix's summary.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ..core.config import PRESETS, get_config
from ..experiments.definition_checks import read_yaml_file, short
from ..experiments.definitions import Matrix, RunSpec, default_root, packaged_root
from ..io.formatting import DASH, fmt, is_missing, markdown_table
from .records import DENSE_COLUMN, LABELS, METRICS, profiles
from .summary import delta_text, metric_cell, variant_text

#: Label of the paper's Table 1 figure shown beside the code and paper presets.
PAPER_LABEL = "paper/README reported, Flickr30K ViT-224"
#: The figures shipped with the package, used when the ablation root has none.
REPO_FIGURES = packaged_root() / "paper_figures.yaml"
#: The recalls of the paper's module-ablation table (it reports R@1 and R@5 only).
MODULE_RECALLS = ("i2t_r1", "i2t_r5", "t2i_r1", "t2i_r5")
#: The head fields the paper's coefficient grid sweeps (l1, l2).
COEFFICIENT_KEYS = frozenset({"lambda_sparse", "lambda_dense"})
#: Head fields a run may set beside l1, l2 and still be matched to a coefficient row: the
#: paper measured its grid under its own decision only, so for another decision the row
#: is context, and :func:`paper_decision_note` says so.
COEFFICIENT_CONTEXT_KEYS = frozenset({"decision"})


def figures_problem(doc: Any) -> str | None:
    """What makes ``doc`` (a parsed ``paper_figures.yaml``) unusable by the reports, or
    ``None``: each table a mapping, its ``rows`` a list of mappings whose metrics are
    numbers."""
    if not isinstance(doc, Mapping):
        return f"expected a mapping of tables, got {short(doc)}"
    for table, entry in doc.items():
        if not isinstance(entry, Mapping):
            return f"table {table!r}: expected a mapping with 'rows', got {short(entry)}"
        rows = entry.get("rows") or []
        if not isinstance(rows, list):
            return f"table {table!r}: field 'rows': expected a list, got {short(rows)}"
        for i, row in enumerate(rows):
            if not isinstance(row, Mapping):
                return f"table {table!r}: rows[{i}]: expected a mapping, got {short(row)}"
            for m in METRICS:
                v = row.get(m)
                if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
                    where = f"table {table!r}: rows[{i}]: field {m!r}"
                    return f"{where}: expected a number, got {short(v)}"
    return None


def load_paper_figures(root: Path | None = None) -> dict[str, Any]:
    """``paper_figures.yaml`` of the ablation root, else the repository's (or ``{}``)."""
    for path in ((root or default_root()) / "paper_figures.yaml", REPO_FIGURES):
        if path.exists():
            doc = (
                read_yaml_file(path) or {}
            )  # one line per fault (seps.experiments.definition_checks)
            problem = figures_problem(doc)
            if problem:
                raise ValueError(f"{path}: {problem}")
            return dict(doc)
    return {}


def load_claims(root: Path | None, figures: Mapping[str, Any]) -> dict[str, str]:
    """Difference id -> claimed impact: ``paper_figures.yaml``, else ``differences.yaml``."""
    out: dict[str, str] = {}
    path = (root or default_root()) / "differences.yaml"
    if path.exists():
        doc = read_yaml_file(path) or {}
        for section in ("differences", "findings"):
            for e in (doc.get(section) or []) if isinstance(doc, Mapping) else []:
                if isinstance(e, Mapping) and e.get("claimed_impact"):
                    out[str(e["id"])] = str(e["claimed_impact"])
    for row in _rows(figures, "claimed_impacts"):
        if row.get("id") and row.get("claimed_impact"):
            out[str(row["id"])] = str(row["claimed_impact"])
    return out


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


def _metric_values(row: Mapping[str, Any]) -> dict[str, float]:
    return {m: float(row[m]) for m in METRICS if m in row}


def paper_decision_note(run: RunSpec) -> str:
    """``measured by the paper under its own decision, gumbel_topk`` when ``run`` sets a
    ``decision`` other than its preset's (the paper's figures were all measured under the
    paper preset's decision), else ``""``."""
    own = (PRESETS.get(run.preset, ("", {}))[1]).get("decision")
    if "decision" not in run.set or own is None or run.set["decision"] == own:
        return ""
    return f"measured by the paper under its own decision, {own}"


def paper_reference(
    run: RunSpec, figures: Mapping[str, Any], claims: Mapping[str, str] | None = None
) -> PaperRef | None:
    """The paper's figure for ``run``, matched by what the run is, first match wins.

    1. ``paper_row`` -> that row of the module-ablation table;
    2. ``difference`` with a claimed impact -> the claim (seed 004);
    3. the paper preset with only ``sparse_ratio`` set -> the selection-ratio row of rho;
    4. the paper preset with only ``lambda_sparse``/``lambda_dense`` set, and possibly
       ``decision`` -> the coefficient row (l1, l2); when the decision differs from the
       paper's, the text says the paper measured the row under its own
       (:func:`paper_decision_note`);
    5. a bare ``code`` or ``paper`` preset -> Table 1 SEPS, ViT-Base-224, Flickr30K 1K
       (the repository README reports the same figures); ``laps`` -> Table 1 LAPS.
    """
    if run.paper_row:
        for row in _rows(figures, "module_ablations"):
            if row.get("setting") == run.paper_row:
                vals = {k: float(row[k]) for k in MODULE_RECALLS}
                return PaperRef("modules", "module_ablations", vals, str(run.paper_row))
        return None
    claims = claims or {}
    if run.difference and claims.get(run.difference):
        scale = (figures.get("claimed_impacts") or {}).get("scale") or {}
        level = claims[run.difference]
        text = f"{level} ({scale[level]})" if level in scale else level
        return PaperRef("impact", "claimed_impacts", {}, text)
    keys = set(run.set)
    # A run that sets its preset's own alignment loss (the triplet, where a profile's
    # default is another loss: `standard` trains InfoNCE) is still the paper's setting.
    if "align_loss" in keys and run.set["align_loss"] == get_config(run.preset).align_loss:
        keys.discard("align_loss")
    if run.preset == "paper" and not run.train and keys == {"sparse_ratio"}:
        for row in _rows(figures, "selection_ratio"):
            if _close(row.get("rho"), run.set["sparse_ratio"]):
                return PaperRef(
                    "rsum", "selection_ratio", _metric_values(row), f"rho={row['rho']:g}"
                )
    if (
        run.preset == "paper"
        and not run.train
        and COEFFICIENT_KEYS <= keys <= COEFFICIENT_KEYS | COEFFICIENT_CONTEXT_KEYS
    ):
        for row in _rows(figures, "coefficients"):
            if _close(row.get("l1"), run.set["lambda_sparse"]) and _close(
                row.get("l2"), run.set["lambda_dense"]
            ):
                text = f"l1={float(row['l1']):g}, l2={float(row['l2']):g}"
                if note := paper_decision_note(run):
                    text += f"; {note}"
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


# ------------------------------------------------------------------ report section
def _impact_row(r: Mapping[str, Any], ref: PaperRef) -> list[str]:
    rel = math.nan
    if r["delta_n"] and not r["blind"] and not is_missing(r["baseline_rsum_mean"]):
        rel = 100.0 * r["delta_rsum_mean"] / r["baseline_rsum_mean"]
    return [
        variant_text(r),
        str(r["difference"]),
        delta_text(r),
        DASH if is_missing(rel) else f"{fmt(rel, 2, sign=True)}%",
        ref.text,
    ]


def _rsum_row(r: Mapping[str, Any], ref: PaperRef, base_ref: PaperRef | None) -> list[str]:
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
    return [
        variant_text(r),
        metric_cell(r, "rsum"),
        delta_text(r),
        fmt(ref.values.get("rsum")),
        paper_delta,
        source,
    ]


def _module_row(r: Mapping[str, Any], ref: PaperRef) -> list[str]:
    cells = []
    for m in MODULE_RECALLS:
        cells += [metric_cell(r, m), fmt(ref.values[m])]
    return [variant_text(r), ref.text, *cells]


def _table(rows: list[list[str]], dense_column: bool, headers: list[str]) -> str:
    if dense_column:
        headers = [headers[0], DENSE_COLUMN, *headers[1:]]
    return markdown_table(rows, headers)


def paper_sections(
    summary: pd.DataFrame,
    matrix: Matrix,
    figures: Mapping[str, Any],
    claims: Mapping[str, str],
    dense_column: bool = False,
) -> list[str]:
    """Tables of reported figures beside measured ones, one per kind of reference
    (``dense_column``: a column with each row's dense-caption protocols, after the
    variant, for a matrix that mixes them)."""
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
    for profile in profiles(summary):
        prof = [r for r in summary.to_dict("records") if r["profile"] == profile]
        by_kind: dict[str, list[list[str]]] = {"impact": [], "rsum": [], "modules": []}
        for r in prof:
            ref = refs.get(r["run_id"])
            if ref is None:
                continue
            if ref.kind == "impact":
                # A revert's Δ is against its own preset (Matrix.reference), not the
                # baseline this table's percentages are of: it has its own section.
                if not is_missing(r["reference"]):
                    continue
                row = _impact_row(r, ref)
            elif ref.kind == "rsum":
                row = _rsum_row(r, ref, base_ref)
            else:
                row = _module_row(r, ref)
            if dense_column:
                row.insert(1, r["dense_protocol"])
            by_kind[ref.kind].append(row)
        if not any(by_kind.values()):
            continue
        lines += [f"### Profile `{profile}`", ""]

        if by_kind["impact"]:
            lines += [
                "Claimed impact of each documented difference (seed 004; a claim, not a "
                "measurement; it does not say of which quantity the percentage is taken). "
                "Measured: Δ rSum paired by seed, and that Δ as a percentage of the "
                "baseline's rSum; only runs that change the baseline's own preset (the "
                "reverts, each against its own preset, are in the section 'Each "
                "difference in both directions' when the matrix has it).",
                "",
                _table(
                    by_kind["impact"],
                    dense_column,
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
                    dense_column,
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
            for m in MODULE_RECALLS:
                headers += [f"{LABELS[m]} measured", f"{LABELS[m]} reported"]
            lines += [
                "Module-ablation rows (the paper reports R@1 and R@5 only; Flickr30K, "
                "ViT-Base-224)." + (f" Note: {' '.join(str(note).split())}" if note else ""),
                "",
                _table(by_kind["modules"], dense_column, headers),
                "",
            ]
    return lines


__all__ = [
    "MODULE_RECALLS",
    "PAPER_LABEL",
    "REPO_FIGURES",
    "PaperRef",
    "figures_problem",
    "load_claims",
    "load_paper_figures",
    "paper_decision_note",
    "paper_reference",
    "paper_sections",
]
