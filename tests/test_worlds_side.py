"""The scorecard's worlds side by side (seps.report.worlds_side)."""

import math

from seps.report.worlds_side import WorldVerdict, disagreement, side_by_side_lines

KEY = ("dense_fusion", "seven-differences", "code", "code+dense_fusion")


def v(profile, verdict, est, key=KEY):
    return WorldVerdict(key, profile, verdict, est)


def test_detected_in_both_worlds_with_opposite_signs_is_flagged_as_sign():
    assert disagreement(v("a", "supported", 12.0), v("b", "contradicted", -9.0)) == "sign"


def test_verdicts_of_different_kinds_are_flagged_as_decision():
    bounded = "bounded: the repeated interval rules out effects beyond ±4.6 rSum"
    assert disagreement(v("a", "supported", 12.0), v("b", bounded, 1.0)) == "decision"


def test_the_same_kind_and_sign_agree():
    assert disagreement(v("a", "supported", 12.0), v("b", "supported; larger", 30.0)) == ""
    assert disagreement(v("a", "open (look 1 of the design)", 3.0), v("b", "open", -2.0)) == ""
    both = [v("a", "supported", 12.0), v("b", "supported; larger", 30.0)]
    assert "| agree " in "\n".join(side_by_side_lines(both, ["a", "b"]))


def test_a_row_undecided_in_a_world_has_not_disagreed_yet():
    # A fixed sample's "no stated size" and a design's "open" are one state, not two answers.
    a, b = v("standard", "not detected (no stated size)", 5.1), v("standard-noisy", "open", 2.0)
    assert disagreement(a, b) == ""
    assert disagreement(v("standard", "supported", 12.0), b) == ""
    text = "\n".join(side_by_side_lines([a, b], ["standard", "standard-noisy"]))
    assert "**0 of 1 differ**, 1 not yet decided in every world" in text
    assert "| undecided in both" in text
    text = "\n".join(
        side_by_side_lines([v("standard", "supported", 9.0), b], ["standard", "standard-noisy"])
    )
    assert "| undecided in `standard-noisy`" in text


def test_rows_in_one_world_only_are_left_out_and_shared_rows_are_counted():
    other = ("scoring", "seven-differences", "paper-scoring", "paper")
    rows = [
        v("standard", "supported", 10.0),
        v("standard-noisy", "contradicted", -5.0),
        v("standard", "supported", 4.0, other),
    ]
    text = "\n".join(side_by_side_lines(rows, ["standard", "standard-noisy"]))
    assert "**1 of 1 differ**" in text
    assert "**differ: sign**" in text
    assert "paper-scoring" not in text
    assert "supported (+10.0)" in text and "contradicted (-5.0)" in text


def test_no_shared_row_says_so_and_one_world_shows_nothing():
    rows = [v("standard", "supported", 10.0)]
    assert side_by_side_lines(rows, ["standard"]) == []
    text = "\n".join(side_by_side_lines(rows, ["standard", "standard-noisy"]))
    assert "No claim row has been judged in more than one world yet" in text


def test_a_verdict_without_a_test_shows_no_estimate():
    rows = [v("a", "not enough seeds", math.nan), v("b", "not enough seeds", math.nan)]
    text = "\n".join(side_by_side_lines(rows, ["a", "b"]))
    assert "| not enough seeds " in text and "| undecided in both" in text
