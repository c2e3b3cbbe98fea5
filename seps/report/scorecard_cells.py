"""The cells of the scorecard's claims table, one function per column.

Each takes a row (:mod:`seps.report.scorecard_rows`) and its judgement in its claim's
family (:func:`seps.report.scorecard_judge.judge_row`) and returns markdown text; the
preamble (:mod:`seps.report.scorecard_sections`) says what each part means. Pure
functions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from ..experiments.definitions import Matrix
from ..io.formatting import DASH, code, fmt, fmt_ci, is_missing
from .blind import BLIND
from .claims import DIRECTIONS
from .compare import Family
from .power import impact_text
from .scorecard_judge import Judged, impact_level
from .scorecard_rows import Row
from .sequential_section import interval_text
from .sequential_verdicts import BOUNDED
from .summary import p_value_text
from .verdicts import (
    IDENTICAL,
    IDENTICAL_HOLDS,
    NO_SIZE,
    UNDERPOWERED,
    UNTESTABLE,
    holm_interval,
    verdict_kind,
)

#: Report heading of a matrix's extra section (``sections:``), linked instead of Results.
SECTION_TITLES = {"loss-study": "Loss study"}


def anchor(title: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def link_text(matrix: Matrix) -> str:
    """A link to the section of ``<matrix>.md`` (beside the scorecard) that details a row:
    the matrix's extra section when it has one (the loss study), else its results."""
    title = next((SECTION_TITLES[s] for s in matrix.sections if s in SECTION_TITLES), "Results")
    return f"[{matrix.name}]({matrix.name}.md#{anchor(title)})"


def ci_text(lo: float, hi: float) -> str:
    """``[lo, hi]`` with signs, one decimal."""
    return f"[{fmt(lo, 1, sign=True)}, {fmt(hi, 1, sign=True)}]"


def claim_text(row: Row, first: bool, levels: Mapping[str, str]) -> str:
    """The claim cell: on the claim's first row the claim, its claimed direction and size
    and seed 004's impact; ``(cont.)`` after; then the pair the row tests."""
    c, claimed = row.claim, []
    if c.kind == "optimum":
        claimed.append(f"claimed best: {code(row.baseline)}")
    elif c.direction is not None:
        size = "" if c.size is None else f", {fmt(c.size, 1, sign=True)} rSum on Flickr30K"
        if c.relative_size is not None:
            size = f", {fmt(100.0 * c.relative_size, 1, sign=True)}%" + size
        claimed.append(f"claimed: {DIRECTIONS[c.direction]}{size}")
    level = impact_level(row, levels)
    if level:
        claimed.append(f"seed 004: {impact_text(level)}")
    text = f"**{c.id}**: {c.claim} ({'; '.join(claimed)})" if claimed else f"**{c.id}**: {c.claim}"
    text = text if first else f"**{c.id}** (cont.)"
    return text + (f"; test: {code(row.variant)} vs {code(row.baseline)}" if row.variant else "")


def claim_cell(row: Row) -> str:
    """The claims table's first cell: the claim's id and the pair the row tests (the
    claim itself is in the list under the table, :func:`claim_list`)."""
    test = f": {code(row.variant)} vs {code(row.baseline)}" if row.variant else ""
    return f"**{row.claim.id}**{test}"


def claim_list(rows: Sequence[Row], levels: Mapping[str, str]) -> list[str]:
    """One line per claim of ``rows`` (in order): its id, the claim with its claimed
    direction, size and seed 004's impact (:func:`claim_text`), and its source."""
    out, seen = ["The claims:", ""], set()
    for r in rows:
        if r.claim.id in seen:
            continue
        seen.add(r.claim.id)
        text = claim_text(r, True, levels).split("; test: ")[0]
        out.append(f"- {text}. Source: {r.claim.source}.")
    return [*out, ""]


