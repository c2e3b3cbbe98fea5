"""The loss-study matrix end to end (smoke profile): report, plots, and plotted series
that come from the stored per-step records."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from ablation_roots import make_ablation_root

from seps.cli import main
from seps.core.config import get_config
from seps.experiments.definitions import load_matrix
from seps.report import current_records, load_results, write_report
from seps.report.loss_plots import warmup_end
from seps.report.loss_records import flat, flat_levels, last_epoch_triplets
from seps.report.loss_study import CRITERIA, loss_study_section, plot_files
from seps.runs.runner import SCHEMA

PLOTS = ("keep-ratio", "ratio-curves", "align", "grad-norm")


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    root = tmp_path_factory.mktemp("loss-study")
    results, reports = root / "results", root / "reports"
    code = main(
        [
            "run",
            "loss-study",
            "--profile",
            "smoke",
            "--results",
            str(results),
            "--reports",
            str(reports),
            "--no-progress",
        ]
    )
    assert code == 0
    return results, reports


def _records(results: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((results / "loss-study").glob("*.json"))]


def _cell(records: list[dict], decision: str, crit: str, form: str) -> list[dict]:
    """The records of one ratio cell at the paper's ratio weight (what the plots draw);
    the paper default is stored under two run ids (``ratio/...`` and ``align/triplet``)
    with the same key: one run."""
    out, seen = [], set()
    paper_weight = get_config("paper").ratio_weight
    for r in records:
        if (r["key"], r["seed"]) in seen or r["head_config"]["ratio_weight"] != paper_weight:
            continue
        seen.add((r["key"], r["seed"]))
        h = r["head_config"]
        c = "off" if h["ratio_loss"] == "off" else h["ratio_criterion"]
        if (h["decision"], c, h["ratio_loss"], h["align_loss"]) == (
            decision,
            crit,
            form,
            "triplet",
        ):
            out.append(r)
    return out


def _series(results: Path, reports: Path) -> dict:
    df = load_results(results, "loss-study")
    matrix = load_matrix("loss-study")
    cur, _ = current_records(df[df["run_id"].isin([r.id for r in matrix.runs])])
    _, _, series = loss_study_section(cur, "loss-study", reports)
    return series["smoke"]


def test_report_and_every_plot_exist(study):
    results, reports = study
    records = _records(results)
    assert len(records) == 42 and all(r["status"] == "done" for r in records)
    md = (reports / "loss-study.md").read_text()
    for heading in ("## Loss study", "Table 1: ratio constraint", "Table 2: alignment losses"):
        assert heading in md
    for name in plot_files("loss-study", "smoke"):
        assert (reports / name).stat().st_size > 0
        assert f"]({name})" in md
    assert "decision=topk: the ratio loss is a constant" in md
    assert "decision=gumbel_topk: the ratio loss is a constant" in md
    assert "decision=gumbel_per_patch: the ratio loss acts" in md
    assert "Hardest-negative triplet vs multi-positive InfoNCE" in md
    # One seed per cell: no paired test anywhere, and the report says so.
    assert md.count("Holm-corrected across the 0 paired tests of this report") == 3
    # The smoke profile evaluates no dev split: collapse cannot be checked.
    assert "Not checked: no record has a validation rSum" in md


def test_keep_ratio_and_gradient_series_come_from_the_records(study):
    results, reports = study
    records = _records(results)
    series = _series(results, reports)
    for decision in ("topk", "gumbel_topk", "gumbel_per_patch"):
        lines = series["keep-ratio"][decision]["lines"]
        grads = series["grad-norm"][decision]["lines"]
        assert set(lines) == set(CRITERIA)
        for crit in CRITERIA:
            runs = _cell(records, decision, crit, "off" if crit == "off" else "separate")
            assert len(runs) == 1
            log = [s for h in runs[0]["history"] for s in h["steps_log"]]
            want = [float(np.mean(list(s["keep_ratio"].values()))) for s in log]
            x, y = lines[crit]
            assert x == list(range(len(log)))
            np.testing.assert_allclose(y, want, rtol=1e-12)
            np.testing.assert_allclose(
                grads[f"{crit} (ratio loss only)"][1], [s["ratio_grad_norm"] for s in log]
            )
            np.testing.assert_allclose(grads[crit][1], [s["selector_grad_norm"] for s in log])
        assert series["keep-ratio"][decision]["target"] == 0.5
    # The constancy is in the records themselves, not only in the text.
    for r in _cell(records, "topk", "mse", "unified"):
        log = [s for h in r["history"] for s in h["steps_log"]]
        assert {s["ratio"] for s in log} == {0.25}
        assert {s["ratio_grad_norm"] for s in log} == {0.0}


def test_ratio_curve_points_and_alignment_bars_come_from_the_records(study):
    results, reports = study
    records = _records(results)
    series = _series(results, reports)
    for crit in ("mse", "l1", "ce"):
        pts = series["ratio-curves"][crit]["points"]["gumbel_per_patch"]
        (run,) = _cell(records, "gumbel_per_patch", crit, "separate")
        xs, ys = [], []
        for h in run["history"]:
            for s in h["steps_log"]:
                for b, term in s["ratio_parts"].items():
                    xs.append(s["keep_ratio"][b])
                    ys.append(term / run["head_config"][f"lambda_{b}"])
        np.testing.assert_allclose(pts[0], xs)
        np.testing.assert_allclose(pts[1], ys)
    bars = series["align"]["rsum"]
    by_kind = _align_records(records)
    assert set(bars) == set(by_kind)
    for kind, per_seed in by_kind.items():
        rsums = [r["metrics"]["rsum"] for r in per_seed.values()]
        assert bars[kind] == pytest.approx(np.mean(rsums))
        # A dot per seed on each bar: the seeds themselves, not only their mean.
        assert sorted(series["align"]["rsum_seeds"][kind]) == pytest.approx(sorted(rsums))


def _align_records(records: list[dict]) -> dict[str, dict[int, dict]]:
    """The alignment cells' records (the paper preset's ratio setting), by loss and seed
    (the paper default, stored under two run ids, counts once)."""
    by_kind: dict[str, dict[int, dict]] = {}
    for r in records:
        h = r["head_config"]
        if (h["decision"], h["ratio_loss"], h["ratio_criterion"]) == (
            "gumbel_topk",
            "separate",
            "mse",
        ):
            by_kind.setdefault(h["align_loss"], {})[r["seed"]] = r
    return by_kind


def test_alignment_curves_are_the_unscaled_batch_triplets_not_the_warmed_up_term(study):
    """The alignment plot draws ``align_sum`` and ``align_hardest`` (no warm-up factor),
    never ``align``, whose epoch-0 warm-up ramp would read as a rising loss."""
    results, reports = study
    records = _records(results)
    curves = _series(results, reports)["align"]
    hardest_only = list(_align_records(records)["triplet_hardest"].values())
    for field in ("align_sum", "align_hardest"):
        want = [
            np.mean([s[field] for s in steps])
            for steps in zip(
                *[[s for h in r["history"] for s in h["steps_log"]] for r in hardest_only],
                strict=True,
            )
        ]
        np.testing.assert_allclose(curves[field]["triplet_hardest"][1], want)
    scaled = [s["align"] for r in hardest_only for s in r["history"][0]["steps_log"]]
    assert scaled[0] == 0.0  # the warm-up factor is 0 at the first step: not what is drawn
    assert curves["align_sum"]["triplet_hardest"][1][0] > 0.0
    b = records[0]["train_config"]["batch_size"]
    m = records[0]["head_config"]["margin"]
    assert curves["flat"] == {
        "align_sum": pytest.approx(2 * b * (b - 1) * m),
        "align_hardest": pytest.approx(2 * b * m),
    }


def test_normalised_cells_are_listed_with_their_weight_and_compared_with_mse(study):
    _, reports = study
    text = (reports / "loss-study.md").read_text()
    normalised = [r for r in load_matrix("loss-study").runs if r.id.endswith("/normalised")]
    assert len(normalised) == 6  # l1 and ce in three forms; mse is the reference
    for run in normalised:
        crit, form, w = (run.set[k] for k in ("ratio_criterion", "ratio_loss", "ratio_weight"))
        assert f"{crit} (weight {w:.4g})" in text  # its own row of Table 1
        assert f"form={form}, `{crit}` at equal initial gradient norm (weight {w:.4g}" in text


def test_report_regenerates_byte_identically(study):
    results, reports = study
    before = {p.name: p.read_bytes() for p in reports.iterdir()}
    assert main(["report", "loss-study", "--results", str(results), "--reports", str(reports)]) == 0
    after = {p.name: p.read_bytes() for p in reports.iterdir()}
    assert before == after


# ------------------------------------------- one correction family per report (no training)
def _align_record(kind: str, seed: int, rsum: float) -> dict:
    head = get_config("paper", align_loss=kind).to_dict()
    metrics = {"rsum": rsum, "i2t_r1": rsum / 6}
    return {
        "schema": SCHEMA,
        "matrix": "ls",
        "profile": "quick",
        "run_id": f"align/{kind}",
        "describe": f"align_loss={kind}",
        "preset": "paper",
        "seed": seed,
        "key": f"{kind}{seed}",
        "head_config": head,
        "train_config": {"dense_source": "query", "seed": seed},
        "started": 1.0,
        "status": "done",
        "metrics": metrics,
        "history": [],
    }


def test_report_family_spans_results_and_loss_study(tmp_path):
    """The results table tests infonce and triplet_hardest against triplet; the section
    prints those two again (the same records: the same tests) and triplet_hardest against
    infonce: 3 tests in the report's one family, Holm-corrected together."""
    matrix = {
        "name": "ls",
        "baseline": "align/triplet",
        "sections": ["loss-study"],
        "runs": [
            {
                "grid": {
                    "preset": ["paper"],
                    "align_loss": ["triplet", "infonce", "triplet_hardest"],
                },
                "id": "align/{align_loss}",
            },
        ],
    }
    root = make_ablation_root(tmp_path / "ablations", {"ls": matrix})
    # Per seed: triplet 0, 6, -6; infonce +12, +15, +12 over it; hardest +6, -6, -3 over it.
    base = (100.0, 106.0, 94.0)
    sides = {
        "triplet": base,
        "infonce": (112.0, 121.0, 106.0),
        "triplet_hardest": (106.0, 100.0, 91.0),
    }
    for kind, values in sides.items():
        for seed, v in enumerate(values):
            path = tmp_path / "results" / "ls" / f"align_{kind}-{kind}{seed}-s{seed}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(_align_record(kind, seed, v)))
    text = write_report("ls", tmp_path / "results", tmp_path / "reports", root=root).read_text()

    def p_of(diffs: list[float]) -> float:  # two-sided paired t, df = 2
        mean = float(np.mean(diffs))
        t = abs(mean) / (float(np.std(diffs, ddof=1)) / math.sqrt(3))
        return 1 - t / math.sqrt(t * t + 2)

    p_info = p_of([12.0, 15.0, 12.0])
    p_hard = p_of([6.0, -6.0, -3.0])
    p_hi = p_of([-6.0, -21.0, -15.0])  # hardest − infonce
    # Holm by hand: p_info < p_hi < p_hard -> x3, x2, x1 with the running maximum.
    assert p_info < p_hi < p_hard
    holm = {"info": 3 * p_info, "hi": max(3 * p_info, 2 * p_hi), "hard": max(2 * p_hi, p_hard)}
    sentence = "Holm-corrected across the 3 paired tests of this report"
    results = text.split("## Results")[1].split("\n## ")[0]
    study = text.split("## Loss study")[1].split("\n## ")[0]
    assert sentence in results and sentence in study
    rows = {r.split("|")[1].strip(): r for r in results.splitlines() if r.startswith("| align/")}
    assert f"| {holm['info']:.3f} " in rows["align/infonce"]
    assert f"| {holm['hard']:.3f} " in rows["align/triplet_hardest"]
    assert f"Holm-corrected p = {holm['hi']:.3f}, n = 3" in study
    assert f"Holm-corrected p = {holm['info']:.3f}, n = 3: outside seed noise" in study


