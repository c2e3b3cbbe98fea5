"""Text-blind runs (seps/report/blind.py): scores that cannot depend on the query text.

A ``dense_only`` head evaluated under ``candidate`` scores every image with its own dense
caption and never reads the text, so its similarity matrix is constant along each row;
the recalls then come from the tie rule (i2t 100%, t2i at chance). These tests pin that
such runs are recognised from their configs, kept out of every test and correction
family, and shown as such in the report and the scorecard.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from report_records import _add_run, _record, _section, _table_after, _write

from seps.core.metrics import recall_at_k
from seps.experiments.definitions import load_matrix
from seps.report import load_results, plot_delta, summarise, write_report
from seps.report.blind import BLIND, text_blind_reason
from seps.report.compare import compare, family_of
from seps.report.verdicts import UNTESTABLE, effect_verdict


def _rec(fusion: str, train: str, evaluation: str | None = None) -> dict:
    rec = {"head_config": {"dense_fusion": fusion}, "train_config": {"dense_source": train}}
    if evaluation is not None:
        rec["eval_dense_source"] = evaluation
    return rec


@pytest.mark.parametrize(
    ("fusion", "train", "evaluation", "blind"),
    [
        ("dense_only", "candidate", None, True),
        ("dense_only", "query", "candidate", True),  # evaluation decides, not training
        ("dense_only", "candidate", "query", False),  # leaky, but text-dependent
        ("dense_only", "candidate", "shuffled", False),
        ("dense_only", "candidate", "none", False),  # the sparse caption stands in
        ("dual_branch", "candidate", None, False),
        ("fused", "candidate", None, False),
        ("none", "candidate", None, False),
    ],
)
def test_blindness_is_read_off_fusion_and_evaluation_protocol(fusion, train, evaluation, blind):
    reason = text_blind_reason(_rec(fusion, train, evaluation))
    assert (reason is not None) == blind
    if blind:
        assert "dense_only" in reason and "candidate" in reason


def test_a_text_independent_matrix_scores_perfect_i2t_under_the_tie_rule():
    # Why the flag exists: a row-constant matrix is all ties, and ties count for the
    # positive, so image-to-text retrieval looks perfect without reading any text.
    rng = np.random.default_rng(0)
    sims = np.repeat(rng.normal(size=(20, 1)), 100, axis=1)
    m = recall_at_k(sims)
    assert m["i2t_r1"] == 100.0
    assert m["t2i_r1"] == pytest.approx(5.0)  # one image of 20 ranks first for every text


def _side(fusion: str, rsums: list[float], tag: str) -> dict[int, dict]:
    return {
        s: {
            **_rec(fusion, "candidate"),
            "file": f"{tag}-{s}.json",
            "rsum": r,
            "metrics": {"rsum": r},
        }
        for s, r in enumerate(rsums)
    }


def test_a_blind_side_makes_the_comparison_no_test():
    base = _side("fused", [180.0, 184.0, 176.0], "base")
    blind = _side("dense_only", [301.6, 301.6, 301.6], "blind")
    other = _side("none", [170.0, 171.0, 175.0], "other")
    c = compare(blind, base)
    assert c.blind is not None and c.blind_side == "variant" and not c.testable
    assert compare(base, blind).blind_side == "reference"
    assert family_of([c, compare(other, base)]).size == 1
    assert effect_verdict("-", c, math.nan) == UNTESTABLE


def test_report_marks_a_blind_variant_and_keeps_it_out_of_the_family(env, tmp_path):
    _add_run(env, {"id": "dense-only", "preset": "code", "set": {"dense_fusion": "dense_only"}})
    for seed in range(3):
        rec = _record("base", seed)
        rec.update(run_id="dense-only", describe="dense_fusion=dense_only")
        rec["head_config"] = {"embed_size": 64, "dense_fusion": "dense_only"}
        rec["train_config"] = {**rec["train_config"], "dense_source": "candidate"}
        rec["metrics"] = {**rec["metrics"], "i2t_r1": 100.0, "rsum": 301.6}
        _write(env["results"] / "mini" / f"dense-only-k0-s{seed}.json", rec)

    s = summarise(load_results(env["results"]), load_matrix("mini", env["root"]))
    row = s.set_index("run_id").loc["dense-only"]
    assert row["delta_mark"] == BLIND and math.isnan(row["delta_p_adj"])
    drawn = plot_delta(s, load_matrix("mini", env["root"]), tmp_path / "d.png")["quick"]
    at = drawn["labels"].index("dense-only")
    assert drawn["delta"][at] == 0.0 and math.isnan(drawn["ci"][at])  # no bar: not measured

    text = write_report("mini", env["results"], env["reports"], root=env["root"]).read_text()
    assert "Holm-corrected across the 2 paired tests of this report" in text
    rows = {r[0]: r for r in _table_after(text, "## Results")[2:]}
    cells = rows[f"dense-only ({BLIND})"]
    assert cells[-4:-1] == [f"n/a ({BLIND})", f"not a test ({BLIND})", "not a test"]
    assert cells[-1].startswith(f"{BLIND}: dense_fusion=dense_only never reads the query text")
    shows = _section(text, "What this run shows")
    assert "- Not measured:" in shows and "`dense-only`" in shows
    assert "`text-blind`:" in text  # the legend explains the mark


def test_report_without_a_blind_run_does_not_mention_the_mark(env):
    text = write_report("mini", env["results"], env["reports"], root=env["root"]).read_text()
    assert BLIND not in text
