"""Whether a rerun gave the same bits: two result stores compared record by record.

The check a reviewer makes of a reproduction ("rerun one committed run at HEAD into a
new folder; are its metrics bitwise the committed ones?"), as a pure function over two
stores. Records are paired by their place in the store (``<matrix>/<run>-<key>-s<seed>.json``:
the key fixes the configs, so equal names are the same run). Compared exactly: every
metric and every number of the training history (losses, keep ratios, gradient norms,
validation recalls, per epoch and per logged step); left out: wall times and
throughputs, which no two runs share. A history field that only one of the two records
has (a measurement added to the records by later code, e.g. ``grad_share``) is not
compared but counted (:attr:`Pair.added`): a record of older code still has the same
bits when every number both carry is equal. A metric only one has is a difference. Where
the bits differ, the row also says whether
the two records came from the same code version, machine (float path and CPU model:
:func:`seps.experiments.provenance.bits_key`) and pretrained weights
(:mod:`seps.experiments.provenance`), the three things besides the configs that decide them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..experiments.provenance import bits_key, cpu_label
from ..io.store import RecordError, scan_records
from ..versioning.version import VERSION_KEY

__all__ = ["Pair", "compare_records", "compare_stores", "numbers"]

#: History and metric keys that measure time, not the model: never compared.
_TIMING = re.compile(r"seconds|per_second")


def numbers(record: dict[str, Any]) -> dict[str, Any]:
    """The record's metrics and training history flattened to ``{path: value}``
    (``metrics.rsum``, ``history.1.steps_log.3.loss``, ...), timing fields left out."""
    out: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                if not _TIMING.search(str(k)):
                    walk(f"{prefix}.{k}", v)
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(f"{prefix}.{i}", v)
        else:
            out[prefix] = value

    walk("metrics", record.get("metrics") or {})
    walk("history", record.get("history") or [])
    return out


def _added_fields(
    a: dict[str, Any], b: dict[str, Any], na: dict[str, Any], nb: dict[str, Any]
) -> tuple[str, ...]:
    """The ``history.<epoch>.<field>...`` paths of a field that one record's epoch has and
    the other's same epoch lacks altogether (a measurement newer code adds). An epoch, a
    logged step or a sub-field missing on one side is not an added field: it is compared,
    and differs."""
    ha, hb = (r.get("history") or [] for r in (a, b))
    out = []
    for k in dict.fromkeys([*na, *nb]):
        parts = k.split(".")
        if parts[0] != "history" or (k in na) == (k in nb):
            continue
        e, field = int(parts[1]), parts[2]
        if e < len(ha) and e < len(hb) and (field in ha[e]) != (field in hb[e]):
            out.append(k)
    return tuple(out)


@dataclass(frozen=True)
class Pair:
    """One record present in both stores, and how the two compare."""

    name: str  # <matrix>/<file name>
    same: bool
    first_difference: str | None  # "metrics.rsum: 173.62 vs 186.4", or None
    same_code: bool
    same_machine: bool | None  # float path and CPU model; None: a record does not say
    same_weights: bool | None  # None: a record with pretraining does not say
    cpu_a: str
    cpu_b: str
    #: history fields only one record has (``history.<epoch>.<field>`` paths): not compared
    added: tuple[str, ...] = ()


def compare_records(name: str, a: dict[str, Any], b: dict[str, Any]) -> Pair:
    """:class:`Pair` of two records of the same run."""
    na, nb = numbers(a), numbers(b)
    added = _added_fields(a, b, na, nb)
    first = None
    # rSum first, then the other metrics, then the history: the line a reader wants.
    order = ["metrics.rsum", *na, *nb]
    for key in dict.fromkeys(order):
        if key in added:
            continue
        if na.get(key, "missing") != nb.get(key, "missing"):
            first = f"{key}: {na.get(key, 'missing')} vs {nb.get(key, 'missing')}"
            break
    cpu_a, cpu_b = ((r.get("environment") or {}).get("cpu") for r in (a, b))
    keys = bits_key(cpu_a), bits_key(cpu_b)
    return Pair(
        name=name,
        same=first is None,
        first_difference=first,
        same_code=a.get(VERSION_KEY) == b.get(VERSION_KEY),
        same_machine=None if None in keys else keys[0] == keys[1],
        same_weights=_same_weights(a, b),
        cpu_a=cpu_label(cpu_a),
        cpu_b=cpu_label(cpu_b),
        added=added,
    )


def _same_weights(a: dict[str, Any], b: dict[str, Any]) -> bool | None:
    fa, fb = a.get("pretrain_fingerprint"), b.get("pretrain_fingerprint")
    if fa == fb:
        return True
    pretrained = any((r.get("train_config") or {}).get("pretrain") for r in (a, b))
    return None if pretrained and None in (fa, fb) else False


def _records(store: Path) -> tuple[dict[str, dict[str, Any]], list[RecordError]]:
    found: dict[str, dict[str, Any]] = {}
    errors: list[RecordError] = []
    folders = [p for p in sorted(Path(store).iterdir()) if p.is_dir()]
    for folder in folders:
        good, bad = scan_records(folder)
        errors += bad
        for path, rec in good:
            found[f"{folder.name}/{path.name}"] = rec
    return found, errors


def compare_stores(a: str | Path, b: str | Path) -> tuple[list[Pair], int, int]:
    """Every record present in both stores, compared; with the counts of records only in
    ``a`` and only in ``b`` (not compared: a rerun is usually of a few runs).

    Raises:
        ValueError: a store is not a folder, or holds an unreadable record (named).
    """
    stores = []
    for label, path in (("first store", a), ("second store", b)):
        if not Path(path).is_dir():
            raise ValueError(f"{path}: not a folder ({label}); expected a result store")
        found, errors = _records(Path(path))
        if errors:
            raise ValueError(f"{errors[0]} (in the {label})")
        stores.append(found)
    ra, rb = stores
    both = sorted(set(ra) & set(rb))
    pairs = [compare_records(name, ra[name], rb[name]) for name in both]
    return pairs, len(set(ra) - set(rb)), len(set(rb) - set(ra))
