"""The scorecard's worlds side by side: a claim row measured in more than one world.

A world is a profile (``standard``, ``standard-noisy``: the same images and sparse
captions, noisier dense captions; docs/worlds.md). A row of a claim (same matrix,
baseline and variant) whose records exist in several worlds is judged in each, in its
own family or by its own world's sequential design; :func:`side_by_side_lines` puts the
verdicts next to each other and flags a disagreement:

- ``sign``: detected in two worlds (``supported`` or ``contradicted``) with opposite
  estimates;
- ``decision``: both worlds decided the row (:data:`DECIDED`: detected, bounded, shown
  equivalent or identical, or not detected by a test powered for the claim) and the
  decisions are of different kinds, which may be power as well as the world;
- nothing otherwise. A row still undecided in a world (open, underpowered, not detected
  with no stated size, ...) has not disagreed yet: its last column says where it is
  undecided, since a sequential design's ``open`` and a fixed sample's ``underpowered``
  are the same state reached by two analyses, not two answers.

A row measured in one world only is left out (the claims table has it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..io.formatting import code, fmt, markdown_table
from .verdicts import EQUIVALENT, IDENTICAL, NOT_DETECTED, verdict_kind

__all__ = ["WorldVerdict", "disagreement", "side_by_side_lines"]

DETECTED = ("supported", "contradicted")
#: Verdict kinds that are a decision about the row (the rest are still undecided).
DECIDED = (*DETECTED, EQUIVALENT, NOT_DETECTED, "bounded", IDENTICAL)


@dataclass(frozen=True)
class WorldVerdict:
    """One row's verdict in one world: ``key`` (claim id, matrix, baseline, variant),
    ``profile``, ``verdict`` (the full verdict text), ``estimate`` (Δ rSum, NaN when no
    test)."""

    key: tuple[str, str, str, str]
    profile: str
    verdict: str
    estimate: float


def disagreement(a: WorldVerdict, b: WorldVerdict) -> str:
    """``sign``, ``decision`` or ``""`` (module docstring)."""
    ka, kb = verdict_kind(a.verdict), verdict_kind(b.verdict)
    if ka in DETECTED and kb in DETECTED and a.estimate * b.estimate < 0:
        return "sign"
    return "decision" if ka != kb and ka in DECIDED and kb in DECIDED else ""


def _undecided(present: Sequence[WorldVerdict]) -> list[str]:
    return [v.profile for v in present if verdict_kind(v.verdict) not in DECIDED]


def _cell(v: WorldVerdict | None) -> str:
    if v is None:
        return "—"
    kind = verdict_kind(v.verdict)
    est = "" if math.isnan(v.estimate) else f" ({'+' if v.estimate > 0 else ''}{fmt(v.estimate)})"
    return f"{kind}{est}"


def side_by_side_lines(verdicts: Sequence[WorldVerdict], worlds: Sequence[str]) -> list[str]:
    """The section's markdown: a table of every row judged in two or more of ``worlds``
    (in the order given), one column per world, and the flag; ``[]`` for fewer than two
    worlds."""
    if len(worlds) < 2:
        return []
    by_key: dict[tuple[str, str, str, str], dict[str, WorldVerdict]] = {}
    for v in verdicts:
        if v.profile in worlds:
            by_key.setdefault(v.key, {})[v.profile] = v
    shared = {k: d for k, d in by_key.items() if len(d) > 1}
    lines = ["## Worlds side by side", ""]
    names = ", ".join(code(w) for w in worlds)
    if not shared:
        return [
            *lines,
            f"No claim row has been judged in more than one world yet ({names}). A "
            "world's rows are judged from its sequential design's first look; until then "
            "the matrix reports hold its records back and say how many (docs/worlds.md "
            "says which rows the second world measures and how to run them).",
            "",
        ]
    table, flagged, pending = [], 0, 0
    for (claim, matrix, baseline, variant), d in shared.items():
        present = [d[w] for w in worlds if w in d]
        flags = {disagreement(present[0], other) for other in present[1:]} - {""}
        flag = "sign" if "sign" in flags else ("decision" if flags else "")
        undecided = _undecided(present)
        flagged += bool(flag)
        pending += bool(undecided) and not flag
        if flag:
            state = f"**differ: {flag}**"
        elif undecided:
            state = "undecided in " + (
                ("both" if len(present) == 2 else "every world")
                if len(undecided) == len(present)
                else ", ".join(map(code, undecided))
            )
        else:
            state = "agree"
        row = [f"{code(claim)}: {code(variant)} vs {code(baseline)} ({matrix})"]
        row += [_cell(d.get(w)) for w in worlds]
        table.append([*row, state])
    return [
        *lines,
        f"The rows measured in more than one world ({names}), each judged in its own "
        f"world: **{flagged} of {len(shared)} differ**, {pending} not yet decided in every "
        "world. `sign`: detected in both, with opposite signs; `decision`: decided in "
        "both, with decisions of different kinds (which can be power as well as the "
        "world); a row undecided in a world (open, underpowered, no stated size) has not "
        "disagreed yet.",
        "",
        markdown_table(table, ["row", *worlds, "worlds"]),
        "",
    ]