def test_a_criterion_ends_closer_to_the_target_only_when_the_paired_interval_excludes_zero():
    """ "Ends closer" is a paired comparison over seeds of |keep - target|, not a reading
    of two means: a consistent small gap is said, a gap that changes sign is not."""
    from seps.report.loss_study import _closer

    def cell(gaps: dict[int, float]) -> dict:
        return {"keep_gap_by_seed": gaps}

    # MSE closer by 0.002, 0.003, 0.002 on three seeds: the interval excludes 0.
    short, long = _closer(
        cell({0: 0.050, 1: 0.051, 2: 0.049}), cell({0: 0.052, 1: 0.054, 2: 0.051})
    )
    assert short.startswith("MSE ends closer") and "n = 3" in short
    assert long.startswith("MSE ends with its keep ratio closer")
    # CE closer on two seeds, MSE on one, by more: the interval includes 0.
    short, _ = _closer(cell({0: 0.050, 1: 0.060, 2: 0.050}), cell({0: 0.055, 1: 0.050, 2: 0.052}))
    assert short.startswith("neither ends detectably closer")
    # Only seed 1 is shared: no interval, no claim.
    short, _ = _closer(cell({0: 0.01, 1: 0.02}), cell({1: 0.03, 2: 0.04}))
    assert short == "one paired seed: no CI"


