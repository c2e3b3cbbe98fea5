"""The control that comes with a second world: ``laps`` must not change between worlds.

Two worlds (profiles ``standard`` and ``standard-noisy``) share images, sparse captions,
pretrained builds and training; only the dense captions differ (docs/worlds.md).
``laps`` reads no dense caption, so a seed's ``laps`` record must carry the same bits in
every world. If it does not, the worlds differ in more than the dense captions, and a
verdict that changes between them cannot be put down to the captions.
:func:`control_lines` compares, seed by seed, each later world's ``laps`` with the first
world's (:func:`seps.report.same_bits.compare_records`: every metric and every number of
the training history) and words the outcome for the pages; it is measured from the
records every time a page is made, never typed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..io.formatting import code
from ..io.store import RecordError, read_record
from .same_bits import Pair, compare_records

__all__ = ["LAPS_MATRIX", "REFERENCE_RUN", "compare_worlds", "control_lines"]

#: The run that reads no dense caption, and the matrix whose records hold it in every
#: world (both worlds run it, on one CPU type; the card's ratios read it too).
REFERENCE_RUN = "laps"
LAPS_MATRIX = "seven-differences"


def _laps_records(results: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """(profile, seed) -> the finished ``laps`` record of :data:`LAPS_MATRIX` (the file
    names start with the run's slug, so only those files are read)."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for path in sorted((Path(results) / LAPS_MATRIX).glob(f"{REFERENCE_RUN}-*.json")):
        try:
            rec = read_record(path)
        except RecordError:
            continue  # an unreadable record is the store's fault, named by its checks
        if rec and rec.get("run_id") == REFERENCE_RUN and rec.get("status") == "done":
            out[(str(rec.get("profile")), int(rec["seed"]))] = rec
    return out


def compare_worlds(results: str | Path, worlds: Sequence[str]) -> dict[str, list[Pair]]:
    """For each world after the first: its ``laps`` records compared with the first
    world's, one :class:`Pair` per seed both hold (named ``s<seed>``), by seed."""
    records = _laps_records(Path(results))
    first = worlds[0]
    out: dict[str, list[Pair]] = {}
    for world in worlds[1:]:
        seeds = sorted(s for p, s in records if p == world and (first, s) in records)
        out[world] = [
            compare_records(f"s{s}", records[(first, s)], records[(world, s)]) for s in seeds
        ]
    return out


def _outcome(world: str, first: str, pairs: Sequence[Pair]) -> str:
    if not pairs:
        return f"{code(world)}: not compared yet (no seed has `laps` in both worlds)."
    seeds = ", ".join(p.name[1:] for p in pairs)
    differ = [p for p in pairs if not p.same]
    if not differ:
        return (
            f"{code(world)} against {code(first)}: **same bits** at seeds {seeds} "
            f"({len(pairs)} of {len(pairs)})."
        )
    first_bad = differ[0]
    why = (
        "the two records were made on different CPU types, so the bits cannot be compared"
        if first_bad.same_machine is False
        else "**the worlds differ in more than the dense captions: their comparison is void**"
    )
    return (
        f"{code(world)} against {code(first)}: **differ** at seeds "
        f"{', '.join(p.name[1:] for p in differ)} of {seeds} "
        f"(seed {first_bad.name[1:]}: {first_bad.first_difference}); {why}."
    )


def control_lines(results: str | Path, worlds: Sequence[str]) -> list[str]:
    """The pages' lines for the control (``[]`` for fewer than two worlds)."""
    if len(worlds) < 2:
        return []
    compared = compare_worlds(results, worlds)
    lines = [
        f"**Control:** `{REFERENCE_RUN}` reads no dense caption, so each seed's record "
        "must carry the same bits in every world (metrics and training history):",
        "",
    ]
    lines += [f"- {_outcome(w, worlds[0], compared[w])}" for w in worlds[1:]]
    return [*lines, ""]
