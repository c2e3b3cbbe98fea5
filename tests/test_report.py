"""Reports from stored run records (seps/report.py): statistics, loading, the summary, the
page and its command, on the hand-written records of tests/report_records.py (no test
trains). The page's special sections (identical variants, collapsed runs, dense-caption
protocols, code versions) are pinned in tests/test_report_sections.py.
"""

from __future__ import annotations

import math
import re

import pytest
import yaml
from report_records import (
    P_FLIP,
    P_NOACT,
    RECALL_KEYS,
    REPO,
    T975_DF2,
    K,
    _history,
    _record,
    _section,
    _stamp_current,
    _store,
    _table_after,
    _write,
)

from seps.cli import main
from seps.experiments.definitions import load_matrix
from seps.report import (
    load_results,
    paired_test,
    paper_reference,
    plot_curves,
    plot_delta,
    summarise,
    t_quantile,
    t_two_sided_p,
    write_report,
)
from seps.report.plots import same_curves


# ------------------------------------------------------------------------ statistics
def test_t_distribution_matches_closed_forms():
    assert t_quantile(0.975, 1) == pytest.approx(12.706204736174705, rel=1e-10)
    assert t_quantile(0.975, 2) == pytest.approx(T975_DF2, rel=1e-10)
    assert t_quantile(0.975, 4) == pytest.approx(2.7764451051977987, rel=1e-10)
    assert t_quantile(0.975, 30) == pytest.approx(2.0422724563012373, rel=1e-10)
    for t in (0.1, 1.0, 3.0, 13.0):
        # df=1: Cauchy; df=2: 1 - |t| / sqrt(t^2 + 2).
        assert t_two_sided_p(t, 1) == pytest.approx(1 - 2 / math.pi * math.atan(t), rel=1e-9)
        assert t_two_sided_p(t, 2) == pytest.approx(1 - t / math.sqrt(t * t + 2), rel=1e-9)


def test_paired_test_edge_cases():
    assert all(math.isnan(v) for v in paired_test([3.0])[1:3])
    mean, half, p, n = paired_test([2.0, 2.0, 2.0])
    assert (mean, half, p, n) == (2.0, 0.0, 0.0, 3)
    assert paired_test([0.0, 0.0])[2] == 1.0


# --------------------------------------------------------------------------- loading
def test_load_results_one_row_per_record(env):
    df = load_results(env["results"])
    # 10 done + 1 failed + 1 superseded; notes.json, the temp file and _work/ are skipped.
    assert len(df) == 12
    assert set(df["matrix"]) == {"mini"}
    assert not df["file"].str.contains("_work|notes|tmp").any()
    for col in (*RECALL_KEYS, "rsum", "i2t_medr", "history", "train_seconds", "parameters"):
        assert col in df.columns
    row = df[(df.run_id == "flip-hrpa") & (df.seed == 1)].iloc[0]
    assert row["i2t_r1"] == 53.5 and row["rsum"] == 370 + 6 * 3.5
    assert isinstance(row["history"], list) and len(row["history"]) == 2
    failed = df[df.status == "failed"].iloc[0]
    assert math.isnan(failed["rsum"]) and failed["dense_source"] == "query"
    assert len(load_results(env["results"], "mini")) == 12
    assert load_results(env["results"], "absent").empty


