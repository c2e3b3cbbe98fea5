"""No stale page: `seps-bench report` and `seps-bench scorecard` state the code version of
their records against this code's, and refuse (one line, exit 2, no traceback) to write a
page from records of another version, even when the records agree with each other,
unless `--allow-mixed-versions`, which writes it with a banner (seps/versioning/version.py,
seps/report/versions.py).

Hand-made records (test_report's and test_scorecard's); nothing trains.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from ablation_roots import make_ablation_root
from report_records import MATRIX_YAML, _store, _write
from test_scorecard import CLAIMS, MATRIX, SEEDS, _write_records

from seps.cli import main
from seps.report.headline import Headline, render_headline
from seps.report.scorecard import write_scorecard
from seps.report.scorecard_sections import profile_versions, scale_lines
from seps.report.versions import version_banner, version_counts, version_line
from seps.versioning.version import VERSION_KEY, check_versions, code_version

OTHER = "0123456789abcdef"


@pytest.fixture()
def card(tmp_path: Path) -> dict[str, Path]:
    """test_scorecard's claims over its records, all at one version (OTHER)."""
    root = make_ablation_root(tmp_path / "ablations", {"mini": MATRIX})
    (root / "claims.yaml").write_text(yaml.safe_dump({"claims": CLAIMS}, sort_keys=False))
    results = tmp_path / "results"
    _write_records(results, {r: SEEDS for r in ("base", "up", "noise", "down", "same")}, OTHER)
    return {"root": root, "results": results, "out": tmp_path / "card.md"}


@pytest.fixture()
def matrix(tmp_path: Path) -> dict[str, Path]:
    """test_report's matrix and records, all stamped with one version (OTHER)."""
    root = make_ablation_root(tmp_path / "ablations", {"mini": MATRIX_YAML})
    results = tmp_path / "results"
    _store(results)
    _stamp(results, OTHER)
    return {"root": root, "results": results, "reports": tmp_path / "reports"}


def _stamp(results: Path, version: str) -> None:
    for f in sorted((results / "mini").glob("*.json")):
        rec = json.loads(f.read_text())
        if "run_id" in rec:
            _write(f, {**rec, VERSION_KEY: version})


def _one_error_line(err: str) -> str:
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err.strip()


def test_scorecard_refuses_records_at_other_version(card, capsys):
    argv = ["scorecard", "--results", str(card["results"]), "--output", str(card["out"])]
    argv += ["--ablations", str(card["root"])]
    assert main(argv) == 2  # every record agrees with the others, at another version
    err = _one_error_line(capsys.readouterr().err)
    assert f"records at code version {OTHER} (" in err and code_version() in err
    assert "--allow-mixed-versions" in err and not card["out"].exists()
    # Allowed: written, with the banner and both versions in the preamble.
    assert main([*argv, "--allow-mixed-versions"]) == 0
    text = card["out"].read_text()
    assert "> **Stale page.** Its records are at code version " + OTHER in text
    assert f"this code: {code_version()} (stale" in text


def test_scorecard_of_current_records_states_both_versions_and_no_banner(card, capsys):
    _write_records(
        card["results"], {r: SEEDS for r in ("base", "up", "noise", "down", "same")},
        code_version(),
    )  # fmt: skip
    argv = ["scorecard", "--results", str(card["results"]), "--output", str(card["out"])]
    assert main([*argv, "--ablations", str(card["root"])]) == 0
    text = card["out"].read_text()
    assert "Stale page" not in text
    assert f"Code version of the records: {code_version()} (25); this code: " in text
    assert text.count(code_version()) == 2


def test_report_refuses_records_at_other_version(matrix, capsys):
    argv = ["report", "mini", "--results", str(matrix["results"])]
    argv += ["--reports", str(matrix["reports"]), "--ablations", str(matrix["root"])]
    assert main(argv) == 2
    err = _one_error_line(capsys.readouterr().err)
    assert OTHER in err and code_version() in err and "--allow-mixed-versions" in err
    assert not (matrix["reports"] / "mini.md").exists()
    assert main([*argv, "--allow-mixed-versions"]) == 0
    text = (matrix["reports"] / "mini.md").read_text()
    assert text.startswith("# Report: mini\n\n> **Stale page.**")
    assert f"this code: {code_version()} (stale" in text
    # Records of this code: no banner, both versions stated and the same.
    _stamp(matrix["results"], code_version())
    assert main(argv) == 0
    text = (matrix["reports"] / "mini.md").read_text()
    assert "Stale page" not in text and f"this code: {code_version()} (the same)." in text


