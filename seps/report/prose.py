"""The generated parts of a matrix report: protocol, results, findings, failures, cost.

Every function returns markdown lines computed from the records or the summary alone.
The findings ("What this run shows") state only what the paired tests support, judged on
p-values corrected across the report's family (:mod:`seps.report.compare`): an effect
beyond seed noise, no detected difference (which is not equality), runs identical to the
baseline (no effect was possible), or a comparison that cannot be made, and always for
this profile and dataset only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import pandas as pd

from ..experiments.definitions import Matrix
from ..io.formatting import (
    DASH,
    code,
    fmt,
    fmt_ci,
    fmt_count,
    fmt_n,
    is_missing,
    markdown_table,
)
from ..runtime.machine_load import BUSY_MARGIN
from ..stats.paired import ALPHA, mean_ci
from .bimodal import BROKEN_FACTOR
from .compare import Family
from .records import (
    DENSE_COLUMN,
    DENSE_LABELS,
    LABELS,
    METRICS,
    dense_label,
    dense_pair,
    eval_dense_of,
    profiles,
    train_dense_of,
)
from .summary import (
    delta_text,
    metric_cell,
    p_adj_text,
    p_text,
    seeds_text,
    variant_text,
    verdict_text,
)


# --------------------------------------------------------------------------- protocol
def _value_counts(values: Iterable[Any]) -> str:
    """``v`` when all records agree, else ``varies: a (2 records); b (1 record)``."""
    counts: dict[str, int] = {}
    for v in values:
        key = DASH if is_missing(v) or v == "" else str(v)
        counts[key] = counts.get(key, 0) + 1
    if not counts:
        return DASH
    if len(counts) == 1:
        return next(iter(counts))
    parts = [f"{k} ({n} record{'s' if n > 1 else ''})" for k, n in sorted(counts.items())]
    return "varies: " + "; ".join(parts)


def _dataset_text(r: Mapping[str, Any]) -> str:
    ds = r.get("dataset")
    if ds == "synthetic" and not is_missing(r.get("synth_images")):
        return f"synthetic (built-in, {int(r['synth_images'])} images)"
    return str(ds)


def _backbones(r: Mapping[str, Any]) -> str:
    return f"{r.get('backbone')} / {r.get('text_backbone')}"


def mixes_dense(cur: pd.DataFrame) -> bool:
    """Whether the records use more than one (training, evaluation) dense-caption
    protocol pair: the tables then state it per row (:data:`DENSE_COLUMN`)."""
    return len({dense_pair(r) for r in cur.to_dict("records")}) > 1


def _dense_md(source: str | None) -> str:
    """The protocol as inline code, then what it means: `` `query` (official, ...) ``."""
    label = DENSE_LABELS.get(source or "")
    return f"`{source or 'unknown'}`" + (f" ({label})" if label else "")


def dense_header_lines(cur: pd.DataFrame) -> list[str]:
    """The report header's statement of the dense-caption protocols of its numbers."""
    recs = cur.to_dict("records")
    if not recs:
        return []
    if not mixes_dense(cur):
        r = recs[0]
        return [
            "**Dense-caption protocol of every number in this report**: training "
            f"{_dense_md(train_dense_of(r))}; evaluation {_dense_md(eval_dense_of(r))}.",
            "",
        ]
    legend = "; ".join(f"`{k}` = {v}" for k, v in DENSE_LABELS.items())
    return [
        "**Dense-caption protocol**: this matrix mixes protocols, so every table states "
        f"it per row (column '{DENSE_COLUMN}'). {legend}.",
        "",
    ]


