"""The seps-bench command line."""

from __future__ import annotations

import subprocess
import sys

import pytest

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


def test_errors_are_one_line_and_debug_shows_the_traceback(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    args = ["data", "synth", "--out", str(blocker / "sub"), "--images", "10"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and str(blocker) in err and "Traceback" not in err
    with pytest.raises(OSError):
        main([*args, "--debug"])


def test_every_subcommand_documents_debug(capsys):
    from seps.cli import COMMANDS, build_parser

    build_parser()
    for name in COMMANDS:
        argv = ["data", "synth", "--help"] if name == "data" else [name, "--help"]
        with pytest.raises(SystemExit):
            main(argv)
        assert "--debug" in capsys.readouterr().out, name
