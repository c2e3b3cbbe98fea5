"""The report's special sections, on the hand-written records of tests/report_records.py:
a variant identical to its baseline is not a test, collapsed runs are listed with their
curves, the dense-caption protocols are stated per row when they mix, records of two code
versions are refused unless allowed, set-aside stale records are not read.
"""

from __future__ import annotations

import json
import shutil

import pytest
import yaml
from report_records import (
    P_FLIP,
    _add_run,
    _copy_of_base,
    _history,
    _record,
    _section,
    _table_after,
    _write,
)

from seps.cli import main
from seps.experiments.definitions import load_matrix
from seps.report import load_results, plot_collapsed, summarise, write_report


def test_report_identical_variant_is_not_a_test(env):
    base_head = {"embed_size": 64, "decision": "topk", "ratio_loss": "unified"}
    for seed in range(3):
        rec = _record("base", seed)
        rec["head_config"] = base_head
        _write(env["results"] / "mini" / f"base-k0-s{seed}.json", rec)
    _add_run(env, {"id": "ratio-only", "preset": "code", "set": {"ratio_loss": "separate"}})
    doc = yaml.safe_load((env["root"] / "matrices" / "mini.yaml").read_text())
    doc["runs"].append({"id": "mystery", "preset": "code", "set": {"hrpa": "mean_topk"}})
    (env["root"] / "matrices" / "mini.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    for seed in range(3):
        _copy_of_base(env, "ratio-only", {**base_head, "ratio_loss": "separate"}, seed)
        _copy_of_base(env, "mystery", {**base_head, "hrpa": "mean_topk"}, seed)

    s = summarise(load_results(env["results"]), load_matrix("mini", env["root"]))
    s = s.set_index("run_id")
    assert s.loc["ratio-only", "identical"] and s.loc["mystery", "identical"]
    assert (
        s.loc["ratio-only", "identical_reason"]
        == "the ratio loss is a constant under decision=topk"
    )
    assert s.loc["mystery", "identical_reason"] is None
    assert s.loc["ratio-only", "delta_mark"] == "identical"

    text = write_report("mini", env["results"], env["reports"], root=env["root"]).read_text()
    rows = {r[0]: r for r in _table_after(text, "## Results")[2:]}
    assert rows["ratio-only"][10:] == [
        "0.0 (identical)",
        "identical (no effect possible)",
        "not a test",
        "identical: the ratio loss is a constant under decision=topk",
    ]
    assert rows["mystery"][10:] == [
        "0.0 (identical)",
        "identical (no effect possible)",
        "not a test",
        "identical",
    ]
    assert "1.000" not in rows["ratio-only"] and "1.000" not in rows["mystery"]
    # Identical variants are not tests: the family is still flip-hrpa and no-act.
    assert "Holm-corrected across the 2 paired tests of this report" in text
    assert rows["flip-hrpa"][12] == f"{2 * P_FLIP:.3f}"
    shows = _section(text, "What this run shows")
    line = next(x for x in shows.splitlines() if x.startswith("- Identical"))
    assert "`ratio-only` (the ratio loss is a constant under decision=topk)" in line
    assert "`mystery` (reason not known)" in line
    assert "ratio-only" not in next(x for x in shows.splitlines() if "No difference" in x)
    impact = _table_after(_section(text, "Reported by the paper"), "Claimed impact")
    assert all("identical" not in c for r in impact for c in r)  # only flip-hrpa has a claim


# ------------------------------------------------------------------ collapsed runs
def test_report_lists_collapsed_runs_with_their_curves(env):
    rec = _record("no-act", 0)
    step = _history(0, 1.0)[0]
    rec["history"] = [
        {**step, "epoch": e, "val": {"rsum": v}} for e, v in enumerate((100.0, 120.0, 90.0))
    ]
    _write(env["results"] / "mini" / "no-act-k0-s0.json", rec)
    text = write_report("mini", env["results"], env["reports"], root=env["root"]).read_text()
    section = _section(text, "Collapsed runs")
    assert "1 of the 10 runs with a validation curve collapsed" in section
    table = _table_after(section, "collapsed:")
    assert table[0] == ["run", "profile", "seed", "best val rSum", "final val rSum", "drop"]
    assert table[2:] == [["no-act", "quick", "0", "120.0 (epoch 1)", "90.0 (epoch 2)", "-25.0%"]]
    assert "![validation rSum of the collapsed runs](mini-collapsed.png)" in section
    png = env["reports"] / "mini-collapsed.png"
    assert png.stat().st_size > 1000
    # The plot shows the record's curve, read back from the drawn line.
    matrix = load_matrix("mini", env["root"])
    df = load_results(env["results"])
    from seps.report.collapse import collapsed_runs

    runs, checked = collapsed_runs(df[df.file != "mini/base-old-s0.json"], matrix)
    assert checked == 10 and [(r["run_id"], r["seed"]) for r in runs] == [("no-act", 0)]
    series = plot_collapsed(runs, env["reports"] / "check.png")
    assert series == {"quick / no-act": {"seed 0": ([0.0, 1.0, 2.0], [100.0, 120.0, 90.0])}}
    # Regenerating is byte-identical; once nothing collapses the plot is removed.
    first = png.read_bytes()
    write_report("mini", env["results"], env["reports"], root=env["root"])
    assert png.read_bytes() == first
    _write(env["results"] / "mini" / "no-act-k0-s0.json", _record("no-act", 0))
    write_report("mini", env["results"], env["reports"], root=env["root"])
    assert not png.exists()


# -------------------------------------------------------- dense-caption protocols
def test_report_header_states_the_evaluation_protocol_key(env):
    for i, f in enumerate(sorted((env["results"] / "mini").glob("*-k0-s*.json"))):
        rec = json.loads(f.read_text())
        # The top-level key, or the train config's field when the record has only that.
        if i % 2:
            rec["eval_dense_source"] = "candidate"
        else:
            rec["train_config"]["eval_dense_source"] = "candidate"
        _write(f, rec)
    text = write_report("mini", env["results"], env["reports"], root=env["root"]).read_text()
    header = text.split("## Protocol")[0]
    assert (
        "training `query` (official, leaks the ground-truth image's dense caption); "
        "evaluation `candidate` (fair)."
    ) in header
    protocol = _section(text, "Protocol")
    assert "(`eval_dense_source`, else the training one): candidate (fair)" in protocol
    assert "dense caption (train / eval)" not in text  # one protocol pair: no column


def test_report_with_mixed_protocols_states_them_per_row(env):
    for seed in range(3):
        rec = _record("no-act", seed)
        rec["train_config"]["dense_source"] = "candidate"
        _write(env["results"] / "mini" / f"no-act-k0-s{seed}.json", rec)
    rec = _record("flip-hrpa", 0)
    rec["eval_dense_source"] = "shuffled"
    _write(env["results"] / "mini" / "flip-hrpa-k0-s0.json", rec)
    text = write_report("mini", env["results"], env["reports"], root=env["root"]).read_text()
    header = text.split("## Protocol")[0]
    assert "this matrix mixes protocols" in header
    assert "`query` = official, leaks the ground-truth image's dense caption" in header
    assert "`candidate` = fair" in header
    table = _table_after(text, "## Results")
    assert table[0][:3] == ["variant", "what differs", "dense caption (train / eval)"]
    cells = {r[0]: r[2] for r in table[2:]}
    assert cells == {
        "base (baseline)": "query / query",
        "flip-hrpa": "varies",
        "no-act": "candidate / candidate",
        "lonely": "query / query",
        "broken": "—",
    }
    impact = _table_after(_section(text, "Reported by the paper"), "Claimed impact")
    assert impact[0][1] == "dense caption (train / eval)" and impact[2][1] == "varies"
    protocol = _section(text, "Protocol")
    assert "dense caption in training** (`train_config.dense_source`): varies:" in protocol


def test_report_refuses_records_of_two_code_versions_unless_allowed(env):
    d = env["results"] / "mini"
    for i, f in enumerate(sorted(d.glob("*-k0-s*.json"))):
        rec = json.loads(f.read_text())
        rec["code_version"] = "a" * 16 if i % 2 else "b" * 16
        _write(f, rec)
    args = (env["results"], env["reports"])
    with pytest.raises(ValueError, match=r"code versions: .*--allow-mixed-versions"):
        write_report("mini", *args, root=env["root"])
    assert not (env["reports"] / "mini.md").exists()
    text = write_report("mini", *args, root=env["root"], allow_mixed_versions=True).read_text()
    assert f"Code versions: {'a' * 16}, {'b' * 16}" in text
    # The CLI says it in one line and exits 2, and accepts the option.
    assert (
        main(
            [
                "report",
                "mini",
                "--results",
                str(env["results"]),
                "--reports",
                str(env["reports"]),
                "--ablations",
                str(env["root"]),
            ]
        )
        == 2
    )


def test_stale_records_set_aside_are_not_read(env):
    d = env["results"] / "mini"
    before = len(load_results(env["results"], "mini"))
    f = sorted(d.glob("*-k0-s*.json"))[0]
    shutil.copy(f, d / (f.stem + ".stale.json"))
    shutil.copy(f, d / (f.stem + ".stale.1.json"))
    assert len(load_results(env["results"], "mini")) == before


def test_the_text_only_matcher_line_is_given_per_profile_when_profiles_mix():
    import pandas as pd

    from seps.report.prose import _text_only_lines

    rows = [("standard", s, 320.0 + s) for s in range(3)] + [("smoke", 0, 480.0)] * 2
    df = pd.DataFrame(rows, columns=["profile", "seed", "text_only_rsum"])
    lines = _text_only_lines(df)
    assert len(lines) == 2
    assert "(profile `smoke`)" in lines[0] and "rSum 480.0 ± n/a over 1 test" in lines[0]
    assert "(profile `standard`)" in lines[1] and "over 3 test split(s)" in lines[1]
    # one profile: one line, as before (committed reports keep their bytes)
    one = _text_only_lines(df[df["profile"] == "standard"])
    assert len(one) == 1 and one[0].startswith("- **text-only matcher** (`seps.data.baselines`")


def test_a_users_file_under_the_reports_name_is_never_overwritten(env, capsys):
    env["reports"].mkdir()
    mine = env["reports"] / "mini.md"
    mine.write_text("# my notes on mini\n")
    with pytest.raises(ValueError, match="not written by seps-bench report"):
        write_report("mini", env["results"], env["reports"], root=env["root"])
    assert mine.read_text() == "# my notes on mini\n"
    assert sorted(p.name for p in env["reports"].iterdir()) == ["mini.md"]  # no plot drawn
    args = ["report", "mini", "--results", str(env["results"]), "--reports", str(env["reports"]),
            "--ablations", str(env["root"]), "--allow-mixed-versions"]  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and str(mine) in err
    mine.unlink()
    first = write_report("mini", env["results"], env["reports"], root=env["root"])
    again = write_report("mini", env["results"], env["reports"], root=env["root"])
    assert first == again and "Regenerated from the stored run records" in again.read_text()