def protocol_lines(cur: pd.DataFrame) -> list[str]:
    """What the numbers were measured on, one bullet per setting, ``varies`` when the
    records disagree."""
    recs = cur.to_dict("records")

    def col(f: Callable[[Mapping[str, Any]], Any]) -> str:
        return _value_counts(f(r) for r in recs)

    def opt_int(x: Any) -> str:
        return "no limit" if is_missing(x) else str(int(x))

    seeds = sorted({int(r["seed"]) for r in recs if not is_missing(r.get("seed"))})
    commit = col(lambda r: (r.get("git_commit") or "unknown")[:12])
    return [
        f"- **profile**: {col(lambda r: r['profile'])}",
        f"- **dataset**: {col(_dataset_text)}",
        "- **evaluation**: "
        + col(
            lambda r: (
                f"{r.get('eval_split')} split"
                + ("" if is_missing(r.get("eval_images")) else f", {int(r['eval_images'])} images")
            )
        ),
        "- **dense caption in training** (`train_config.dense_source`): "
        + col(lambda r: dense_label(train_dense_of(r))),
        "- **dense caption at evaluation** (`eval_dense_source`, else the training one): "
        + col(lambda r: dense_label(eval_dense_of(r))),
        f"- **training protocol**: {col(lambda r: r['protocol'])}",
        "- **training**: "
        + col(
            lambda r: (
                f"{r.get('epochs')} epochs, batch {r.get('batch_size')}, "
                f"max steps/epoch {opt_int(r.get('max_steps_per_epoch'))}"
            )
        ),
        f"- **backbones** (image / text): {col(_backbones)}",
        f"- **seeds**: {', '.join(str(s) for s in seeds) or DASH}",
        f"- **device**: {col(lambda r: r.get('device_name') or 'unknown')}",
        f"- **torch**: {col(lambda r: r.get('torch') or 'unknown')}",
        f"- **git commit**: {commit}",
        *_text_only_lines(cur),
    ]


def _text_only_lines(cur: pd.DataFrame) -> list[str]:
    """The pixel-free word matcher's rSum on the same test splits (one per seed: the
    split is the seed's dataset draw), as the reference a fair protocol must stay above.

    One line per profile when the records span several: each profile draws its own
    splits (a smoke seed's 30 test images are not a standard seed's 1,000), so pooling
    them would average matchers of different tasks."""
    if "text_only_rsum" not in cur or cur["text_only_rsum"].isna().all():
        return []
    known = cur.dropna(subset=["text_only_rsum"])
    profiles = known["profile"] if "profile" in known else pd.Series("", index=known.index)
    groups = list(known.groupby(profiles.fillna(""), sort=True))
    lines = []
    for profile, sub in groups:
        per_seed = sub.drop_duplicates("seed")
        mean, half, n = mean_ci(per_seed["text_only_rsum"].tolist())
        where = f" (profile {code(profile)})" if len(groups) > 1 else ""
        lines.append(
            f"- **text-only matcher**{where} (`seps.data.baselines`: the sparse caption's words "
            f"against each gallery image's dense caption, no pixels; what the dense captions "
            f"alone give away under `candidate`): rSum {fmt_ci(mean, half, n)} over {n} test "
            f"split(s){_headroom(per_seed)}"
        )
    return lines


def _headroom(per_seed: pd.DataFrame) -> str:
    """ "; chance ..., scene oracle ..." for the text-only line, from the records that
    carry them (`seps.data.oracle`; records made before it carry neither)."""
    parts = []
    for col, label in (
        ("chance_rsum", "chance (random ranking)"),
        ("oracle_rsum", "scene oracle (`seps.data.oracle`: reads the true scenes, the ceiling "
         "the sparse captions allow)"),
    ):  # fmt: skip
        if col in per_seed and not per_seed[col].isna().all():
            mean, half, n = mean_ci(per_seed[col].dropna().tolist())
            parts.append(f"{label} rSum {fmt_ci(mean, half, n)}")
    return "; beside it, " + ", ".join(parts) if parts else ""


# ---------------------------------------------------------------------------- results
def results_table(summary: pd.DataFrame, dense_column: bool = False) -> str:
    """The recalls ± CI (each group's mean for a bimodal run) and paired Δ rSum of every
    run of one profile: the raw p, the corrected p and the verdict on the corrected p
    (``dense_column``: the dense-caption protocols of each row, for a matrix that mixes
    them)."""
    headers = [
        "variant",
        "what differs",
        *([DENSE_COLUMN] if dense_column else []),
        "seeds",
        *(LABELS[m] for m in METRICS),
        "Δ rSum",
        "p (paired t)",
        "p (Holm)",
        "verdict",
    ]
    rows = []
    for r in summary.to_dict("records"):
        rows.append(
            [
                variant_text(r),
                r["describe"],
                *([r["dense_protocol"]] if dense_column else []),
                seeds_text(r),
                *(metric_cell(r, m) for m in METRICS),
                delta_text(r, mark=False),
                p_text(r),
                p_adj_text(r),
                verdict_text(r),
            ]
        )
    return markdown_table(rows, headers)


# --------------------------------------------------------------------------- findings
def _names(rows: Sequence[Mapping[str, Any]], detail: Callable[[Mapping[str, Any]], str]) -> str:
    return ", ".join(f"`{r['run_id']}` ({detail(r)})" for r in rows)


