"""The scorecard's first section, "Controls: can this instrument see?" (seps/report/controls.py).

No test trains: a minimal copy of the `controls` matrix (baseline `laps`) in a temporary
ablation root, the repository's own controls (`group: controls` in claims.yaml) as its
claims file, and hand-made records whose rSum per run and seed is chosen so that each
control holds or fails for a known reason.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from ablation_roots import make_ablation_root

from seps.io.store import SCHEMA
from seps.report.claims import load_claim_file
from seps.report.controls import controls_of, state_text
from seps.report.headline import BEGIN, END, write_headline
from seps.report.render import write_report
from seps.report.scorecard import judged_controls, scorecard_inputs, write_scorecard

REPO = Path(__file__).resolve().parents[1]
RECALLS = ["i2t_r1", "i2t_r5", "i2t_r10", "t2i_r1", "t2i_r5", "t2i_r10"]
SEEDS = range(5)
UNTRAINED = {"epochs": 1, "max_steps_per_epoch": 1, "lr": 1.0e-9}
QUERY = {"dense_source": "query"}
#: The controls matrix as the brief defines it (its run ids), with only settings this
#: checkout knows: the records below carry the switches that distinguish the runs.
MATRIX = {
    "name": "controls",
    "baseline": "laps",
    "runs": [
        {"id": "laps", "preset": "laps"},
        {"id": "laps/untrained", "preset": "laps", "train": UNTRAINED},
        {"id": "code", "preset": "code"},
        {"id": "code/untrained", "preset": "code", "train": UNTRAINED},
        {"id": "paper", "preset": "paper"},
        {"id": "paper/untrained", "preset": "paper", "train": UNTRAINED},
        {"id": "laps/selection=random", "preset": "laps"},
        {"id": "laps/selection=oracle", "preset": "laps"},
        {"id": "paper/selection=random", "preset": "paper"},
        {"id": "paper/dense_noise=0", "preset": "paper", "train": {"dense_noise": 0.0}},
        {
            "id": "paper/dense_source=shuffled",
            "preset": "paper",
            "train": {"dense_source": "shuffled"},
        },
        {"id": "code/dense_source=query", "preset": "code", "train": QUERY},
        {
            "id": "code/dense_source=query/dense_noise=0",
            "preset": "code",
            "train": {**QUERY, "dense_noise": 0.0},
        },
        {
            "id": "code/dense_source=query/eval_dense_source=shuffled",
            "preset": "code",
            "train": {**QUERY, "eval_dense_source": "shuffled"},
        },
        {"id": "laps/planted-noise", "preset": "laps"},
        {"id": "laps/negative-control", "preset": "laps"},
    ],
}
#: Mean rSum per run where every control holds: each untrained run at 20% of its trained
#: run, the oracle selection 60 above random (the learned ones 20 and 30 above it),
#: clean > as generated > shuffled dense captions (code under query for the control,
#: paper under candidate for the claim), the planted damage 30 below laps; the negative
#: control is laps itself, bit for bit.
RSUM = {
    "laps": 300.0,
    "laps/untrained": 60.0,
    "code": 320.0,
    "code/untrained": 64.0,
    "paper": 330.0,
    "paper/untrained": 66.0,
    "laps/selection=random": 280.0,
    "laps/selection=oracle": 340.0,
    "paper/selection=random": 300.0,
    "paper/dense_noise=0": 345.0,
    "paper/dense_source=shuffled": 310.0,
    "code/dense_source=query": 400.0,
    "code/dense_source=query/dense_noise=0": 450.0,
    "code/dense_source=query/eval_dense_source=shuffled": 60.0,
    "laps/planted-noise": 270.0,
    "laps/negative-control": 300.0,
}
#: What distinguishes each run in its record (head or train setting).
HEAD = {
    "laps/selection=random": {"selection": "random"},
    "laps/selection=oracle": {"selection": "oracle"},
    "paper/selection=random": {"selection": "random"},
}
TRAIN: dict[str, dict[str, Any]] = {
    **{f"{p}/untrained": UNTRAINED for p in ("laps", "code", "paper")},
    "paper/dense_noise=0": {"dense_noise": 0.0},
    "paper/dense_source=shuffled": {"dense_source": "shuffled"},
    "code/dense_source=query": QUERY,
    "code/dense_source=query/dense_noise=0": {**QUERY, "dense_noise": 0.0},
    "code/dense_source=query/eval_dense_source=shuffled": {
        **QUERY,
        "eval_dense_source": "shuffled",
    },
    "laps/planted-noise": {"eval_sim_noise": 0.5},
    "laps/negative-control": {"eval_permute": True},
}
#: Per-seed offset shared by every run (the seed's difficulty), and a small per-run one.
SEED_K = [0.0, 6.0, -6.0, 3.0, -3.0]
JITTER = [0.0, 0.6, -0.6, 0.3, -0.3]


def _record(run: str, seed: int, rsum: float) -> dict[str, Any]:
    # The negative control presents the data in another order: same metrics, bit for bit.
    own = 0.0 if run in ("laps", "laps/negative-control") else JITTER[(seed + len(run)) % 5]
    each = (rsum + SEED_K[seed] + own) / 6.0
    recalls = dict.fromkeys(RECALLS, each)
    preset = run.split("/")[0]
    return {
        "schema": SCHEMA,
        "matrix": "controls",
        "profile": "standard",
        "run_id": run,
        "seed": seed,
        "key": f"k-{run.replace('/', '_')}",
        "status": "done",
        "started": 1000.0,
        "preset": preset,
        "head_config": {"embed_size": 64, "preset": preset, **HEAD.get(run, {})},
        "train_config": {
            "dataset": "synthetic",
            "synth_images": 1000,
            "dense_source": "candidate",
            "seed": seed,
            **TRAIN.get(run, {}),
        },
        "metrics": {**recalls, "rsum": sum(recalls.values())},
        "dense_source": "candidate",
        "eval_images": 200,
        "code_version": "v1",
        "history": [],
    }


def _write_records(results: Path, rsum: dict[str, float]) -> None:
    folder = results / "controls"
    folder.mkdir(parents=True, exist_ok=True)
    for run, value in rsum.items():
        for s in SEEDS:
            name = f"{run.replace('/', '_')}-s{s}.json"
            (folder / name).write_text(json.dumps(_record(run, s, value), sort_keys=True))


def _repository_controls() -> list[dict[str, Any]]:
    doc = yaml.safe_load((REPO / "ablations" / "claims.yaml").read_text())
    return [c for c in doc["claims"] if c.get("group") == "controls"]


@pytest.fixture()
def env(tmp_path: Path) -> dict[str, Path]:
    root = make_ablation_root(tmp_path / "ablations", {"controls": MATRIX})
    (root / "claims.yaml").write_text(
        yaml.safe_dump({"claims": _repository_controls()}, sort_keys=False)
    )
    return {"root": root, "results": tmp_path / "results", "out": tmp_path / "README.md"}


def _section(env: dict[str, Path], rsum: dict[str, float] | None = None) -> str:
    if rsum is not None:
        _write_records(env["results"], rsum)
    write_scorecard(env["results"], env["out"], env["root"])
    text = env["out"].read_text()
    return text.split("## Controls: can this instrument see?\n")[1].split("\n## Claims\n")[0]


def _row(section: str, control: str) -> list[str]:
    """Cells of the first table row of ``control``."""
    line = next(x for x in section.splitlines() if x.startswith(f"| **{control}**"))
    return [c.strip() for c in line.strip("|").split(" | ")]


def test_the_repository_defines_five_controls_on_the_controls_matrix_run_ids(tmp_path):
    controls = _repository_controls()
    assert [c["id"] for c in controls] == [
        "learns",
        "selection-matters",
        "dense-matters",
        "planted-effect",
        "negative-control",
    ]
    ids = {r["id"] for r in MATRIX["runs"]}
    root = make_ablation_root(tmp_path / "ablations", {"controls": MATRIX})
    (root / "claims.yaml").write_text(yaml.safe_dump({"claims": controls}, sort_keys=False))
    claims, _ = load_claim_file(None, root)
    assert all(c.runs() <= ids and not c.undefined for c in claims)
    assert next(c for c in claims if c.id == "negative-control").direction == "0"


def test_all_five_controls_holding_says_5_of_5_controls_hold(env):
    section = _section(env, RSUM)
    assert "**5 of 5 controls hold.**" in section
    assert "read in that light" not in section
    learns = _row(section, "learns")
    # untrained and trained rSum, their ratio, the paired gain with its interval: detected
    assert "`laps/untrained` 60.0, `laps` 300.0 (ratio 20%)" in learns[2]
    assert "Δ +240.0 [" in learns[2] and ": detected" in learns[2]
    assert learns[3] == "yes"
    selection = _row(section, "selection-matters")
    # the known answer is judged (oracle above random); the learned selections are shown
    assert "`laps/selection=random` 280.0, `laps/selection=oracle` 340.0; Δ +60.0" in selection[2]
    assert "`paper/selection=random` 300.0 ± 6.0 (shown, no verdict)" in selection[2]
    assert selection[3] == "yes"
    dense = _row(section, "dense-matters")
    assert "means `code/dense_source=query/dense_noise=0` 450.0 ± " in dense[2]
    assert " ≥ `code/dense_source=query` 400." in dense[2]
    assert dense[3] == "yes"
    assert _row(section, "planted-effect")[3] == "yes"
    # The section comes first: before the claims table.
    text = env["out"].read_text()
    assert text.index("## Controls: can this instrument see?") < text.index("## Claims")


def test_learned_selection_below_random_is_a_finding_and_does_not_fail_the_control(env):
    # On the synthetic scenes SPEC's image score ranks the backdrop first and random
    # patches beat the learned ones (docs/regime.md): that is the claim
    # `learned-selection`'s verdict, while the control asks only that the instrument
    # sees the oracle's patches.
    below = {"laps": 250.0, "laps/negative-control": 250.0, "laps/planted-noise": 220.0}
    section = _section(env, {**RSUM, **below})
    assert "**5 of 5 controls hold.**" in section
    selection = _row(section, "selection-matters")
    assert selection[3] == "yes"
    assert "`laps` 250.0 ± " in selection[2] and "(shown, no verdict)" in selection[2]


@pytest.mark.parametrize("oracle", [280.0, 260.0], ids=["equal-to-random", "below-random"])
def test_an_oracle_no_better_than_random_fails_the_selection_control(env, oracle):
    section = _section(env, {**RSUM, "laps/selection=oracle": oracle})
    assert _row(section, "selection-matters")[3].startswith("no")
    assert "Failing: `selection-matters`." in section


def test_an_untrained_run_at_40_percent_of_the_trained_fails_learns(env):
    section = _section(env, {**RSUM, "code/untrained": 0.4 * RSUM["code"]})
    assert "**4 of 5 controls hold.** Failing: `learns`." in section
    assert "Every verdict below is to be read in that light" in section
    code_row = next(x for x in section.splitlines() if "`code` vs `code/untrained`" in x)
    assert "(ratio 40%)" in code_row
    assert "no: `code/untrained` at 40% of `code` (more than 25%)" in code_row
    assert _row(section, "learns")[3] == "yes"  # laps itself learns


def test_a_negative_control_with_identical_metrics_is_identical_bits_and_holds(env):
    section = _section(env, RSUM)
    negative = _row(section, "negative-control")
    assert "identical bits on 5 seeds" in negative[2]
    assert negative[3] == "yes"


def test_a_negative_control_that_moves_detectably_fails(env):
    section = _section(env, {**RSUM, "laps/negative-control": 290.0})
    negative = _row(section, "negative-control")
    assert negative[3] == "no: detected: not null"
    assert "**4 of 5 controls hold.** Failing: `negative-control`." in section


def test_dense_captions_out_of_order_fail_their_control(env):
    section = _section(env, {**RSUM, "code/dense_source=query": 460.0})
    dense = _row(section, "dense-matters")
    order = "out of order (`code/dense_source=query/dense_noise=0` < `code/dense_source=query`)"
    assert order in dense[3]


def test_the_papers_dense_guided_selection_below_shuffled_does_not_fail_the_control(env):
    # Under `candidate` the paper's dense caption acts only through its selections
    # (SPEC.md row 2); noise-free below shuffled there (the pilots, docs/regime.md) is
    # the claim `dense-guided-selection`'s verdict, not the instrument's failure.
    reversed_paper = {"paper/dense_noise=0": 290.0, "paper": 300.0}
    section = _section(env, {**RSUM, **reversed_paper})
    assert "**5 of 5 controls hold.**" in section
    assert _row(section, "dense-matters")[3] == "yes"


@pytest.mark.parametrize("shuffled", [450.0, 470.0], ids=["equal", "above"])
def test_shuffled_dense_captions_as_good_as_clean_ones_fail_the_dense_control(env, shuffled):
    key = "code/dense_source=query/eval_dense_source=shuffled"
    section = _section(env, {**RSUM, key: shuffled})
    assert _row(section, "dense-matters")[3].startswith("no")
    assert "Failing: `dense-matters`." in section


def test_without_controls_records_the_section_is_one_line(env):
    section = _section(env)
    lines = [x for x in section.splitlines() if x.strip()]
    assert lines == [
        "No records of the `controls` matrix yet: no control is judged, so nothing below "
        "has been checked against them."
    ]


def test_an_incomplete_controls_matrix_judges_what_it_can(env):
    section = _section(env, {k: v for k, v in RSUM.items() if k != "laps/planted-noise"})
    assert _row(section, "planted-effect")[3] == "not judged: no records yet"
    assert "**4 of 5 controls hold.** Not judged (no records): `planted-effect`." in section


def test_controls_whose_matrix_is_not_defined_say_so_in_one_line(tmp_path):
    root = make_ablation_root(tmp_path / "ablations")
    (root / "claims.yaml").write_text(
        yaml.safe_dump({"claims": _repository_controls()}, sort_keys=False)
    )
    out = tmp_path / "README.md"
    write_scorecard(tmp_path / "results", out, root)
    text = out.read_text()
    assert "The `controls` matrix is not defined in these definitions: no control is judged" in text
    assert "0 claims in 0 rows" in text


def test_the_controls_report_shows_the_scorecards_controls_section(env, tmp_path):
    section = _section(env, RSUM)
    (env["root"] / "matrices" / "controls.yaml").write_text(
        yaml.safe_dump({**MATRIX, "sections": ["controls"]}, sort_keys=False)
    )
    path = write_report("controls", env["results"], tmp_path / "reports", env["root"])
    report = path.read_text()
    assert "## Controls: can this instrument see?\n" + section.rstrip("\n") in report


def test_the_readme_headline_states_each_control_as_the_scorecard_judges_it(tmp_path):
    # The README's generated block names every control's state, from the same judging
    # as the scorecard's section: nothing about the controls is typed by hand.
    fixture = REPO / "tests" / "data" / "fixture_store" / "seven-differences.yaml"
    matrices = {"controls": MATRIX, "seven-differences": yaml.safe_load(fixture.read_text())}
    root = make_ablation_root(tmp_path / "ablations", matrices)
    (root / "claims.yaml").write_text(
        yaml.safe_dump({"claims": _repository_controls()}, sort_keys=False)
    )
    rsum = {k: v for k, v in RSUM.items() if k != "laps/planted-noise"}
    _write_records(tmp_path / "results", {**rsum, "laps/selection=oracle": 260.0})
    readme = tmp_path / "README.md"
    readme.write_text(f"{BEGIN}\n{END}\n")
    write_headline(readme, tmp_path / "results", root)
    line = next(x for x in readme.read_text().splitlines() if x.startswith("**Controls**"))
    assert "(reports/README.md#controls-can-this-instrument-see)" in line
    assert "**3 of 5 hold**: `learns` holds; `selection-matters` fails (" in line
    assert "fails (detected with the wrong sign); `dense-matters` holds; " in line
    assert "`planted-effect` not judged (no records yet); " in line
    assert line.endswith("`negative-control` holds.")
    # The scorecard's own section judges the same way.
    write_scorecard(tmp_path / "results", tmp_path / "scorecard.md", root)
    assert "**3 of 5 controls hold.**" in (tmp_path / "scorecard.md").read_text()


def test_a_control_with_some_tests_still_without_records_is_partly_judged(env):
    # Mid-campaign: `learns` has its laps and paper tests, not yet code's.
    rsum = {k: v for k, v in RSUM.items() if not k.startswith("code/untrained")}
    _write_records(env["results"], rsum)
    rows, _ = scorecard_inputs(env["results"], env["root"])
    judged, family = judged_controls(rows)
    states = {c.claim.id: state_text(c) for c in controls_of(judged, family)}
    assert states["learns"] == "partly judged (2 of 3 tests hold; no records yet)"
    assert states["planted-effect"] == "holds"
