"""``seps-bench status``: what a result store holds and lacks per matrix, read without
taking a lock, writing anything or loading torch (seps/runs/status.py,
seps/io/record_fields.py, seps/cli/status.py).

The fixture store is written here as the runner writes records (sorted keys, indent 2,
through seps.io.store.atomic_write_json), under a definitions root with one matrix ``tiny``
(runs a, b, c) and a profile ``p`` of seeds 0 and 1. Records carry the code version
``v1``; the status is asked for at ``v1`` unless a test says otherwise.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from ablation_roots import make_ablation_root

import seps.cli.status
from seps.cli import main
from seps.core.config import get_config
from seps.experiments.definitions import load_matrix, load_profile
from seps.io.record_fields import read_fields
from seps.io.store import RunLock, atomic_write_json, read_record
from seps.runs.runner import lock_path, plan, run_group
from seps.runs.status import collect_status, lock_state, process_start_time, status_text

VERSION = "v1"
MATRIX = {
    "name": "tiny",
    "baseline": "a",
    "runs": [
        {"id": "a", "preset": "code"},
        {"id": "b", "preset": "code", "set": {"hrpa": "mean_topk"}},
        {"id": "c", "preset": "code", "train": {"epochs": 2}},
    ],
}
# ``lr: 1e-3`` is a string to YAML 1.1: the record's resolved 0.001 must still match it.
PROFILES = """\
p:
  summary: two seeds
  seeds: [0, 1]
  head: {embed_size: 32}
  train: {epochs: 1, lr: 1e-3, synth_images: 40}
other:
  summary: one seed
  seeds: [0]