def _one_seed(r: Mapping[str, Any]) -> str:
    return f"Δ {fmt(r['delta_rsum_mean'], sign=True)} from one seed"


def _untested_delta(r: Mapping[str, Any]) -> str:
    """Δ ± CI, n and the raw p of a comparison that is not a test (no corrected p)."""
    delta = fmt_ci(r["delta_rsum_mean"], r["delta_rsum_ci"], r["delta_n"], sign=True)
    return f"Δ {delta}, n={r['delta_n']}, raw p {_p(r['delta_p'])}"


def _paired_delta(r: Mapping[str, Any]) -> str:
    versus = "" if is_missing(r.get("reference")) else f" vs `{r['reference']}`"
    return (
        f"Δ {fmt_ci(r['delta_rsum_mean'], r['delta_rsum_ci'], r['delta_n'], sign=True)}"
        f"{versus}, "
        f"n={r['delta_n']}, p {_p(r['delta_p'])}, corrected p {_p(r['delta_p_adj'])}"
    )


def _p(p: float) -> str:
    """``= 0.012`` or ``< 0.001``, to follow "p" in a sentence."""
    return "< 0.001" if p < 0.001 else f"= {p:.3f}"


def _reason(r: Mapping[str, Any]) -> str:
    return r["identical_reason"] or "reason not known"


def _profile_findings(prof: list[dict[str, Any]], matrix: Matrix) -> list[str]:
    """The findings bullets of one profile's summary rows (verdicts on corrected p)."""
    lines = []
    base = next((r for r in prof if r["is_baseline"]), None)
    others = [r for r in prof if not r["is_baseline"]]
    if base is None or base["n"] == 0:
        lines.append(
            f"- The baseline `{matrix.baseline}` has no completed run, so no variant "
            "can be compared with it."
        )
    elif base["blind"]:
        lines.append(
            f"- The baseline `{matrix.baseline}` is text-blind ({base['blind']}), so no "
            "variant can be compared with it."
        )
    elif base.get("split") is not None:
        lines.append(f"- Baseline {base['split'].text()}.")
    else:
        lines.append(
            f"- Baseline `{matrix.baseline}`: rSum "
            f"{fmt_ci(base['rsum_mean'], base['rsum_ci'], base['n'])} over {base['n']} "
            f"seed{'s' if base['n'] > 1 else ''}."
        )
    bimodal = [r["split"] for r in prof if r.get("split") is not None]
    if bimodal:
        lines.append(
            "- Bimodal: some seeds at chance level (test rSum at most "
            f"{BROKEN_FACTOR:g} × chance), the others above it, so a mean ± CI would describe "
            "neither group; every metric column gives the functional seeds' mean, then the "
            "broken ones', and a Δ with such a run "
            "mixes the two (seps/report/bimodal.py): "
            f"{'; '.join(s.text() for s in bimodal)}."
        )
    identical = [r for r in others if r["identical"]]
    blind = [r for r in others if r["blind"] and not r["identical"]]
    # A comparison whose learned part did not train is not a test (seps.report.frozen;
    # with_frozen never marks an identical or text-blind one).
    untrained = [r for r in others if r.get("frozen")]
    rest = [r for r in others if not r["identical"] and not r["blind"] and not r.get("frozen")]
    testable = [r for r in rest if r["delta_n"] >= 2]
    outside = [r for r in testable if r["delta_mark"] == "*"]
    within = [r for r in testable if r["delta_mark"] != "*"]
    raw_only = [r for r in within if r["delta_p"] < ALPHA]
    single = [r for r in rest if r["delta_n"] == 1]
    unpaired = [r for r in rest if r["delta_n"] == 0 and r["n"] > 0]
    all_failed = [r for r in rest if r["n"] == 0]
    higher = [r for r in outside if r["delta_rsum_mean"] > 0]
    lower = [r for r in outside if r["delta_rsum_mean"] < 0]
    # A revert is compared with its own preset (Matrix.reference), named in its Δ.
    than = (
        "than the baseline (a revert: than its own preset)"
        if any(not is_missing(r.get("reference")) for r in others)
        else "than the baseline"
    )
    if higher:
        lines.append(
            f"- Higher rSum {than} beyond seed noise (corrected p < 0.05): "
            f"{_names(higher, _paired_delta)}."
        )
    if lower:
        lines.append(
            f"- Lower rSum {than} beyond seed noise (corrected p < 0.05): "
            f"{_names(lower, _paired_delta)}."
        )
    if within:
        lines.append(
            "- No difference detected at this number of seeds (corrected p ≥ 0.05; this "
            f"does not show the variants are equal): {_names(within, _paired_delta)}."
        )
    if raw_only:
        lines.append(
            "- Of these, raw p < 0.05 but not after the correction for the report's many "
            f"tests, so not claimed as effects: {', '.join(code(r['run_id']) for r in raw_only)}."
        )
    if testable and not outside:
        lines.append(
            "- No variant differs from the baseline beyond seed noise at this number of seeds."
        )
    if identical:
        lines.append(
            "- Identical to the baseline on every seed, bit for bit: no effect was possible, "
            "so these are not tests (left out of the correction): "
            f"{_names(identical, _reason)}."
        )
    if blind:
        lines.append(
            "- Not measured: the scores of these runs (or of the run they are compared "
            "with) cannot depend on the query text, so their recalls come from how ties "
            "are counted, not from retrieval; they are not tests: "
            f"{_names(blind, lambda r: r['blind'])}."
        )
    if untrained:
        lines.append(
            "- Not testable here: the learned part the switch acts through did not train "
            "(under 1% relative parameter change in every record), so the runs compare an "
            "untrained network with its absence; not tests (left out of the correction), "
            f"Δ shown for the record: {_names(untrained, _untested_delta)}."
        )
    if single:
        lines.append(
            "- Single paired seed, not testable (one seed cannot separate an effect "
            f"from seed noise): {_names(single, _one_seed)}."
        )
    if unpaired:
        lines.append(
            "- No paired comparison (the baseline has no completed run on the same "
            f"seeds): {', '.join(code(r['run_id']) for r in unpaired)}."
        )
    if all_failed:
        lines.append(f"- Every seed failed: {', '.join(code(r['run_id']) for r in all_failed)}.")
    lines.append(
        "- These statements hold for this profile and dataset only (see Protocol); "
        "they are not measurements of the paper's Flickr30K setting."
    )
    return lines