def test_warmup_end_is_the_first_step_of_epoch_one_when_every_run_warms_up():
    def run(epoch_steps: list[int], warmup: bool = True) -> dict:
        history = [{"steps_log": [{"step": i} for i in range(n)]} for n in epoch_steps]
        return {"train_config": {"warmup": warmup}, "history": history}

    def end(*runs: dict) -> int | None:
        return warmup_end(pd.DataFrame(list(runs)))

    assert end(run([6, 6]), run([6, 6])) == 6
    assert end(run([6, 6]), run([6, 6], warmup=False)) is None  # the factor is not shared
    assert end(run([6])) is None  # one epoch: the warm-up never ends inside the plot
    assert end(run([6, 6]), run([5, 6])) is None  # a skipped step: no single boundary


def test_a_cell_reads_flat_only_when_both_batch_triplets_sit_at_the_equal_similarity_level():
    def run(last_sum: float, last_hardest: float) -> dict:
        epoch = {"steps_log": [{"align_sum": last_sum, "align_hardest": last_hardest}] * 3}
        return {
            "train_config": {"batch_size": 4},
            "head_config": {"margin": 0.5},
            "history": [{"steps_log": [{"align_sum": 99.0, "align_hardest": 99.0}]}, epoch],
        }

    sel = pd.DataFrame([run(12.0, 4.0), run(12.0, 4.0)])
    levels = flat_levels(sel)
    assert levels == {"align_sum": 12.0, "align_hardest": 4.0}  # 2 B (B - 1) m, 2 B m
    row = {"flat_levels": levels, "last_triplets": last_epoch_triplets(sel)}
    assert flat(row)
    for off in (pd.DataFrame([run(12.0, 4.2)]), pd.DataFrame([run(6.0, 4.0)])):
        assert not flat({"flat_levels": levels, "last_triplets": last_epoch_triplets(off)})
    mixed = pd.DataFrame([run(12.0, 4.0), {**run(12.0, 4.0), "head_config": {"margin": 0.2}}])
    assert flat_levels(mixed) is None  # no shared margin: no level, no verdict
    assert not flat({"flat_levels": None, "last_triplets": row["last_triplets"]})


