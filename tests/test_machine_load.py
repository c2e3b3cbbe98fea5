"""Every record says how busy the machine was while it was timed, and the report marks
timings taken on a busy machine and leaves copied records out of the matrix's total."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from ablation_roots import make_ablation_root
from report_records import MATRIX_YAML, _store, _table_after
from test_runner import PROFILE, _run
from test_twins import MATRICES

from seps.report import write_report
from seps.runtime.machine_load import BUSY_MARGIN, LOAD_FIELD, LoadWatch, was_busy


def test_a_watch_samples_at_entry_while_the_work_runs_and_at_exit():
    values = iter([1.0, 3.5, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 0.5] + [0.5] * 1000)
    with LoadWatch(every=0.01, read=lambda: next(values)) as watch:
        time.sleep(0.2)
    s = watch.summary()
    assert s["cpus"] == os.cpu_count()
    assert s["samples"] >= 3
    assert s["load_1min_start"] == 1.0 and s["load_1min_max"] == 3.5
    assert s["load_1min_end"] in (0.5, 2.0)


def test_a_platform_without_a_load_average_records_none_and_no_verdict():
    with LoadWatch(every=0.01, read=lambda: None) as watch:
        time.sleep(0.03)
    s = watch.summary()
    assert (s["load_1min_start"], s["load_1min_end"], s["load_1min_max"]) == (None, None, None)
    assert s["samples"] == 0
    assert was_busy({LOAD_FIELD: s}) is None


@pytest.mark.parametrize(
    ("peak", "busy"), [(2.0, False), (2.0 + BUSY_MARGIN, False), (2.0 + BUSY_MARGIN + 0.01, True)]
)
def test_busy_means_the_load_rose_above_the_cpu_count_plus_the_margin(peak, busy):
    assert was_busy({LOAD_FIELD: {"cpus": 2, "load_1min_max": peak}}) is busy


def test_a_record_made_before_the_load_was_sampled_has_no_verdict():
    assert was_busy({}) is None
    assert was_busy({LOAD_FIELD: None}) is None


def test_every_run_record_carries_the_machine_load(tmp_path, synth):
    root = make_ablation_root(tmp_path / "ablations", {"mini": MATRICES["mini"]})
    (root / "profiles.yaml").write_text(PROFILE)
    (rec,) = _run(root, tmp_path / "results", synth)
    load = rec[LOAD_FIELD]
    assert load["cpus"] == os.cpu_count() and load["samples"] >= 2
    assert load["load_1min_max"] >= load["load_1min_start"]
    assert load["covers"] == "training, evaluation"
    # Run again on the finished training: this process only evaluates, and says so (the
    # training's times come from the earlier process, whose load this one did not see).
    next((tmp_path / "results" / "mini").glob("code-*.json")).unlink()
    (again,) = _run(root, tmp_path / "results", synth)
    assert again[LOAD_FIELD]["covers"] == "evaluation"
    assert again["train_seconds"] == rec["train_seconds"]


def _rewrite(path: Path, **fields) -> None:
    rec = json.loads(path.read_text())
    rec.update(fields)
    path.write_text(json.dumps(rec))


def test_the_cost_table_marks_busy_timings_and_the_total_leaves_copies_out(tmp_path):
    root = make_ablation_root(tmp_path / "ablations", {"mini": MATRIX_YAML})
    results, reports = tmp_path / "results", tmp_path / "reports"
    _store(results)
    plain = write_report("mini", results, reports, root=root).read_text()
    assert "†" not in plain and "copied from another matrix" not in plain
    n_done = int(plain.split("Wall time of the ")[1].split(" ")[0])
    # One record timed busy; one copied from another matrix.
    busy = {"cpus": 2, "load_1min_start": 2.1, "load_1min_end": 4.0, "load_1min_max": 4.0}
    _rewrite(results / "mini" / "base-k0-s0.json", **{LOAD_FIELD: busy})
    _rewrite(results / "mini" / "flip-hrpa-k0-s1.json", copied_from="other/x-k0-s1.json")
    text = write_report("mini", results, reports, root=root).read_text()
    cost = {r[1]: r for r in _table_after(text, "## Cost")[2:]}
    assert cost["base (baseline)"][4].endswith("†") and cost["base (baseline)"][5].endswith("†")
    assert not cost["flip-hrpa"][4].endswith("†")
    assert "† includes 1 record timed on a busy machine" in text
    assert f"Wall time of the {n_done - 1} completed records" in text
    assert "1 record copied from another matrix that measured the same run" in text
    # The accuracy part of the report does not change.
    assert text.split("\n## Cost")[0] == plain.split("\n## Cost")[0]