def optimum_text(row: Row, judged: Judged, family: Family, missing: str) -> str:
    """The measured-effect cell of a grid optimum: the best and the claimed cell (mean ±
    per-cell 95% CI), the quoted cell's paired difference to the claimed one with its
    Holm-widened interval, and how many cells are detectably above and below it."""
    opt = judged.optimum
    assert opt is not None
    of = f"{len(row.cells)} of {len(row.cells) + len(row.missing)} cells"
    if opt.verdict == IDENTICAL:
        return f"all {of} bit-identical"
    if opt.best is None:
        return DASH + missing
    best, claimed = opt.best, row.cells[0]
    text = f"best {code(best.run)} {fmt_ci(best.mean, best.half, best.n)}; claimed "
    text += "is the best" if best is claimed else fmt_ci(claimed.mean, claimed.half, claimed.n)
    text += f" ({of}, per-cell 95% CI)"
    shown = opt.shown
    c = shown.comparison if shown is not None else None
    if shown is None or c is None or not c.testable or is_missing(family.p(c)):
        return text  # not a test of the family: a frozen part (seps.report.frozen)
    p = family.p(c)
    text += f"; {code(shown.run)} − claimed {fmt(c.mean, 1, sign=True)} "
    text += f"{ci_text(*holm_interval(c, p))} (n={c.n}, p Holm {p_value_text(p)}); "
    above, below = len(opt.above), len(opt.below)
    return text + f"of {opt.tested} cells, {above} detectably above, {below} below"


def bimodal_text(row: Row, family: Family) -> str:
    """The measured-effect cell of an effect row with a bimodal side: ``k of n seeds
    functional`` with both groups' means for each bimodal side, the other side's mean, and
    the paired test over every paired seed without an interval (a mean ± CI of two
    groups describes neither)."""
    c = row.comparison
    assert c is not None
    parts = [s.text() for s in row.bimodal]
    runs = {s.run for s in row.bimodal}
    if row.baseline not in runs:
        parts.append(f"{code(row.baseline)} {fmt(row.base_mean)} on the same seeds")
    elif row.variant not in runs:
        parts.append(f"{code(row.variant)} {fmt(row.base_mean + c.mean)} on the same seeds")
    p = family.p(c)
    parts.append(
        f"Δ {fmt(c.mean, 1, sign=True)} over all {c.n} paired seeds (p Holm "
        f"{p_value_text(p)}; no interval: bimodal)"
    )
    return "; ".join(parts)


def effect_text(row: Row, judged: Judged, family: Family, levels: Mapping[str, str]) -> str:
    """The measured-effect cell (the scorecard's preamble says what each part means)."""
    present = len(row.cells) if row.claim.kind == "optimum" else 2 - len(row.missing)
    missing = f" (no record of {', '.join(map(code, row.missing))})" if present else ""
    if not row.claim.testable:
        return DASH
    if row.claim.kind == "optimum":
        return optimum_text(row, judged, family, missing)
    if row.sequential is not None:
        text = interval_text(row.sequential) + ", repeated interval, build- and CPU-blocked"
        base = row.sequential.reference_rsum
        final = row.sequential.final()
        if final is not None and impact_level(row, levels) and base:
            text += f"; {fmt(100.0 * final.mean / base, 1, sign=True)}% of the reference's rSum"
        return text
    c = row.comparison
    if c is None or c.n == 0:
        return DASH + (missing or (" (no common seed)" if c is not None else ""))
    if c.identical:
        return f"0.0 (bit-identical on {c.n} seed{'s' if c.n != 1 else ''})"
    if c.blind:
        return f"{DASH} (`{row.variant if c.blind_side == 'variant' else row.baseline}` is {BLIND})"
    fell = f"; {row.collapsed}" if row.collapsed else ""
    if not c.testable:
        return f"{fmt(c.mean, 1, sign=True)} (n={c.n}, no CI){fell}"
    if row.frozen:
        return f"{fmt(c.mean, 1, sign=True)} (n={c.n}, not a test){fell}"
    if row.bimodal:
        return bimodal_text(row, family) + fell
    p = family.p(c)
    text = f"{fmt(c.mean, 1, sign=True)} {ci_text(*holm_interval(c, p))} (n={c.n}, p Holm "
    text += f"{p_value_text(p)})"
    if impact_level(row, levels) and not is_missing(row.base_mean) and row.base_mean:
        text += f"; {fmt(100.0 * c.mean / row.base_mean, 1, sign=True)}% of the baseline's rSum"
    text += f"; {row.at_chance}" if row.at_chance else ""
    return text + fell


def scaled_text(row: Row, judged: Judged) -> str:
    """The scaled-claim cell: the claimed effect on this benchmark and how it was scaled
    (:func:`seps.report.power.scaled_claim`), or ``no stated size``."""
    if not row.claim.testable:
        return DASH
    return judged.scaled.text if judged.scaled is not None else "no stated size"


def mde_text(judged: Judged) -> str:
    """The MDE cell: the test's minimal detectable effect at 80% power and its level
    ``0.05/m`` (``—`` when the row is not a test)."""
    power = judged.power
    if power is None:
        return DASH
    level = "0.05" if power.tests == 1 else f"0.05/{power.tests}"
    return f"{fmt(power.mde)} (α {level}, n={judged.tested.n if judged.tested else DASH})"


