"""What the runner does with a stored run record and a training folder of other code.

A record is run, skipped, or *stale* (made by other code than this version: kept, or
redone with ``--rerun-stale``, the old one set aside, never overwritten); a training
folder of other code is moved aside before anything trains in it, since resuming its
checkpoints would stamp this version on a model it did not train. Pure decisions plus
the two moves; :mod:`seps.runs.runner` applies them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from ..io.store import atomic_write_text
from ..versioning.version import VERSION_KEY, code_version

__all__ = [
    "WORK_VERSION_FILE",
    "Decision",
    "claim_work_dir",
    "decide",
    "is_stale",
    "needs_run",
    "reusable_work_dir",
    "set_aside_stale",
    "stale_message",
    "stale_path",
    "work_dir_version",
]


def needs_run(rec: dict[str, Any] | None, retry_failed: bool) -> bool:
    """Whether a stored record (or its absence) asks for the run to be (re)done."""
    if rec is None:
        return True
    if rec.get("status") == "done":
        return False
    if rec.get("failure_kind") == "environment":
        return True
    return retry_failed


def is_stale(rec: dict[str, Any] | None, version: str) -> bool:
    """Whether a stored record was made by other code than ``version``: its
    :data:`~seps.versioning.version.VERSION_KEY` differs, or it has none (written before records
    carried one). No record is not stale."""
    return rec is not None and rec.get(VERSION_KEY) != version


#: What the runner does with one planned run: ``run`` it (no record, or a pending one,
#: which is overwritten), ``skip`` it (complete and current), keep a ``stale`` record
#: (complete, other code; counted and named), or ``rerun-stale`` (move it aside, redo).
Decision = Literal["run", "skip", "stale", "rerun-stale"]


def decide(
    rec: dict[str, Any] | None, version: str, *, retry_failed: bool, rerun_stale: bool
) -> Decision:
    """What to do with the run whose stored record is ``rec`` (``None``: no record).

    A record :func:`needs_run` asks for is redone whatever its version. One that would be
    skipped (done, or a final failure) is skipped only when made by this ``version``;
    otherwise it is ``stale``: kept as it is, or redone with ``rerun_stale``.
    """
    if needs_run(rec, retry_failed):
        return "run"
    if not is_stale(rec, version):
        return "skip"
    return "rerun-stale" if rerun_stale else "stale"


def _first_free(path: Path, stem: str, suffix: str) -> Path:
    """``<stem><suffix>`` beside ``path``, or ``<stem>.<N><suffix>`` with the first free N."""
    target = path.with_name(f"{stem}{suffix}")
    n = 0
    while target.exists():
        n += 1
        target = path.with_name(f"{stem}.{n}{suffix}")
    return target


def stale_path(path: Path) -> Path:
    """Where the stale record at ``path`` goes before its run is redone: beside it, as
    ``<name>.stale.json``, or ``<name>.stale.<N>.json`` with the first free ``N`` (an
    earlier stale record is never overwritten)."""
    path = Path(path)
    return _first_free(path, f"{path.stem}.stale", ".json")


def set_aside_stale(path: Path) -> Path:
    """Move the stale record at ``path`` to :func:`stale_path`; return where it went."""
    target = stale_path(path)
    os.replace(path, target)
    return target


#: The file in a training's work folder that names the code version of its checkpoints.
WORK_VERSION_FILE = "code_version"


#: What :func:`work_dir_version` gives for a marker that cannot be read: no code's
#: version, so the folder is set aside and trained anew, never resumed.
UNREADABLE_MARKER = "unreadable marker"


def work_dir_version(work: Path) -> str | None:
    """The code version that wrote the training state in ``work`` (``None``: no marker,
    e.g. a folder made before the runner wrote one)."""
    try:
        return (Path(work) / WORK_VERSION_FILE).read_text(encoding="utf-8").strip() or None
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError):  # damaged (or a folder): no version's, so stale
        return UNREADABLE_MARKER


def reusable_work_dir(work: Path, version: str) -> bool:
    """Whether code ``version`` may resume the training state in ``work``: the folder is
    absent or empty, or that version wrote it.

    Checkpoints of other code (or of unknown code) are never resumed: the record would
    claim a version that did not train its model (a complete training is only evaluated
    again on resume, so ``--rerun-stale`` would recompute nothing)."""
    work = Path(work)
    if not work.is_dir() or not any(work.iterdir()):
        return True
    return work_dir_version(work) == version


def claim_work_dir(work: Path, version: str) -> Path | None:
    """Make ``work`` the training folder of ``version`` before anything trains in it.

    A folder that is not :func:`reusable_work_dir` is moved aside whole, as
    ``<name>.stale`` (``<name>.stale.<N>``: never overwritten), and its new place is
    returned (``None`` when nothing moved); then the marker file is written."""
    work = Path(work)
    moved = None
    if not reusable_work_dir(work, version):
        moved = _first_free(work, f"{work.name}.stale", "")
        os.replace(work, moved)
    atomic_write_text(work / WORK_VERSION_FILE, version + "\n")
    return moved


def stale_message(matrix: str, n: int, *, rerun_stale: bool) -> str:
    """The one line the runner says about a matrix's ``n`` stale records."""
    what = (
        f"{matrix}: {n} stale record{'s' if n != 1 else ''} (made by other code than this "
        f"version, {code_version()}, or before records carried one)"
    )
    if rerun_stale:
        return f"{what}: recomputing; the old ones are kept beside as *.stale.json"
    return f"{what} kept as they are; --rerun-stale recomputes them"