"""


@pytest.fixture()
def store(tmp_path):
    """``(definitions root, results folder)``: ``tiny`` and ``p``, and an empty store."""
    root = make_ablation_root(tmp_path / "ablations", {"tiny": MATRIX}, profiles=PROFILES)
    results = tmp_path / "results"
    (results / "tiny").mkdir(parents=True)
    return root, results


def write_record(
    results: Path,
    run_id: str,
    seed: int,
    *,
    status: str = "done",
    version: str = VERSION,
    profile: str = "p",
    wall: float = 3600.0,
    copied_from: str | None = None,
    head: dict | None = None,
    epochs: int | None = None,
    history: int = 2,
    started: float = 1000.0,
) -> Path:
    """A record of ``tiny``'s run ``run_id`` as the runner writes it: resolved configs of
    profile ``p`` unless ``head`` or ``epochs`` say otherwise (a definition since edited)."""
    run = next(r for r in MATRIX["runs"] if r["id"] == run_id)
    head = head or get_config(run["preset"], embed_size=32, **run.get("set", {})).to_dict()
    train = {"epochs": 1, "lr": 0.001, "synth_images": 40, "seed": seed, "workers": 0}
    train.update(run.get("train", {}))
    if epochs is not None:
        train["epochs"] = epochs
    key = hashlib.sha256(json.dumps([run_id, head, train]).encode()).hexdigest()[:16]
    rec = {
        "schema": "seps-bench/run/1",
        "code_version": version,
        "matrix": "tiny",
        "profile": profile,
        "run_id": run_id,
        "preset": run["preset"],
        "seed": seed,
        "key": key,
        "train_key": key,
        "head_config": json.loads(json.dumps(head)),
        "train_config": train,
        "status": status,
        "started": started,
        "wall_seconds": wall,
        "copied_from": copied_from,
        "history": [{"epoch": e, "loss": [0.5] * 40} for e in range(history)],
        "metrics": {"rsum": 300.0},
    }
    path = results / "tiny" / f"{run_id}-{key}-s{seed}.json"
    atomic_write_json(path, rec)
    return path


def status_of(root: Path, results: Path, version: str = VERSION, **kw):
    return collect_status(results, ["tiny"], kw.pop("profile", "p"), root, version=version, **kw)


def tree(folder: Path) -> dict[str, tuple[int, int, int]]:
    """Every path under ``folder`` with its size, inode and modification time."""
    return {
        str(p): (p.stat().st_size, p.stat().st_ino, p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
    }


def test_each_planned_run_and_seed_is_counted_once_by_its_records_state(store):
    root, results = store
    write_record(results, "a", 0, wall=3600.0)
    write_record(results, "a", 1, wall=7200.0, copied_from="other/a-0123456789abcdef-s1.json")
    write_record(results, "b", 0, status="failed")
    write_record(results, "b", 1, status="diverged")
    write_record(results, "c", 0, version="v0")
    before = tree(results)
    m = status_of(root, results).matrices[0]
    assert m.planned == 6
    assert m.counts == {
        "done": 2,
        "running": 0,
        "failed": 1,
        "diverged": 1,
        "stale": 1,
        "to do": 1,
    }
    assert m.to_do_runs == {"c": [1]}
    assert m.hours_done == pytest.approx(1.0)  # the copy took its time in another matrix
    assert m.hours_left == pytest.approx(1.5)  # c has none done: the matrix's mean, 5400 s
    assert tree(results) == before  # nothing written, moved or touched


def test_a_stale_record_counts_as_stale_whatever_its_status_and_adds_no_hours(store):
    root, results = store
    write_record(results, "a", 0, version="v0", wall=3600.0)
    # Older code, whose head config had no top_k yet: still this run, stale.
    older = get_config("code", embed_size=32, hrpa="mean_topk").to_dict()
    del older["top_k"]
    write_record(results, "b", 0, version="v0", status="failed", head=older)
    m = status_of(root, results).matrices[0]
    assert m.counts["stale"] == 2 and m.counts["done"] == 0 and m.counts["failed"] == 0
    assert m.hours_done == 0.0
    assert m.hours_left is None  # nothing of this code is done: no time to go by
    assert "unknown" in status_text(status_of(root, results))
    current = status_of(root, results, version="v0").matrices[0]
    assert (current.counts["done"], current.counts["failed"], current.counts["stale"]) == (1, 1, 0)


def test_hours_left_use_the_runs_own_mean_before_the_matrixs(store):
    root, results = store
    write_record(results, "a", 0, wall=1800.0)
    write_record(results, "b", 0, wall=5400.0)
    m = status_of(root, results).matrices[0]
    # a s1: a's mean (0.5 h); b s1: b's (1.5 h); c s0, c s1: the matrix's (1 h each).
    assert m.hours_left == pytest.approx(0.5 + 1.5 + 2 * 1.0)
    assert m.hours_done == pytest.approx(2.0)


def test_records_of_another_profile_seed_or_edited_definition_are_outside_the_plan(store):
    root, results = store
    write_record(results, "a", 0, profile="other")
    write_record(results, "a", 7)
    write_record(results, "b", 0, head=get_config("code", embed_size=32).to_dict())  # no hrpa
    write_record(results, "c", 0, epochs=3)  # c's epochs were 3 when it ran
    write_record(results, "c", 1)
    m = status_of(root, results).matrices[0]
    assert m.counts["done"] == 1 and m.counts["to do"] == 5
    assert m.other_records == 4
    assert "4 record(s) outside this plan" in status_text(status_of(root, results))


def test_when_several_records_match_a_run_the_latest_decides(store):
    root, results = store
    write_record(results, "a", 0, status="failed", started=1000.0, history=3)
    write_record(results, "a", 0, status="done", started=2000.0)
    m = status_of(root, results).matrices[0]
    assert m.counts["done"] == 1 and m.counts["failed"] == 0


def test_the_default_profile_is_the_one_most_records_were_run_at(store):
    root, results = store
    write_record(results, "a", 0, profile="other")
    write_record(results, "b", 0, profile="other")
    write_record(results, "a", 1)
    status = collect_status(results, ["tiny"], None, root, version=VERSION)
    assert (status.profile, status.profile_from) == ("other", "store")
    assert status.matrices[0].planned == 3  # other has one seed


def test_a_held_lock_is_running_with_its_holder_and_status_leaves_it_untouched(store, monkeypatch):
    """A real run_group holds the training's RunLock; while it "trains", status reports
    the run as running, names the holder, and neither locks nor changes the file."""
    root, results = store
    matrix, profile = load_matrix("tiny", root), load_profile("p", root)
    group = [p for p in plan(matrix, profile, [1], results) if p.run.id == "a"]
    path = lock_path(results, group[0])
    seen = {}

    def fake_execute(p, results, **options):
        before = path.read_bytes(), path.stat().st_ino, tree(results)

        def no_flock(*args):
            raise AssertionError("status took a lock")

        with monkeypatch.context() as m:
            m.setattr(fcntl, "flock", no_flock)
            seen["status"] = status_of(root, results)
        assert (path.read_bytes(), path.stat().st_ino, tree(results)) == before
        assert not RunLock(path).acquire()  # still held by run_group
        seen["owner"] = json.loads(path.read_text())
        return {"status": "done", "wall_seconds": 1.0, "run_id": p.run.id, "seed": p.seed}

    monkeypatch.setattr("seps.runs.runner.execute", fake_execute)
    run_group(group, results, reuse=False, say=lambda line: None)
    status, owner = seen["status"], seen["owner"]
    assert status.matrices[0].counts["running"] == 1
    assert status.matrices[0].to_do_runs == {"a": [0], "b": [0, 1], "c": [0, 1]}
    (lock,) = status.locks
    assert (lock.state, lock.pid, lock.host) == ("held", os.getpid(), socket.gethostname())
    assert (lock.matrix, lock.profile, lock.seed, lock.runs) == ("tiny", "p", 1, ("a",))
    assert lock.since == owner["since"]
    text = status_text(status)
    assert f"tiny a s1 (p): pid {os.getpid()} on {socket.gethostname()} since" in text
    assert not path.exists()  # run_group released it as usual


def test_a_lock_file_left_by_a_dead_process_is_not_running(store):
    root, results = store
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        text=True,
        capture_output=True,
        check=True,
    )
    pid = int(gone.stdout)
    lock = results / "_work" / "0123456789abcdef-s0.lock"
    lock.parent.mkdir()
    owner = {
        "pid": pid,
        "host": socket.gethostname(),
        "since": 1000.0,
        "matrix": "tiny",
        "profile": "p",
        "seed": 0,
        "runs": ["a"],
    }
    lock.write_text(json.dumps(owner))
    status = status_of(root, results)
    assert status.matrices[0].counts["running"] == 0
    assert status.matrices[0].counts["to do"] == 6
    assert [x.state for x in status.locks] == ["dead"]
    assert "no longer run" in status_text(status)
    assert json.loads(lock.read_text()) == owner  # left for the next run to take over


def test_a_held_lock_of_an_older_runner_is_listed_but_counted_in_no_matrix(store):
    """Lock files written before the runner named its runs in them (pid, host, since
    only): the training is running, but which matrix's runs it trains is not known."""
    root, results = store
    lock = RunLock(results / "_work" / "0123456789abcdef-s0.lock")
    assert lock.acquire()
    try:
        status = status_of(root, results)
    finally:
        lock.release()
    assert [(x.state, x.matrix, x.pid) for x in status.locks] == [("held", None, os.getpid())]
    assert status.matrices[0].counts["running"] == 0
    assert "training 0123456789abcdef s0 (its lock file names no runs" in status_text(status)


