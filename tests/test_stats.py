"""The statistics of the reports, against values worked out by hand.

Multiple-comparison corrections of seps.stats.paired. Holm-Bonferroni: sort the m non-NaN
p-values ascending, multiply the i-th smallest (i = 1..m) by m - i + 1, take the running
maximum (monotone), cap at 1, and put each value back in its input position.
Benjamini-Hochberg: SciPy's, checked against SciPy and one hand-worked case.

The report's use of them (seps.report.compare, seps.report.collapse): identical runs and
why, one family per report, collapsed validation curves.
"""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
from scipy.stats import false_discovery_control

from seps.report import collapsed, compare, family_of, identical_reason
from seps.stats.paired import correct, holm, paired_test


def _same(got: list[float], want: list[float]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        if math.isnan(w):
            assert math.isnan(g)
        else:
            assert g == pytest.approx(w, abs=1e-12)


# ---------------------------------------------------------------------- Holm by hand
@pytest.mark.parametrize(
    ("p", "want"),
    [
        # m = 4. Sorted: 0.005 x4 = 0.02; 0.01 x3 = 0.03; 0.03 x2 = 0.06;
        # 0.04 x1 = 0.04 -> running max 0.06. Back in input order:
        ([0.01, 0.04, 0.03, 0.005], [0.03, 0.06, 0.06, 0.02]),
        # Three-way tie, m = 3: 0.02 x3 = 0.06; x2 = 0.04 -> 0.06; x1 = 0.02 -> 0.06.
        # Tied p-values get the same adjusted value whatever order they are taken in.
        ([0.02, 0.02, 0.02], [0.06, 0.06, 0.06]),
        # Tie in the middle, m = 4: 0.01 x4 = 0.04; 0.03 x3 = 0.09; 0.03 x2 = 0.06 -> 0.09;
        # 0.2 x1 = 0.2.
        ([0.03, 0.2, 0.01, 0.03], [0.09, 0.2, 0.04, 0.09]),
        # Cap, m = 3: 0.2 x3 = 0.6; 0.6 x2 = 1.2 -> capped 1; 0.9 x1 = 0.9 -> running
        # max 1.2 -> capped 1.
        ([0.6, 0.2, 0.9], [1.0, 0.6, 1.0]),
        # NaN entries are not tests: m = 2. 0.01 x2 = 0.02; 0.04 x1 = 0.04. NaN stays NaN.
        ([math.nan, 0.01, math.nan, 0.04], [math.nan, 0.02, math.nan, 0.04]),
        # A single test is its own correction; 0 stays 0 (0 x m = 0).
        ([0.03], [0.03]),
        ([0.0, 0.5], [0.0, 0.5]),
        # p = 1 anywhere caps everything after it at 1: 0.5 x2 = 1; 1 x1 = 1.
        ([1.0, 0.5], [1.0, 1.0]),
        # Nothing to correct.
        ([], []),
        ([math.nan, math.nan], [math.nan, math.nan]),
    ],
)
def test_holm_hand_worked(p, want):
    _same(holm(p), want)
    _same(correct(p, "holm"), want)


def test_holm_accepts_none_as_no_test():
    _same(holm([None, 0.01, 0.04]), [math.nan, 0.02, 0.04])


def test_holm_properties_on_random_families():
    rng = random.Random(0)
    for _ in range(200):
        m = rng.randint(1, 12)
        # Round to create ties; now and then a NaN.
        p = [math.nan if rng.random() < 0.1 else round(rng.random() ** 3, 2) for _ in range(m)]
        adj = holm(p)
        idx = [i for i in range(m) if not math.isnan(p[i])]
        k = len(idx)
        for i in range(m):
            if math.isnan(p[i]):
                assert math.isnan(adj[i])
                continue
            # Never below the raw p, never above 1 or the Bonferroni value.
            assert p[i] <= adj[i] <= min(1.0, k * p[i]) + 1e-12
        for i in idx:
            for j in idx:
                if p[i] <= p[j]:
                    assert adj[i] <= adj[j] + 1e-12  # monotone in the raw p
                if p[i] == p[j]:
                    assert adj[i] == adj[j]  # ties equal
        # Permuting the input permutes the output.
        perm = list(range(m))
        rng.shuffle(perm)
        _same(holm([p[i] for i in perm]), [adj[i] for i in perm])


def test_holm_rejects_values_that_are_not_p_values():
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        holm([0.2, 1.5])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        holm([-0.1])


# ---------------------------------------------------------- Benjamini-Hochberg
def test_bh_hand_worked():
    # m = 4. Sorted: 0.005 x4/1 = 0.02; 0.01 x4/2 = 0.02; 0.03 x4/3 = 0.04;
    # 0.04 x4/4 = 0.04. Step-up (minimum from the largest down): 0.04, 0.04, 0.02, 0.02.
    _same(correct([0.01, 0.04, 0.03, 0.005], "bh"), [0.02, 0.04, 0.04, 0.02])


def test_bh_matches_scipy_and_leaves_nan():
    rng = random.Random(1)
    for _ in range(50):
        p = [rng.random() ** 2 for _ in range(rng.randint(1, 15))]
        _same(correct(p, "bh"), [float(v) for v in false_discovery_control(p, method="bh")])
    scipy_two = [float(v) for v in false_discovery_control([0.01, 0.04], method="bh")]
    _same(correct([math.nan, 0.01, 0.04], "bh"), [math.nan, *scipy_two])
    assert correct([], "bh") == []


def test_correct_rejects_unknown_method():
    with pytest.raises(ValueError, match="unknown method 'bonferroni'"):
        correct([0.1], "bonferroni")


def test_paired_test_of_identical_runs_is_p_one():
    """Why reports never show this p: all-zero differences give p = 1 (no variance)."""
    assert paired_test([0.0, 0.0, 0.0]) == (0.0, 0.0, 1.0, 3)


# ------------------------------------------------ identical runs and the family
def _rec(head: dict, train: dict | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "head_config": head,
        "train_config": {"dense_source": "query", "lr": 2e-4, "seed": 0, **(train or {})},
        **extra,
    }


def test_identical_reason_reads_the_config_difference():
    topk = {"decision": "topk", "ratio_loss": "unified", "dense_fusion": "dual_branch"}
    # Nothing differs (a different seed or output folder is not a setting).
    assert identical_reason(_rec(topk), _rec(topk, {"seed": 3, "out_dir": "x"})) == (
        "same configuration as the baseline"
    )
    # Ratio-loss settings under a fixed-count decision: the ratio loss is a constant.
    for decision in ("topk", "gumbel_topk"):
        base = {**topk, "decision": decision}
        var = {**base, "ratio_loss": "separate", "ratio_criterion": "ce", "ratio_weight": 0.5}
        assert identical_reason(_rec(base), _rec(var)) == (
            f"the ratio loss is a constant under decision={decision}"
        )
    # Per-patch decisions vary the keep count: no known reason.
    per_patch = {**topk, "decision": "gumbel_per_patch"}
    assert identical_reason(_rec(per_patch), _rec({**per_patch, "ratio_loss": "eq7"})) is None
    # The decision alone, topk against gumbel_topk: no known reason unless the configs
    # show that the straight-through part reaches nothing.
    assert identical_reason(_rec(topk), _rec({**topk, "decision": "gumbel_topk"})) is None
    cut = "topk and gumbel_topk keep the same patches; the straight-through gradient reaches"
    for fields, why in (
        ({"detach_selection": True}, "and the selection is detached (detach_selection)"),
        ({"ratio_loss": "separate"}, "zero in its separate form at K = rho N"),
        ({"ratio_loss": "off"}, "which is off"),
    ):
        base = {**topk, **fields}
        got = identical_reason(_rec(base), _rec({**base, "decision": "gumbel_topk"}))
        assert got is not None and got.startswith(cut) and why in got, got
    # Per-patch keeps another count: never explained this way.
    detached = {**topk, "detach_selection": True}
    per = {**detached, "decision": "gumbel_per_patch"}
    assert identical_reason(_rec(detached), _rec(per)) is None
    # A ratio setting together with the decision itself: no known reason.
    var = {**topk, "decision": "gumbel_topk", "ratio_loss": "separate"}
    assert identical_reason(_rec(topk), _rec(var)) is None
    # Dense-caption protocol (training, or the evaluation key) with a head that reads none.
    laps = {**topk, "dense_fusion": "none"}
    dense = "the head reads no dense caption (dense_fusion=none)"
    assert identical_reason(_rec(laps), _rec(laps, {"dense_source": "candidate"})) == dense
    assert identical_reason(_rec(laps), _rec(laps, eval_dense_source="shuffled")) == dense
    assert identical_reason(_rec(laps), _rec(laps, {"eval_dense_source": "none"})) == dense
    assert identical_reason(_rec(laps), _rec(laps, {"dense_noise": 0.0})) == dense
    assert identical_reason(_rec(topk), _rec(topk, {"dense_source": "candidate"})) is None
    # eval_checkpoint: identical when both tested the same epoch, unexplained otherwise.
    same = identical_reason(
        _rec(topk, evaluated_epoch=1),
        _rec(topk, {"eval_checkpoint": "best_val"}, evaluated_epoch=1),
    )
    assert same == "both test the same epoch's weights (the best validation epoch is the last)"
    other = _rec(topk, {"eval_checkpoint": "best_val"}, evaluated_epoch=0)
    assert identical_reason(_rec(topk, evaluated_epoch=1), other) is None
    # An evaluation key equal to the training protocol is no difference.
    assert identical_reason(_rec(topk), _rec(topk, eval_dense_source="query")) == (
        "same configuration as the baseline"
    )
    # Both reasons at once.
    both = identical_reason(
        _rec(laps), _rec({**laps, "ratio_loss": "off"}, {"dense_source": "candidate"})
    )
    assert both == f"the ratio loss is a constant under decision=topk; {dense}"
    # A switch that acts only through training, when nothing trains.
    frozen = {"trainable_parameters": 0}
    detach = {**topk, "detach_selection": False}
    assert "nothing trains" in identical_reason(_rec(topk, **frozen), _rec(detach, **frozen))
    assert "nothing trains" in identical_reason(
        _rec(topk, {"lr": 0.0}), _rec({**topk, "align_loss": "infonce"}, {"lr": 0.0})
    )
    assert identical_reason(_rec(topk), _rec(detach)) is None  # it trains: unknown
    # A switch that changes the forward pass is never explained.
    assert identical_reason(_rec(topk, **frozen), _rec({**topk, "hrpa": "mean"}, **frozen)) is None


def _row(seed: int, file: str, rsum: float, **metrics: float) -> dict[str, Any]:
    return {
        "seed": seed,
        "file": file,
        "rsum": rsum,
        "metrics": {"rsum": rsum, **metrics},
        **_rec({"decision": "topk"}),
    }


def test_compare_identical_means_every_metric_on_every_seed():
    base = {s: _row(s, f"b{s}", 100.0 + s, i2t_medr=2.0) for s in range(3)}
    same = {s: _row(s, f"v{s}", 100.0 + s, i2t_medr=2.0) for s in range(3)}
    c = compare(same, base)
    assert c.identical and not c.testable and c.reason == "same configuration as the baseline"
    assert (c.mean, c.half, c.p, c.n) == (0.0, 0.0, 1.0, 3)  # the p a report must not print
    # Same rSum, another metric differs on one seed: a real test (p = 1), not identical.
    other = {**same, 1: _row(1, "v1", 101.0, i2t_medr=3.0)}
    c = compare(other, base)
    assert not c.identical and c.testable and c.p == 1.0
    # A seed the baseline does not have: not identical on every seed.
    extra = {**same, 7: _row(7, "v7", 50.0, i2t_medr=2.0)}
    assert not compare(extra, base).identical
    assert compare(extra, base).n == 3


def test_family_counts_each_pair_of_record_sets_once():
    base = {s: _row(s, f"b{s}", 100.0 + s) for s in range(3)}
    up = {s: _row(s, f"u{s}", 110.0 + 2 * s * s) for s in range(3)}
    down = {s: _row(s, f"d{s}", 90.0 - s * s) for s in range(3)}
    same = {s: _row(s, f"s{s}", 100.0 + s) for s in range(3)}
    lonely = {0: _row(0, "l0", 120.0)}
    a, b = compare(up, base), compare(down, base)
    # The same comparison again, and reversed: the same records, so the same test.
    comps = [a, b, compare(up, base), compare(base, up), compare(same, base), compare(lonely, base)]
    fam = family_of(comps)
    assert fam.size == 2
    lo, hi = sorted([a.p, b.p])
    assert fam.p(a if a.p == lo else b) == pytest.approx(2 * lo)
    assert fam.p(a if a.p == hi else b) == pytest.approx(max(2 * lo, hi))
    assert math.isnan(fam.p(comps[4])) and math.isnan(fam.p(comps[5]))  # not tests
    assert fam.sentence() == "Holm-corrected across the 2 paired tests of this report"
    assert family_of([], "holm").size == 0
    bh = family_of([a, b], "bh")
    assert bh.sentence().startswith("Benjamini-Hochberg-corrected across the 2")


# ------------------------------------------------------------------ collapsed runs
def _hist(*values: float | None) -> list[dict[str, Any]]:
    return [
        {"epoch": e, "loss": 1.0} if v is None else {"epoch": e, "val": {"rsum": v}}
        for e, v in enumerate(values)
    ]


def test_collapsed_by_hand():
    # Best 120 at epoch 1, final 90: (120 - 90) / 120 = 25% lost.
    c = collapsed(_hist(100.0, 120.0, 90.0))
    assert c is not None
    assert (c["best"], c["best_epoch"], c["final"], c["final_epoch"]) == (120.0, 1, 90.0, 2)
    assert c["drop"] == pytest.approx(0.25)
    assert c["epochs"] == [0, 1, 2] and c["values"] == [100.0, 120.0, 90.0]
    # Exactly 10% below the best is not "more than 10%"; just beyond it is.
    assert collapsed(_hist(100.0, 90.0)) is None
    assert collapsed(_hist(100.0, 89.9))["drop"] == pytest.approx(0.101)
    assert collapsed(_hist(100.0, 95.0)) is None  # a 5% dip is noise, not a collapse
    assert collapsed(_hist(50.0, 100.0)) is None  # the final epoch is the best
    # Ties: the first epoch reaching the best.
    assert collapsed(_hist(80.0, 80.0, 10.0))["best_epoch"] == 0
    # Epochs without a (finite) validation rSum are skipped; the final one is the last
    # epoch that has one.
    c = collapsed(_hist(100.0, None, 70.0, None))
    assert c["final_epoch"] == 2 and c["epochs"] == [0, 2]
    nan_last = [*_hist(100.0, 70.0), {"epoch": 2, "val": {"rsum": float("nan")}}]
    assert collapsed(nan_last)["final_epoch"] == 1
    # Nothing to judge.
    assert collapsed(_hist(100.0)) is None
    assert collapsed(_hist(None, None)) is None
    assert collapsed([]) is None and collapsed(None) is None
    assert collapsed(_hist(0.0, 0.0)) is None
