"""Sequential designs replayed on stored records (seps.report.sequential), the loop of
``run --until-decided`` (seps.runs.until_decided), ``seps-bench sequential`` and the
scorecard's verdicts of the rows a design decides."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from ablation_roots import make_ablation_root

from seps.experiments.definitions import load_matrix, load_profile
from seps.report.sequential import DesignError, analyse, load_designs, next_stage
from seps.runs.runner import SCHEMA
from seps.runs.until_decided import log_path, run_until_decided

MATRIX = {
    "name": "both-ways",
    "description": "flips on code and reverts in paper",
    "baseline": "code",
    "sections": ["differences"],
    "runs": [
        {"id": "code", "preset": "code"},
        {"expand": "flip", "from": "code", "to": "paper", "over": "differences"},
        {"id": "paper", "preset": "paper"},
        {"expand": "revert", "from": "paper", "to": "code", "over": "differences"},
    ],
}
CLAIMS = {
    "claims": [
        {
            "id": cid,
            "claim": f"the paper's {cid} helps",
            "source": "test",
            "matrix": "both-ways",
            "protocol": "candidate",
            "runs": [
                {"baseline": "code", "variants": [f"code+{cid}"]},
                {"baseline": f"paper-{cid}", "variants": ["paper"]},
            ],
            "direction": "+",
            "size": None,
        }
        for cid in ("hrpa", "aggregation")
    ]
}
DESIGN = {
    "designs": {
        "both": {
            "claims": ["hrpa", "aggregation"],
            "matrices": ["both-ways"],
            "looks": [3, 6, 9, 12],
            "spending": "pocock",
            "alpha": 0.05,
            "margin": 0.05,
            "reference": {"flip": "code", "revert": "paper"},
            "blocks": ["build", "cpu"],
            "written": "test",
        }
    }
}
#: True effect of each run over its preset (rSum); per-seed noise sd 2 with a shared
#: per-seed level. code+hrpa: a large effect (detected early); the rest: none.
EFFECT = {"code+hrpa": 30.0}
LEVEL = {"code": 100.0, "paper": 200.0}
HEAD = {
    "code": {"hrpa": "mean", "aggregation": "shared"},
    "paper": {"hrpa": "mean_topk", "aggregation": "dual"},
}


def _rsum(run: str, seed: int) -> float:
    preset = "paper" if run.startswith("paper") else "code"
    rng = np.random.default_rng([seed, sum(map(ord, run))])
    shared = np.random.default_rng(seed).normal(0, 10)
    return float(LEVEL[preset] + shared + EFFECT.get(run, 0.0) + rng.normal(0, 2))


def _record(run: str, seed: int, cpu: str = "Test CPU") -> dict[str, Any]:
    preset = "paper" if run.startswith("paper") else "code"
    head = dict(HEAD[preset])
    diff = run.partition("+" if preset == "code" else "-")[2] or None
    if diff:
        head[diff] = HEAD["paper" if preset == "code" else "code"][diff]
    rsum = _rsum(run, seed)
    recalls = {f"{d}_r{k}": rsum / 6 for d in ("i2t", "t2i") for k in (1, 5, 10)}
    return {
        "schema": SCHEMA,
        "matrix": "both-ways",
        "profile": "standard",
        "run_id": run,
        "preset": preset,
        "difference": diff,
        "seed": seed,
        "key": f"{run}-k",
        "status": "done",
        "head_config": head,
        "train_config": {
            "dataset": "synthetic",
            "dense_source": "candidate",
            "seed": seed,
            "pretrain": "uni",
            "pretrain_builds": 3,
        },
        "metrics": {**recalls, "rsum": rsum},
        "dense_source": "candidate",
        "started": 1.0,
        "environment": {"cpu": {"model": cpu}},
        "code_version": "v",
    }


RUNS = ["code", "code+hrpa", "code+aggregation", "paper", "paper-hrpa", "paper-aggregation"]


def _write(results: Path, run: str, seed: int, cpu: str = "Test CPU") -> None:
    name = run.replace("+", "-plus-")
    path = results / "both-ways" / f"{name}-{'0' * 16}-s{seed}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_record(run, seed, cpu)))


@pytest.fixture()
def store(tmp_path: Path) -> dict[str, Path]:
    root = make_ablation_root(tmp_path / "ablations", {"both-ways": MATRIX})
    (root / "claims.yaml").write_text(yaml.safe_dump(CLAIMS))
    (root / "sequential.yaml").write_text(yaml.safe_dump(DESIGN))
    results = tmp_path / "results"
    for run in RUNS:
        for seed in range(3):
            _write(results, run, seed)
    return {"root": root, "results": results}


def _design(store):
    return load_designs(store["root"])["both"]


def test_each_testable_row_of_a_claim_joins_its_family_at_the_first_look(store):
    a = analyse(_design(store), store["results"], store["root"])
    assert {k: [r.key for r in v] for k, v in a.families.items()} == {
        "hrpa": ["both-ways: code+hrpa vs code", "both-ways: paper vs paper-hrpa"],
        "aggregation": [
            "both-ways: code+aggregation vs code",
            "both-ways: paper vs paper-aggregation",
        ],
    }
    assert all(r.looks_taken == 1 and r.decision == "open" for r in a.rows())


def test_next_stage_asks_for_the_next_looks_seeds_of_the_open_rows_runs(store):
    a = analyse(_design(store), store["results"], store["root"])
    stage = next_stage(a, "both-ways")
    assert stage is not None and stage.look == 1
    assert stage.seeds == tuple(range(6))
    assert set(stage.runs) == set(RUNS)
    assert next_stage(a, "both-ways", max_seeds=5) is None


def _fill(store, seeds, runs=RUNS):
    for run in runs:
        for seed in seeds:
            _write(store["results"], run, seed)


def test_a_planted_effect_is_detected_and_its_row_stops_there(store):
    _fill(store, range(3, 12))
    a = analyse(_design(store), store["results"], store["root"])
    rows = {r.key: r for r in a.rows()}
    hrpa = rows["both-ways: code+hrpa vs code"]
    assert hrpa.decision == "detected"
    assert hrpa.final().mean > 20
    stopped_at = hrpa.looks_taken
    assert stopped_at < 4  # decided before the cap: no later look was read
    assert all(r.decision != "detected" for k, r in rows.items() if "hrpa" not in k)


def test_the_runs_a_decided_row_alone_needed_get_no_more_seeds(store):
    _fill(store, range(3, 6))
    a = analyse(_design(store), store["results"], store["root"])
    hrpa = next(r for r in a.rows() if r.variant == "code+hrpa")
    if hrpa.decision != "detected":
        pytest.skip("the planted effect was not decided at look 2 with these draws")
    stage = next_stage(a, "both-ways")
    assert stage is None or "code+hrpa" not in stage.runs


def test_a_row_that_no_longer_moves_is_bounded_within_its_margin(store):
    _fill(store, range(3, 12))
    a = analyse(_design(store), store["results"], store["root"])
    agg = next(r for r in a.rows() if r.variant == "code+aggregation")
    assert agg.decision == "bounded"
    lo, hi = agg.interval()
    assert -agg.margin < lo < hi < agg.margin
    assert agg.margin == pytest.approx(0.05 * agg.reference_rsum)


def test_a_paired_seed_from_two_cpu_types_is_refused_naming_the_seed(store):
    _write(store["results"], "code+hrpa", 1, cpu="Other CPU")
    with pytest.raises(ValueError, match=r"seed 1: .*different CPU types"):
        analyse(_design(store), store["results"], store["root"])


def test_seeds_on_another_cpu_type_form_blocks_of_their_own(store):
    for run in RUNS:
        for seed in range(3, 6):
            _write(store["results"], run, seed, cpu="Other CPU")
    a = analyse(_design(store), store["results"], store["root"])
    row = a.rows()[0]
    assert len(row.blocked) == 2
    assert row.blocked[1].df == 6 - 6  # 3 builds x 2 CPU types, one seed each
    assert math.isnan(row.blocked[1].p)


def test_until_decided_adds_seeds_look_by_look_to_the_open_rows_only(store):
    calls = []

    def run_seeds(seeds, only):
        calls.append((tuple(seeds), only))
        for seed in seeds:
            for run in only.split(","):
                _write(store["results"], run, seed)

    root = store["root"]
    status = run_until_decided(
        load_matrix("both-ways", root),
        load_profile("standard", None),
        store["results"],
        root=root,
        run_seeds=run_seeds,
        here_cpu="Test CPU",
        say=lambda _: None,
    )
    assert status == 0
    assert [c[0] for c in calls[:3]] == [(0,), (1,), (2,)]  # look 2: seeds 0-5, one at a time
    later = [set(only.split(",")) for seeds, only in calls if seeds[0] >= 6]
    assert later and all("code+hrpa" not in runs for runs in later)
    log = json.loads(log_path(store["results"], "both").read_text())
    assert log["counts"]["open"] == 0
    assert {r["decision"] for r in log["rows"]} <= {"detected", "bounded", "open at the cap"}


def test_until_decided_leaves_a_seed_begun_on_another_cpu_type_to_it(store):
    _write(store["results"], "code", 4, cpu="Other CPU")
    said, calls = [], []

    def run_seeds(seeds, only):
        calls.append(tuple(seeds))

    status = run_until_decided(
        load_matrix("both-ways", store["root"]),
        load_profile("standard", None),
        store["results"],
        root=store["root"],
        run_seeds=run_seeds,
        here_cpu="Test CPU",
        say=said.append,
    )
    assert (4,) not in calls
    assert any("seed 4 has records made on Other CPU" in s for s in said)
    assert status == 1  # the look cannot complete here: it stops, saying so


def test_the_sequential_command_writes_the_analysis_and_check_replays_it(store):
    cmd = [sys.executable, "-m", "seps", "sequential", "--results", str(store["results"])]
    cmd += ["--ablations", str(store["root"])]
    first = subprocess.run(cmd, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    assert "decided 0 of 4" in first.stdout
    check = subprocess.run([*cmd, "--check"], capture_output=True, text=True)
    assert check.returncode == 0 and "same decisions" in check.stdout
    path = log_path(store["results"], "both")
    log = json.loads(path.read_text())
    log["rows"][0]["decision"] = "detected"
    path.write_text(json.dumps(log))
    tampered = subprocess.run([*cmd, "--check"], capture_output=True, text=True)
    assert tampered.returncode == 1 and "differs in decision" in tampered.stdout


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"looks": [5, 3]}, "looks"),
        ({"spending": "linear"}, "spending"),
        ({"alpha": 2}, "alpha"),
        ({"reference": {"flip": "code"}}, "reference"),
        ({"blocks": ["gpu"]}, "blocks"),
        ({"colour": 1}, "unknown field"),
    ],
)
def test_a_malformed_design_is_one_error_naming_the_field(store, change, field):
    doc = json.loads(json.dumps(DESIGN))
    doc["designs"]["both"].update(change)
    (store["root"] / "sequential.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(DesignError, match=f"design 'both': .*{field}"):
        load_designs(store["root"])


def test_the_scorecard_words_a_designs_rows_with_its_decisions(store):
    from seps.report.scorecard import write_scorecard

    _fill(store, range(3, 12))
    out = write_scorecard(store["results"], store["results"].parent / "sc.md", store["root"])
    text = out.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| **hrpa**: `code+hrpa`"))
    assert "| supported" in row and "repeated interval" in row
    agg = next(line for line in text.splitlines() if "**aggregation**: `code+aggregation`" in line)
    assert "| bounded ±" in agg


def test_two_worlds_designs_decide_their_own_rows_and_the_scorecard_sets_them_side_by_side(
    store,
):
    from seps.report.scorecard import write_scorecard

    doc = yaml.safe_load((store["root"] / "sequential.yaml").read_text())
    doc["designs"]["noisy"] = {**doc["designs"]["both"], "profile": "standard-noisy"}
    (store["root"] / "sequential.yaml").write_text(yaml.safe_dump(doc))
    _fill(store, range(3, 12))
    # the second world: the same runs, code+hrpa's effect reversed
    for run in RUNS:
        for seed in range(12):
            rec = _record(run, seed)
            rec["profile"] = "standard-noisy"
            if run == "code+hrpa":
                rec["metrics"]["rsum"] -= 2 * EFFECT["code+hrpa"]
            name = run.replace("+", "-plus-")
            path = store["results"] / "both-ways" / f"{name}-{'1' * 16}-s{seed}.json"
            path.write_text(json.dumps(rec))
    designs = load_designs(store["root"])
    first, second = (analyse(designs[d], store["results"], store["root"]) for d in designs)
    hrpa = {a.design.profile: a.families["hrpa"][0].final().mean for a in (first, second)}
    assert hrpa["standard"] > 20 and hrpa["standard-noisy"] < -20
    out = write_scorecard(store["results"], store["results"].parent / "sc.md", store["root"])
    text = out.read_text()
    side = text.split("## Worlds side by side", 1)[1]
    row = next(line for line in side.splitlines() if "`code+hrpa` vs `code`" in line)
    assert "supported (+" in row and "contradicted (-" in row and "**differ: sign**" in row


def test_a_design_reading_some_of_a_claims_matrices_replays_without_the_others(tmp_path):
    # dense-world reads dense_fusion's rows in seven-differences only; the claim also has
    # rows in seven-differences-query, which the replay must walk past, not look up
    design = load_designs()["dense-world"]
    assert "seven-differences-query" not in design.matrices
    analysis = analyse(design, tmp_path / "empty-store")
    assert analysis.rows() == []


def test_pages_hold_back_the_seeds_a_design_has_not_read_until_their_look(store):
    from seps.report.looks import hold_to_looks
    from seps.report.records import load_results

    _fill(store, range(3, 5))  # look 1 is at 3 seeds; seeds 3-4 wait for look 2 (6)
    records = load_results(store["results"], "both-ways")
    kept, lines = hold_to_looks(records, "both-ways", store["results"], store["root"])
    assert sorted(set(kept["seed"])) == [0, 1, 2]
    assert "12 records of seeds 3, 4" in lines[0] and "the next at 6 seeds" in lines[0]
    other = records.assign(profile="another-world")  # a profile no design reads
    kept, lines = hold_to_looks(other, "both-ways", store["results"], store["root"])
    assert len(kept) == len(other) and lines == []


def test_pages_hold_back_a_world_whose_design_has_not_taken_its_first_look(store):
    # a new world with 2 seeds where its design's first look needs 3: a table over them
    # would be an unplanned look too, so the page shows none of them and says so
    from seps.report.looks import hold_to_looks
    from seps.report.records import load_results

    doc = yaml.safe_load((store["root"] / "sequential.yaml").read_text())
    doc["designs"]["noisy"] = {**doc["designs"]["both"], "profile": "standard-noisy"}
    (store["root"] / "sequential.yaml").write_text(yaml.safe_dump(doc))
    for run in RUNS:
        for seed in range(2):
            rec = _record(run, seed)
            rec["profile"] = "standard-noisy"
            name = run.replace("+", "-plus-")
            path = store["results"] / "both-ways" / f"{name}-{'1' * 16}-s{seed}.json"
            path.write_text(json.dumps(rec))
    records = load_results(store["results"], "both-ways")
    kept, lines = hold_to_looks(records, "both-ways", store["results"], store["root"])
    assert set(kept["profile"]) == {"standard"} and sorted(set(kept["seed"])) == [0, 1, 2]
    text = " ".join(lines)
    assert "12 records of seeds 0, 1 (profile `standard-noisy`)" in text
    assert "has read 0 seeds" in text and "the next at 3 seeds" in text
    assert "show none of them" in text
