"""The result store: atomic files, run records, and per-training locks.

Everything the suite writes goes through :func:`atomic_write_bytes` (a private temporary
file in the same folder, then ``os.replace``), so a reader or a killed writer sees either
the old file or the new one, never a part. A temporary file is named
``.<name>.<pid>@<host tag>.tmp``; one left behind by a process that no longer runs is
removed by :func:`clean_stale_temps` when the runner starts. The host tag (a hash of the
host name) keeps one host from removing what a process of another host is writing into a
store they share (a pid means nothing on another host); such a file is removed only once
it is a day old. A name without a tag (``.<name>.<pid>.tmp``, written before names had
one, or by the dataset generator) counts as this host's.

A run record is ``<results>/<matrix>/<run id>-<key>-s<seed>.json`` with
``"schema": "seps-bench/run/1"``. :func:`read_record` tells three cases apart: no file
(``None``), a record (a dict), and a file that exists but cannot be used
(:class:`RecordError`, with the reason). The last is never hidden: the runner names it
and leaves it alone unless told to retry (it is then moved aside as ``*.corrupt``), and
the report lists it under "Failed runs".

:class:`RunLock` is an exclusive ``flock`` on a lock file that names its owner (pid and
host). It guards one training (runs that differ only in the evaluation protocol share a
training and its working folder), so two ``seps-bench run`` processes on one store never
train the same thing twice. The kernel drops the lock when its owner dies, so a killed
run never leaves a lock that blocks the next one.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..runtime.faults import kill_point

__all__ = [
    "RECORD_FIELD_TYPES",
    "RECORD_NAME",
    "SCHEMA",
    "RecordError",
    "RunLock",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_text",
    "check_writable",
    "clean_stale_temps",
    "pid_alive",
    "quarantine",
    "read_record",
    "record_field_problem",
    "scan_records",
    "temp_path",
]

SCHEMA = "seps-bench/run/1"
_TMP = re.compile(r"^\..+\.(\d+)(?:@([0-9a-f]{8}))?\.tmp$")
#: How old a temporary file of another host must be before :func:`clean_stale_temps`
#: takes its writer for gone (seconds).
FOREIGN_TEMP_AGE = 24 * 3600
#: The name the runner gives a record: ``<run id slug>-<16 hex key>-s<seed>.json``.
RECORD_NAME = re.compile(r"^(?P<run>.+)-(?P<key>[0-9a-f]{16})-s(?P<seed>\d+)\.json$")


@functools.cache
def host_tag() -> str:
    """8 hex digits of a hash of this host's name: the ``@<tag>`` of temporary names."""
    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]


def temp_path(path: Path) -> Path:
    """The private temporary name of ``path`` for this process (same folder, so that
    ``os.replace`` is a rename on one file system)."""
    return path.with_name(f".{path.name}.{os.getpid()}@{host_tag()}.tmp")


def atomic_write_bytes(path: Path, data: bytes, *, fault_point: str | None = None) -> None:
    """Write ``data`` to ``path`` so that ``path`` is always whole (old or new).

    ``fault_point`` names this write for :func:`seps.runtime.faults.kill_point` (tests kill the
    process between the temporary file and the rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(path)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if fault_point:
            kill_point(fault_point)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, obj: Any, *, fault_point: str | None = None) -> None:
    """Sorted keys and a final newline: the same object always gives the same bytes."""
    data = (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()
    atomic_write_bytes(path, data, fault_point=fault_point)


def pid_alive(pid: int) -> bool:
    """True when a process with ``pid`` runs on this host (signal 0 probes, sends nothing)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # none, or a number no pid can be
        return False
    except PermissionError:  # it exists, owned by someone else
        return True
    return True


def clean_stale_temps(folder: Path, *, recursive: bool = True) -> list[Path]:
    """Remove the ``.<name>.<pid>[@<host tag>].tmp`` files and folders in ``folder`` (and
    below it, with ``recursive``) whose writer no longer runs (left by a kill during a
    write): this host's whose pid is gone, another host's once a day old
    (:data:`FOREIGN_TEMP_AGE`); return what was removed."""
    removed: list[Path] = []
    folder = Path(folder)
    if not folder.is_dir():
        return removed
    for path in folder.rglob(".*.tmp") if recursive else folder.glob(".*.tmp"):
        m = _TMP.match(path.name)
        if m and m.group(2) not in (None, host_tag()):  # another host's: its pid means
            try:  # nothing here; gone once it is a day old
                gone = time.time() - path.lstat().st_mtime > FOREIGN_TEMP_AGE
            except FileNotFoundError:
                continue
        else:
            gone = m is not None and not pid_alive(int(m.group(1)))
        if gone:
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def check_writable(folder: Path, option: str) -> None:
    """Refuse early, in one line, a folder this process cannot create or write into
    (rather than after the first hour of training, when the first record is written)."""
    probe = folder / f".write-test.{os.getpid()}.tmp"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ValueError(
            f"{option} {str(folder)!r}: cannot write there ({exc.strerror or exc}); "
            "expected a writable folder"
        ) from None


