"""The controls section: can this instrument see? Stated before any claim.

The controls are the claims of ``group: controls`` in ``ablations/claims.yaml``
(the ``controls`` matrix): checks that the benchmark sees an effect it must see (the
heads learn, the selection matters, the dense captions matter where they can, a planted
damage is recovered) and sees none where none can be (a negative control). The scorecard
(:mod:`seps.report.scorecard`) makes their rows with its own code and judges each with
its verdict rule (:func:`~seps.report.verdicts.effect_verdict`) in a Holm family of the
controls' tests alone, so the controls do not change the claims' corrections; this
module turns those judged rows into the section's markdown. The matrix report of
``controls`` (``sections: [controls]``) shows the same lines.

*When a control holds* (:func:`judge`): every one of its rows (pair and profile) holds,
where a row holds when

1. its verdict is ``supported`` (direction ``+`` or ``-``: detected on the claimed side),
   or, for direction ``0`` (a switch that cannot act), ``identical`` (every seed's
   metrics bit-identical: "identical bits"), ``equivalent`` (within the claim's
   ``equivalence_margin`` by the TOST) or ``not detected`` with a test powered for that
   margin (an ``underpowered`` negative control does not hold: it could not have seen
   an effect of the margin's size);
2. with ``baseline_at_most``: the baseline's mean rSum over the paired seeds is at most
   that fraction of the variant's (``learns``: untrained <= 25% of trained);
3. with ``order``: the runs' mean rSum (each over its seeds) do not increase along the
   order (ties hold);

and every run it names has a record. A control without any record is *not judged*, and
counts as not holding. ``shown`` runs are stated (mean ± 95% CI), never judged.

Pure functions of rows and verdicts: no record is read here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..io.formatting import DASH, code, fmt, fmt_ci, fmt_n, is_missing, markdown_table
from ..stats.paired import ALPHA
from .claims import Claim
from .compare import Family
from .summary import p_value_text
from .verdicts import (
    EQUIVALENT,
    IDENTICAL,
    IDENTICAL_HOLDS,
    NO_RECORDS,
    NOT_DETECTED,
    holm_interval,
)

if TYPE_CHECKING:  # the scorecard imports this module
    from .scorecard_rows import Row

#: The claims of this group are the controls.
GROUP = "controls"
#: The section's heading.
TITLE = "Controls: can this instrument see?"
#: Verdicts under which a row holds, by claimed direction (a verdict holds when it starts
#: with one of them: ``not detected (no stated size)`` is a ``not detected``).
HOLDING = {
    "+": ("supported",),
    "-": ("supported",),
    "0": (IDENTICAL_HOLDS, IDENTICAL, EQUIVALENT, NOT_DETECTED),
}
#: Why a verdict does not hold, in the holds column.
FAILURES = {
    "contradicted": "detected with the wrong sign",
    NOT_DETECTED: "not detected",
}


@dataclass(frozen=True)
class Check:
    """One row of a control: ``measured`` (the numbers) and ``failure`` (why the row does
    not hold; ``None`` when it holds); ``judged``: both sides have records in common."""

    row: Row
    measured: str
    failure: str | None
    judged: bool


@dataclass(frozen=True)
class Control:
    """A control and the checks of its rows, in row order."""

    claim: Claim
    checks: tuple[Check, ...]

    @property
    def judged(self) -> bool:
        """Some row of it has records on both sides."""
        return any(c.judged for c in self.checks)

    @property
    def holds(self) -> bool:
        """Every row holds (a control without rows or records does not)."""
        return bool(self.checks) and all(c.failure is None for c in self.checks)


def _ci(lo: float, hi: float) -> str:
    return f"[{fmt(lo, 1, sign=True)}, {fmt(hi, 1, sign=True)}]"


def _delta(row: Row, verdict: str, family: Family) -> tuple[str, str | None]:
    """The paired difference's text and the failure its verdict makes (``None``: holds)."""
    c, direction = row.comparison, str(row.claim.direction)
    assert c is not None
    holds = any(verdict.startswith(v) for v in HOLDING[direction])
    if c.identical:
        text = f"identical bits on {fmt_n(c.n, 'seed')} (every metric equal)"
        return text, None if holds else IDENTICAL
    if not c.testable or row.frozen:
        text = f"Δ {fmt(c.mean, 1, sign=True)} (n={c.n}, not a test)"
        return text, None if holds else verdict
    p = family.p(c)
    text = f"Δ {fmt(c.mean, 1, sign=True)} {_ci(*holm_interval(c, p))} (n={c.n}, p Holm "
    found = "detected" if p < ALPHA else "not detected"
    if p < ALPHA and verdict == "contradicted" and direction != "0":
        found = "detected, wrong sign"
    text += f"{p_value_text(p)}): {found}"
    if holds:
        return text, None
    failure = FAILURES.get(verdict, verdict)
    return text, "detected: not null" if direction == "0" and p < ALPHA else failure


