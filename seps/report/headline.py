"""The README's headline block: the controls' states, the scorecard's verdict counts and
the seven differences.

``seps-bench scorecard --readme README.md`` rewrites the text between two marker lines of
the README (:data:`BEGIN` and :data:`END`) and nothing else, so the numbers a reader sees
first are generated from the same records and the same tests as ``reports/README.md``
and ``reports/seven-differences.md``, never typed by hand.

The block is rendered by a pure function (:func:`render_headline`) of plain data
(:class:`Headline`); :func:`headline_of` gathers that data from a result store with the
scorecard's and the report's own code (:func:`seps.report.scorecard.scorecard_inputs`,
:func:`seps.report.differences.difference_rows`), and :func:`replace_block` splices a
block into a text. When the records come from several code versions, or (given the
current one) from another version than this code's (refused unless
``allow_mixed_versions``), the block opens with a banner naming each version and its
record count.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..experiments.ablation_index import profile_summaries
from ..experiments.definitions import load_matrix
from ..io.formatting import DASH, code, is_missing, markdown_table
from ..io.store import atomic_write_text
from ..versioning.version import check_versions
from .controls import TITLE as CONTROLS_TITLE
from .controls import controls_of, state_text
from .differences import DIRECTIONS, difference_cells, difference_frozen, difference_rows
from .looks import hold_to_looks
from .paper import load_claims, load_paper_figures
from .records import load_results
from .render import ReportData
from .scorecard import (
    impact_levels,
    judged_controls,
    paper_rows,
    scorecard_inputs,
    verdict_counts,
)
from .scorecard_cells import anchor
from .scorecard_judge import claim_families, counts_by_profile, paired_tests
from .sequential import analyse, design_for
from .sequential_section import counts_line, difference_decisions
from .summary import metric_cell
from .versions import version_counts

#: The marker lines around the generated block (each alone on its line).
BEGIN = "<!-- BEGIN GENERATED: headline -->"
END = "<!-- END GENERATED: headline -->"
#: The matrix whose report section the block's table repeats.
DIFFERENCES_MATRIX = "seven-differences"
#: The presets whose mean rSum the block gives under the table.
PRESETS = ("laps", "code", "paper")


@dataclass(frozen=True)
class Headline:
    """What the block shows. ``counts``: verdict -> number of scorecard rows (zero counts
    are left out when rendered); ``claims``: how many claims those rows test;
    ``differences``: one row per difference as
    :func:`~seps.report.differences.difference_rows` gives it; ``presets``: (preset, rSum
    mean ± CI, or for a bimodal preset each group's mean in parentheses) of the
    differences matrix; ``profile``: the profile of that table;
    ``card_versions`` and ``table_versions``: (code version, record count) of the records
    the counts and the table read, most frequent first; ``current``: this code's version
    (``None``: not compared); ``by_profile``: (profile, its rows' counts) for each profile
    with rows, rendered when there are several, so that a reader sees which regime each
    verdict comes from (rows without records have no profile and count only in
    ``counts``); ``controls``: (control id, whether it holds, its state as
    :func:`~seps.report.controls.state_text` words it) for each control of the
    scorecard's first section, in its order (none: no line)."""

    counts: dict[str, int]
    claims: int
    differences: list[list[str]]
    presets: list[tuple[str, str]]
    profile: str | None
    card_versions: list[tuple[str, int]]
    table_versions: list[tuple[str, int]]
    current: str | None = None
    by_profile: tuple[tuple[str, dict[str, int]], ...] = ()
    controls: tuple[tuple[str, bool, str], ...] = ()
    tests: int | None = None
    summaries: tuple[tuple[str, str], ...] = ()
    decided: str | None = None


def _summary(counts: dict[str, int]) -> str:
    return ", ".join(f"**{n} {v}**" for v, n in counts.items() if n)


def _minus(h: Headline) -> dict[str, int]:
    """The counts of the rows no profile holds (rows without records)."""
    return {v: n - sum(c.get(v, 0) for _, c in h.by_profile) for v, n in h.counts.items()}


def render_headline(h: Headline) -> str:
    """The block's markdown (without the markers), ending with a newline."""
    lines: list[str] = []
    card, table = _listed(h.card_versions), _listed(h.table_versions)
    found = {v for v, _ in h.card_versions + h.table_versions}
    if len(found) > 1:
        lines += [
            f"> **Mixed code versions.** The scorecard's counts read records of {card}; the "
            f"table's, {table}"
            + (f"; this code is {h.current}" if h.current is not None else "")
            + ". Generated with `--allow-mixed-versions` while the older records are "
            "recomputed.",
            "",
        ]
    elif h.current is not None and found and found != {h.current}:
        lines += [
            f"> **Stale records.** The scorecard's counts and the table read records of "
            f"{card}; this code is {h.current}. Generated with `--allow-mixed-versions` while "
            "they are recomputed.",
            "",
        ]
    elif h.card_versions or h.table_versions:
        version = (h.card_versions or h.table_versions)[0][0]
        # Say that the records are this code's, not just which version they are: a reader
        # of the README cannot otherwise tell a current block from a stale one.
        if h.current:
            lines += [f"Every record read here is at code version {version}, this code's.", ""]
        else:
            lines += [f"Code version {version}.", ""]
    if h.controls:
        held = sum(holds for _, holds, _ in h.controls)
        states = "; ".join(f"{code(c)} {state}" for c, _, state in h.controls)
        lines += [
            f"**Controls** (can this instrument see? [reports/README.md](reports/README.md#"
            f"{anchor(CONTROLS_TITLE)})): **{held} of {len(h.controls)} hold**: {states}.",
            "",
        ]
    rows = sum(h.counts.values())
    tests = ""
    if h.tests is not None:
        tests = f" ({h.tests} paired tests: a grid's row tests each cell)"
    if len(h.by_profile) > 1:
        # Several regimes: their verdicts are not one population (a retired profile's
        # "not detected" may be its blindness), so each is counted under its name first.
        about = dict(h.summaries)
        parts = [
            f"profile `{p}`"
            + (f" ({about[p]})" if about.get(p) else "")
            + f", {sum(c.values())} rows: {_summary(c)}"
            for p, c in h.by_profile
        ]
        bare = rows - sum(sum(c.values()) for _, c in h.by_profile)
        lines += [
            f"**Scorecard** ([reports/README.md](reports/README.md)): {h.claims} claims in "
            f"{rows} rows{tests}. By the profile whose records a row reads (each verdict "
            "reads one regime's records, but a claim's Holm family holds all its rows, of "
            "every profile): "
            + "; ".join(parts)
            + (f"; {bare} rows without records: {_summary(_minus(h))}" if bare else "")
            + f". All rows together: {_summary(h.counts)}.",
            "",
        ]
    else:
        lines += [
            f"**Scorecard** ([reports/README.md](reports/README.md)): {h.claims} claims in "
            f"{rows} rows{tests}: {_summary(h.counts) or 'no rows'}.",
            "",
        ]
    where = f"profile `{h.profile}`, " if h.profile else ""
    lines += [
        f"**The seven differences** ([reports/{DIFFERENCES_MATRIX}.md]"
        f"(reports/{DIFFERENCES_MATRIX}.md), {where}fair `candidate` protocol"
        + (f"; {h.decided}" if h.decided else "")
        + "): Δ rSum of adopting the paper's choice, paired by seed, with its repeated "
        "confidence interval at the look the decision rests on.",
        "",
    ]
    if h.differences:
        headers = ["difference", "claimed impact (seed 004)"]
        for _, label in DIRECTIONS:
            headers += [f"{label}", "Δ rSum [repeated CI] (seeds, look)"]
        lines += [markdown_table(h.differences, headers), ""]
    else:
        lines += ["No records of the differences yet.", ""]
    if h.presets:
        lines += [
            "Presets, rSum mean ± 95% CI over seeds: "
            + ", ".join(f"{code(p)} {text}" for p, text in h.presets)
            + ".",
            "",
        ]
    return "\n".join(lines)


def replace_block(text: str, block: str, name: str = "README") -> str:
    """``text`` with the lines strictly between the :data:`BEGIN` and :data:`END` marker
    lines replaced by ``block``; every other byte is kept.

    Raises:
        ValueError: one line naming ``name`` when a marker is missing, repeated or out of
            order.
    """
    lines = text.splitlines(keepends=True)
    begins = [i for i, line in enumerate(lines) if line.strip() == BEGIN]
    ends = [i for i, line in enumerate(lines) if line.strip() == END]
    if len(begins) != 1 or len(ends) != 1 or begins[0] > ends[0]:
        raise ValueError(
            f"{name}: expected one line '{BEGIN}' followed by one line '{END}' around the "
            f"generated headline block; found {len(begins)} and {len(ends)}"
            + (" in the wrong order" if begins and ends and begins[0] > ends[0] else "")
        )
    body = block if not block or block.endswith("\n") else block + "\n"
    return "".join(lines[: begins[0] + 1]) + body + "".join(lines[ends[0] :])


def _listed(versions: list[tuple[str, int]]) -> str:
    if not versions:
        return "no records"
    text = ", ".join(f"{v} ({n})" for v, n in versions)
    return f"code version{'s' if len(versions) > 1 else ''} {text}"


def headline_of(
    results_dir: str | Path,
    root: Path | None = None,
    *,
    allow_mixed_versions: bool = False,
    current_version: str | None = None,
) -> Headline:
    """The block's data from the records under ``results_dir``: the scorecard's rows
    judged as ``seps-bench scorecard`` judges them (one Holm family per claim), and the
    differences section of the ``seven-differences`` report (its profile with the most
    completed records).

    Raises ``ValueError`` (one line naming the versions) when the records read come from
    several code versions or, given ``current_version``, from another one, unless
    ``allow_mixed_versions``."""
    rows, used = scorecard_inputs(
        results_dir,
        root,
        allow_mixed_versions=allow_mixed_versions,
        current_version=current_version,
    )
    controls = tuple(
        (c.claim.id, c.holds, state_text(c)) for c in controls_of(*judged_controls(rows))
    )
    rows = paper_rows(rows)  # the claims' verdicts; the controls are counted apart
    levels = impact_levels(root)
    counts = verdict_counts(rows, levels=levels)
    # Each row judged in its claim's family of all rows, as the scorecard judges it.
    families = claim_families(rows)
    by_profile = counts_by_profile(rows, families, levels)
    matrix = load_matrix(DIFFERENCES_MATRIX, root)
    records = hold_to_looks(load_results(results_dir, matrix.name), matrix.name, results_dir, root)
    data = ReportData.of(matrix, records[0], root)  # read as its report reads it (.looks)
    current = data.current
    card = list(used["code_version"]) if len(used) else []
    read = list(current["code_version"]) if len(current) else []
    check_versions(
        [None if is_missing(v) else str(v) for v in card + read],
        allow_mixed=allow_mixed_versions,
        what=f"{results_dir} (the records of the README's headline)",
        current=current_version,
    )
    cells = difference_cells(current)
    profile = None
    if cells:
        done = current[current["status"] == "done"]
        sizes = done[done["profile"].isin(list(cells))].groupby("profile").size()
        profile = str(sorted(sizes.items(), key=lambda i: (-i[1], str(i[0])))[0][0])
    claims = load_claims(root, load_paper_figures(root))
    frozen = difference_frozen(current).get(profile, {}) if profile else {}
    design = design_for(DIFFERENCES_MATRIX, root, profile)
    decided = None
    if design is not None and profile:
        analysis = analyse(design, results_dir, root)
        table = difference_decisions(analysis, matrix.name, cells[profile], frozen, claims)
        decided = counts_line(analysis, [matrix.name])
    else:
        table = difference_rows(cells[profile], data.family, claims, frozen) if profile else []
    presets = []
    summary = data.summary
    for p in PRESETS:
        sub = summary[(summary["profile"] == profile) & (summary["run_id"] == p)]
        if len(sub):
            r = sub.iloc[0]
            cell = metric_cell(r, "rsum")
            # A bimodal preset's cell gives each group's mean, not a mean ± CI.
            presets.append((p, cell if is_missing(r.get("split")) else f"(bimodal: {cell})"))
        elif profile:
            presets.append((p, DASH))
    n_claims = len({r.claim.id for r in rows})
    about = profile_summaries(root)
    return Headline(
        counts,
        n_claims,
        table,
        presets,
        profile,
        version_counts(card),
        version_counts(read),
        current_version,
        by_profile,
        controls,
        paired_tests(families),
        tuple((p, about.get(p, "")) for p, _ in by_profile),
        decided,
    )


def write_headline(
    readme: str | Path,
    results_dir: str | Path,
    root: Path | None = None,
    *,
    allow_mixed_versions: bool = False,
    current_version: str | None = None,
) -> Path:
    """Replace the headline block of ``readme`` (between its markers) with the block of
    the records under ``results_dir``; the rest of the file stays byte-identical. The
    markers are checked before any record is read. Returns ``readme``."""
    path = Path(readme)
    text = path.read_bytes().decode("utf-8")
    replace_block(text, "", str(path))
    block = render_headline(
        headline_of(
            results_dir,
            root,
            allow_mixed_versions=allow_mixed_versions,
            current_version=current_version,
        )
    )
    new = replace_block(text, block, str(path))
    if new != text:
        atomic_write_text(path, new)
    return path


__all__ = [
    "BEGIN",
    "END",
    "Headline",
    "headline_of",
    "render_headline",
    "replace_block",
    "write_headline",
]
