"""SIGTERM stops a run at a step boundary with its checkpoint, Ctrl-C in one line; both
resume to the bits of an uninterrupted run and leave no lock or temporary file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from ablation_roots import make_ablation_root
from test_runner import MATRIX, PROFILE, _comparable
from test_train import HEAD, tiny

import seps.train.loop as loop
from seps.runtime import interrupts
from seps.runtime.interrupts import StopRequested
from seps.train import load_run_checkpoint, train

CLOCKS = ("seconds", "train_pairs_per_second")


def _no_clocks(history):
    return [{k: v for k, v in h.items() if k not in CLOCKS} for h in history]


def _sigterm_at_call(monkeypatch, n):
    """Act as if a SIGTERM arrived just before the n-th step of the process."""
    calls = []

    def requested():
        calls.append(1)
        if len(calls) == n:
            interrupts._requested.set()
        return interrupts._requested.is_set()

    monkeypatch.setattr(loop, "stop_requested", requested)


@pytest.mark.parametrize("stop_before_step", [3, 5])  # epoch 0 step 2; epoch 1 step 1
def test_sigterm_mid_epoch_checkpoints_that_step_and_resumes_to_the_same_bits(
    synth, tmp_path, monkeypatch, stop_before_step
):
    full = train(tiny(synth, tmp_path / "full"), HEAD)
    cfg = tiny(synth, tmp_path / "stopped")
    _sigterm_at_call(monkeypatch, stop_before_step)
    with pytest.raises(StopRequested, match=r"checkpoint_last.safetensors at epoch \d, step"):
        train(cfg, HEAD)
    ckpt = load_run_checkpoint(tmp_path / "stopped" / "checkpoint_last.safetensors")
    epoch, step = divmod(stop_before_step - 1, 3)
    assert ckpt["partial_epoch"]["epoch"] == epoch
    assert ckpt["partial_epoch"]["next_step"] == step
    assert not interrupts.stop_requested()  # the flag ends with the run
    monkeypatch.undo()
    resumed = train(cfg, HEAD, resume=True)
    assert resumed["metrics"] == full["metrics"]
    assert _no_clocks(resumed["history"]) == _no_clocks(full["history"])
    assert not list((tmp_path / "stopped").rglob(".*.tmp"))


# ------------------------------------------------------------------- subprocess matrices
@pytest.fixture()
def root(tmp_path):
    return make_ablation_root(tmp_path / "ablations", {"mini": MATRIX}, profiles=PROFILE)


def _cmd(root, synth, results):
    return [sys.executable, "-m", "seps.cli", "run", "mini", "--ablations", str(root),
            "--profile", "tiny", "--results", str(results), "--data-path", str(synth),
            "--device", "cpu", "--no-report", "--no-progress"]  # fmt: skip


def _records(results):
    files = sorted((results / "mini").glob("*"))
    return {f.name: _comparable(json.loads(f.read_text())) for f in files}


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _leftovers(results):
    return [p for p in results.rglob("*") if p.suffix in (".tmp", ".lock")]


@pytest.mark.slow
def test_sigint_and_sigterm_stop_a_matrix_that_then_resumes_to_the_uninterrupted_records(
    root, synth, tmp_path
):
    # The signal is sent by the process to itself at a known step (SEPS_BENCH_KILL_AT's
    # third field), as a scheduler or a Ctrl-C would send it, so the test is not a race.
    # tiny: 2 epochs x 2 steps; step 3 is inside epoch 1 of the first training.
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("SEPS_BENCH_KILL_AT", None)
    cmd = _cmd(root, synth, tmp_path / "stopped")
    term = subprocess.run(
        cmd, env={**env, "SEPS_BENCH_KILL_AT": "train_step:3:SIGTERM"}, capture_output=True
    )
    assert term.returncode == 143, term.stderr[-2000:]
    line = term.stderr.decode().strip().splitlines()[-1]
    assert "stopped by SIGTERM" in line and "epoch 1, step 1" in line and "resume" in line
    assert b"Traceback" not in term.stderr and _leftovers(tmp_path / "stopped") == []
    work = next((tmp_path / "stopped" / "_work").glob("*/checkpoint_last.safetensors"))
    assert load_run_checkpoint(work)["partial_epoch"]["next_step"] == 1

    intr = subprocess.run(
        cmd,
        env={**env, "SEPS_BENCH_KILL_AT": "train_step:2:SIGINT"},
        capture_output=True,
        # A Ctrl-C reaches a foreground program; a test suite started in the background
        # (`nohup ... &`, some CI runners) hands its children SIGINT ignored, and Python
        # then keeps ignoring it. Give the child the terminal's default, as a shell would.
        preexec_fn=_default_sigint,
    )
    assert intr.returncode == 130, intr.stderr[-2000:]
    assert b"Traceback" not in intr.stderr
    assert "interrupted; kept:" in intr.stderr.decode().strip().splitlines()[-1]
    assert _leftovers(tmp_path / "stopped") == []

    assert subprocess.run(cmd, env=env, capture_output=True).returncode == 0
    clean = _cmd(root, synth, tmp_path / "clean")
    assert subprocess.run(clean, env=env, capture_output=True).returncode == 0
    stopped = _records(tmp_path / "stopped")
    assert stopped == _records(tmp_path / "clean") and len(stopped) == 3
    assert _leftovers(tmp_path / "stopped") == []