def _order(claim: Claim, row: Row) -> tuple[str, str | None]:
    """The ``order`` runs' means in order and the failure when they are out of order."""
    means = {c.run: c for c in row.cells}
    if any(run not in means for run in claim.order):
        return "", None  # a missing run is named by the row's missing runs
    parts, broken = [], []
    for i, run in enumerate(claim.order):
        cell = means[run]
        if i:
            before = means[claim.order[i - 1]].mean
            ok = before >= cell.mean
            parts.append("≥" if ok else "<")
            if not ok:
                broken.append(f"{code(claim.order[i - 1])} < {code(run)}")
        parts.append(f"{code(run)} {fmt_ci(cell.mean, cell.half, cell.n)}")
    failure = f"out of order ({', '.join(broken)})" if broken else None
    return f"means {' '.join(parts)}", failure


def judge(row: Row, verdict: str, family: Family) -> Check:
    """The check of one control row (``verdict``: the scorecard's, in ``family``)."""
    claim, c = row.claim, row.comparison
    missing = tuple(r for r in row.missing if r not in (row.baseline, row.variant))
    if c is None or c.n == 0:
        gone = [r for r in row.missing if r in (row.baseline, row.variant)]
        why = f"no record of {', '.join(map(code, gone))}" if gone else "no common seed"
        return Check(row, f"{DASH} ({why})", "not judged: " + (NO_RECORDS if gone else why), False)
    failures: list[str] = []
    parts: list[str] = []
    var_mean = row.base_mean + c.mean
    means = f"{code(row.baseline)} {fmt(row.base_mean)}, {code(row.variant)} {fmt(var_mean)}"
    if claim.baseline_at_most is not None:
        ratio = row.base_mean / var_mean if var_mean > 0 else float("nan")
        means += f" (ratio {fmt(100.0 * ratio, 0)}%)"
        if is_missing(ratio) or ratio > claim.baseline_at_most:
            limit = fmt(100.0 * claim.baseline_at_most, 0)
            failures.append(
                f"{code(row.baseline)} at {fmt(100.0 * ratio, 0)}% of {code(row.variant)} "
                f"(more than {limit}%)"
            )
    parts.append(means)
    delta, failure = _delta(row, verdict, family)
    parts.append(delta)
    if failure:
        failures.insert(0, failure)
    if claim.order:
        text, failure = _order(claim, row)
        if text:
            parts.append(text)
        if failure:
            failures.append(failure)
    for cell in (x for x in row.cells if x.run in claim.shown):
        parts.append(f"{code(cell.run)} {fmt_ci(cell.mean, cell.half, cell.n)} (shown, no verdict)")
    if missing:
        parts.append(f"no record of {', '.join(map(code, missing))}")
        failures.append(f"no record of {', '.join(map(code, missing))}")
    return Check(row, "; ".join(parts), "; ".join(failures) or None, True)


def controls_of(judged: Sequence[tuple[Row, str]], family: Family) -> list[Control]:
    """The controls of ``judged`` (their rows with the scorecard's verdicts), in order of
    first appearance."""
    by_claim: dict[str, list[Check]] = {}
    claims: dict[str, Claim] = {}
    for row, verdict in judged:
        claims.setdefault(row.claim.id, row.claim)
        by_claim.setdefault(row.claim.id, []).append(judge(row, verdict, family))
    return [Control(claims[i], tuple(checks)) for i, checks in by_claim.items()]


def _holds_text(check: Check) -> str:
    if check.failure is None:
        return "yes"
    return check.failure if check.failure.startswith("not judged") else f"no: {check.failure}"


def _pending(failure: str) -> bool:
    """A failure that is a missing record, not a measured miss."""
    return failure.startswith(("not judged", "no record of"))


