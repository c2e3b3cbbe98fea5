"""The seps-bench command line."""

from __future__ import annotations

import subprocess
import sys

from seps.cli import main


def test_presets_prints_three_presets_side_by_side(capsys):
    assert main(["presets"]) == 0
    out = capsys.readouterr().out
    header = out.splitlines()[0]
    assert header.index("code") < header.index("paper") < header.index("laps")
    row = next(line for line in out.splitlines() if line.startswith("| hrpa"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1:4] == ["mean", "mean_topk", "mean"]


def test_presets_override_error_exit_code(capsys):
    assert main(["presets", "paper", "--set", "hrpa=bogus"]) == 2
    assert "'hrpa'" in capsys.readouterr().err


def test_console_script_help():
    out = subprocess.run(
        [sys.executable, "-m", "seps.cli", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "presets" in out


def test_data_synth_writes_official_layout(tmp_path, capsys):
    out = tmp_path / "synth"
    assert main(["data", "synth", "--out", str(out), "--images", "30", "--seed", "3"]) == 0
    for split in ("train", "dev", "test"):
        caps = (out / f"{split}_caps.txt").read_text().splitlines()
        assert caps and len(caps) % 5 == 0
        assert (out / f"synth_{split}.jsonl").exists()
    assert (out / "id_mapping.json").exists()
    assert "wrote 30 images" in capsys.readouterr().out


def test_data_synth_bad_splits(tmp_path, capsys):
    assert main(["data", "synth", "--out", str(tmp_path), "--splits", "a,b"]) == 2
    assert "--splits" in capsys.readouterr().err