class RecordError(ValueError):
    """A record file exists but cannot be used: ``path`` and ``reason`` say why."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: unreadable record ({reason})")
        self.path = Path(path)
        self.reason = reason


def read_record(path: Path) -> dict[str, Any] | None:
    """The record at ``path``; ``None`` when there is no file.

    Raises:
        RecordError: the file exists but is not valid JSON (e.g. truncated), not an
            object, or not a ``seps-bench/run/1`` record.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise RecordError(path, f"{type(exc).__name__}: {exc}") from None
    try:
        rec = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RecordError(path, f"invalid JSON: {exc.msg} at line {exc.lineno}") from None
    if not isinstance(rec, dict):
        raise RecordError(path, f"expected a JSON object, got {type(rec).__name__}")
    if rec.get("schema") != SCHEMA:
        raise RecordError(path, f"field 'schema' is {rec.get('schema')!r}, expected {SCHEMA!r}")
    problem = record_field_problem(rec)
    if problem:
        raise RecordError(path, problem)
    return rec


#: The type each field of a record must have where it is present and not null (the
#: readers index into them).
RECORD_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "run_id": (str,),
    "seed": (int,),
    "status": (str,),
    "matrix": (str,),
    "profile": (str,),
    "code_version": (str,),
    "metrics": (dict,),
    "history": (list,),
    "environment": (dict,),
    "train_config": (dict,),
    "head_config": (dict,),
    "movement": (dict,),
}
_TYPE_WORDS = {str: "a string", int: "an integer", dict: "a JSON object", list: "a list"}


def record_field_problem(rec: dict[str, Any]) -> str | None:
    """What makes ``rec`` unusable as a run record (one field, named, with what was
    expected), or ``None``: a record a hand or a tool edited is refused here, at read,
    rather than failing later inside a report."""
    for key, kinds in RECORD_FIELD_TYPES.items():
        value = rec.get(key)
        if value is None:
            continue
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            return f"field {key!r} is {value!r:.40}, expected {_TYPE_WORDS[kinds[0]]}"
    for name, value in (rec.get("metrics") or {}).items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            return f"field 'metrics.{name}' is {value!r:.40}, expected a number"
    for i, entry in enumerate(rec.get("history") or []):
        if not isinstance(entry, dict):
            return f"field 'history[{i}]' is {entry!r:.40}, expected a JSON object"
    return None


def scan_records(
    folder: Path, read: Callable[[Path], dict[str, Any] | None] | None = None
) -> tuple[list[tuple[Path, dict[str, Any]]], list[RecordError]]:
    """The records in ``folder``, sorted by name: ``(readable (path, record) pairs,
    unreadable files as RecordError)``; ``read`` reads one file (default
    :func:`read_record`; ``seps-bench status`` reads only a few fields).

    A file named as the runner names records (:data:`RECORD_NAME`) that cannot be read
    is unreadable; other ``*.json`` files (a user's notes) are read when they are
    records and otherwise left out, since the runner never wrote them. Records set aside
    as stale (``<name>.stale[.N].json``) are not read: they belong to older code."""
    good: list[tuple[Path, dict[str, Any]]] = []
    bad: list[RecordError] = []
    folder = Path(folder)
    if not folder.is_dir():
        return good, bad
    for path in sorted(folder.glob("*.json")):
        if path.name.startswith(".") or ".stale" in path.suffixes:
            continue  # hidden, or a stale record set aside by ``run --rerun-stale``
        try:
            rec = (read or read_record)(path)
        except RecordError as exc:
            if RECORD_NAME.match(path.name):
                bad.append(exc)
            continue
        if rec is not None:
            good.append((path, rec))
    return good, bad


def quarantine(path: Path) -> Path:
    """Move an unreadable record aside as ``<name>.corrupt`` (``.corrupt.1``... when that
    exists), so that a rerun never overwrites what the user may want to inspect."""
    path = Path(path)
    target = path.with_name(path.name + ".corrupt")
    n = 0
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.corrupt.{n}")
    os.replace(path, target)
    return target


class RunLock:
    """An exclusive, non-blocking lock on the file ``path``, which holds the owner's
    ``{"pid", "host", "since"}`` for messages, and ``about``: what the owner does under it
    (the runner names the matrix, profile, seed and runs, which ``seps-bench status``
    reports without taking the lock: :mod:`seps.runs.status`).

    The lock is a ``fcntl.flock`` on the open file, so the kernel releases it when the
    holder ends in any way (a SIGKILL included): no stale-lock guessing. The file is
    removed on release; a file left by a killed holder is simply locked again by the
    next process. ``acquire()`` returns True when this process now holds the lock, False
    when another holds it (:attr:`holder` then says which).
    """

    def __init__(self, path: Path, about: dict[str, Any] | None = None) -> None:
        self.path = Path(path)
        self.about = dict(about or {})
        self.holder: dict[str, Any] | None = None
        self._fd: int | None = None

    def _owner(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def acquire(self) -> bool:
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                self.holder = self._owner()
                return False
            # The previous holder may have removed the file between our open and our
            # lock: then we hold a lock on a file nobody else can see. Start again.
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        me = {**self.about, "pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}
        data = json.dumps(me).encode()
        os.pwrite(fd, data, 0)  # then cut: a reader (status) never sees an empty file
        os.ftruncate(fd, len(data))
        self._fd = fd
        self.holder = me
        return True

    def release(self) -> None:
        if self._fd is not None:
            # Unlink while still locked, so no one can lock the name we are removing.
            self.path.unlink(missing_ok=True)
            os.close(self._fd)
            self._fd = None

    def wait(self, poll: float = 2.0) -> Iterator[dict[str, Any]]:
        """Block until the lock can be taken (it is then held); yield the holder every
        ``poll`` seconds meanwhile, so the caller can say what it waits for."""
        while not self.acquire():
            yield self.holder or {}
            time.sleep(poll)

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def describe(self) -> str:
        h = self.holder or {}
        return f"pid {h.get('pid', '?')} on {h.get('host', '?')}"