def state_text(control: Control) -> str:
    """A control's state in a few words, for the README's headline: ``holds``; ``fails``
    with its measured failures (and how many of its tests wait for records); ``partly
    judged`` when every test with records holds and others have none yet; ``not judged``
    with the reason when no test has records."""
    if control.holds:
        return "holds"
    n = len(control.checks)
    failures = [c.failure for c in control.checks if c.failure is not None]
    waiting = [f.removeprefix("not judged: ") for f in failures if _pending(f)]
    measured = sorted({f for f in failures if not _pending(f)})
    reasons = "; ".join(sorted(set(waiting)))
    if measured:
        text = f"fails ({'; '.join(measured)})"
        return text + (f"; {len(waiting)} of {n} tests not judged yet" if waiting else "")
    if control.judged:
        return f"partly judged ({n - len(waiting)} of {n} tests hold; {reasons})"
    return f"not judged ({reasons or 'no tests'})"


def summary_line(controls: Sequence[Control]) -> str:
    """``k of n controls hold``, and when some do not, which and how to read the rest."""
    held = sum(c.holds for c in controls)
    text = f"**{held} of {len(controls)} controls hold.**"
    if held == len(controls):
        return text
    failed = [code(c.claim.id) for c in controls if c.judged and not c.holds]
    unjudged = [code(c.claim.id) for c in controls if not c.judged]
    if failed:
        text += f" Failing: {', '.join(failed)}."
    if unjudged:
        text += f" Not judged (no records): {', '.join(unjudged)}."
    return (
        text + " Every verdict below is to be read in that light: where this instrument "
        "cannot be shown to see an effect of a kind (or shows one that cannot exist), a "
        "`supported`, `not detected` or `contradicted` below says as much about the "
        "instrument as about SEPS."
    )


def controls_section(judged: Sequence[tuple[Row, str]], family: Family) -> list[str]:
    """The section's markdown lines: ``judged`` is every control row (the claims of
    :data:`GROUP`, in file order) with its verdict in ``family``, the controls' own Holm
    family. One line, after the heading, when there is no control, when a control's
    matrix is not defined, or when no control has a record."""
    head = [f"## {TITLE}", ""]
    if not judged:
        return [*head, f"The claims file defines no controls (`group: {GROUP}`).", ""]
    undefined = sorted({m for row, _ in judged for m in row.claim.undefined})
    if undefined:
        names = ", ".join(code(m) for m in undefined)
        return [
            *head,
            f"The {names} matrix is not defined in these definitions: no control is judged, "
            "so nothing below has been checked against them.",
            "",
        ]
    controls = controls_of(judged, family)
    matrices = ", ".join(sorted({code(m) for c in controls for m in c.claim.matrices}))
    if not any(c.judged for c in controls):
        return [
            *head,
            f"No records of the {matrices} matrix yet: no control is judged, so nothing "
            "below has been checked against them.",
            "",
        ]
    several = len({row.profile for row, _ in judged if row.profile is not None}) > 1
    table = []
    for control in controls:
        for i, check in enumerate(control.checks):
            row = check.row
            name = f"**{control.claim.id}**"
            label = f"{name}: {control.claim.claim}" if i == 0 else f"{name} (cont.)"
            pair = f"{code(row.variant)} vs {code(row.baseline)}"
            if several and row.profile is not None:
                pair += f"; profile {code(row.profile)}"
            table.append([label, pair, check.measured, _holds_text(check)])
    return [
        *head,
        f"Before any claim, whether this benchmark sees an effect it must see and none "
        f"where none can be: the controls of the {matrices} matrix (`group: {GROUP}` in "
        "`ablations/claims.yaml`), judged from their records with the scorecard's "
        "paired tests. The two sides' means are over their paired seeds (a stated order's "
        "and a shown run's: mean ± 95% CI over the run's seeds); Δ is variant − baseline, its "
        "interval widened for a Holm correction across the controls' own "
        f"{fmt_n(family.size, 'paired test')} (a family apart from the claims', so the "
        "controls leave the claims' corrections unchanged). A control holds when each "
        "of its tests is detected on the claimed side (the negative control: identical "
        "bits, equivalent within its margin by the two one-sided tests, or not detected "
        "by a test powered for that margin), the untrained rSum is at most the stated "
        "fraction of "
        "the trained one where one is stated, and the means follow the stated order "
        "where one is stated; runs marked shown are stated without a verdict "
        "(`seps/report/controls.py`).",
        "",
        markdown_table(table, ["control", "test", "measured", "holds"]),
        "",
        summary_line(controls),
        "",
    ]


__all__ = [
    "GROUP",
    "TITLE",
    "Check",
    "Control",
    "controls_of",
    "controls_section",
    "judge",
    "state_text",
    "summary_line",
]
