"""What ``seps-bench status`` says about a result store: per matrix, what is done, running,
failed, diverged, stale and left to do at a profile, and the hours spent and left.

It reads the store and the ablation definitions only: it writes nothing, never takes a
lock, and never loads torch, so it answers in a fraction of a second (about 1 s on the
committed store of 815 records; :mod:`seps.io.record_fields` says how the records are read).

**The plan without keys.** The runner names a record by a hash of the run's resolved
configs (:func:`seps.experiments.definitions.config_key`), which needs
:class:`~seps.train.config.TrainConfig`, whose module loads torch (1.5 s here) through
the device and precision names it checks; those modules count in
:func:`seps.versioning.version.code_version`, so making them lazy would make every stored record
stale. So a planned (run, seed) is matched to a record by what the record says of
itself: its ``run_id``, ``seed`` and ``profile``, and the settings the plan declares: the
head config (the preset with the profile's and the run's switches, resolved by the
torch-free :func:`seps.core.config.get_config`) and each train field the profile or the run
sets. A run whose definition was edited after its record was made (another key for the
runner) thus counts as to do, as ``run`` would do it again. What is not seen: a change
of a ``TrainConfig`` default (which changes the code version: the record is then
stale), a ``--data-path``/``--dataset`` given to ``run`` (records made so count as the
profile's), and a renamed profile (its records count for their old name only).
``seps-bench run MATRIX --dry-run`` resolves the keys (loading torch).

**Running, without taking a lock.** The runner holds an ``flock`` on
``_work/<train key>-s<seed>.lock`` while it trains a group of runs, and writes into it
its pid, host, start time and (:func:`seps.runs.runner.lock_labels`) the matrix, profile,
seed and runs. The kernel drops the lock when the holder dies, but the file stays until
the next run takes it over, so a file is not a held lock; and testing the lock would
mean taking it, which a status must never do (a run starting that moment would find it
taken). Instead the file's holder is checked (:func:`lock_state`): held when its pid is
alive on this host and that process started before the lock's ``since`` (so a pid
reused by a later process does not count); ``dead`` when not; ``elsewhere`` when written
on another host, which cannot be checked from here and is counted as running; and
``unknown`` when the file names no holder (a holder between creating the file and
writing it, or killed then).
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..core.config import get_config
from ..experiments.ablation_index import default_root, list_matrices, profile_summaries
from ..experiments.definitions import (
    NON_SEMANTIC_TRAIN_FIELDS,
    RESULT_NEUTRAL_TRAIN_FIELDS,
    Matrix,
    Profile,
    RunSpec,
    load_matrix,
    load_profile,
)
from ..io.record_fields import scan_fields
from ..io.store import RecordError, pid_alive
from ..versioning.version import VERSION_KEY

__all__ = [
    "DEFAULT_PROFILE",
    "LockInfo",
    "MatrixStatus",
    "StoreStatus",
    "collect_status",
    "lock_state",
    "matrix_status",
    "read_locks",
    "status_json",
    "status_text",
]

#: The profile when neither ``--profile`` nor the store names one (``run``'s default).
DEFAULT_PROFILE = "smoke"
#: The states of a planned (run, seed), in the order the table shows them.
STATES = ("done", "running", "failed", "diverged", "stale", "to do")
#: A lock file of the runner: ``<train key>-s<seed>.lock`` (:func:`seps.runs.runner.lock_path`).
LOCK_NAME = re.compile(r"^(?P<key>[0-9a-f]{16})-s(?P<seed>\d+)\.lock$")
#: Seconds a process's start time, read from ``/proc`` (boot time in whole seconds plus
#: clock ticks), may seem to follow the ``since`` it wrote.
START_SLACK = 2.0


# ---------------------------------------------------------------------------- locks
@dataclass(frozen=True)
class LockInfo:
    """One lock file of ``_work/``: its holder as written in it, and :func:`lock_state`."""

    path: str
    train_key: str
    state: str  # held, dead, elsewhere or unknown
    pid: int | None = None
    host: str | None = None
    since: float | None = None
    matrix: str | None = None
    profile: str | None = None
    seed: int | None = None
    runs: tuple[str, ...] = ()

    @property
    def running(self) -> bool:
        return self.state in ("held", "elsewhere")


def process_start_time(pid: int) -> float | None:
    """When process ``pid`` started (epoch seconds), from ``/proc`` (Linux); ``None``
    where that cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = next(
            float(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime ")
        )
        ticks = int(stat[stat.rindex(")") + 2 :].split()[19])  # field 22, after the name
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def lock_state(owner: Mapping[str, Any], host: str | None = None) -> str:
    """``held``, ``dead``, ``elsewhere`` or ``unknown`` for a lock file whose content is
    ``owner`` (see the module docstring), judged on ``host`` (default: this one)."""
    pid, since = owner.get("pid"), owner.get("since")
    if not isinstance(pid, int) or isinstance(pid, bool) or not owner.get("host"):
        return "unknown"
    if owner["host"] != (host or socket.gethostname()):
        return "elsewhere"
    if not pid_alive(pid):
        return "dead"
    started = process_start_time(pid)
    if started is not None and isinstance(since, int | float) and started > since + START_SLACK:
        return "dead"  # the pid now belongs to a process that started after the lock
    return "held"


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def read_locks(results: Path) -> list[LockInfo]:
    """Every runner lock file of ``<results>/_work/`` with its state, by name. The files
    are read, never locked."""
    out = []
    for path in sorted((Path(results) / "_work").glob("*.lock")):
        m = LOCK_NAME.match(path.name)
        if not m:
            continue
        try:
            owner = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            owner = None  # gone since the listing, or being written
        if not isinstance(owner, dict):
            owner = {}
        # Each field as the runner writes it, else unknown: a damaged or hand-edited lock
        # file is listed, never a reason for status to fail.
        pid, seed, since, runs = (owner.get(k) for k in ("pid", "seed", "since", "runs"))
        since_ok = isinstance(since, int | float) and 0 <= since < 1e11  # NaN fails too
        out.append(
            LockInfo(
                path=str(path),
                train_key=m.group("key"),
                state=lock_state(owner),
                pid=pid if type(pid) is int else None,
                host=_text(owner.get("host")),
                since=since if since_ok and not isinstance(since, bool) else None,
                matrix=_text(owner.get("matrix")),
                profile=_text(owner.get("profile")),
                seed=seed if type(seed) is int else int(m.group("seed")),
                runs=tuple(map(str, runs)) if isinstance(runs, list) else (),
            )
        )
    return out


# ------------------------------------------------------------------------ matching
def _as_json(value: Any) -> Any:
    """``value`` as a record holds it (tuples as lists)."""
    return json.loads(json.dumps(value, default=list))


def _same_value(stored: Any, declared: Any) -> bool:
    """Whether a record's resolved train field ``stored`` is the value a definition
    declares (``declared``, as YAML read it: ``lr: 1e-3`` is a string that
    :func:`seps.train.config.coerce_field` makes a number)."""
    if isinstance(declared, str) and isinstance(stored, int | float):
        try:
            return not isinstance(stored, bool) and float(declared) == stored
        except ValueError:
            return False
    return _as_json(declared) == stored


def _declared_train(run: RunSpec, profile: Profile) -> dict[str, Any]:
    """The train fields the profile and the run set that count in a run's key."""
    values = {**profile.train, **run.train}
    skip = (*NON_SEMANTIC_TRAIN_FIELDS, *RESULT_NEUTRAL_TRAIN_FIELDS)
    return {k: v for k, v in values.items() if k not in skip}


def _settings_match(
    fields: Mapping[str, Any], head: dict[str, Any], train: dict[str, Any], preset: str
) -> bool:
    """Whether a record's resolved configs agree with the plan's ``head`` config and its
    declared ``train`` fields. A field that one side lacks is not held against the record:
    it was added or removed since, by other code, so the record is stale already and is
    counted so (as the runner finds it when the field is one of those its key omits at
    their default)."""
    if fields.get("preset", preset) != preset:
        return False
    stored_head = fields.get("head_config") or {}
    if any(stored_head[k] != v for k, v in head.items() if k in stored_head):
        return False
    stored_train = fields.get("train_config") or {}
    return all(_same_value(stored_train[k], v) for k, v in train.items() if k in stored_train)


# -------------------------------------------------------------------------- status
@dataclass
class MatrixStatus:
    """One matrix at one profile: each planned (run, seed) in one state of :data:`STATES`,
    the records of the folder outside the plan, and the hours."""

    matrix: str
    planned: int
    counts: dict[str, int]
    hours_done: float
    hours_left: float | None  # None: nothing done to estimate from
    other_records: int = 0  # another profile, seed, run id or settings
    unreadable: list[str] = field(default_factory=list)
    to_do_runs: dict[str, list[int]] = field(default_factory=dict)  # run id -> seeds


def _mean(values: Iterable[float]) -> float | None:
    values = list(values)
    return sum(values) / len(values) if values else None


def matrix_status(
    matrix: Matrix,
    profile: Profile,
    records: list[tuple[Path, dict[str, Any]]],
    unreadable: list[RecordError],
    locks: list[LockInfo],
    version: str,
) -> MatrixStatus:
    """The state of each planned (run, seed) of ``matrix`` at ``profile``.

    A pair's record is the latest (by ``started``) of its folder's ``records`` that
    match it (module docstring); of another code ``version`` it is ``stale``, else its
    status (``done``, ``diverged``, anything else ``failed``). A pair named by a running
    lock of this matrix and profile is ``running`` unless done and current (a group's
    lock names its runs until the last one ends). The rest is ``to do``.

    Hours: ``hours_done`` sums the ``wall_seconds`` of the done records computed in this
    matrix (a copy, with ``copied_from``, took its time elsewhere); ``hours_left`` is,
    for each run id, its to-do count times the mean wall time of its done records (copies
    included: they time the same computation), else of the matrix's, and ``None`` when
    nothing is done but something is to do.
    """
    by_pair: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for _, rec in records:
        by_pair.setdefault((rec.get("run_id"), rec.get("seed")), []).append(rec)
    running = {
        (run, lock.seed)
        for lock in locks
        if lock.running and lock.matrix == matrix.name and lock.profile == profile.name
        for run in lock.runs
    }
    counts = dict.fromkeys(STATES, 0)
    matched = 0
    done_wall: dict[str, list[float]] = {}
    hours_done = 0.0
    to_do: dict[str, list[int]] = {}
    for run in matrix.runs:
        head = _as_json(get_config(run.preset, **{**profile.head, **run.set}).to_dict())
        train = _declared_train(run, profile)
        for seed in profile.seeds:
            mine = [
                r
                for r in by_pair.get((run.id, seed), [])
                if r.get("profile") == profile.name and _settings_match(r, head, train, run.preset)
            ]
            matched += len(mine)
            rec = max(mine, key=lambda r: r.get("started") or 0.0, default=None)
            state = _state(rec, version)
            if state != "done" and (run.id, seed) in running:
                state = "running"
            counts[state] += 1
            if state == "to do":
                to_do.setdefault(run.id, []).append(seed)
            if state == "done" and isinstance(rec.get("wall_seconds"), int | float):
                done_wall.setdefault(run.id, []).append(rec["wall_seconds"])
                if not rec.get("copied_from"):
                    hours_done += rec["wall_seconds"] / 3600
    return MatrixStatus(
        matrix=matrix.name,
        planned=len(matrix.runs) * len(profile.seeds),
        counts=counts,
        hours_done=hours_done,
        hours_left=_hours_left(to_do, done_wall),
        other_records=len(records) - matched,
        unreadable=[str(e) for e in unreadable],
        to_do_runs=to_do,
    )


def _hours_left(to_do: dict[str, list[int]], done_wall: dict[str, list[float]]) -> float | None:
    """Hours for the ``to_do`` seeds of each run id: the mean of its ``done_wall`` seconds,
    else of every run's; ``None`` when some are to do and nothing is done."""
    every = _mean(w for walls in done_wall.values() for w in walls)
    hours = 0.0
    for run_id, seeds in to_do.items():
        mean = _mean(done_wall.get(run_id, ()))
        mean = every if mean is None else mean
        if mean is None:
            return None
        hours += mean * len(seeds) / 3600
    return hours


def _state(rec: Mapping[str, Any] | None, version: str) -> str:
    if rec is None:
        return "to do"
    if rec.get(VERSION_KEY) != version:
        return "stale"
    return rec["status"] if rec.get("status") in ("done", "diverged") else "failed"


@dataclass
class StoreStatus:
    """What :func:`status_text` and :func:`status_json` print."""

    results: str
    profile: str
    profile_from: str  # option, store (the profile of most records) or default
    code_version: str
    matrices: list[MatrixStatus]
    locks: list[LockInfo]  # those of the shown matrices, and those that name none
    now: float


def store_profile(records: Iterable[Mapping[str, Any]], known: Iterable[str]) -> str | None:
    """The profile most of ``records`` were run at, among the ``known`` ones (a
    ``--set`` variant such as ``standard+train.epochs=3`` is not one); ``None`` when
    none is."""
    names = set(known)
    counts = Counter(r.get("profile") for r in records if r.get("profile") in names)
    return counts.most_common(1)[0][0] if counts else None


def collect_status(
    results: Path,
    matrices: list[str] | None = None,
    profile: str | None = None,
    root: Path | None = None,
    *,
    version: str,
    now: float | None = None,
) -> StoreStatus:
    """The status of ``matrices`` (names or matrix files; default every matrix of the
    definitions ``root``, in the order ``run --help`` lists them) in the store
    ``results`` at ``profile`` (default: the profile of most of their records, else
    :data:`DEFAULT_PROFILE`), against this code's ``version``.

    Raises:
        ValueError: ``results`` is not a folder; an unknown matrix or profile, or a
            definition that cannot be read (one line naming the file).
    """
    results = Path(results)
    if not results.is_dir():
        raise ValueError(f"{results}: not a folder; expected a result store")
    root = root or default_root()
    names = matrices or list_matrices(root)
    if not names:
        raise ValueError(
            f"{root}: no matrix in its matrices/ folder; expected ablation definitions"
        )
    loaded = [load_matrix(name, root, check_train=False) for name in names]
    scans = {m.name: scan_fields(results / m.name) for m in loaded}
    profile_from = "option"
    if profile is None:
        every = (rec for good, _ in scans.values() for _, rec in good)
        profile = store_profile(every, profile_summaries(root))
        profile_from = "default" if profile is None else "store"
        profile = profile or DEFAULT_PROFILE
    chosen = load_profile(profile, root, check_train=False)
    shown = {m.name for m in loaded}
    locks = [lock for lock in read_locks(results) if lock.matrix in shown or not lock.matrix]
    return StoreStatus(
        results=str(results),
        profile=chosen.name,
        profile_from=profile_from,
        code_version=version,
        matrices=[matrix_status(m, chosen, *scans[m.name], locks, version) for m in loaded],
        locks=locks,
        now=time.time() if now is None else now,
    )


# ------------------------------------------------------------------------ printing
def _hours(h: float | None) -> str:
    return "unknown" if h is None else f"{h:.1f}"


def _when(since: float | None, now: float) -> str:
    """``2026-12-02 00:40 (for 12 min)`` in local time; ``?`` when unknown."""
    if not isinstance(since, int | float):
        return "?"
    age = max(0.0, now - since)
    took = f"{age / 60:.0f} min" if age < 5400 else f"{age / 3600:.1f} h"
    return f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(since))} (for {took})"


