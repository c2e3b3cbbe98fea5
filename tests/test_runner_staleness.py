"""Stale records and training state: what the runner skips, reruns, keeps or sets aside.

A record or a training folder made by other code (another `code_version`) is stale:
kept, never overwritten, and redone only on `--rerun-stale`. The end-to-end case
through `run_matrix` and the CLI is in test_runner.py.
"""

from __future__ import annotations

import shutil

import pytest

from seps.runs.runner import (
    claim_work_dir,
    decide,
    is_stale,
    set_aside_stale,
    stale_message,
    stale_path,
    work_dir_version,
)
from seps.versioning.version import VERSION_KEY, code_version

NOW, OLD = "a" * 16, "b" * 16


def _rec(status="done", version=NOW, **kw):
    rec = {"status": status, **kw}
    if version is not None:
        rec[VERSION_KEY] = version
    return rec


def test_records_of_other_code_or_without_a_version_are_stale():
    assert not is_stale(_rec(), NOW)
    assert is_stale(_rec(version=OLD), NOW)
    assert is_stale(_rec(version=None), NOW), "a record made before versions is stale"
    assert not is_stale(None, NOW), "no record is pending, not stale"


@pytest.mark.parametrize("rerun_stale", [False, True])
def test_current_records_are_skipped_and_missing_ones_run(rerun_stale):
    kw = {"retry_failed": False, "rerun_stale": rerun_stale}
    assert decide(_rec(), NOW, **kw) == "skip"
    assert decide(_rec("failed", failure_kind="error"), NOW, **kw) == "skip"
    assert decide(None, NOW, **kw) == "run"


def test_stale_records_are_kept_unless_rerun_stale():
    for rec in (_rec(version=OLD), _rec(version=None), _rec("diverged", version=OLD)):
        assert decide(rec, NOW, retry_failed=False, rerun_stale=False) == "stale"
        assert decide(rec, NOW, retry_failed=False, rerun_stale=True) == "rerun-stale"


def test_pending_records_run_whatever_their_version():
    env = _rec("failed", version=OLD, failure_kind="environment")
    assert decide(env, NOW, retry_failed=False, rerun_stale=False) == "run"
    failed = _rec("failed", version=None, failure_kind="error")
    assert decide(failed, NOW, retry_failed=True, rerun_stale=False) == "run"


def test_rerun_stale_keeps_old_record_beside(tmp_path):
    path = tmp_path / "code-0123456789abcdef-s0.json"
    for n, expected in enumerate(
        ["code-0123456789abcdef-s0.stale.json", "code-0123456789abcdef-s0.stale.1.json",
         "code-0123456789abcdef-s0.stale.2.json"]
    ):  # fmt: skip
        path.write_text(f"version {n}\n")
        assert stale_path(path).name == expected
        assert set_aside_stale(path).name == expected and not path.exists()
    kept = sorted(p.read_text() for p in tmp_path.glob("*.stale*.json"))
    assert kept == ["version 0\n", "version 1\n", "version 2\n"], "never overwritten"


def test_stale_message_is_one_line_with_count_and_the_option():
    kept = stale_message("mini", 3, rerun_stale=False)
    assert kept.startswith("mini: 3 stale records") and "--rerun-stale" in kept
    assert code_version() in kept and "\n" not in kept
    redo = stale_message("mini", 1, rerun_stale=True)
    assert redo.startswith("mini: 1 stale record ") and "*.stale.json" in redo


def test_training_state_of_other_code_is_set_aside_not_resumed(tmp_path):
    work = tmp_path / "_work" / "k-s0"
    for marker, kept in [(OLD, "k-s0.stale"), (None, "k-s0.stale.1")]:
        work.mkdir(parents=True)
        (work / "checkpoint_last.pt").write_text(f"trained by {marker}")
        if marker:
            (work / "code_version").write_text(marker + "\n")
        moved = claim_work_dir(work, NOW)
        assert moved == work.with_name(kept), "unmarked (older) state is of unknown code"
        assert (moved / "checkpoint_last.pt").read_text() == f"trained by {marker}"
        assert sorted(p.name for p in work.iterdir()) == ["code_version"]
        assert work_dir_version(work) == NOW
        shutil.rmtree(work)


def test_training_state_of_this_code_is_resumed(tmp_path):
    work = tmp_path / "_work" / "k-s0"
    assert claim_work_dir(work, NOW) is None and work_dir_version(work) == NOW  # new folder
    (work / "checkpoint_last.pt").write_text("epoch 1")
    assert claim_work_dir(work, NOW) is None
    assert (work / "checkpoint_last.pt").read_text() == "epoch 1"
    empty = tmp_path / "_work" / "empty-s0"
    empty.mkdir()
    assert claim_work_dir(empty, NOW) is None and work_dir_version(empty) == NOW
    assert not list((tmp_path / "_work").glob("*.stale*"))