# ------------------------------------------------------------------------- summarise
def test_summarise_means_cis_and_paired_deltas(env):
    matrix = load_matrix("mini", env["root"])
    s = summarise(load_results(env["results"]), matrix).set_index("run_id")
    assert list(s.index) == ["base", "flip-hrpa", "no-act", "lonely", "broken"]
    base = s.loc["base"]
    # The superseded base/seed-0 record (k=40) must not count: i2t R@1 is 50, 51, 49.
    assert base["n"] == 3 and base["i2t_r1_mean"] == pytest.approx(50.0)
    assert base["i2t_r1_ci"] == pytest.approx(T975_DF2 / math.sqrt(3))
    assert base["rsum_mean"] == pytest.approx(370.0)
    assert base["rsum_ci"] == pytest.approx(6 * T975_DF2 / math.sqrt(3))
    assert base["delta_mark"] == "baseline"

    flip = s.loc["flip-hrpa"]  # paired Δ 12, 15, 12: mean 13, sd sqrt(3), se 1
    assert flip["delta_rsum_mean"] == pytest.approx(13.0)
    assert flip["delta_rsum_ci"] == pytest.approx(T975_DF2)
    assert flip["delta_p"] == pytest.approx(P_FLIP)
    assert flip["delta_n"] == 3 and flip["delta_mark"] == "*"
    # Holm over the 2 tests (flip-hrpa, no-act; lonely and broken are not tests): the
    # smaller p times 2, the larger times 1 (it stays above the first).
    assert flip["delta_p_adj"] == pytest.approx(2 * P_FLIP)
    assert s.loc["no-act", "delta_p_adj"] == pytest.approx(P_NOACT)
    assert not s["identical"].any()
    assert math.isnan(s.loc["lonely", "delta_p_adj"]) and math.isnan(base["delta_p_adj"])
    # Unpaired means would differ by 13 as well, but their CI is far wider: pairing matters.
    assert flip["rsum_ci"] > 2 * flip["delta_rsum_ci"]

    noact = s.loc["no-act"]  # paired Δ 6, -6, -3
    assert noact["delta_rsum_mean"] == pytest.approx(-1.0)
    assert noact["delta_rsum_ci"] == pytest.approx(T975_DF2 * math.sqrt(39) / math.sqrt(3))
    assert noact["delta_mark"] == "ns"

    lonely = s.loc["lonely"]
    assert lonely["n"] == 1 and math.isnan(lonely["rsum_ci"])
    assert lonely["delta_rsum_mean"] == pytest.approx(3.0) and lonely["delta_mark"] == "n/a"
    broken = s.loc["broken"]
    assert broken["n"] == 0 and broken["n_failed"] == 1 and broken["delta_mark"] == "n/a"
    assert base["train_seconds_mean"] == pytest.approx(12.0) and base["parameters"] == 1_234_567


def test_pairing_uses_only_common_seeds(env):
    """A variant seed without a baseline record on that seed is not paired."""
    matrix = load_matrix("mini", env["root"])
    (env["results"] / "mini" / "base-k0-s2.json").unlink()
    s = summarise(load_results(env["results"]), matrix).set_index("run_id")
    assert s.loc["flip-hrpa", "n"] == 3 and s.loc["flip-hrpa", "delta_n"] == 2
    assert s.loc["flip-hrpa", "delta_rsum_mean"] == pytest.approx(13.5)  # (12 + 15) / 2


def test_profiles_are_not_paired_with_each_other(env):
    matrix = load_matrix("mini", env["root"])
    _write(env["results"] / "mini" / "x.json", _record("no-act", 5, profile="smoke", k=9.0))
    s = summarise(load_results(env["results"]), matrix)
    smoke = s[s.profile == "smoke"].iloc[0]
    assert list(s.profile.unique()) == ["quick", "smoke"]
    assert smoke["n"] == 1 and smoke["delta_n"] == 0 and smoke["delta_mark"] == "n/a"


