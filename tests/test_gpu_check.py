"""scripts/gpu-check.sh at its small size on the CPU (``--small``: tiny encoders, a few
steps, 20 images x 100 captions, Triton in the CPU interpreter), so that the one-shot GPU
run (docs/gpu.md) does not meet a broken script. The ``tests`` step (pytest inside pytest)
and the latency report (``tests/test_bench.py`` checks it) are skipped to keep this
under a minute."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from seps.bench import gpu_check, gpu_summary

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu-check.sh"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("timeout") is None, reason="needs coreutils timeout")
def test_small_run_writes_every_output(tmp_path: Path) -> None:
    out = tmp_path / "gpu"
    env = {**os.environ, "PYTHON": sys.executable, "SEPS_GPU_CHECK_SKIP": "tests,bench-report"}
    proc = subprocess.run(
        ["bash", str(SCRIPT), "--small", "--out-dir", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=str(tmp_path),  # the script finds the repository itself
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    steps = {s["step"]: s["status"] for s in json.loads((out / "steps.json").read_text())}
    assert steps == {
        "tests": "skipped",
        "kernels": "ok",
        "train": "ok",
        "eval": "ok",
        "bench-report": "skipped",
    }
    # at most 8 files (a device run brings back no more), with the 2 of the latency report
    files = sorted(p.name for p in out.rglob("*") if p.is_file())
    assert files == ["eval.json", "kernels.json", "steps.json", "summary.md", "train.json"]
    kernels = json.loads((out / "kernels.json").read_text())
    assert kernels["env"]["device"] == "cpu" and kernels["env"]["triton_interpret"] == "1"
    assert kernels["ok"] and not kernels.get("partial")
    impls = [r["impl"] for r in kernels["rows"]]
    assert impls[0] == "loop" and "batched" in impls
    assert all(r["sims_equal"] for r in kernels["rows"])
    train = json.loads((out / "train.json").read_text())
    assert [r["preset"] for r in train["rows"]] == ["code"] * 2 + ["paper"] * 2 + ["laps"] * 2
    assert [r["alignment"] for r in train["rows"][:2]] == ["blocks", "per image"]
    assert train["ok"] and all(r["first_loss_rel_diff"] < 1e-3 for r in train["rows"][1::2])
    assert all(r["step_ms_median"] > 0 and r["loss_finite"] for r in train["rows"])
    ev = json.loads((out / "eval.json").read_text())
    assert ev["ok"] and [r["shape"] for r in ev["rows"]] == [[20, 100]] * 5
    for row in (ev["rows"][1], ev["rows"][3]):  # candidate and query, one image per call
        assert row["sims_equal"] and row["max_abs_diff_vs_blocks"] < 1e-5
    summary = (out / "summary.md").read_text()
    for needle in ("## Kernels vs loop", "## Training step", "## Evaluation", "| train | ok |"):
        assert needle in summary, needle
    assert "[" in proc.stdout and "=== " in proc.stdout  # per-step timestamps


def test_failed_step_is_recorded_and_summarised(tmp_path: Path) -> None:
    """A step's exception goes into its JSON; the summary lists steps, errors and tests."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "steps.tsv").write_text("kernels\t0\t3\ntrain\t1\t5\neval\t124\t60\n")
    (tmp_path / "train.json").write_text(json.dumps({"error": "RuntimeError: boom", "ok": False}))
    (tmp_path / "eval.json").write_text(
        json.dumps(
            {"partial": True, "ok": False, "rows": [{"layout": "candidate", "seconds": 1.0}]}
        )
    )
    (work / "tests.txt").write_text("1 passed, 1 failed, 1 skipped in 0.1s\n")
    (work / "tests.xml").write_text(
        '<testsuites><testsuite tests="3" failures="1" errors="0" skipped="1">'
        '<testcase classname="t" name="a"/><testcase classname="t" name="b">'
        '<failure message="bad"/></testcase><testcase classname="t" name="c">'
        '<skipped message="no cuda"/></testcase></testsuite></testsuites>'
    )
    text = gpu_summary.write_summary(tmp_path, work)
    assert "| train | FAILED | 1 |" in text and "| eval | TIMEOUT | 124 |" in text
    assert "skipped: t::c no cuda" in text
    assert "RuntimeError: boom" in text and "PARTIAL" in text
    assert "1 passed, 1 failed, 0 errors, 1 skipped" in text
    tests = json.loads((tmp_path / "tests.json").read_text())
    assert not tests["ok"] and tests["passed"] == 1 and "1 failed" in tests["output_tail"]
    steps = json.loads((tmp_path / "steps.json").read_text())
    assert [s["status"] for s in steps] == ["ok", "FAILED", "TIMEOUT"]


def test_one_preset_failing_leaves_the_others(monkeypatch) -> None:
    def fake(preset, small, device, sizes, blocks):
        if preset == "paper":
            raise RuntimeError("CUDA out of memory")
        return {"preset": preset, "step_ms_median": 1.0, "steps": 2, "peak_mem_mb": None,
                "last_loss": 1.0, "loss_finite": True}  # fmt: skip

    monkeypatch.setattr(gpu_check, "train_preset", fake)
    saved = []
    res = gpu_check.run_train("cpu", True, lambda m: None, saved.append)
    assert [r["preset"] for r in res["rows"]] == ["code", "code", "paper", "paper", "laps", "laps"]
    assert [r.get("alignment") for r in res["rows"]][2:4] == ["blocks", "per image"]
    assert "out of memory" in res["rows"][2]["error"] and not res["ok"]
    assert len(saved) == 6
    # a step stopped by its limit keeps its last save: it must name what was measured
    assert all(s["profile"] == res["profile"] and s["embed_size"] == 64 for s in saved)


def test_a_raising_step_writes_its_error_and_fails(monkeypatch, tmp_path: Path) -> None:
    def boom(device, small, log, save):
        save({"rows": [{"layout": "candidate"}]})
        raise ValueError("bad shard")

    monkeypatch.setitem(gpu_check.STEPS, "eval", boom)
    threads = torch.get_num_threads()  # --small sets one thread
    try:
        assert gpu_check.main(["eval", "--small", "--out-dir", str(tmp_path)]) == 1
    finally:
        torch.set_num_threads(threads)
    data = json.loads((tmp_path / "eval.json").read_text())
    assert data["error"] == "ValueError: bad shard" and not data["ok"]
