"""``seps-bench export``: the stored records as one flat table (CSV or JSON lines)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd

from seps.cli import main

FIXTURE = Path(__file__).resolve().parent / "data" / "fixture_store"
STORE = FIXTURE / "records"
MATRIX = "seven-differences"


def test_csv_has_one_row_per_record_with_dotted_config_and_environment_columns(tmp_path):
    out = tmp_path / "runs.csv"
    assert main(["export", MATRIX, "--results", str(STORE), "--output", str(out)]) == 0
    df = pd.read_csv(out)
    assert len(df) == len(list((STORE / MATRIX).glob("*.json"))) == 18
    for col in ("matrix", "run_id", "seed", "profile", "protocol", "code_version", "rsum",
                "i2t_r1", "head.sparse_ratio", "train.epochs", "environment.python",
                "environment.torch"):  # fmt: skip
        assert col in df.columns, col
    assert list(df.columns[:3]) == ["matrix", "run_id", "seed"]
    assert "history" not in df.columns and "metrics" not in df.columns
    assert sorted(df["seed"].unique()) == [0, 1, 2]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # atomic write


def test_jsonl_to_stdout_gives_one_object_per_record_and_keeps_lists(capsys):
    assert main(["export", "--results", str(STORE), "--format", "jsonl"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 18
    code = next(r for r in rows if r["run_id"] == "code" and r["seed"] == 0)
    record = json.loads(next((STORE / MATRIX).glob("code-*-s0.json")).read_text())
    assert code["rsum"] == record["metrics"]["rsum"]
    assert code["head.sparse_ratio"] == record["head_config"]["sparse_ratio"]
    assert isinstance(code["train.lr_milestones"], list)


def test_without_matrix_every_matrix_of_the_store_is_exported(tmp_path, capsys):
    store = tmp_path / "results"
    shutil.copytree(STORE / MATRIX, store / MATRIX)
    other = store / "other"
    other.mkdir()
    for f in sorted((STORE / MATRIX).glob("code-*.json")):
        rec = json.loads(f.read_text())
        (other / f.name).write_text(json.dumps({**rec, "matrix": "other"}))
    assert main(["export", "--results", str(store), "--format", "jsonl"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {r["matrix"] for r in rows} == {MATRIX, "other"}
    assert len(rows) == 18 + 3


def test_a_matrix_file_exports_the_folder_its_name_says(tmp_path, capsys):
    assert main(["export", str(FIXTURE / f"{MATRIX}.yaml"), "--results", str(STORE)]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 18 + 1  # header


def test_a_matrix_without_records_is_one_line_naming_the_store(capsys):
    assert main(["export", "nope", "--results", str(STORE)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("seps-bench export: error: ")
    assert "nope" in err and MATRIX in err


def test_a_missing_store_is_one_line_naming_the_option(tmp_path, capsys):
    assert main(["export", "--results", str(tmp_path / "none")]) == 2
    assert "--results" in capsys.readouterr().err


def test_an_existing_output_is_replaced_only_with_overwrite(tmp_path, capsys):
    out = tmp_path / "mine.csv"
    out.write_text("my own table\n")
    args = ["export", MATRIX, "--results", str(STORE), "--output", str(out)]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--output" in err and "--overwrite" in err
    assert out.read_text() == "my own table\n"
    assert main([*args, "--overwrite"]) == 0
    assert len(pd.read_csv(out)) == 18


def test_an_output_inside_the_store_or_a_folder_is_refused(tmp_path, capsys):
    store = tmp_path / "results"
    shutil.copytree(STORE, store)
    record = sorted((store / MATRIX).glob("*.json"))[0]
    before = record.read_bytes()
    for out in (record, tmp_path):
        args = ["export", "--results", str(store), "--output", str(out), "--overwrite"]
        assert main(args) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and f"--output: {out}" in err
    assert record.read_bytes() == before


def test_an_unreadable_record_is_exported_as_such_and_said(tmp_path, capsys):
    store = tmp_path / "results"
    shutil.copytree(STORE / MATRIX, store / MATRIX)
    broken = sorted((store / MATRIX).glob("*.json"))[0]
    broken.write_text(json.dumps({**json.loads(broken.read_text()), "environment": "x"}))
    assert main(["export", "--results", str(store), "--format", "jsonl"]) == 0
    captured = capsys.readouterr()
    rows = [json.loads(line) for line in captured.out.splitlines()]
    assert len(rows) == 18 and [r["status"] for r in rows].count("unreadable") == 1
    (warning,) = captured.err.strip().splitlines()
    assert broken.name in warning and "field 'environment'" in warning