# --------------------------------------------------------------------------- report
def test_report_is_byte_identical_and_structured(env):
    path = write_report("mini", env["results"], env["reports"], root=env["root"])
    first = path.read_bytes()
    pngs = {p: (env["reports"] / p).read_bytes() for p in ("mini-delta.png", "mini-curves.png")}
    assert write_report("mini", env["results"], env["reports"], root=env["root"]) == path
    assert path.read_bytes() == first
    for name, data in pngs.items():
        assert (env["reports"] / name).read_bytes() == data, name
    assert not list(env["reports"].glob(".*tmp"))

    text = first.decode()
    assert text.startswith("# Report: mini\n\nA five-variant test matrix.")
    table = _table_after(text, "## Results")
    header, rule, body = table[0], table[1], table[2:]
    assert header == [
        "variant",
        "what differs",
        "seeds",
        "i2t R@1",
        "i2t R@5",
        "i2t R@10",
        "t2i R@1",
        "t2i R@5",
        "t2i R@10",
        "rSum",
        "Δ rSum",
        "p (paired t)",
        "p (Holm)",
        "verdict",
    ]
    assert all(set(c) <= set("-:") for c in rule)
    assert [r[0] for r in body] == ["base (baseline)", "flip-hrpa", "no-act", "lonely", "broken"]
    rows = {r[0]: r for r in body}
    assert rows["base (baseline)"][3] == f"50.0 ± {T975_DF2 / math.sqrt(3):.1f}"
    assert rows["base (baseline)"][9] == f"370.0 ± {6 * T975_DF2 / math.sqrt(3):.1f}"
    assert rows["base (baseline)"][10:] == ["baseline", "—", "—", "baseline"]
    # Raw p, Holm p over the report's 2 tests, verdict on the Holm p.
    assert rows["flip-hrpa"][10:] == [
        "+13.0 ± 4.3",
        f"{P_FLIP:.3f} (n=3)",
        f"{2 * P_FLIP:.3f}",
        "higher *",
    ]
    assert rows["no-act"][10:] == ["-1.0 ± 15.5", f"{P_NOACT:.3f} (n=3)", f"{P_NOACT:.3f}", "ns"]
    assert rows["lonely"][9] == "373.0 ± n/a" and rows["lonely"][10] == "+3.0 ± n/a"
    assert rows["lonely"][11:] == ["n/a (n=1)", "n/a", "n/a (1 paired seed)"]
    assert rows["broken"][2] == "0 (1 failed)" and rows["broken"][9] == "—"
    assert all("±" in c for r in body[:4] for c in r[3:10])
    results = _section(text, "Results")
    assert "Holm-corrected across the 2 paired tests of this report" in results

    assert text.count("**Dense-caption protocol of every number in this report**") == 1
    header = text.split("## Protocol")[0]
    assert (
        "training `query` (official, leaks the ground-truth image's dense caption); "
        "evaluation `query` (official, leaks the ground-truth image's dense caption)."
    ) in header
    protocol = _section(text, "Protocol")
    assert "synthetic (built-in, 300 images)" in protocol
    assert "- **dense caption in training** (`train_config.dense_source`): query (official" in (
        protocol
    )
    assert "- **dense caption at evaluation** (`eval_dense_source`" in protocol
    assert "seeds**: 0, 1, 2" in protocol and "abc123abc123" in protocol
    assert "- **torch**: 2.14.1" in protocol
    collapsed = _section(text, "Collapsed runs")
    assert "None of the 10 runs with a validation curve collapsed." in collapsed
    assert not (env["reports"] / "mini-collapsed.png").exists()
    # Cost columns live only in the Cost section, which comes last.
    assert "train time" not in text.split("\n## Cost")[0]
    cost = _table_after(text, "## Cost")
    assert cost[0][:3] == ["profile", "variant", "parameters"] and cost[2][2] == "1.235M"
    assert "wall time (s)" in cost[0]
    # Every completed record took 13 s by the runner's clock: the total is their sum.
    total = re.search(
        r"Wall time of the (\d+) completed records of profile `quick`: (.*?) \(", text
    )
    assert total is not None
    n_done = int(total.group(1))
    assert n_done == sum(1 for (run_id, _) in K if run_id != "broken")
    hours, minutes = divmod(round(13 * n_done / 60), 60)
    assert total.group(2) == f"{hours} h {minutes:02d} min"
    assert "![Δ rSum per variant with 95% CI](mini-delta.png)" in text
    assert "![training curves](mini-curves.png)" in text


def test_report_paper_figures_and_findings(env):
    text = write_report("mini", env["results"], env["reports"], root=env["root"]).read_text()
    paper = _section(text, "Reported by the paper")
    assert "different dataset" in paper
    impact = {r[0]: r for r in _table_after(paper, "Claimed impact")}
    assert impact["flip-hrpa"][1] == "hrpa" and impact["flip-hrpa"][4] == "medium (1-3%)"
    assert impact["flip-hrpa"][3] == f"+{100 * 13 / 370:.2f}%"
    rsum = {r[0]: r for r in _table_after(paper, "rSum measured here")}
    assert rsum["base (baseline)"][3] == "560.9"
    assert "paper/README reported, Flickr30K ViT-224" in rsum["base (baseline)"][5]

    shows = _section(text, "What this run shows")
    assert "Holm-corrected across the 2 paired tests of this report" in shows
    assert re.search(r"Higher rSum than the baseline beyond seed noise.*`flip-hrpa`", shows)
    within = next(line for line in shows.splitlines() if "No difference detected" in line)
    assert "`no-act`" in within and "flip-hrpa" not in within
    assert f"corrected p = {P_NOACT:.3f}" in within
    assert "without correction" not in shows and "Identical" not in shows
    single = next(line for line in shows.splitlines() if "Single paired seed" in line)
    assert "not testable" in single and "`lonely`" in single and "+3.0 from one seed" in single
    assert "Every seed failed: `broken`" in shows
    assert "Lower rSum" not in shows  # no claim the data do not support

    failed = _section(text, "Failed runs")
    assert "| broken" in failed and "RuntimeError: out of memory" in failed
    assert "more" not in failed  # only the first line of the error
    assert "`mini/base-old-s0.json`" in _section(text, "Records not used")