def findings_lines(summary: pd.DataFrame, matrix: Matrix, family: Family) -> list[str]:
    """What the numbers support, per profile, without going beyond them."""
    lines = ["## What this run shows", ""]
    if summary.empty:
        return [*lines, "No completed runs: nothing can be concluded yet.", ""]
    lines += [
        f"Verdicts use p-values {family.sentence()} ({family.guarantee()} over all of them).",
        "",
    ]
    for profile in profiles(summary):
        prof = [r for r in summary.to_dict("records") if r["profile"] == profile]
        lines += [f"Profile `{profile}`:", "", *_profile_findings(prof, matrix), ""]
    return lines


# ------------------------------------------------------------ failures and leftovers
def failed_lines(cur: pd.DataFrame, matrix: Matrix) -> list[str]:
    """Every current record that is not ``done``, with the first line of its error."""
    failed = cur[cur["status"] != "done"]
    lines = ["## Failed runs", ""]
    if failed.empty:
        return [*lines, "None.", ""]
    order = {r.id: i for i, r in enumerate(matrix.runs)}
    failed = failed.assign(_o=failed["run_id"].map(order)).sort_values(
        ["profile", "_o", "seed"], kind="stable"
    )
    rows = []
    for r in failed.to_dict("records"):
        # The first line of the error ("Type: message"); the traceback stays in the record.
        first = str(r["error"] or "").strip().splitlines()
        seed = DASH if is_missing(r["seed"]) else int(r["seed"])
        rows.append(
            [r["run_id"], r["profile"] or DASH, seed, r["status"], first[0] if first else DASH]
        )
    return [*lines, markdown_table(rows, ["variant", "profile", "seed", "status", "error"]), ""]