def test_none_went_flat_counts_only_the_cells_whose_records_logged_the_batch_triplets():
    from seps.report.loss_study import _flat_statements

    levels = {"align_sum": 12.0, "align_hardest": 4.0}
    unlogged = {"align_sum": math.nan, "align_hardest": math.nan}
    apart = {"align_sum": 3.0, "align_hardest": 4.0}  # one triplet off is enough
    row = {"align_loss": "triplet", "flat_levels": levels, "seeds": 2, "rsum": (1.0, 0.1, 2)}
    assert _flat_statements([{**row, "last_triplets": unlogged}]) == []
    (line,) = _flat_statements(
        [{**row, "last_triplets": unlogged}, {**row, "last_triplets": apart}]
    )
    assert line.startswith("- No alignment cell's similarities went flat: in each of the 1 ")
    (flat_line,) = _flat_statements([{**row, "last_triplets": dict(levels)}])
    assert "**`triplet`: the similarities went flat.**" in flat_line


def test_a_bimodal_alignment_cell_gives_each_groups_mean_not_a_mean_and_interval(tmp_path):
    """Table 2's rSum of a cell with seeds at chance and seeds that learned is `k of n
    functional` with each group's mean (seps/report/bimodal.py), and the section says so;
    a one-mode cell keeps its mean ± CI."""
    matrix = {
        "name": "ls",
        "baseline": "align/triplet",
        "sections": ["loss-study"],
        "runs": [
            {
                "grid": {"preset": ["paper"], "align_loss": ["triplet", "infonce"]},
                "id": "align/{align_loss}",
            }
        ],
    }
    root = make_ablation_root(tmp_path / "ablations", {"ls": matrix})
    # 1,000 test images: chance 3.2, broken at <= 6.4; infonce's seed 1 is broken.
    sides = {"triplet": (200.0, 204.0, 196.0), "infonce": (210.0, 3.0, 205.0)}
    for kind, values in sides.items():
        for seed, v in enumerate(values):
            path = tmp_path / "results" / "ls" / f"align_{kind}-{kind}{seed}-s{seed}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({**_align_record(kind, seed, v), "eval_images": 1000}))
    text = write_report("ls", tmp_path / "results", tmp_path / "reports", root=root).read_text()
    study = text.split("## Loss study")[1].split("\n## ")[0]
    table = {r.split("|")[1].strip(): r for r in study.splitlines() if r.startswith("| ")}
    assert "| 2 of 3 functional: 207.5; broken: 3.0 |" in table["infonce"]
    assert "functional" not in table["triplet"] and "200.0 ± " in table["triplet"]
    assert "`infonce`: 2 of 3 seeds functional (mean rSum 207.5; broken seed 1: 3.0)." in study


def test_alignment_cells_share_a_bar_only_when_curves_and_seed_rsums_are_equal():
    """Two cells without logged batch curves have equal (empty) curves but are not one
    training; two with equal curves and equal seed rSums are."""
    from seps.report.loss_plots import _trained_alike

    def row(name: str, rsums: tuple[float, ...]) -> dict:
        return {"align_loss": name, "rsum_by_seed": dict(enumerate(rsums))}

    empty = {f: {n: ([], []) for n in ("a", "b")} for f in ("align_sum", "align_hardest")}
    assert _trained_alike([row("a", (1.0, 2.0)), row("b", (1.0, 2.0))], empty) == [["a"], ["b"]]
    curve = ([0.0, 1.0], [5.0, 4.0])
    same = {f: {n: curve for n in ("a", "b", "c")} for f in ("align_sum", "align_hardest")}
    rows = [row("a", (1.0, 2.0)), row("b", (1.0, 2.0)), row("c", (1.0, 3.0))]
    assert _trained_alike(rows, same) == [["a", "b"], ["c"]]
