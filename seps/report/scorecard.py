"""The claims scorecard: ``reports/README.md`` from ``ablations/claims.yaml`` and
the records.

The work is split by concept: :func:`~seps.report.claims.load_claim_file` reads and
checks the claims (every matrix and run named must exist);
:mod:`seps.report.scorecard_rows` makes a claim's rows from the current records of its
matrices; :mod:`seps.report.scorecard_judge` judges them, one Holm family per claim
(:mod:`seps.report.compare`, the rules in :mod:`seps.report.verdicts`, the power in
:mod:`seps.report.power`); :mod:`seps.report.scorecard_cells` and
:mod:`seps.report.scorecard_sections` write the table's cells and the sections around
it. This module assembles the page (:func:`render_scorecard`) and writes it from a
result store (:func:`write_scorecard`). No clock is read and everything is visited in a
fixed order: the same records (and the same current code version, when given) give the
same bytes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import pandas as pd

from ..experiments.ablation_index import profile_summaries
from ..io.formatting import fmt_n, is_missing, markdown_table
from ..io.store import atomic_write_text
from ..versioning.version import check_versions
from .claims import ClaimError, load_claim_file
from .compare import Family
from .controls import TITLE, controls_section
from .looks import hold_to_looks
from .paper import load_claims as load_impacts
from .paper import load_paper_figures
from .scorecard_cells import (
    Notes,
    claim_cell,
    claim_list,
    effect_text,
    link_text,
    mde_text,
    protocol_text,
    scaled_text,
    verdict_cell,
)
from .scorecard_judge import (
    claim_families,
    counts_by_profile,
    family_of_rows,
    judge_row,
    paired_tests,
    single_family,
    verdict_counts,
    verdict_of,
)
from .scorecard_rows import Row, claim_rows, matrix_records, paper_rows
from .scorecard_sections import (
    MARKER,
    OLD_MARKERS,
    OTHER_REPORTS,
    frozen_note,
    leakage_lines,
    preamble,
)
from .sequential import load_designs
from .sequential_verdicts import analyses, attach_sequential
from .world_card import world_lines
from .worlds_side import WorldVerdict, side_by_side_lines


def counts_text(counts: Mapping[str, int]) -> str:
    """``6 supported, 9 contradicted, ...`` (zero counts left out)."""
    return ", ".join(f"{n} {v}" for v, n in counts.items() if n) or "no rows"


def judged_controls(rows: Sequence[Row]) -> tuple[list[tuple[Row, str]], Family]:
    """The control rows among ``rows`` (claims with a ``group``), each with its verdict
    from :func:`~seps.report.scorecard_judge.verdict_of` in the controls' own Holm family
    (all the controls' tests together, apart from the claims'), and that family. The one
    place the controls are judged: the scorecard's section and the README's headline
    read it."""
    controls = [r for r in rows if r.claim.group is not None]
    family = family_of_rows(controls)
    return [(r, verdict_of(r, family)) for r in controls], family


def controls_lines(rows: Sequence[Row]) -> list[str]:
    """The controls section (:func:`~seps.report.controls.controls_section`) of the
    control rows among ``rows``, judged by :func:`judged_controls`."""
    return controls_section(*judged_controls(rows))


def controls_report_section(
    current: pd.DataFrame,
    matrix_name: str,
    out_dir: Path,
    family: Family,
    root: Path | None = None,
) -> tuple[list[str], dict[str, str], None]:
    """A matrix report's controls section (``sections: [controls]``): the lines of
    :func:`controls_lines` for the controls of ``<root>/claims.yaml`` that name this
    matrix, from the report's current records (its completed ones of this matrix, as
    :func:`matrix_records` reads them), so the report shows what the scorecard shows. The
    report's ``family`` is not used: the controls are their own family. No plot."""
    try:
        claims, matrices = load_claim_file(None, root)
    except ClaimError as exc:
        return [f"## {TITLE}", "", f"No controls are judged: {exc}.", ""], {}, None
    if len(current):
        current = current[(current["matrix"] == matrix_name) & (current["status"] == "done")]
    frames = {matrix_name: current.reset_index(drop=True)}
    rows = []
    for c in (c for c in claims if c.group is not None and matrix_name in c.matrices):
        i = c.matrices.index(matrix_name)
        own = replace(c, matrices=(matrix_name,), protocols=(c.protocols[i],))
        rows += claim_rows(own, matrices, frames)
    return controls_lines(rows), {}, None


