"""A run record's top-level fields without reading its history: fast, for ``status``.

A record is about 0.6 MB, 99% of it the per-epoch ``history`` list; the committed store
holds 815 of them (480 MB), which :func:`json.loads` takes about 3.5 s to read on this
2-core machine. ``seps-bench status`` must answer in under 2 s and needs a dozen small
fields per record, so :func:`read_fields` reads the first and the last
:data:`PIECE_BYTES` of a file and takes the fields from there.

Why that is exact for the records the runner writes: :func:`seps.io.store.atomic_write_json`
writes them with sorted keys and an indent of 2, so a top-level entry is a line that
starts with exactly two spaces and a quote (nested lines have four or more; a JSON
string holds no raw line break), and the keys come in sorted order. Given the keys seen
in the first piece (``a`` ... ``h``, the last one's value, ``history``, running on) and in
the last (``k`` ... ``w``), a wanted key that sorts before ``h`` or after ``k`` and was not
seen is absent from the file; one that sorts between them could be in the unread middle.
Whenever a wanted field cannot be settled so (a key in that gap, a value that runs past
the piece, keys out of order, a file not indented so, a small file, a file that is not a
record), the whole file is read and checked by :func:`seps.io.store.read_record` instead.
What this skips is the check of the unread middle: a record damaged inside its history
is counted by its status here, and named as unreadable by ``run`` and ``report``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from .store import (
    SCHEMA,
    RecordError,
    read_record,
    record_field_problem,
    scan_records,
)

__all__ = ["PIECE_BYTES", "STATUS_FIELDS", "read_fields", "scan_fields"]

#: How much of each end of a file is read. The committed records need at most 2 kB at the
#: start (up to ``history``) and 4 kB at the end (``key`` ... ``wall_seconds``); a file
#: whose fields do not fit (a failed run's long traceback) is read whole.
PIECE_BYTES = 16 * 1024

#: The fields ``seps-bench status`` reads (absent ones are left out of the result).
STATUS_FIELDS = (
    "schema",
    "status",
    "run_id",
    "seed",
    "profile",
    "preset",
    "code_version",
    "wall_seconds",
    "copied_from",
    "started",
    "head_config",
    "train_config",
)

#: A top-level entry line (keys of records are plain identifiers) and the line that
#: closes a top-level object or list; the leading newline lets the search skip to it.
_ENTRY = re.compile(rb'\n  "([A-Za-z0-9_]+)": ([^\n]*)')
_CLOSE = re.compile(rb"\n  [}\]]")


def _entries(piece: bytes, wanted: frozenset[str]) -> tuple[list[str], dict[str, bytes | None]]:
    """The top-level keys of ``piece`` (whole lines of an indented JSON object) in file
    order, and the value of each ``wanted`` one as JSON text, ``None`` when it does not end
    in ``piece`` (the others are not looked for: ``history`` would be scanned to its end)."""
    keys: list[str] = []
    values: dict[str, bytes | None] = {}
    for m in _ENTRY.finditer(piece):
        key, text = m.group(1).decode("ascii"), m.group(2)
        keys.append(key)
        if key not in wanted:
            continue
        if text in (b"{", b"["):
            close = _CLOSE.search(piece, m.end())
            values[key] = piece[m.start(2) : close.end()] if close else None
        else:
            values[key] = text.removesuffix(b",")
    return keys, values


def _from_pieces(head: bytes, tail: bytes, wanted: tuple[str, ...]) -> dict[str, Any] | None:
    """The ``wanted`` fields from the first and last pieces of a file, or ``None`` when
    they cannot be settled from them (see the module docstring)."""
    head = head[: head.rfind(b"\n")]  # whole lines only: the last one may be cut
    tail = tail[tail.find(b"\n") :]  # the first one is
    head_keys, head_values = _entries(head, frozenset(wanted))
    tail_keys, tail_values = _entries(tail, frozenset(wanted))
    if not head_keys or not tail_keys:
        return None
    if head_keys != sorted(head_keys) or tail_keys != sorted(tail_keys):
        return None
    last_seen, first_seen = head_keys[-1], tail_keys[0]
    if last_seen >= first_seen:
        return None
    values = {**head_values, **tail_values}
    out: dict[str, Any] = {}
    for key in wanted:
        if key not in values:
            if last_seen < key < first_seen:
                return None  # it may be in the middle, which was not read
            continue  # sorted keys: it would have been seen
        text = values[key]
        if text is None:
            return None
        try:
            out[key] = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None
    return out


def read_fields(path: Path, wanted: tuple[str, ...] = STATUS_FIELDS) -> dict[str, Any] | None:
    """The ``wanted`` top-level fields of the record at ``path`` (absent ones left out);
    ``None`` when there is no file.

    Raises:
        RecordError: as :func:`seps.io.store.read_record`: the file is not a usable record.
    """
    path = Path(path)
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            if size > 2 * PIECE_BYTES:
                f.seek(0)
                head = f.read(PIECE_BYTES)
                f.seek(size - PIECE_BYTES)
                fields = _from_pieces(head, f.read(PIECE_BYTES), wanted)
            else:
                fields = None
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise RecordError(path, f"{type(exc).__name__}: {exc}") from None
    if fields is None or fields.get("schema") != SCHEMA:
        rec = read_record(path)  # small, unusual or not a record: read it whole
        return None if rec is None else {k: rec[k] for k in wanted if k in rec}
    problem = record_field_problem(fields)
    if problem:
        raise RecordError(path, problem)
    return fields


def scan_fields(
    folder: Path, wanted: tuple[str, ...] = STATUS_FIELDS
) -> tuple[list[tuple[Path, dict[str, Any]]], list[RecordError]]:
    """:func:`seps.io.store.scan_records` with :func:`read_fields`: the records of ``folder``
    by name, ``(readable (path, fields) pairs, unreadable files)``; hidden files, records
    set aside as stale (``*.stale.json``) and JSON files that are not records and not
    named as records are left out, as there."""
    return scan_records(folder, read=lambda path: read_fields(path, wanted))
