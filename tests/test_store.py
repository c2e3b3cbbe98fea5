"""The result store: atomic writes, unreadable records, quarantine, temp clean-up, locks."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from seps.io.store import (
    SCHEMA,
    RecordError,
    RunLock,
    atomic_write_json,
    clean_stale_temps,
    quarantine,
    read_record,
    scan_records,
)

RECORD = "code-0123456789abcdef-s0.json"


def test_read_record_tells_absent_from_unreadable(tmp_path):
    path = tmp_path / RECORD
    assert read_record(path) is None
    atomic_write_json(path, {"schema": SCHEMA, "status": "done"})
    assert read_record(path) == {"schema": SCHEMA, "status": "done"}
    path.write_text(path.read_text()[:10])  # truncated
    with pytest.raises(RecordError, match=r"code-0123456789abcdef-s0.json.*invalid JSON"):
        read_record(path)
    path.write_text('{"schema": "other/1"}')
    with pytest.raises(RecordError, match=r"'schema'"):
        read_record(path)


def test_scan_names_unreadable_records_and_ignores_other_json(tmp_path):
    atomic_write_json(tmp_path / RECORD, {"schema": SCHEMA, "status": "done"})
    (tmp_path / "paper-0123456789abcdef-s1.json").write_text("{")
    (tmp_path / "notes.json").write_text("{not a record")
    good, bad = scan_records(tmp_path)
    assert [p.name for p, _ in good] == [RECORD]
    assert [e.path.name for e in bad] == ["paper-0123456789abcdef-s1.json"]


def test_quarantine_never_overwrites(tmp_path):
    path = tmp_path / RECORD
    for i in range(3):
        path.write_text(f"broken {i}")
        quarantine(path)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [f"{RECORD}.corrupt", f"{RECORD}.corrupt.1", f"{RECORD}.corrupt.2"]
    assert (tmp_path / f"{RECORD}.corrupt").read_text() == "broken 0"


def test_clean_stale_temps_removes_only_dead_writers(tmp_path):
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True
    )
    dead_pid = int(dead.stdout)
    stale = tmp_path / "m" / f".{RECORD}.{dead_pid}.tmp"
    live = tmp_path / "m" / f".{RECORD}.{os.getpid()}.tmp"
    stale.parent.mkdir()
    stale.write_text("x")
    live.write_text("x")
    assert clean_stale_temps(tmp_path) == [stale]
    assert live.exists() and not stale.exists()


def test_atomic_write_leaves_no_temp_file(tmp_path):
    atomic_write_json(tmp_path / "a" / "r.json", {"x": 1})
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["r.json"]


_HOLD = """
import sys, time
from pathlib import Path
from seps.io.store import RunLock
lock = RunLock(Path(sys.argv[1]))
assert lock.acquire()
print("held", flush=True)
time.sleep(60)
"""


def test_lock_is_exclusive_and_released_when_its_holder_is_killed(tmp_path):
    path = tmp_path / "train.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        lock = RunLock(path)
        assert not lock.acquire()
        assert lock.holder["pid"] == holder.pid
        assert f"pid {holder.pid}" in lock.describe()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    # The kernel dropped the dead holder's lock: no stale lock blocks the next run.
    lock = RunLock(path)
    assert lock.acquire()
    assert json.loads(path.read_text())["pid"] == os.getpid()
    lock.release()
    assert not path.exists()


def test_lock_wait_returns_once_the_holder_ends(tmp_path):
    path = tmp_path / "train.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD.replace("time.sleep(60)", "time.sleep(1.5)"), str(path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    lock = RunLock(path)
    t0 = time.monotonic()
    seen = [owner["pid"] for owner in lock.wait(poll=0.2)]
    assert seen and set(seen) == {holder.pid}
    assert time.monotonic() - t0 < 30
    lock.release()
    holder.wait()


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("history", "x", "field 'history' is 'x', expected a list"),
        ("environment", "x", "field 'environment' is 'x', expected a JSON object"),
        ("train_config", [1], "field 'train_config' is [1], expected a JSON object"),
        ("seed", "two", "field 'seed' is 'two', expected an integer"),
        ("seed", True, "field 'seed' is True, expected an integer"),
        ("metrics", {"rsum": "oops"}, "field 'metrics.rsum' is 'oops', expected a number"),
        ("history", [{"epoch": 0}, 3], "field 'history[1]' is 3, expected a JSON object"),
    ],
)
def test_a_record_with_a_field_of_the_wrong_type_is_unreadable_naming_it(
    tmp_path, field, value, said
):
    good = {"schema": SCHEMA, "run_id": "code", "seed": 0, "status": "done", "metrics": {}}
    atomic_write_json(tmp_path / RECORD, {**good, field: value})
    with pytest.raises(RecordError, match=re.escape(said)):
        read_record(tmp_path / RECORD)
    good_, bad = scan_records(tmp_path)
    assert not good_ and [e.reason for e in bad] == [said]
    atomic_write_json(tmp_path / RECORD, {**good, "metrics": {"rsum": None}, "profile": None})
    assert read_record(tmp_path / RECORD)["seed"] == 0  # null is allowed where unknown
