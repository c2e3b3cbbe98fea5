"""Runs at chance level (seps/report/chance.py): rSum no better than random scores."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from report_records import _record, _section, _write

from seps.core.metrics import recall_at_k
from seps.report import write_report
from seps.report.chance import chance_rsum, is_at_chance, threshold
from seps.report.scorecard_rows import _at_chance_text


def test_chance_rsum_has_the_closed_form_of_both_directions():
    # One caption per image: both directions are K / n.
    mean, _ = chance_rsum(50, captions_per_image=1)
    assert mean == pytest.approx(2 * 100 * (1 + 5 + 10) / 50)
    # 1,000 images x 5 captions: i2t R@K = 1 - C(4995, K) / C(5000, K).
    i2t = [1 - math.comb(4995, k) / math.comb(5000, k) for k in (1, 5, 10)]
    mean, sd = chance_rsum(1000)
    assert mean == pytest.approx(100 * (sum(i2t) + 0.016))
    assert 0 < sd < 1


def test_random_similarity_matrices_average_chance_and_stay_under_the_threshold():
    rng = np.random.default_rng(0)
    n = 40
    rsums = [recall_at_k(rng.normal(size=(n, 5 * n)))["rsum"] for _ in range(400)]
    mean, sd = chance_rsum(n)
    assert np.mean(rsums) == pytest.approx(mean, abs=3 * sd / math.sqrt(400))
    assert np.std(rsums) <= sd  # the bound is an upper bound
    assert np.mean(np.array(rsums) <= threshold(n)) > 0.99


def test_report_lists_a_seed_at_chance(env):
    for seed in range(3):
        rec = _record("base", seed)
        rec["eval_images"] = 200
        if seed == 2:
            rec["metrics"] = {**rec["metrics"], "rsum": 12.0}
        if seed == 1:
            rec["metrics"] = {**rec["metrics"], "rsum": 1.0}  # under 15.9 - 3 * 4.53
        _write(env["results"] / "mini" / f"base-k0-s{seed}.json", rec)
    text = write_report("mini", env["results"], env["reports"], root=env["root"]).read_text()
    section = _section(text, "Runs at chance level")
    assert "200 test images: chance 15.9, threshold 29.5" in section
    assert re.search(r"\n2 of the \d+ completed records are at chance level:", section)
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in section.splitlines()]
    assert ["quick", "`base`", "2", "12.0", "15.9 (threshold 29.5, 200 images)"] in rows
    assert [
        "quick",
        "`base`",
        "1",
        "1.0 (below chance)",
        "15.9 (threshold 29.5, 200 images)",
    ] in rows


def test_report_says_when_no_seed_is_at_chance(env):
    text = write_report("mini", env["results"], env["reports"], root=env["root"]).read_text()
    assert "30 test images: chance 102.0, threshold 181.8" in text
    assert re.search(r"None of the \d+ completed records is at chance level\.", text)


def test_is_at_chance_needs_a_split_size_and_reads_the_threshold():
    assert is_at_chance({"eval_images": 1000, "rsum": 5.9})
    assert not is_at_chance({"eval_images": 1000, "rsum": 6.1})
    assert not is_at_chance({"rsum": 0.0})  # no split size: not checked


def test_scorecard_effect_names_the_seeds_at_chance():
    sides = {
        "variant": {0: {"eval_images": 1000, "rsum": 0.5}, 1: {"eval_images": 1000, "rsum": 150.0}},
        "base": {0: {"eval_images": 1000, "rsum": 170.0}},
    }
    assert _at_chance_text(sides) == "seed 0 of `variant` at chance level"
    assert _at_chance_text({"base": sides["base"]}) is None