def other_lines(
    matrix: Matrix, all_recs: pd.DataFrame, cur: pd.DataFrame, superseded: pd.DataFrame
) -> list[str]:
    """Runs of the matrix without a record, and records the report does not use (runs no
    longer in the matrix, superseded records); nothing when there are none."""
    lines: list[str] = []
    missing = []
    for profile in profiles(cur):
        have = set(cur[cur["profile"] == profile]["run_id"])
        absent = [r.id for r in matrix.runs if r.id not in have]
        if absent:
            missing.append(f"- profile `{profile}`: {', '.join(code(a) for a in absent)}")
    if missing:
        lines += ["## Not run yet", "", "Runs of the matrix without a stored record:", ""]
        lines += [*missing, ""]
    ids = {r.id for r in matrix.runs}
    stray = sorted(set(all_recs["run_id"].dropna()) - ids)
    if stray or not superseded.empty:
        lines += ["## Records not used", ""]
        if stray:
            lines.append(
                "- Records of runs that are not in the matrix (any more): "
                + ", ".join(code(s) for s in stray)
                + "."
            )
        if not superseded.empty:
            lines.append(
                "- Superseded by a newer record of the same run, profile and seed, or "
                "made under an earlier definition of the matrix or profile (a field they "
                "set has another value now; the run waits to be made again): "
                + ", ".join(code(f) for f in superseded["file"])
                + "."
            )
        lines.append("")
    return lines


# ------------------------------------------------------------------------------ cost
def cost_lines(summary: pd.DataFrame) -> list[str]:
    """Timings, throughput, memory and parameter counts: the report's last section, so
    that the accuracy part of two reports compares as ``text.split("\\n## Cost")[0]``."""
    lines = [
        "## Cost",
        "",
        "Machine- and load-dependent (means over completed seeds); kept apart from the "
        "accuracy sections above.",
        "",
    ]
    if summary.empty:
        return [*lines, "No completed runs.", ""]
    headers = [
        "profile",
        "variant",
        "parameters",
        "trainable",
        "train time (s)",
        "wall time (s)",
        "train pairs/s",
        "eval pairs/s",
        "peak memory (MiB)",
    ]
    rows = []
    for r in summary.to_dict("records"):
        mem = r["peak_memory_bytes"]
        busy = BUSY_MARK if r["busy_n"] else ""
        rows.append(
            [
                r["profile"],
                variant_text(r),
                fmt_count(r["parameters"]),
                fmt_count(r["trainable_parameters"]),
                fmt(r["train_seconds_mean"]) + busy,
                fmt(r["wall_seconds_mean"]) + busy,
                fmt(r["train_pairs_per_second_mean"], 0),
                fmt(r["eval_pairs_per_second_mean"], 0),
                DASH if is_missing(mem) else fmt(mem / 2**20, 0),
            ]
        )
    return [
        *lines,
        markdown_table(rows, headers),
        "",
        *_busy_lines(summary),
        *_total_wall_lines(summary),
    ]


#: Marks the timings of a variant that include records timed on a busy machine.
BUSY_MARK = " †"


def _busy_lines(summary: pd.DataFrame) -> list[str]:
    """The footnote of :data:`BUSY_MARK` (nothing when no record was timed busy)."""
    n = int(pd.to_numeric(summary["busy_n"], errors="coerce").fillna(0).sum())
    if not n:
        return []
    return [
        f"{BUSY_MARK.strip()} includes {fmt_n(n, 'record')} timed on a busy machine: the "
        "1-minute load average rose above the CPU count plus "
        f"{BUSY_MARGIN} while it ran (other work competed for the cores; "
        "`seps/runtime/machine_load.py`). Those times are not comparable with the others.",
        "",
    ]


def _total_wall_lines(summary: pd.DataFrame) -> list[str]:
    """The summed wall clock of the completed records, per profile: what gathering the
    matrix cost on the machines that ran it (a run evaluated on a training it shares with
    another run counts its evaluation only; the training is counted where it ran)."""
    out = []
    for profile in profiles(summary):
        rows = summary[summary["profile"] == profile]
        total = pd.to_numeric(rows["wall_seconds_sum"], errors="coerce").sum(min_count=1)
        if is_missing(total):
            continue
        copied = int(rows["copied_n"].sum())
        n = int(rows["n"].sum()) - copied
        hours, minutes = divmod(round(float(total) / 60), 60)
        out.append(
            f"Wall time of the {n} completed records of profile `{profile}`: "
            f"{hours} h {minutes:02d} min (the runner's clock per record, summed; a run "
            "evaluated on a training it shares with another run counts its evaluation only)"
            + (
                f"; {fmt_n(copied, 'record')} copied from another matrix that measured the "
                "same run cost nothing here and are left out."
                if copied
                else "."
            )
        )
    return [*out, ""] if out else []


__all__ = [
    "cost_lines",
    "dense_header_lines",
    "failed_lines",
    "findings_lines",
    "mixes_dense",
    "other_lines",
    "protocol_lines",
    "results_table",
]
