"""The ablation runner: store, skipping, failures, dry run, interruption and resume, Ray."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from seps.ablations import load_matrix, load_profile
from seps.cli import main
from seps.runner import plan, read_record, run_matrix

REPO_ABLATIONS = Path(__file__).resolve().parents[1] / "ablations"

PROFILE = """
tiny:
  description: test-sized
  seeds: [0]
  head: {embed_size: 32}
  train: {synth_images: 60, image_size: 32, epochs: 2, batch_size: 8, max_steps_per_epoch: 2,
          val_images: 0, backbone_lr_mult: 1.0, vocab_size: 300, max_dense_words: 48}
"""

MATRIX = """
name: mini
description: two variants and a shared-training evaluation variant
baseline: code
runs:
  - {id: code, preset: code}
  - {id: code+hrpa, preset: code, set: {hrpa: mean_topk}}
  - {id: code-candidate, preset: code, train: {dense_source: candidate}}
"""


@pytest.fixture()
def root(tmp_path):
    r = tmp_path / "ablations"
    (r / "matrices").mkdir(parents=True)
    shutil.copy(REPO_ABLATIONS / "differences.yaml", r / "differences.yaml")
    (r / "profiles.yaml").write_text(PROFILE)
    (r / "matrices" / "mini.yaml").write_text(MATRIX)
    (r / "matrices" / "broken.yaml").write_text(
        MATRIX.replace("name: mini", "name: broken")
        + "  - {id: bad, preset: code, train: {backbone: no_such_backbone_xyz}}\n"
    )
    return r


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    from seps.data.synth import generate_synthetic

    path = tmp_path_factory.mktemp("synth")
    generate_synthetic(path, n_images=60, seed=0, image_size=32)
    return path


def _run(root, results, synth, matrix="mini", **kw):
    return run_matrix(
        load_matrix(matrix, root),
        load_profile("tiny", root),
        [0],
        results,
        progress=False,
        data_path=str(synth),
        device="cpu",
        **kw,
    )


def test_runs_are_stored_skipped_and_share_training(root, synth, tmp_path):
    results = tmp_path / "results"
    records = _run(root, results, synth)
    assert [r["run_id"] for r in records] == ["code", "code+hrpa", "code-candidate"]
    assert all(r["status"] == "done" for r in records)
    by_id = {r["run_id"]: r for r in records}
    # The candidate-protocol run shares the code run's training: same history, other metrics.
    assert by_id["code-candidate"]["train_key"] == by_id["code"]["train_key"]
    assert by_id["code-candidate"]["history"] == by_id["code"]["history"]
    assert by_id["code-candidate"]["dense_source"] == "candidate"
    files = sorted((results / "mini").glob("*.json"))
    assert len(files) == 3
    before = {f: f.read_bytes() for f in files}
    again = _run(root, results, synth)
    assert [r["key"] for r in again] == [r["key"] for r in records]
    assert {f: f.read_bytes() for f in files} == before, "completed runs must be skipped"


def test_failed_run_is_recorded_and_does_not_stop_others(root, synth, tmp_path):
    results = tmp_path / "results"
    records = _run(root, results, synth, matrix="broken")
    status = {r["run_id"]: r["status"] for r in records}
    assert status == {
        "code": "done",
        "code+hrpa": "done",
        "code-candidate": "done",
        "bad": "failed",
    }
    bad = next(r for r in records if r["run_id"] == "bad")
    assert "no_such_backbone_xyz" in bad["error"] and "Traceback" in bad["traceback"]
    planned = plan(
        load_matrix("broken", root), load_profile("tiny", root), [0], results, data_path=str(synth)
    )
    p = next(p for p in planned if p.run.id == "bad")
    stamp = read_record(results / "broken" / p.record_name)["started"]
    _run(root, results, synth, matrix="broken")
    assert read_record(results / "broken" / p.record_name)["started"] == stamp
    _run(root, results, synth, matrix="broken", retry_failed=True)
    assert read_record(results / "broken" / p.record_name)["started"] != stamp


def test_dry_run_lists_resolved_runs(root, tmp_path, capsys):
    assert (
        main(
            [
                "run",
                "mini",
                "--ablations",
                str(root),
                "--profile",
                "tiny",
                "--results",
                str(tmp_path / "r"),
                "--dry-run",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "code+hrpa" in out and "hrpa=mean_topk" in out and "dense_source=candidate" in out
    assert not (tmp_path / "r").exists()


def test_killed_matrix_resumes_without_losing_or_repeating_runs(root, synth, tmp_path):
    results = tmp_path / "interrupted"
    cmd = [
        sys.executable,
        "-m",
        "seps.cli",
        "run",
        "mini",
        "--ablations",
        str(root),
        "--profile",
        "tiny",
        "--results",
        str(results),
        "--data-path",
        str(synth),
        "--device",
        "cpu",
        "--no-report",
        "--no-progress",
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 900
    while time.time() < deadline and not list((results / "mini").glob("*.json")):
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done_before = {f.name: f.read_bytes() for f in (results / "mini").glob("*.json")}
    assert 1 <= len(done_before) < 3, "the kill should land mid-matrix"
    assert subprocess.run(cmd, env=env, capture_output=True).returncode == 0
    after = {f.name: f.read_bytes() for f in (results / "mini").glob("*.json")}
    assert len(after) == 3
    for name, blob in done_before.items():
        assert after[name] == blob, "a completed run was done twice"
    reference = _run(root, tmp_path / "uninterrupted", synth)
    got = {json.loads(b)["run_id"]: json.loads(b) for b in after.values()}
    for rec in reference:
        assert got[rec["run_id"]]["metrics"] == rec["metrics"]
        assert len(got[rec["run_id"]]["history"]) == 2


def test_ray_backend_runs_in_local_ray(root, synth, tmp_path):
    pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'seps-bench[ray]'")
    results = tmp_path / "ray"
    records = run_matrix(
        load_matrix("mini", root),
        load_profile("tiny", root),
        [0],
        results,
        progress=False,
        backend="ray",
        only="code,code+hrpa",
        data_path=str(synth),
        device="cpu",
    )
    assert sorted(r["run_id"] for r in records) == ["code", "code+hrpa"]
    assert all(r["status"] == "done" for r in records)
    local = {r["run_id"]: r for r in _run(root, tmp_path / "local", synth, only="code,code+hrpa")}
    for r in records:
        # Same configs and keys as a local run; a Ray worker may use another thread count,
        # so float rounding can move a rank: compare the training record, not exact recalls.
        assert r["key"] == local[r["run_id"]]["key"]
        assert len(r["history"]) == len(local[r["run_id"]]["history"]) == 2
        assert r["metrics"]["rsum"] == pytest.approx(local[r["run_id"]]["metrics"]["rsum"], abs=60)