def test_report_without_records_says_so_and_leaves_no_stale_plots(env, tmp_path):
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "mini-delta.png").write_bytes(b"stale")
    path = write_report("mini", tmp_path / "empty", reports, root=env["root"])
    assert "No stored results for this matrix yet." in path.read_text()
    assert not (reports / "mini-delta.png").exists()


def test_accuracy_sections_do_not_depend_on_timings(tmp_path, env):
    fast = write_report("mini", env["results"], tmp_path / "a", root=env["root"]).read_text()
    slow_results = tmp_path / "slow"
    _store(slow_results, seconds=99.0)
    slow = write_report("mini", slow_results, tmp_path / "b", root=env["root"]).read_text()
    assert fast != slow
    assert fast.split("\n## Cost")[0] == slow.split("\n## Cost")[0]


def test_plotted_series_come_from_the_records(env, tmp_path):
    matrix = load_matrix("mini", env["root"])
    df = load_results(env["results"])
    delta = plot_delta(summarise(df, matrix), matrix, tmp_path / "d.png")["quick"]
    assert (tmp_path / "d.png").stat().st_size > 1000
    # The baseline is the 0 line; "broken" has no completed seed, so no bar.
    assert delta["labels"] == ["flip-hrpa", "no-act", "lonely"]
    assert delta["delta"] == pytest.approx([13.0, -1.0, 3.0])
    assert delta["ci"][:2] == pytest.approx([T975_DF2, T975_DF2 * math.sqrt(13)])
    assert math.isnan(delta["ci"][2])  # one seed: no error bar

    done = df[df.file != "mini/base-old-s0.json"]
    curves = plot_curves(done, matrix, tmp_path / "c.png")["quick"]
    assert set(curves) == {"loss", "val_rsum"}
    assert list(curves["loss"]) == ["base", "flip-hrpa", "no-act", "lonely"]
    x, y = curves["val_rsum"]["flip-hrpa"]
    # val rSum = 100 + 10 epoch + seed + k, averaged over seeds 0, 1, 2 (k = 2, 3.5, 1).
    assert x == [0.0, 1.0]
    assert y == pytest.approx([100 + 1 + 6.5 / 3, 110 + 1 + 6.5 / 3])
    # One seed: the curve is that record's history, unaveraged.
    assert curves["loss"]["lonely"][1] == pytest.approx([h["loss"] for h in _history(0, 0.5)])


def test_paper_reference_matching():
    from seps.experiments.definitions import RunSpec
    from seps.report import load_paper_figures

    figures = load_paper_figures(REPO / "ablations")
    rho = paper_reference(RunSpec("rho=0.3", "paper", {"sparse_ratio": 0.3}), figures)
    assert rho is not None and rho.values["rsum"] == 561.2
    coef = paper_reference(
        RunSpec("c", "paper", {"lambda_sparse": 1.0, "lambda_dense": 0.25}), figures
    )
    assert coef is not None and coef.values["rsum"] == 540.9
    module = paper_reference(RunSpec("m", "paper", paper_row="only dense text"), figures)
    assert module is not None and module.values == {
        "i2t_r1": 80.3,
        "i2t_r5": 80.3,
        "t2i_r1": 80.5,
        "t2i_r5": 96.8,
    }
    paper = paper_reference(RunSpec("paper", "paper"), figures)
    assert paper is not None and paper.values["rsum"] == 560.9 and "564.2" in paper.text
    assert paper_reference(RunSpec("x", "code", {"hrpa": "mean_topk"}), figures) is None


