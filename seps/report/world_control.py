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

Bits are only comparable on one CPU type: under ``standard`` a record reproduces only
on the CPU type that made it (docs/across-machines.md, "Intel against AMD"). So a later
world's ``laps`` is compared with a first-world record of the same training (the same
key as the first world's :data:`LAPS_MATRIX` record, found in any matrix: ``controls``
and ``regime`` hold ``laps`` too) made on the same CPU type
(:func:`seps.experiments.provenance.record_bits_key`); a seed with no such record is
listed as not comparable, never as a difference.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..experiments.provenance import record_bits_key, record_cpu_model
from ..io.formatting import code
from ..io.store import RecordError, read_record
from .same_bits import Pair, compare_records

__all__ = ["LAPS_MATRIX", "REFERENCE_RUN", "WorldControl", "compare_worlds", "control_lines"]

#: The run that reads no dense caption, and the matrix whose records hold it in every
#: world (both worlds run it; the card's ratios read it too).
REFERENCE_RUN = "laps"
LAPS_MATRIX = "seven-differences"


@dataclass(frozen=True)
class WorldControl:
    """One later world against the first: ``pairs`` (one per seed compared, named
    ``s<seed>``) and the seeds whose ``laps`` the first world holds only from another
    CPU type (``other_cpu``: seed -> that record's CPU model), which are not compared."""

    pairs: list[Pair] = field(default_factory=list)
    other_cpu: dict[int, str] = field(default_factory=dict)


def _laps_records(results: Path) -> list[tuple[str, dict[str, Any]]]:
    """(matrix, record) of every finished ``laps`` record of the store (the file names
    start with the run's slug, so only those files are read)."""
    out: list[tuple[str, dict[str, Any]]] = []
    for path in sorted(Path(results).glob(f"*/{REFERENCE_RUN}-*.json")):
        try:
            rec = read_record(path)
        except RecordError:
            continue  # an unreadable record is the store's fault, named by its checks
        if rec and rec.get("run_id") == REFERENCE_RUN and rec.get("status") == "done":
            out.append((path.parent.name, rec))
    return out


def _same_cpu(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether the bits of ``a`` and ``b`` can be compared: the same CPU type and float
    path, or a record that does not say (compared, and a difference is then named)."""
    ka, kb = record_bits_key(a), record_bits_key(b)
    return ka is None or kb is None or ka == kb


def compare_worlds(results: str | Path, worlds: Sequence[str]) -> dict[str, WorldControl]:
    """For each world after the first, its :data:`LAPS_MATRIX` ``laps`` records
    compared with the first world's records of the same training on the same CPU type
    (the :data:`LAPS_MATRIX` record first, then the same key in another matrix)."""
    records = _laps_records(Path(results))
    first = worlds[0]
    main = {(str(r.get("profile")), int(r["seed"])): r for m, r in records if m == LAPS_MATRIX}
    out: dict[str, WorldControl] = {}
    for world in worlds[1:]:
        control = WorldControl()
        for seed in sorted(s for p, s in main if p == world and (first, s) in main):
            ours, theirs = main[(world, seed)], main[(first, seed)]
            twins = [theirs] + [
                r for m, r in records
                if m != LAPS_MATRIX and theirs.get("key") and r.get("key") == theirs["key"]
            ]  # fmt: skip
            match = next((r for r in twins if _same_cpu(ours, r)), None)
            if match is None:
                control.other_cpu[seed] = record_cpu_model(theirs)
            else:
                control.pairs.append(compare_records(f"s{seed}", match, ours))
        out[world] = control
    return out


def _outcome(world: str, first: str, control: WorldControl) -> str:
    pairs = control.pairs
    if not pairs and not control.other_cpu:
        return f"{code(world)}: not compared yet (no seed has `laps` in both worlds)."
    seeds = ", ".join(p.name[1:] for p in pairs)
    differ = [p for p in pairs if not p.same]
    if not pairs:
        text = f"{code(world)} against {code(first)}: no seed compared"
    elif not differ:
        text = (
            f"{code(world)} against {code(first)}: **same bits** at seeds {seeds} "
            f"({len(pairs)} of {len(pairs)})"
        )
    else:
        first_bad = differ[0]
        text = (
            f"{code(world)} against {code(first)}: **differ** at seeds "
            f"{', '.join(p.name[1:] for p in differ)} of {seeds} "
            f"(seed {first_bad.name[1:]}: {first_bad.first_difference}); **the worlds "
            "differ in more than the dense captions: their comparison is void**"
        )
    if control.other_cpu:
        cpus = " and ".join(sorted(set(control.other_cpu.values())))
        text += (
            f"; not compared at seeds {', '.join(map(str, control.other_cpu))}, whose "
            f"first-world `laps` was made only on another CPU type ({cpus}), where a "
            "record's bits do not reproduce"
        )
    return text + "."


def control_lines(results: str | Path, worlds: Sequence[str]) -> list[str]:
    """The pages' lines for the control (``[]`` for fewer than two worlds)."""
    if len(worlds) < 2:
        return []
    compared = compare_worlds(results, worlds)
    lines = [
        f"**Control:** `{REFERENCE_RUN}` reads no dense caption, so each seed's record "
        "must carry the same bits in every world (metrics and training history), "
        "compared on one CPU type:",
        "",
    ]
    lines += [f"- {_outcome(w, worlds[0], compared[w])}" for w in worlds[1:]]
    return [*lines, ""]
