"""The seps-bench command line."""

from __future__ import annotations

import os
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
    assert main(["presets", "paper", "--set", "head.hrpa=bogus"]) == 2
    assert "'hrpa'" in capsys.readouterr().err


def test_presets_refuses_an_unknown_table_format_instead_of_falling_back(capsys):
    assert main(["presets", "--format", "bogus"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--format: unknown table format 'bogus'" in err, err
    assert main(["presets", "--format", "plain"]) == 0
    assert not capsys.readouterr().out.startswith("|")  # plain, not github's pipes


def test_report_on_a_store_without_records_is_one_line_naming_the_option(tmp_path, capsys):
    assert main(["report", "--results", str(tmp_path), "--reports", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"--results {tmp_path}: no run records" in err, err
    assert not (tmp_path / "r").exists()


def test_a_dry_run_refuses_an_unknown_float_path_as_a_run_does(monkeypatch, capsys):
    monkeypatch.setenv("SEPS_FLOAT_PATH", "bogus")
    assert main(["run", "findings", "--profile", "smoke", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "SEPS_FLOAT_PATH: invalid value 'bogus'" in err, err


def test_set_means_head_or_train_field_and_a_bare_field_is_one_line_naming_the_form(capsys):
    assert main(["presets", "paper", "--set", "head.hrpa=mean"]) == 0
    assert "hrpa = 'mean'" in capsys.readouterr().out
    for argv in (["presets", "--set", "hrpa=mean"], ["train", "--set", "embed_size=32"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1, err
        assert "expected head.FIELD=VALUE or train.FIELD=VALUE" in err and "--set head." in err


def test_console_script_help():
    out = subprocess.run(
        [sys.executable, "-m", "seps.cli", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "presets" in out


def test_data_synth_writes_official_layout(tmp_path, capsys):
    out = tmp_path / "synth"
    assert main(["data", "synth", "--output", str(out), "--images", "30", "--seed", "3"]) == 0
    for split in ("train", "dev", "test"):
        caps = (out / f"{split}_caps.txt").read_text().splitlines()
        assert caps and len(caps) % 5 == 0
        assert (out / f"synth_{split}.jsonl").exists()
    assert (out / "id_mapping.json").exists()
    assert "wrote 30 images" in capsys.readouterr().out


def test_data_synth_bad_splits(tmp_path, capsys):
    assert main(["data", "synth", "--output", str(tmp_path), "--splits", "a,b"]) == 2
    assert "--splits" in capsys.readouterr().err


def test_errors_are_one_line_and_debug_shows_the_traceback(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    args = ["data", "synth", "--output", str(blocker / "sub"), "--images", "10"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and str(blocker) in err and "Traceback" not in err
    with pytest.raises(OSError):
        main([*args, "--debug"])
    with pytest.raises(OSError):  # a global option: before the command's name too
        main(["--debug", *args])


def test_renamed_output_flags_keep_their_old_spelling_hidden(tmp_path, capsys):
    out = tmp_path / "synth"
    assert main(["data", "synth", "--out", str(out), "--images", "10"]) == 0
    assert (out / "id_mapping.json").exists()
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["data", "synth", "--help"])
    text = capsys.readouterr().out
    assert "--output" in text and "--out " not in text and "--out," not in text
    assert main(["data", "synth", "--images", "10"]) == 2
    assert "--output: required" in capsys.readouterr().err


@pytest.mark.parametrize("where", ["before", "after"])
def test_quiet_before_or_after_the_command_turns_progress_off(where, monkeypatch, tmp_path):
    """``--quiet`` implies ``--no-progress`` (seps.cli.main), wherever it is written: the
    Hugging Face loading bars go off and the variable that reaches worker processes is set."""
    import transformers

    hf = transformers.utils.logging
    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)
    hf.enable_progress_bar()
    command = ["run", "seven-differences", "--profile", "smoke", "--dry-run"]
    argv = ["--quiet", *command] if where == "before" else [*command, "--quiet"]
    try:
        assert main([*argv, "--results", str(tmp_path)]) == 0
        assert os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1"
        assert not hf.is_progress_bar_enabled()
        # without it the bars stay on
        hf.enable_progress_bar()
        monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS")
        assert main([*command, "--results", str(tmp_path)]) == 0
        assert hf.is_progress_bar_enabled() and "HF_HUB_DISABLE_PROGRESS_BARS" not in os.environ
    finally:
        hf.enable_progress_bar()


def test_every_subcommand_documents_debug(capsys):
    from seps.cli import COMMANDS, build_parser

    build_parser()
    for name in COMMANDS:
        argv = ["data", "synth", "--help"] if name == "data" else [name, "--help"]
        with pytest.raises(SystemExit):
            main(argv)
        out = capsys.readouterr().out
        assert "--debug" in out and "--quiet" in out, name


def test_train_pretrain_names_the_recipe_the_run_starts_from(capsys):
    from seps.cli import build_parser
    from seps.cli.train import train_config_from_args

    args = build_parser(["train"]).parse_args(["train", "--pretrain", "synth-48"])
    cfg = train_config_from_args(args)
    assert cfg.pretrain == "synth-48" and cfg.tokenizer is None  # the recipe's tokenizer
    # Checked before the recipe is built (hours): one line naming the option to change.
    assert main(["train", "--pretrain", "synth-48", "--image-size", "40"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("--image-size: 40 does not match pretraining recipe 'synth-48'; "
                        "pass --image-size 48")  # fmt: skip
    assert main(["train", "--pretrain", "nope"]) == 2
    assert "--pretrain: unknown recipe 'nope'; known: synth-48" in capsys.readouterr().err


def test_train_set_train_field_wins_over_its_option():
    from seps.cli import build_parser
    from seps.cli.train import train_config_from_args

    argv = ["train", "--epochs", "5", "--set", "train.epochs=2", "--set", "head.embed_size=32"]
    cfg = train_config_from_args(build_parser(["train"]).parse_args(argv))
    assert cfg.epochs == 2


def test_a_missing_optional_dependency_is_one_line_naming_the_package(monkeypatch, capsys):
    import seps.cli as cli
    from seps.cli import registry

    real_load = registry.load

    def load(name):
        add_args, _ = real_load(name)

        def run(args):
            raise ModuleNotFoundError("No module named 'pandas'", name="pandas")

        return add_args, run

    monkeypatch.setattr(cli, "load", load)
    assert cli.main(["export"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'pandas'" in err[0] and "seps-bench[all]" in err[0]


def test_pretrain_accepts_a_numbered_build_and_names_a_bad_one(monkeypatch, tmp_path, capsys):
    import seps.runs.prebuild  # the command imports it when it runs, so patch it at its source

    built = []

    def fake_build(name, root, progress):  # the build itself takes tens of minutes
        built.append(name)
        (tmp_path / "meta.json").write_text('{"final_loss": 0.5, "train_seconds": 1}')
        return tmp_path

    monkeypatch.setattr(seps.runs.prebuild, "build_checked", fake_build)
    assert main(["pretrain", "uni-48-w128@1", "--no-progress"]) == 0
    assert built == ["uni-48-w128@1"]
    assert main(["pretrain", "uni-48-w128@x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "recipe: unknown recipe 'uni-48-w128@x'" in err and "train config field" not in err