@pytest.mark.skipif(process_start_time(os.getpid()) is None, reason="needs /proc")
def test_a_lock_whose_pid_now_belongs_to_a_later_process_is_not_held():
    me = {"pid": os.getpid(), "host": socket.gethostname()}
    started = process_start_time(os.getpid())
    assert lock_state({**me, "since": started + 60}) == "held"
    assert lock_state({**me, "since": started - 3600}) == "dead"  # written before we began


def test_lock_states_of_another_host_and_of_a_file_naming_no_holder():
    assert lock_state({"pid": 1, "host": "elsewhere.example", "since": 0.0}) == "elsewhere"
    assert lock_state({}) == "unknown"  # created, not yet written


def test_fields_after_a_long_history_are_read_from_the_ends_and_equal_a_whole_read(
    store, monkeypatch
):
    _, results = store
    long = write_record(results, "a", 0, history=2000)  # about 1 MB: a real one is 0.6
    assert long.stat().st_size > 10 * 64 * 1024
    whole = read_record(long)
    with monkeypatch.context() as m:
        m.setattr("seps.io.record_fields.read_record", None)  # the pieces must be enough
        fields = read_fields(long)
    assert fields == {k: whole[k] for k in fields}
    assert {"status", "train_config", "head_config", "wall_seconds"} <= set(fields)
    compact = results / "tiny" / "b-0123456789abcdef-s0.json"
    compact.write_text(json.dumps({**whole, "run_id": "b"}))  # not indented: read whole
    assert read_fields(compact)["run_id"] == "b"


def test_an_unreadable_record_is_named_not_counted(store):
    root, results = store
    (results / "tiny" / "a-0123456789abcdef-s0.json").write_text('{"schema": ')
    m = status_of(root, results).matrices[0]
    assert m.counts["to do"] == 6
    assert len(m.unreadable) == 1 and "a-0123456789abcdef-s0.json" in m.unreadable[0]


def test_json_says_what_the_table_says(store, capsys, monkeypatch):
    root, results = store
    write_record(results, "a", 0)
    monkeypatch.setattr(seps.cli.status, "code_version", lambda: VERSION)
    argv = ["status", "tiny", "--results", str(results), "--ablations", str(root), "--profile"]
    assert main([*argv, "p", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (m,) = doc["matrices"]
    assert (m["matrix"], m["done"], m["to_do"], m["planned"]) == ("tiny", 1, 5, 6)
    assert m["to_do_runs"] == {"a": [1], "b": [0, 1], "c": [0, 1]}
    assert (doc["profile"], doc["code_version"], doc["totals"]["done"]) == ("p", VERSION, 1)
    assert main([*argv, "p"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "| tiny" in line)
    assert [c.strip() for c in row.split("|")[2:10]] == ["6", "1", "0", "0", "0", "0", "5", "1.0"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--results", "{tmp}/missing"], "--results: {tmp}/missing: not a folder"),
        (["--profile", "huge"], "unknown profile 'huge'"),
        (["nosuch"], "matrix file not found"),
    ],
)
def test_a_bad_option_is_one_line_naming_it(store, capsys, args, expected):
    root, results = store
    tmp = str(results.parent)
    argv = ["status", "--results", str(results), "--ablations", str(root)]
    assert main([*argv, *(a.replace("{tmp}", tmp) for a in args)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("seps-bench status: error: ") and err.count("\n") == 1
    assert expected.replace("{tmp}", tmp) in err


def test_status_loads_no_torch(store):
    """The 2-second answer depends on it: importing torch alone takes about 1.5 s."""
    root, results = store
    write_record(results, "a", 0)
    code = (
        "import json, sys, contextlib, io\n"
        "import seps.cli\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    rc = seps.cli.main(['status', '--results', {str(results)!r}, "
        f"'--ablations', {str(root)!r}])\n"
        "print(json.dumps([rc, 'torch' in sys.modules, 'pandas' in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [0, False, False]