def _lock_line(lock: LockInfo, now: float) -> str:
    what = (
        f"{lock.matrix} {', '.join(lock.runs)} s{lock.seed} ({lock.profile})"
        if lock.matrix
        else f"training {lock.train_key} s{lock.seed} (its lock file names no runs: "
        "written by a runner older than `status`)"
    )
    holder = f"pid {lock.pid} on {lock.host} since {_when(lock.since, now)}"
    if lock.state == "elsewhere":
        holder += " (another host: not checked from here)"
    return f"{what}: {holder}"


def status_text(status: StoreStatus) -> str:
    """The table (one row per matrix, a total row), then what runs and what is left
    behind (lock files of dead holders, records outside the plan, unreadable files)."""
    from tabulate import tabulate

    source = {
        "option": "",
        "store": " (the profile of most records; --profile to choose)",
        "default": " (no record names a profile; --profile to choose)",
    }[status.profile_from]
    head = (
        f"{status.results}/ at profile {status.profile}{source}, code version {status.code_version}"
    )
    rows = [
        [
            m.matrix,
            m.planned,
            *(m.counts[s] for s in STATES),
            f"{m.hours_done:.1f}",
            _hours(m.hours_left),
        ]
        for m in status.matrices
    ]
    totals = _totals(status.matrices)
    rows.append(
        [
            "total",
            totals["planned"],
            *(totals["counts"][s] for s in STATES),
            f"{totals['hours_done']:.1f}",
            _total_left(totals),
        ]
    )
    headers = ["matrix", "planned", *STATES, "hours done", "hours left"]
    table = tabulate(
        rows,
        headers=headers,
        tablefmt="github",
        disable_numparse=True,
        colalign=("left", *["right"] * (len(headers) - 1)),
    )
    lines = [head, "", table]
    running = [lock for lock in status.locks if lock.running]
    if running:
        lines += ["", "running:", *(f"  {_lock_line(lock, status.now)}" for lock in running)]
    dead = [lock for lock in status.locks if lock.state == "dead"]
    if dead:
        lines += [
            "",
            "lock files left by processes that no longer run (the next run takes them over):",
            *(f"  {lock.path}: {_lock_line(lock, status.now)}" for lock in dead),
        ]
    for m in status.matrices:
        if m.other_records:
            lines.append(
                f"{m.matrix}: {m.other_records} record(s) outside this plan (another profile, "
                "seed, run id or settings; not counted)"
            )
        lines += [f"{m.matrix}: {line}" for line in m.unreadable]
    if any(m.hours_left for m in status.matrices):
        lines.append(
            "hours left: the mean wall time of each run's done records (else its matrix's) "
            "times its runs to do; runs copied from another matrix's records take less"
        )
    return "\n".join(lines)