def test_help_documents_the_flag(capsys):
    for command in ("report", "scorecard"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        out = " ".join(capsys.readouterr().out.split())
        assert "--allow-mixed-versions" in out and "not all at this code's version" in out
        assert "banner" in out


def test_check_versions_refuses_one_other_version_only_given_the_current_one():
    check_versions(["a", "a"], allow_mixed=False, what="x")  # no current: one version is fine
    check_versions(["a", "a"], allow_mixed=False, what="x", current="a")
    with pytest.raises(
        ValueError, match=r"^x: records at code version a \(2\), not this code's b;"
    ):
        check_versions(["a", "a"], allow_mixed=False, what="x", current="b")
    with pytest.raises(ValueError, match=r"unversioned \(1\), not this code's b"):
        check_versions([None], allow_mixed=False, what="x", current="b")
    check_versions(["a", None], allow_mixed=True, what="x", current="b")


def test_version_line_and_banner():
    counts = version_counts(["a", "a", "b"])
    assert counts == [("a", 2), ("b", 1)]
    assert version_line(counts, None) == "Code versions: a, b."
    assert (
        version_line([("a", 3)], "a")
        == "Code version of the records: a (3); this code: a (the same)."
    )
    assert version_banner([("a", 3)], "a") == []
    assert version_banner([("a", 3)], None) == []
    assert version_banner([("a", 3)], "b")[0].startswith("> **Stale page.**")
    assert version_banner(counts, None)  # several versions are stale whatever the code


def test_the_scorecards_banner_says_which_profiles_records_are_current():
    used = pd.DataFrame(
        {"profile": ["new", "new", "old", "old", "old"], "code_version": ["a", "a", "b", "c", "b"]}
    )
    detail = profile_versions(used, "a")
    assert (
        detail
        == "; by profile: `new` 2 records, all at this code; `old` 3 records, at b (2), c (1)"
    )
    banner = version_banner(version_counts(used["code_version"]), "a", detail)[0]
    assert "may not be what this code gives; by profile: `new` 2 records" in banner
    assert profile_versions(used[used["profile"] == "old"], "a") == ""  # one profile: no detail


def test_the_scorecards_scale_lines_give_each_profile_its_summary():
    used = pd.DataFrame(
        {
            "profile": ["new", "old"],
            "matrix": ["m", "m"],
            "run_id": ["a", "a"],
            "dataset": ["synthetic"] * 2,
            "synth_images": [100, 100],
            "eval_images": [10, 10],
            "seed": [0, 1],
            "code_version": ["a", "b"],
            "environment": [{}, {}],
        }
    )
    lines = scale_lines(used, "a", {"old": "retired: its pretraining solves the task"})
    assert lines[0].startswith("- Profile `new`: synthetic data")
    assert lines[1].startswith("- Profile `old` (retired: its pretraining solves the task): ")


def test_headline_block_names_stale_records():
    h = Headline({"supported": 1}, 1, [], [], None, [("aaaa", 4)], [("aaaa", 2)], current="bbbb")
    text = render_headline(h)
    assert text.startswith("> **Stale records.**") and "this code is bbbb" in text
    same = Headline({"supported": 1}, 1, [], [], None, [("aaaa", 4)], [], current="aaaa")
    assert render_headline(same).startswith(
        "Every record read here is at code version aaaa, this code's."
    )


def test_library_refuses_when_given_the_current_version(card):
    with pytest.raises(ValueError, match=f"{OTHER}.*not this code's now"):
        write_scorecard(card["results"], card["out"], card["root"], current_version="now")
    write_scorecard(card["results"], card["out"], card["root"])  # None: not compared