def render_scorecard(
    rows: Sequence[Row],
    used: pd.DataFrame,
    impacts: Mapping[str, str] | None = None,
    current: str | None = None,
    summaries: Mapping[str, str] | None = None,
    world: Sequence[str] = (),
    worlds: Sequence[str] = (),
) -> str:
    """The scorecard's markdown: ``rows`` (:func:`claim_rows` of every claim, in order):
    the controls first (:func:`controls_lines`), then the claims' rows, each judged in
    its claim's Holm family (:func:`~seps.report.scorecard_judge.claim_families`), with
    the counts one whole-scorecard family would give below; ``used`` the records they
    read (for the preamble), ``impacts`` seed 004's impact level per difference id (e.g.
    ``large``), ``current`` this code's version (``None``: not compared; else the
    preamble states the records' against it and a stale page opens with a banner),
    ``summaries`` each profile's one-line summary (profiles.yaml) for the preamble,
    ``world`` the world card of the profiles the rows read (:mod:`.world_card`),
    ``worlds`` the worlds (profiles) whose verdicts are set side by side
    (:mod:`.worlds_side`)."""
    levels = impacts or {}
    controls = controls_lines(rows)
    rows = paper_rows(rows)
    families = claim_families(rows)
    several = len({r.profile for r in rows if r.profile is not None}) > 1
    machines = len({r.machine for r in rows if r.machine is not None}) > 1
    table, seen, notes, by_world = [], set(), Notes(), []
    for r in rows:
        seen.add(r.claim.id)
        family = families[r.claim.id]
        judged = judge_row(r, family, levels)
        if r.profile is not None and r.variant is not None:
            est = judged.tested.mean if judged.tested is not None else math.nan
            key = (r.claim.id, r.matrix.name, r.baseline, r.variant)
            by_world.append(WorldVerdict(key, r.profile, judged.verdict, est))
        table.append(
            [
                claim_cell(r),
                protocol_text(r, several, machines),
                effect_text(r, judged, family, levels),
                scaled_text(r, judged),
                mde_text(judged),
                verdict_cell(r, judged, notes),
                link_text(r.matrix),
            ]
        )
    counts = verdict_counts(rows, families, levels)
    tests = fmt_n(paired_tests(families), "paired test")
    summary = f"{len(seen)} claims in {len(rows)} rows ({tests}): {counts_text(counts)}."
    if several:  # each regime's verdicts apart: a retired one's may be its blindness
        parts = [
            f"profile `{p}`, {sum(c.values())} rows: {counts_text(c)}"
            for p, c in counts_by_profile(rows, families, levels)
        ]
        summary += " By the profile whose records a row reads: " + "; ".join(parts) + "."
    whole = single_family(rows)
    whole_size = next(iter(whole.values())).size if whole else 0
    compared = "For comparison, one whole-scorecard Holm family "
    if whole_size:
        compared += (
            f"({fmt_n(whole_size, 'paired test')} corrected together, MDEs at "
            f"0.05/{whole_size}) would give: {counts_text(verdict_counts(rows, whole, levels))}."
        )
    else:
        compared += "would give the same: there is no paired test yet."
    headers = ["claim: test", "protocol", "measured Δ rSum [corrected CI]"]
    headers += ["scaled claim (rSum)", "MDE, 80% power", "verdict", "details"]
    return "\n".join(
        [
            *preamble(used, families, current, summaries),
            *frozen_note(rows),
            *world,
            *controls,
            "## Claims",
            "",
            summary,
            "",
            compared,
            "",
            markdown_table(table, headers),
            "",
            *notes.lines(),
            *side_by_side_lines(by_world, worlds),
            *claim_list(rows, levels),
            *leakage_lines(rows, families),
            *OTHER_REPORTS,
        ]
    )


