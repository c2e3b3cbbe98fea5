"""The claims scorecard (seps/report/scorecard.py, seps/report/claims.py) on hand-made records.

No test trains: records are JSON files with the fields the runner writes, their recalls
chosen so that each variant's paired difference to the baseline has a known sign and
spread (clear rise, noise, clear drop, bit-identical, one seed, none).
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from ablation_roots import make_ablation_root

from seps.cli import main
from seps.experiments.definitions import load_differences, load_matrix
from seps.io.store import SCHEMA
from seps.report.claims import ClaimError, load_claim_file
from seps.report.compare import Comparison, family_of
from seps.report.scorecard import MARKER, write_scorecard
from seps.report.scorecard_sections import OLD_MARKERS
from seps.report.verdicts import (
    IDENTICAL_HOLDS,
    NO_RECORDS,
    Cell,
    effect_verdict,
    holm_interval,
    optimum_verdict,
)

REPO = Path(__file__).resolve().parents[1]
RECALLS = ["i2t_r1", "i2t_r5", "i2t_r10", "t2i_r1", "t2i_r5", "t2i_r10"]
BASE = [50.0, 70.0, 80.0, 40.0, 60.0, 70.0]
SEEDS = range(5)
#: Per-seed offset of every recall of the baseline (rSum = 370 + 6 * offset).
BASE_K = [0.0, 1.0, -1.0, 0.5, -0.5]
#: Per-seed offset of each variant relative to the baseline on the same seed: rSum moves
#: by 6x that. up: a clear rise; noise: both signs; down: a clear drop.
SHIFT = {
    "up": [2.0, 2.2, 1.8, 2.1, 1.9],
    "noise": [0.5, -0.6, 0.2, -0.1, 0.3],
    "down": [-2.0, -2.1, -1.9, -2.2, -1.8],
    "lonely": [1.0] * 5,
}
#: Head switches of each run (``same`` differs only in the ratio loss under hard top-K).
HEAD = {
    "base": {},
    "up": {"hrpa": "mean_topk"},
    "noise": {"similarity_activation": "none"},
    "down": {"aggregation": "dual"},
    "same": {"ratio_loss": "separate"},
    "ghost": {"scoring": "paper"},
    "lonely": {"decision": "gumbel_topk"},
}
MATRIX = {
    "name": "mini",
    "baseline": "base",
    "runs": [
        {
            "id": run,
            "preset": "code",
            "set": head,
            **({"difference": "hrpa"} if run == "up" else {}),
        }
        for run, head in HEAD.items()
    ],
}


def _claim(cid: str, variant: str, direction: str = "+", **extra: Any) -> dict[str, Any]:
    return {
        "id": cid,
        "claim": f"{variant} moves rSum",
        "source": "a test",
        "matrix": "mini",
        "protocol": "candidate",
        "runs": {"baseline": "base", "variants": [variant]},
        "direction": direction,
        "size": None,
        **extra,
    }


CLAIMS = [
    _claim("rises", "up", size=12.0),
    _claim("flat", "noise"),
    _claim("falls", "down"),
    _claim("constant", "same", "0"),
    _claim("unrun", "ghost"),
    _claim("one-seed", "lonely"),
    {
        **_claim("best", "up", "-", kind="optimum"),
        "runs": {"baseline": "up", "variants": ["base", "noise", "down"]},
    },
    _claim("leak", "up", kind="leakage", protocol="query vs candidate"),
    {**_claim("gpu-only", "up"), "testable": False, "why": "needs Flickr30K on a GPU"},
]


def _record(run: str, seed: int, code_version: str = "v1") -> dict[str, Any]:
    k = BASE_K[seed] + (SHIFT[run][seed] if run in SHIFT else 0.0)
    recalls = {m: b + k for m, b in zip(RECALLS, BASE, strict=True)}
    head = {"embed_size": 64, "decision": "topk", "ratio_loss": "unified", **HEAD[run]}
    return {
        "schema": SCHEMA,
        "matrix": "mini",
        "profile": "standard",
        "run_id": run,
        "seed": seed,
        "key": f"k-{run}",
        "status": "done",
        "started": 1000.0,
        "head_config": head,
        "train_config": {
            "dataset": "synthetic",
            "synth_images": 10000,
            "dense_source": "candidate",
            "seed": seed,
        },
        "metrics": {**recalls, "rsum": sum(recalls.values())},
        "dense_source": "candidate",
        "eval_images": 1000,
        "code_version": code_version,
        "history": [],
    }


def _write_records(results: Path, runs: dict[str, range], code_version: str = "v1") -> None:
    folder = results / "mini"
    folder.mkdir(parents=True, exist_ok=True)
    for run, seeds in runs.items():
        for s in seeds:
            rec = _record(run, s, code_version)
            (folder / f"{run}-k-{run}-s{s}.json").write_text(json.dumps(rec, sort_keys=True))


@pytest.fixture()
def env(tmp_path: Path) -> dict[str, Path]:
    root = make_ablation_root(tmp_path / "ablations", {"mini": MATRIX})
    (root / "claims.yaml").write_text(yaml.safe_dump({"claims": CLAIMS}, sort_keys=False))
    results = tmp_path / "results"
    _write_records(
        results,
        {"base": SEEDS, "up": SEEDS, "noise": SEEDS, "down": SEEDS, "same": SEEDS, "lonely": [0]},
    )
    return {"root": root, "results": results, "out": tmp_path / "reports" / "README.md"}


#: Columns of the claims table: claim and test, protocol, measured, scaled claim, MDE,
#: verdict, details.
PROTOCOL, MEASURED, SCALED, MDE, VERDICT, DETAILS = 1, 2, 3, 4, 5, 6


def _notes(text: str) -> dict[str, str]:
    """Note number (as the cells cite it, ``[k]``) -> the note under the claims table."""
    if "\nNotes:\n" not in text:
        return {}
    body = text.split("\nNotes:\n\n", 1)[1].split("\n\n", 1)[0]
    return {f"[{line.split('. ', 1)[0]}]": line.split(". ", 1)[1] for line in body.splitlines()}


def _verdict(cell: str, notes: dict[str, str]) -> str:
    """A verdict cell with its note written out: ``phrase: note``."""
    phrase, _, ref = cell.partition(" [")
    return f"{phrase}: {notes['[' + ref].rstrip('.')}" if ref else phrase


def _verdicts(text: str) -> dict[str, str]:
    """Claim id -> the verdict of its first row in the claims table, note written out."""
    notes = _notes(text)
    return {cid: _verdict(cells[VERDICT], notes) for cid, cells in _rows(text).items()}


def _rows(text: str) -> dict[str, list[str]]:
    """Claim id -> cells of its first row in the claims table."""
    out: dict[str, list[str]] = {}
    for line in text.split("\n## Claims\n")[1].splitlines():
        if line.startswith("| **"):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            out.setdefault(cells[0].split("**")[1], cells)
    return out


# ------------------------------------------------------------------ claims file
def test_every_claim_of_the_repository_names_existing_matrices_and_runs():
    claims, matrices = load_claim_file(REPO / "ablations" / "claims.yaml", REPO / "ablations")
    assert len({c.id for c in claims}) == len(claims)
    for c in claims:
        assert c.matrices, c.id
        # Only a control may name a matrix not written yet (the scorecard says so).
        assert not c.undefined or c.group == "controls", c.id
        for name in (n for n in c.matrices if n not in c.undefined):
            ids = {r.id for r in matrices[name].runs}
            assert c.runs() <= ids, (c.id, name, c.runs() - ids)
        assert c.testable or c.why, c.id


def test_claims_cover_the_headline_modules_differences_optima_losses_and_findings():
    claims, _ = load_claim_file(REPO / "ablations" / "claims.yaml", REPO / "ablations")
    by_matrix: dict[str, set[str]] = {}
    for c in claims:
        for m in c.matrices:
            by_matrix.setdefault(m, set()).update(c.runs())
    headline = next(c for c in claims if c.id == "headline")
    assert headline.pairs[0].baseline == "laps" and headline.protocols == ("candidate", "query")
    for d in load_differences(REPO / "ablations"):
        if d.kind == "difference":
            assert {f"code+{d.id}", f"paper-{d.id}"} <= by_matrix["seven-differences"], d.id
    modules = load_matrix("paper-modules", REPO / "ablations")
    assert {r.id for r in modules.runs} <= by_matrix["paper-modules"]
    kinds = {c.matrices[0]: c.kind for c in claims if c.kind == "optimum"}
    assert kinds == {"selection-ratio": "optimum", "coefficients": "optimum"}
    leak = [c for c in claims if c.kind == "leakage"]
    assert [c.protocols for c in leak] == [("query vs candidate",)]
    assert {"ratio-mse-over-ce", "triplet-over-infonce", "detached-patch-path"} <= {
        c.id for c in claims
    }
    assert any(not c.testable for c in claims if "findings" in c.matrices)


def test_headline_size_is_the_paper_table_difference():
    figures = yaml.safe_load((REPO / "ablations" / "paper_figures.yaml").read_text())
    rows = {
        r["method"]: r["rsum"]
        for r in figures["table1"]["rows"]
        if r["backbone"] == "ViT-Base-224" and r["dataset"] == "Flickr30K 1K"
    }
    claims, _ = load_claim_file(REPO / "ablations" / "claims.yaml", REPO / "ablations")
    headline = next(c for c in claims if c.id == "headline")
    assert headline.size == pytest.approx(rows["SEPS"] - rows["LAPS"])


def test_claim_naming_a_missing_run_or_matrix_is_refused(env):
    bad = env["root"] / "bad.yaml"
    bad.write_text(yaml.safe_dump({"claims": [_claim("typo", "upp")]}))
    with pytest.raises(
        ClaimError, match=r"claim 'typo': field 'runs': 'upp' not a run of matrix 'mini'"
    ):
        load_claim_file(bad, env["root"])
    bad.write_text(yaml.safe_dump({"claims": [{**_claim("nomatrix", "up"), "matrix": "nope"}]}))
    with pytest.raises(ClaimError, match=r"claim 'nomatrix': field 'matrix': .*nope.yaml"):
        load_claim_file(bad, env["root"])
    # The scorecard refuses too, before writing anything.
    with pytest.raises(ClaimError, match="nope"):
        write_scorecard(env["results"], env["out"], env["root"], claims_path=bad)
    assert not env["out"].exists()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"direction": "up"}, "field 'direction': invalid value 'up'"),
        ({"protocol": "leaky"}, "field 'protocol': invalid value 'leaky'"),
        ({"testable": False}, "field 'testable': expected true, or false with a 'why'"),
        ({"colour": "red"}, r"unknown field\(s\) \['colour'\]"),
        ({"kind": "optimum"}, "an optimum claim needs"),
    ],
)
def test_malformed_claim_names_the_field(env, change, message):
    bad = env["root"] / "bad.yaml"
    bad.write_text(yaml.safe_dump({"claims": [{**_claim("c", "up"), **change}]}))
    with pytest.raises(ClaimError, match=message):
        load_claim_file(bad, env["root"])


# ---------------------------------------------------------------------- verdicts
def test_verdicts_on_hand_made_records(env):
    text = write_scorecard(env["results"], env["out"], env["root"]).read_text()
    rows, notes = _rows(text), _notes(text)
    verdict = {cid: _verdict(cells[VERDICT], notes) for cid, cells in rows.items()}
    assert verdict == {
        "rises": "supported",
        "flat": "not detected: no stated size, so its power cannot be judged",
        "falls": "contradicted",
        # A claim of no effect seen exactly: supported, with the reason.
        "constant": f"{IDENTICAL_HOLDS}: the ratio loss is a constant under decision=topk",
        "unrun": "no records yet",
        "one-seed": "not enough seeds: n=1",
        "best": "supported",
        "leak": "supported",
        "gpu-only": "not testable here: needs Flickr30K on a GPU",
    }
    # A verdict cell is a short phrase; its reason is a numbered note under the table.
    assert all(len(cells[VERDICT]) <= 40 for cells in rows.values())
    # rises: Δ rSum per seed 12, 13.2, 10.8, 12.6, 11.4 -> mean +12.0, shown with its CI.
    assert rows["rises"][MEASURED].startswith("+12.0 [")
    assert "(claimed: higher, +12.0 rSum on Flickr30K; seed 004: medium (1-3%))" in text
    assert "% of the baseline's rSum" in rows["rises"][MEASURED]
    assert rows["unrun"][MEASURED] == "— (no record of `ghost`)"
    assert rows["constant"][MEASURED] == "0.0 (bit-identical on 5 seeds)"
    # The claimed best `up` is the best cell; every other cell is detectably below it.
    assert rows["best"][MEASURED].startswith("best `up` ")
    assert (
        "; claimed is the best (4 of 4 cells, per-cell 95% CI); `noise` − claimed -11.6 ["
        in rows["best"][MEASURED]
    )
    assert rows["best"][MEASURED].endswith("of 3 cells, 0 detectably above, 3 below")
    # One family per claim: rises, flat, falls and leak hold one test each, the optimum
    # three (base, noise and down against up); identical and one-seed rows are not tests.
    assert "one family per claim id, 5 families with a test (7 paired tests in all, 1 to 3" in text
    summary = (
        "9 claims in 9 rows (7 paired tests): 4 supported, 1 contradicted, "
        "1 not detected (no stated size)"
    )
    assert summary in text
    # The whole-scorecard family holds 5 distinct tests (leak's pair is rises', and the
    # optimum's base − up too) and decides the same here.
    assert "one whole-scorecard Holm family (5 paired tests corrected together" in text
    assert rows["rises"][SCALED] == "+12.0 (stated, source's scale)"
    assert rows["flat"][SCALED] == "no stated size"
    assert rows["rises"][MDE].endswith("(α 0.05, n=5)")
    # The records' protocol is stated when it is not the claimed one.
    assert rows["leak"][PROTOCOL] == "query vs candidate (records: candidate)"
    assert "how much of the reported dense-caption gain the official evaluation's pairing" in text
    assert rows["rises"][DETAILS] == "[mini](mini.md#results)"
    assert text.startswith(MARKER + "\n")
    assert "Profile `standard`: synthetic data, 10,000 images" in text
    assert "seeds 0, 1, 2, 3, 4" in text and "Code version: v1." in text


def test_without_any_record_every_testable_claim_says_no_records_yet(env, tmp_path):
    text = write_scorecard(tmp_path / "empty", env["out"], env["root"]).read_text()
    verdicts = _verdicts(text)
    assert set(verdicts.values()) == {NO_RECORDS, "not testable here: needs Flickr30K on a GPU"}
    assert "No run records yet" in text


def test_effect_verdict_reads_the_sign_and_the_corrected_p():
    def comp(mean: float, p: float, n: int = 5, identical: bool = False) -> Comparison:
        return Comparison(mean, 1.0, p, n, key=(mean, p), identical=identical)

    assert effect_verdict("+", comp(3.0, 0.001), 0.01) == "supported"
    assert effect_verdict("-", comp(3.0, 0.001), 0.01) == "contradicted"
    assert effect_verdict("0", comp(3.0, 0.001), 0.01) == "contradicted"
    assert effect_verdict("+", comp(3.0, 0.001), 0.2) == "not detected"
    assert effect_verdict("+", comp(0.0, 1.0, identical=True), math.nan).startswith("identical")
    assert effect_verdict("+", comp(3.0, math.nan, n=1), math.nan) == "not enough seeds (n=1)"
    assert effect_verdict("+", None, math.nan) == "no records yet"


def test_holm_widened_interval_excludes_zero_exactly_when_the_corrected_p_does():
    comps = [
        Comparison(mean, half, p, 5, key=i)
        for i, (mean, half, p) in enumerate(
            [(5.0, 2.0, 0.002), (3.0, 2.5, 0.03), (1.0, 3.0, 0.4), (-4.0, 3.0, 0.02)]
        )
    ]
    family = family_of(comps)
    for c in comps:
        p = family.p(c)
        lo, hi = holm_interval(c, p)
        assert hi - lo >= 2 * c.half - 1e-12  # never narrower than the raw 95% CI
        assert (lo > 0 or hi < 0) == (p < 0.05), (c, p, lo, hi)


def _cell(run: str, diff: float | None, p: float = 0.5, same: bool = False) -> Cell:
    """A grid cell whose paired difference to the claimed cell has mean ``diff`` and raw
    p-value ``p`` over 5 seeds (``diff`` None: the claimed cell itself)."""
    if diff is None:
        return Cell(run, 100.0, 2.0, 5)
    reason = "the ratio loss is a constant" if same else None
    comp = Comparison(diff, 1.0, math.nan if same else p, 5, key=run, identical=same, reason=reason)
    return Cell(run, 100.0 + diff, 2.0, 5, comp)


def _judge(cells: list[Cell]):
    family = family_of(c.comparison for c in cells if c.comparison is not None)
    return optimum_verdict("a", cells, family)


def test_optimum_is_contradicted_by_a_detectably_higher_cell_not_by_a_higher_mean():
    claimed = _cell("a", None)
    # b is higher by 10 with raw p 0.001 (Holm: 0.002 over 2 tests): detectably above.
    judged = _judge([claimed, _cell("b", 10.0, 0.001), _cell("c", -30.0, 0.2)])
    assert (judged.verdict, judged.shown.run, [c.run for c in judged.above]) == (
        "contradicted",
        "b",
        ["b"],
    )
    # b's mean is higher still, but its paired test does not survive: not a contradiction.
    judged = _judge([claimed, _cell("b", 20.0, 0.04), _cell("c", 1.0, 0.03)])
    assert (judged.verdict, judged.best.run, judged.shown.run) == ("not detected", "b", "b")


def test_optimum_is_supported_when_nothing_is_above_and_something_is_detectably_below():
    claimed = _cell("a", None)
    judged = _judge([claimed, _cell("b", 3.0, 0.3), _cell("c", -30.0, 0.001)])
    assert (judged.verdict, [c.run for c in judged.below]) == ("supported", ["c"])
    # The claimed cell is the best: the runner-up is the cell quoted.
    judged = _judge([claimed, _cell("b", -3.0, 0.3), _cell("c", -30.0, 0.001)])
    assert (judged.verdict, judged.best.run, judged.shown.run) == ("supported", "a", "b")


def test_optimum_without_tests_says_identical_missing_or_too_few_seeds():
    claimed = _cell("a", None)
    same = _judge([claimed, _cell("b", 0.0, same=True)])
    assert same.verdict == "identical (no effect possible)"
    assert _judge([_cell("b", 1.0), _cell("c", 2.0)]).verdict == "no records yet"
    one_seed = Cell("b", 101.0, 0.0, 1, Comparison(1.0, math.nan, math.nan, 1, key="b"))
    assert _judge([claimed, one_seed]).verdict == "not enough seeds (n=1)"


# ------------------------------------------------------------------------ files
def test_rows_name_their_records_cpu_when_the_scorecard_spans_two_cpu_types(env):
    # One CPU model everywhere (or none recorded): the protocol cell does not name it.
    write_scorecard(env["results"], env["out"], env["root"])
    assert "Intel" not in env["out"].read_text()
    # "up" made on another CPU type than the rest: its rows name both models, the others
    # name theirs, since two types' levels differ by the machine too.
    folder = env["results"] / "mini"
    for f in sorted(folder.glob("*.json")):
        rec = json.loads(f.read_text())
        model = "Intel Xeon" if rec["run_id"] == "up" else "AMD EPYC"
        rec["environment"] = {"cpu": {"model": model}}
        f.write_text(json.dumps(rec, sort_keys=True))
    write_scorecard(env["results"], env["out"], env["root"])
    rows = _rows(env["out"].read_text())
    assert rows["rises"][PROTOCOL].endswith("; AMD EPYC + Intel Xeon"), rows["rises"][PROTOCOL]
    assert rows["flat"][PROTOCOL].endswith("; AMD EPYC"), rows["flat"][PROTOCOL]


def test_a_world_that_ran_some_runs_gets_rows_only_for_the_pairs_it_measured(env):
    # A second profile (world) with records of `base` and `up` only: the claims pairing
    # `up` with `base` get a row in it; those pairing `base` with runs it did not make
    # (`noise`, `down`) do not get a row "no record of ..." there.
    folder = env["results"] / "mini"
    for run in ("base", "up"):
        for s in SEEDS:
            rec = {**_record(run, s), "profile": "standard-noisy", "key": f"n-{run}"}
            (folder / f"{run}-n-{run}-s{s}.json").write_text(json.dumps(rec, sort_keys=True))
    text = write_scorecard(env["results"], env["out"], env["root"]).read_text()
    table = text.split("\n## Claims\n")[1]
    noisy = [line for line in table.splitlines() if "profile `standard-noisy`" in line]
    claims = sorted({line.split("**")[1] for line in noisy if line.startswith("| **")})
    assert claims == ["best", "leak", "rises"], claims
    assert not any("no record of" in line for line in noisy)
    # The first profile keeps its row that names what is missing.
    assert _rows(text)["unrun"][MEASURED] == "— (no record of `ghost`)"


def test_scorecard_regenerates_byte_identically(env, tmp_path):
    first = write_scorecard(env["results"], env["out"], env["root"]).read_bytes()
    # Its own file is overwritten; elsewhere, from a copy of the store, the same bytes.
    again = write_scorecard(env["results"], env["out"], env["root"]).read_bytes()
    copy = tmp_path / "copy"
    shutil.copytree(env["results"], copy)
    other = write_scorecard(copy, tmp_path / "other.md", env["root"]).read_bytes()
    assert first == again == other


def test_foreign_readme_is_never_overwritten(env, capsys):
    env["out"].parent.mkdir(parents=True)
    env["out"].write_text("# reports/\n\nMy own notes.\n")
    with pytest.raises(ValueError, match="not written by seps-bench scorecard"):
        write_scorecard(env["results"], env["out"], env["root"])
    args = ["scorecard", "--results", str(env["results"]), "--out", str(env["out"])]
    assert main([*args, "--ablations", str(env["root"])]) == 2
    assert "not overwritten" in capsys.readouterr().err
    assert env["out"].read_text() == "# reports/\n\nMy own notes.\n"
    env["out"].unlink()
    # The records are at code version v1, not this code's: written only when allowed.
    assert main([*args, "--ablations", str(env["root"]), "--allow-mixed-versions"]) == 0
    assert env["out"].read_text().startswith(MARKER)


def test_a_scorecard_written_under_the_old_marker_is_still_ours(env):
    (old,) = OLD_MARKERS
    assert old != MARKER and "seps/definitions/claims.yaml" in old
    env["out"].parent.mkdir(parents=True)
    env["out"].write_text(old + "\n# Scorecard\n")
    write_scorecard(env["results"], env["out"], env["root"], allow_mixed_versions=True)
    assert env["out"].read_text().startswith(MARKER + "\n")


def test_records_of_two_code_versions_are_refused_unless_allowed(env):
    _write_records(env["results"], {"noise": SEEDS}, code_version="v2")
    with pytest.raises(ValueError, match=r"2 code versions: .*--allow-mixed-versions"):
        write_scorecard(env["results"], env["out"], env["root"])
    text = write_scorecard(
        env["results"], env["out"], env["root"], allow_mixed_versions=True
    ).read_text()
    assert "Code versions: v1, v2." in text