def verdict_text(row: Row, judged: Judged) -> str:
    """The verdict cell, with the reason of an identical row or an untestable claim."""
    verdict = judged.verdict
    if verdict == UNTESTABLE:
        why = row.comparison.blind if row.comparison is not None else None
        return f"{UNTESTABLE}: {why or row.frozen or row.claim.why}"
    if verdict in (IDENTICAL, IDENTICAL_HOLDS):
        reasons = [row.comparison.reason] if row.comparison is not None else []
        reasons += [c.reason for c in row.cells]
        reason = next((r for r in reasons if r), None)
        return f"{verdict}: {reason}" if reason else verdict
    return verdict


#: The phrase a verdict cell shows for each kind of verdict (:data:`VERDICTS`), where it
#: is not the kind itself; the rest of the verdict goes to a numbered note.
SHORT = {IDENTICAL: "identical", NO_SIZE: "not detected", UNTESTABLE: "not testable here"}


class Notes:
    """The numbered notes under a table: each distinct text once, numbered in order."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def ref(self, text: str) -> str:
        """`` [k]``, the number of ``text`` (a new one when unseen)."""
        if text not in self.texts:
            self.texts.append(text)
        return f" [{self.texts.index(text) + 1}]"

    def lines(self) -> list[str]:
        """``Notes:`` and one numbered line per note (none: no lines)."""
        if not self.texts:
            return []
        body = [f"{i}. {t}." for i, t in enumerate(self.texts, 1)]
        return ["Notes:", "", *body, ""]


def _unwrap(text: str) -> str:
    """``text`` without the parentheses around its leading part: ``(needs about 13
    seeds); estimate opposite`` -> ``needs about 13 seeds; estimate opposite``."""
    if not text.startswith("("):
        return text
    depth = 0
    for i, ch in enumerate(text):
        depth += (ch == "(") - (ch == ")")
        if depth == 0:
            return (text[1:i] + text[i + 1 :]).strip()
    return text


#: ``needs about 13 seeds`` / ``needs over 100 seeds: about 2,300`` -> the count.
_NEEDS = re.compile(r"needs (?:about|over \d+ seeds: about) ([\d,]+)(?: seeds)?")


def verdict_cell(row: Row, judged: Judged, notes: Notes) -> str:
    """The verdict as a short phrase (the kind of :data:`VERDICTS` it counts under, a
    detected effect's ``larger/smaller than claimed``, a bound's ``±X``, the seeds an
    underpowered test needs) and a note number for the rest: the reason, the interval."""
    full = verdict_text(row, judged)
    kind = IDENTICAL_HOLDS if full.startswith(IDENTICAL_HOLDS) else verdict_kind(full)
    phrase = SHORT.get(kind, kind)
    rest = _unwrap(full[len(kind) :].strip(" :;"))
    if kind == "supported" and rest.startswith(("larger than claimed", "smaller than claimed")):
        head, _, tail = rest.partition(" (")
        phrase, rest = f"supported, {head}", tail.rstrip(")")
    elif kind == BOUNDED and row.sequential is not None:
        phrase = f"bounded ±{fmt(row.sequential.bound())}"
    elif kind == UNDERPOWERED and (m := _NEEDS.match(rest)):
        phrase = f"underpowered (~{m.group(1)} seeds)"
        rest = rest[m.end() :].strip(" ;")
    elif kind == NO_SIZE:
        rest = "no stated size, so its power cannot be judged" + (f"; {rest}" if rest else "")
    return phrase + (notes.ref(rest) if rest else "")


def protocol_text(row: Row, several_profiles: bool, several_machines: bool = False) -> str:
    """The protocol cell: the claimed protocol, the records' when they differ, the
    profile when the scorecard holds several, and the records' CPU model when its rows
    come from several (a record reproduces on its own CPU type only, and two matrices'
    levels differ by the machine as well: docs/across-machines.md)."""
    text = row.protocol + (f" (records: {row.observed})" if row.observed else "")
    if several_profiles and row.profile is not None:
        text += f"; profile {code(row.profile)}"
    if several_machines and row.machine is not None:
        text += f"; {row.machine}"
    return text


__all__ = [
    "SECTION_TITLES",
    "Notes",
    "anchor",
    "bimodal_text",
    "ci_text",
    "claim_cell",
    "claim_list",
    "claim_text",
    "effect_text",
    "link_text",
    "mde_text",
    "optimum_text",
    "protocol_text",
    "scaled_text",
    "verdict_cell",
    "verdict_text",
]