def _totals(matrices: list[MatrixStatus]) -> dict[str, Any]:
    """The sums over ``matrices``; ``hours_left`` sums the known estimates (``None`` when
    none is known and something is to do), ``hours_left_complete`` says whether all are."""
    lefts = [m.hours_left for m in matrices if m.counts["to do"]]
    known = [h for h in lefts if h is not None]
    return {
        "planned": sum(m.planned for m in matrices),
        "counts": {s: sum(m.counts[s] for m in matrices) for s in STATES},
        "hours_done": sum(m.hours_done for m in matrices),
        "hours_left": sum(known, 0.0) if known or not lefts else None,
        "hours_left_complete": None not in lefts,
    }


def _total_left(totals: dict[str, Any]) -> str:
    """The total's hours left: ``>= X`` when some matrix's are unknown."""
    left = _hours(totals["hours_left"])
    return left if totals["hours_left_complete"] or left == "unknown" else f">= {left}"


def status_json(status: StoreStatus) -> str:
    """What :func:`status_text` says, as one JSON object (for scripts): ``matrices`` (one
    object each: counts by state with ``to_do`` spelled so, hours, the run ids and seeds
    to do), ``totals``, and ``locks`` (each lock file with its state)."""

    def matrix(m: MatrixStatus) -> dict[str, Any]:
        out = asdict(m)
        counts = {s.replace(" ", "_"): n for s, n in out.pop("counts").items()}
        return {"matrix": out.pop("matrix"), "planned": out.pop("planned"), **counts, **out}

    totals = _totals(status.matrices)
    totals = {
        "planned": totals.pop("planned"),
        **{s.replace(" ", "_"): n for s, n in totals.pop("counts").items()},
        **totals,
    }
    doc = {
        "results": status.results,
        "profile": status.profile,
        "profile_from": status.profile_from,
        "code_version": status.code_version,
        "matrices": [matrix(m) for m in status.matrices],
        "totals": totals,
        "locks": [{**asdict(lock), "runs": list(lock.runs)} for lock in status.locks],
    }
    return json.dumps(doc, indent=2) + "\n"
