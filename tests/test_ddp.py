"""A 2-process gloo DDP run (torchrun) matches the single-process run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from seps.data.synth import generate_synthetic

COMMON = [
    "--image-size",
    "32",
    "--epochs",
    "2",
    "--batch-size",
    "8",
    "--max-steps-per-epoch",
    "3",
    "--val-images",
    "0",
    "--set",
    "head.embed_size=32",
    "--dropout",
    "0",
    "--device",
    "cpu",
    "--backbone-lr-mult",
    "1.0",
    "--no-progress",
]


pytestmark = pytest.mark.slow  # end-to-end: see tests/conftest.py


def test_two_process_ddp_matches_single_process(tmp_path):
    synth = tmp_path / "synth"
    generate_synthetic(synth, n_images=60, seed=0, image_size=32)
    single, ddp = tmp_path / "single", tmp_path / "ddp"
    base = [sys.executable, "-m"]
    cli = ["seps.cli", "train", "--data-path", str(synth), *COMMON]
    one = subprocess.run([*base, *cli, "--out", str(single)], capture_output=True, text=True)
    assert one.returncode == 0, one.stderr[-3000:]
    two = subprocess.run(
        [
            *base,
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "2",
            "-m",
            *cli,
            "--out",
            str(ddp),
        ],
        capture_output=True,
        text=True,
    )
    assert two.returncode == 0, two.stderr[-3000:]
    a = json.loads((single / "result.json").read_text())
    b = json.loads((ddp / "result.json").read_text())
    for ha, hb in zip(a["history"], b["history"], strict=True):
        assert hb["loss"] == pytest.approx(ha["loss"], rel=1e-3)
        assert hb["grad_norm"] == pytest.approx(ha["grad_norm"], rel=1e-3)
    assert b["history"][-1]["loss"] != a["history"][0]["loss"]  # it did train