def check_overwritable(path: Path) -> None:
    """Refuse (``ValueError``) to replace a file the scorecard did not write (its first
    line is neither :data:`MARKER` nor one of :data:`OLD_MARKERS`): nothing the user owns is
    overwritten."""
    if path.is_dir():
        raise ValueError(f"{path}: is a folder; --output must name the scorecard's markdown file")
    if path.exists():
        with path.open(encoding="utf-8", errors="replace") as f:
            if f.readline().rstrip("\n") not in (MARKER, *OLD_MARKERS):
                raise ValueError(
                    f"{path}: not written by seps-bench scorecard (its first line is not the "
                    "scorecard's marker), so it is not overwritten; move it aside or choose "
                    "another --output"
                )


def impact_levels(root: Path | None = None) -> dict[str, str]:
    """Difference id -> seed 004's claimed impact level, e.g. ``large`` (from
    ``differences.yaml`` and ``paper_figures.yaml``, as the matrix reports read it; the
    ranges are :data:`seps.report.power.IMPACT_RANGES`)."""
    return dict(sorted(load_impacts(root, load_paper_figures(root)).items()))


def write_scorecard(
    results_dir: str | Path,
    out: str | Path,
    root: Path | None = None,
    *,
    claims_path: str | Path | None = None,
    allow_mixed_versions: bool = False,
    current_version: str | None = None,
) -> Path:
    """Write the scorecard of ``<root>/claims.yaml`` (or ``claims_path``), judged on the
    current records under ``results_dir``, to ``out`` atomically; returns ``out``.

    Refuses (``ValueError``) a malformed claims file, an ``out`` the scorecard did not
    write (:func:`check_overwritable`), and records of several code versions or (given
    ``current_version``, this code's) of another version, unless
    ``allow_mixed_versions``: the page then opens with a banner naming them."""
    out = Path(out)
    check_overwritable(out)
    rows, used = scorecard_inputs(
        results_dir,
        root,
        claims_path=claims_path,
        allow_mixed_versions=allow_mixed_versions,
        current_version=current_version,
    )
    summaries = profile_summaries(root)
    profiles = sorted({str(p) for p in used["profile"].dropna()}) if len(used) else []
    # the worlds a sequential design decides count even before their first record
    worlds = [*profiles, *sorted({d.profile for d in load_designs(root).values()} - set(profiles))]
    world = world_lines(results_dir, worlds, root)
    text = render_scorecard(
        rows, used, impact_levels(root), current_version, summaries, world, worlds
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, text)
    return out


def scorecard_inputs(
    results_dir: str | Path,
    root: Path | None = None,
    *,
    claims_path: str | Path | None = None,
    allow_mixed_versions: bool = False,
    current_version: str | None = None,
) -> tuple[list[Row], pd.DataFrame]:
    """The scorecard's rows (:func:`claim_rows` of every claim of ``<root>/claims.yaml`` or
    ``claims_path``, in order, the controls' among them: :func:`paper_rows` leaves those
    out) and the records they read, from ``results_dir``.

    Refuses (``ValueError``) a malformed claims file and records of several code versions
    or, given ``current_version``, of another version than it, unless
    ``allow_mixed_versions``."""
    claims, matrices = load_claim_file(claims_path, root)
    frames = {name: matrix_records(results_dir, m) for name, m in sorted(matrices.items())}
    # seeds a sequential design has not read yet are not read here either (.looks)
    frames = {n: hold_to_looks(f, n, results_dir, root)[0] for n, f in frames.items()}
    rows = [r for c in claims for r in claim_rows(c, matrices, frames)]
    # The rows a sequential design decides carry its replay (their verdict is the design's).
    rows = attach_sequential(rows, analyses(results_dir, root))
    named = {n: sorted({r for c in claims if n in c.matrices for r in c.runs()}) for n in frames}
    parts = [f[f["run_id"].isin(named[n])] for n, f in frames.items() if len(f)]
    used = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    if len(used):
        check_versions(
            [None if is_missing(v) else str(v) for v in used["code_version"]],
            allow_mixed=allow_mixed_versions,
            what=f"{results_dir} (the records of the scorecard's claims)",
            current=current_version,
        )
    return rows, used


__all__ = [
    "MARKER",
    "Family",
    "Row",
    "check_overwritable",
    "claim_rows",
    "controls_lines",
    "controls_report_section",
    "counts_text",
    "family_of_rows",
    "impact_levels",
    "judged_controls",
    "matrix_records",
    "paper_rows",
    "render_scorecard",
    "scorecard_inputs",
    "verdict_counts",
    "verdict_of",
    "write_scorecard",
]
