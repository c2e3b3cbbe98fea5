"""The scorecard's worlds side by side: a claim row measured in more than one world.

A world is a profile (``standard``, ``standard-noisy``: the same images and sparse
captions, noisier dense captions; docs/worlds.md). A row of a claim (same matrix,
baseline and variant) whose records exist in several worlds is judged in each, in its
own family or by its own world's sequential design; :func:`side_by_side_lines` puts the
verdicts next to each other and flags a disagreement:

- ``sign``: detected in two worlds (``supported`` or ``contradicted``) with opposite
  estimates;
- ``decision``: the verdicts are of different kinds (detected in one, bounded or open in
  another...), which may be power as well as the world: the note says which verdicts;
- nothing when they agree.

A row measured in one world only is left out (the claims table has it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..io.formatting import code, fmt, markdown_table
from .verdicts import verdict_kind

__all__ = ["WorldVerdict", "disagreement", "side_by_side_lines"]

DETECTED = ("supported", "contradicted")


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
    return "decision" if ka != kb else ""


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
    table, flagged = [], 0
    for (claim, matrix, baseline, variant), d in shared.items():
        present = [d[w] for w in worlds if w in d]
        flags = {disagreement(present[0], other) for other in present[1:]} - {""}
        flag = "sign" if "sign" in flags else ("decision" if flags else "")
        flagged += bool(flag)
        row = [f"{code(claim)}: {code(variant)} vs {code(baseline)} ({matrix})"]
        row += [_cell(d.get(w)) for w in worlds]
        table.append([*row, f"**differ: {flag}**" if flag else "agree"])
    return [
        *lines,
        f"The rows measured in more than one world ({names}), each judged in its own "
        f"world: **{flagged} of {len(shared)} differ**. `sign`: detected in both, with "
        "opposite signs; `decision`: verdicts of different kinds (which can be power as "
        "well as the world).",
        "",
        markdown_table(table, ["row", *worlds, "worlds"]),
        "",
    ]
