"""Reports from stored run records (seps/report.py), on hand-written records only.

No test trains: every record is a JSON file with the fields of ``seps.runner.execute``
and metrics chosen so that means, confidence intervals and paired differences can be
computed by hand.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from ablation_roots import make_ablation_root

from seps.ablations import load_matrix
from seps.cli import main
from seps.report import (
    load_results,
    paired_test,
    paper_reference,
    plot_collapsed,
    plot_curves,
    plot_delta,
    summarise,
    t_quantile,
    t_two_sided_p,
    write_report,
)
from seps.runner import SCHEMA
from seps.version import VERSION_KEY, code_version

REPO = Path(__file__).resolve().parents[1]
#: The six recalls of every record are BASE + k, so rsum = 370 + 6k.
BASE = [50.0, 70.0, 80.0, 40.0, 60.0, 70.0]
RECALL_KEYS = ["i2t_r1", "i2t_r5", "i2t_r10", "t2i_r1", "t2i_r5", "t2i_r10"]
#: (run, seed) -> k. base: rsum 370, 376, 364. flip-hrpa: paired Δ 12, 15, 12 (clear
#: effect). no-act: paired Δ 6, -6, -3 (noise). lonely: one seed, Δ 3.
K = {
    ("base", 0): 0.0,
    ("base", 1): 1.0,
    ("base", 2): -1.0,
    ("flip-hrpa", 0): 2.0,
    ("flip-hrpa", 1): 3.5,
    ("flip-hrpa", 2): 1.0,
    ("no-act", 0): 1.0,
    ("no-act", 1): 0.0,
    ("no-act", 2): -1.5,
    ("lonely", 0): 0.5,
}
T975_DF2 = 4.302652729911275  # Student t 0.975 quantile, 2 degrees of freedom
#: Paired t-test p-values of flip-hrpa (t = 13 / 1) and no-act (t = 1 / sqrt(13)), df = 2:
#: p = 1 - t / sqrt(t^2 + 2).
P_FLIP = 1 - 13 / math.sqrt(171)
P_NOACT = 1 - (1 / math.sqrt(13)) / math.sqrt(1 / 13 + 2)

MATRIX_YAML = {
    "name": "mini",
    "description": "A five-variant test matrix.",
    "baseline": "base",
    "runs": [
        {"id": "base", "preset": "code"},
        {"id": "flip-hrpa", "preset": "code", "set": {"hrpa": "mean_topk"}, "difference": "hrpa"},
        {"id": "no-act", "preset": "code", "set": {"similarity_activation": "none"}},
        {"id": "lonely", "preset": "code", "set": {"decision": "gumbel_topk"}},
        {"id": "broken", "preset": "code", "set": {"aggregation": "dual"}},
    ],
}


def _history(seed: int, k: float) -> list[dict[str, Any]]:
    return [
        {
            "epoch": e,
            "loss": 1.0 - 0.1 * e + 0.01 * seed + 0.001 * k,
            "align": 0.9,
            "ratio": 0.25,
            "grad_norm": 1.5,
            "keep_ratio": {"sparse": 0.5, "dense": 0.5},
            "steps": 6,
            "lr": [0.0002],
            "seconds": 1.0,
            "train_pairs_per_second": 100.0,
            "val": {"rsum": 100.0 + 10.0 * e + seed + k},
        }
        for e in range(2)
    ]


def _record(
    run_id: str,
    seed: int,
    *,
    profile: str = "quick",
    status: str = "done",
    error: str | None = None,
    started: float = 1000.0,
    key: str = "k0",
    seconds: float = 12.0,
    k: float | None = None,
) -> dict[str, Any]:
    run = next(r for r in MATRIX_YAML["runs"] if r["id"] == run_id)
    rec: dict[str, Any] = {
        "schema": SCHEMA,
        "matrix": "mini",
        "profile": profile,
        "run_id": run_id,
        "describe": ", ".join(f"{a}={b}" for a, b in run.get("set", {}).items()) or "(preset)",
        "preset": run["preset"],
        "difference": run.get("difference"),
        "paper_row": None,
        "seed": seed,
        "key": key,
        "train_key": key,
        "head_config": {"embed_size": 64},
        "train_config": {
            "dataset": "synthetic",
            "synth_images": 300,
            "eval_split": "test",
            "epochs": 2,
            "batch_size": 16,
            "max_steps_per_epoch": 6,
            "backbone": "tiny-vit",
            "text_backbone": "tiny-bert",
            "dense_source": "query",
            "protocol": "finetune",
            "seed": seed,
        },
        "started": started,
        "status": status,
        "error": error,
        "traceback": None if status == "done" else "Traceback ...",
        "environment": {"torch": "2.14.1", "device_name": "x86_64", "git_commit": "abc123" * 7},
        "wall_seconds": seconds + 1.0,
    }
    if status == "done":
        kk = K[(run_id, seed)] if k is None else k
        recalls = dict(zip(RECALL_KEYS, [b + kk for b in BASE], strict=True))
        rec.update(
            metrics={**recalls, "rsum": sum(recalls.values()), "i2t_medr": 1.0, "t2i_medr": 2.0},
            dense_source="query",
            protocol="finetune",
            history=_history(seed, kk),
            nonfinite_steps=0,
            train_seconds=seconds,
            eval_seconds=seconds / 10,
            eval_pairs_per_second=1000.0 / seconds,
            train_pairs_per_second=50.0 / seconds,
            parameters=1_234_567,
            trainable_parameters=1_000_000,
            peak_memory_bytes=2**30,
            eval_images=30,
        )
    return rec


def _write(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, sort_keys=True))


def _store(results: Path, seconds: float = 12.0) -> None:
    """The records of ``mini`` plus files the loader must ignore."""
    d = results / "mini"
    for (run_id, seed), _ in K.items():
        _write(d / f"{run_id}-k0-s{seed}.json", _record(run_id, seed, seconds=seconds))
    _write(
        d / "broken-k0-s0.json",
        _record("broken", 0, status="failed", error="RuntimeError: out of memory\nmore"),
    )
    # Superseded: an older record of base/seed 0 under another config key.
    _write(d / "base-old-s0.json", _record("base", 0, key="old", started=1.0, k=40.0))
    # Not records: another schema, a temp file, and the training work folder.
    _write(d / "notes.json", {"hello": "world"})
    (d / ".base-k0-s1.json.123.tmp").write_text("{partial")
    _write(results / "_work" / "abc-s0" / "result.json", _record("base", 0))


@pytest.fixture()
def env(tmp_path: Path) -> dict[str, Path]:
    root = make_ablation_root(tmp_path / "ablations", {"mini": MATRIX_YAML})
    results = tmp_path / "results"
    _store(results)
    return {"root": root, "results": results, "reports": tmp_path / "reports"}


def _section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else None]


def _table_after(text: str, marker: str) -> list[list[str]]:
    """The cells of the first markdown table after ``marker``."""
    lines = text[text.index(marker) :].splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[first:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


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
    from seps.ablations import RunSpec
    from seps.report import load_paper_figures

    figures = load_paper_figures(REPO / "seps" / "definitions")
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
    from seps.ablations import RunSpec
    from seps.report import load_paper_figures

    figures = load_paper_figures(REPO / "seps" / "definitions")
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
    figures = yaml.safe_load((REPO / "seps" / "definitions" / "paper_figures.yaml").read_text())
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


# ------------------------------------------------------------------------------ CLI
def _stamp_current(results: Path) -> None:
    """Stamp every record of ``mini`` with this code's version: the command refuses a
    page of records made by other code (tests/test_report_versions.py)."""
    for f in sorted((results / "mini").glob("*.json")):
        rec = json.loads(f.read_text())
        if rec.get("schema") == SCHEMA:
            _write(f, {**rec, VERSION_KEY: code_version()})


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


# --------------------------------------------------------------- identical variants
def _add_run(env: dict[str, Path], run: dict[str, Any]) -> None:
    doc = {**MATRIX_YAML, "runs": [*MATRIX_YAML["runs"], run]}
    (env["root"] / "matrices" / "mini.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))


def _copy_of_base(env: dict[str, Path], run_id: str, head: dict[str, Any], seed: int) -> None:
    rec = _record("base", seed)
    rec.update(run_id=run_id, describe=run_id, head_config=head)
    _write(env["results"] / "mini" / f"{run_id}-k0-s{seed}.json", rec)


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
    assert len(one) == 1 and one[0].startswith("- **text-only matcher** (`seps.baselines`")