def test_coefficient_row_matches_a_run_that_also_sets_the_decision():
    """The paper measured its coefficient grid under its own decision (gumbel_topk): a run
    of another decision gets the row as context, and its text says so."""
    from seps.experiments.definitions import RunSpec
    from seps.report import load_paper_figures

    figures = load_paper_figures(REPO / "ablations")
    coef = {"lambda_sparse": 1.0, "lambda_dense": 0.25}
    topk = paper_reference(RunSpec("c", "paper", {**coef, "decision": "topk"}), figures)
    assert topk is not None and topk.table == "coefficients" and topk.values["rsum"] == 540.9
    assert topk.text == "l1=1, l2=0.25; measured by the paper under its own decision, gumbel_topk"
    own = paper_reference(RunSpec("c", "paper", {**coef, "decision": "gumbel_topk"}), figures)
    assert own is not None and own.text == "l1=1, l2=0.25"
    assert paper_reference(RunSpec("c", "paper", coef), figures).text == "l1=1, l2=0.25"
    # Only the decision may come along: any other field, or another rule's key, still
    # matches nothing.
    other = {**coef, "ratio_loss": "unified"}
    assert paper_reference(RunSpec("c", "paper", other), figures) is None
    rho = {"sparse_ratio": 0.3, "decision": "topk"}
    assert paper_reference(RunSpec("r", "paper", rho), figures) is None
    bare = RunSpec("p", "paper", {"decision": "topk"})
    assert paper_reference(bare, figures) is None


def test_paper_figures_copy_the_reference_tables():
    """Every number of paper_tables.md appears in paper_figures.yaml, in order."""
    ref = REPO.parent / "shared" / "reference" / "paper_tables.md"
    if not ref.exists():
        pytest.skip("shared reference tables not available")
    figures = yaml.safe_load((REPO / "ablations" / "paper_figures.yaml").read_text())
    tables = {}
    for block in ref.read_text().split("\n## ")[1:]:
        rows = [line for line in block.splitlines() if line.startswith("|")][2:]
        tables[block.split("\n")[0]] = [[c.strip() for c in r.strip("|").split("|")] for r in rows]

    def nums(cells: list[str]) -> list[float]:
        return [float(c) for c in cells if re.fullmatch(r"[\d.]+", c)]

    def rows(name: str, keys: list[str]) -> list[list[float]]:
        return [[float(r[k]) for k in keys] for r in figures[name]["rows"]]

    six = [*RECALL_KEYS, "rsum"]
    by_title = {t.split(" (")[0].split(" on ")[0]: v for t, v in tables.items()}
    assert rows("table1", six) == [nums(r) for r in by_title["Main results, SEPS vs LAPS"]]
    four = ["i2t_r1", "i2t_r5", "t2i_r1", "t2i_r5"]
    assert rows("module_ablations", four) == [nums(r) for r in by_title["Module ablations"]]
    assert rows("selection_ratio", ["rho", *six]) == [
        nums(r) for r in by_title["Selection ratio rho"]
    ]
    assert rows("coefficients", ["l1", "l2", *six]) == [
        nums(r) for r in by_title["Ratio-loss coefficients"]
    ]
    settings = [r["setting"] for r in figures["module_ablations"]["rows"]]
    assert settings == [r[1] for r in by_title["Module ablations"]]


def test_cli_report_writes_every_matrix_with_records(env, capsys):
    _stamp_current(env["results"])
    argv = ["report", "--results", str(env["results"]), "--reports", str(env["reports"])]
    assert main([*argv, "--ablations", str(env["root"])]) == 0
    assert (env["reports"] / "mini.md").exists()
    assert "report:" in capsys.readouterr().out
    # A named matrix works too; an unknown one is a clear error (exit 2).
    assert main([*argv, "--ablations", str(env["root"]), "mini"]) == 0
    assert main([*argv, "--ablations", str(env["root"]), "nope"]) == 2
    assert "nope" in capsys.readouterr().err


def test_cli_report_help_lists_options(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["report", "--help"])
    assert exc.value.code == 0
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for opt in ("MATRIX", "--results", "--reports", "--ablations", "never trains"):
        assert opt in out


def test_unreadable_record_is_named_in_output_and_report(env, capsys):
    bad = env["results"] / "mini" / "flip-hrpa-0123456789abcdef-s7.json"
    _stamp_current(env["results"])
    bad.write_text('{"schema": "seps-bench/run/1", "status": "do')  # truncated mid-write
    argv = ["report", "--results", str(env["results"]), "--reports", str(env["reports"])]
    assert main([*argv, "--ablations", str(env["root"]), "mini"]) == 0
    err = capsys.readouterr().err
    assert f"{bad}: unreadable record (invalid JSON" in err
    report = (env["reports"] / "mini.md").read_text()
    failed = report.split("## Failed runs")[1].split("\n## ")[0]
    row = next(line for line in failed.splitlines() if "unreadable" in line)
    assert "flip-hrpa" in row and "| 7 " in row and bad.name in row
    df = load_results(env["results"])
    assert (df["status"] == "unreadable").sum() == 1


def test_runs_with_identical_curves_in_every_panel_share_one_line():
    up, down = ([0.0, 1.0], [1.0, 2.0]), ([0.0, 1.0], [2.0, 1.0])
    panels = {
        "loss": {"a": up, "b": up, "c": up, "d": down},
        # "c" has no validation curve: not the same as "a" and "b", which do.
        "val_rsum": {"a": down, "b": down, "d": down},
    }
    assert same_curves(panels) == [["a", "b"], ["c"], ["d"]]
    assert same_curves({"loss": {"a": up, "b": down}}) == [["a"], ["b"]]


def test_a_bar_repeating_an_earlier_bars_numbers_is_marked_as_the_same_training():
    import pandas as pd

    from seps.report.plots import _bar_notes

    def row(run_id, delta, ci=4.0, identical=False, n=5):
        return {
            "run_id": run_id,
            "rsum_mean": 100.0 + delta,
            "rsum_ci": 5.0 if n > 1 else math.nan,
            "delta_rsum_mean": delta,
            "delta_rsum_ci": ci,
            "n": n,
            "identical": identical,
        }

    sub = pd.DataFrame(
        [
            row("a", 3.0),
            row("b", 3.0),
            row("c", 2.0),
            row("d", 0.0, 0.0, True),
            row("e", 1.0, math.nan),
        ]
    )
    assert _bar_notes(sub) == [
        None,
        "same numbers as a",
        None,
        "identical to its reference",
        "1 seed, no CI",
    ]
    # One seed each: equal means are too likely by chance to be called the same numbers.
    single = pd.DataFrame([row("f", 1.5, math.nan, n=1), row("g", 1.5, math.nan, n=1)])
    assert _bar_notes(single) == ["1 seed, no CI", "1 seed, no CI"]


def test_a_bimodal_bar_says_how_many_seeds_are_functional():
    import pandas as pd

    from seps.report.bimodal import split_seeds
    from seps.report.plots import _bar_notes

    side = {s: {"rsum": r, "eval_images": 1000} for s, r in enumerate([210.0, 2.0, 205.0])}
    split = split_seeds("x", side)
    rows = [
        {"run_id": run, "rsum_mean": m, "rsum_ci": 5.0, "delta_rsum_mean": d}
        | {"delta_rsum_ci": 4.0, "n": 3, "identical": False, "split": sp}
        for run, m, d, sp in (("x", 139.0, -70.0, split), ("y", 210.0, 1.0, None))
    ]
    assert _bar_notes(pd.DataFrame(rows)) == ["bimodal: 2 of 3 seeds functional", None]


def test_a_bar_measured_against_a_bimodal_reference_says_so():
    import pandas as pd

    from seps.report.bimodal import split_seeds
    from seps.report.plots import _bar_notes

    side = {s: {"rsum": r, "eval_images": 1000} for s, r in enumerate([2.0, 80.0, 60.0])}
    ref = split_seeds("base", side)
    rows = [
        {"run_id": "v", "rsum_mean": 90.0, "rsum_ci": 5.0, "delta_rsum_mean": 42.0}
        | {"delta_rsum_ci": 4.0, "n": 3, "identical": False, "split": None}
    ]
    assert _bar_notes(pd.DataFrame(rows), {"v": ref}) == [
        "vs a bimodal base: 2 of 3 seeds functional"
    ]
    assert _bar_notes(pd.DataFrame(rows), {"v": None}) == [None]


def test_curve_legends_get_rows_tall_enough_for_their_longest_column():
    """The training-curve figure sizes each profile's row to its legend (matplotlib fills
    legend columns by entry count), with the fewest columns whose tallest fits 7 in, so
    that a long matrix's legend is never cut off below its row."""
    from seps.report.plots import _legend_layout

    assert _legend_layout([[1, 1, 1], [2]]) == (1, [3.5, 3.5])
    # 15 + 4 + 20 one-line entries: one column would be 39 lines (7.03 in); two hold 11
    # entries each (28 and 11 lines), so the row is as tall as 28 lines.
    cols, heights = _legend_layout([[15, 4, *[1] * 20], [1]])
    assert cols == 2 and heights == pytest.approx([0.4 + 0.17 * 28, 3.5])
    # A single 60-line entry fits no column count: three columns, the row as tall as it.
    assert _legend_layout([[60]]) == (3, [pytest.approx(0.4 + 0.17 * 60)])
