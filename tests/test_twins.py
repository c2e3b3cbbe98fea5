"""A run another matrix has already measured is copied from its record, not evaluated again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ablation_roots import make_ablation_root
from test_runner import PROFILE, _run

import seps.train
from seps.experiments.definitions import load_matrix, load_profile
from seps.experiments.provenance import bits_key
from seps.io.store import SCHEMA
from seps.runs.run_plan import dry_run_text
from seps.runs.runner import plan, read_record
from seps.runs.twins import COPIED_FROM, LABELS, copy_record, find_twin
from seps.runtime.float_path import FLOAT_PATHS
from seps.versioning.version import VERSION_KEY, code_version

# ``other`` and ``third`` hold the run ``mini`` calls ``code`` under other ids: the same
# configs, so the same key.
MATRICES = {
    name: {
        "name": name,
        "description": "d",
        "baseline": run_id,
        "runs": [{"id": run_id, "preset": "code"}],
    }
    for name, run_id in (("mini", "code"), ("other", "reference"), ("third", "again"))
}


@pytest.fixture()
def root(tmp_path):
    r = make_ablation_root(tmp_path / "ablations", MATRICES)
    (r / "profiles.yaml").write_text(PROFILE)
    return r


@pytest.fixture()
def trainings(monkeypatch):
    """Counts the calls of the trainer (the real one still runs)."""
    calls = []
    real = seps.train.train

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(seps.train, "train", counted)
    return calls


def _measured(rec):
    """What a record says about the run's numbers (everything but its labels)."""
    return {k: v for k, v in rec.items() if k not in (*LABELS, COPIED_FROM)}


def test_a_run_another_matrix_has_measured_is_copied_with_this_matrixs_labels(
    root, synth, tmp_path, trainings
):
    results = tmp_path / "results"
    (source,) = _run(root, results, synth, "mini")
    assert len(trainings) == 1
    said = []
    (copy,) = _run(root, results, synth, "other", say=said.append)
    assert len(trainings) == 1, "the copy must not evaluate again"
    source_file = f"mini/code-{source['key']}-s0.json"
    assert copy[COPIED_FROM] == source_file
    assert (copy["matrix"], copy["run_id"]) == ("other", "reference")
    assert _measured(copy) == _measured(source)
    stored = read_record(results / "other" / f"reference-{source['key']}-s0.json")
    assert stored == copy
    assert any("copied from " + source_file in line for line in said)
    # The source is left as it was.
    assert read_record(results / source_file) == source


def test_evaluating_again_gives_the_numbers_the_copy_would_have(root, synth, tmp_path, trainings):
    results = tmp_path / "results"
    (source,) = _run(root, results, synth, "mini")
    (fresh,) = _run(root, results, synth, "other", reuse=False)
    assert len(trainings) == 2 and COPIED_FROM not in fresh
    assert fresh["metrics"] == source["metrics"]
    assert fresh["history"] == source["history"]


def test_a_copy_of_a_copy_names_the_record_that_was_computed(root, synth, tmp_path):
    results = tmp_path / "results"
    (source,) = _run(root, results, synth, "mini")
    _run(root, results, synth, "other")
    # With the computed record gone, the only twin left is the copy.
    (results / "mini" / f"code-{source['key']}-s0.json").unlink()
    (third,) = _run(root, results, synth, "third")
    assert third[COPIED_FROM] == f"mini/code-{source['key']}-s0.json"
    assert third["run_id"] == "again"


def test_the_dry_run_counts_the_runs_it_would_copy(root, synth, tmp_path):
    results = tmp_path / "results"
    _run(root, results, synth, "mini")
    planned = plan(
        load_matrix("other", root), load_profile("tiny", root), [0], results, data_path=str(synth)
    )
    text = dry_run_text(planned, results, version=code_version())
    assert "to do: 0 of 1 runs" in text and "1 to copy from other matrices' records" in text
    text = dry_run_text(planned, results, version=code_version(), reuse=False)
    assert "to do: 1 of 1 runs" in text and "to copy" not in text


def test_a_record_made_on_another_cpu_model_is_not_copied_but_computed_here(
    root, synth, tmp_path, trainings, float_path
):
    """Pinned Intel and AMD runs differ by seed-sized amounts at `standard`
    (docs/across-machines.md): a twin must come from this machine, pinned or not."""
    float_path("portable")
    results = tmp_path / "results"
    (source,) = _run(root, results, synth, "mini")
    path = results / "mini" / f"code-{source['key']}-s0.json"
    rec = json.loads(path.read_text())
    rec["environment"]["cpu"]["model"] = "Some Other CPU"
    path.write_text(json.dumps(rec))
    (fresh,) = _run(root, results, synth, "other")
    assert len(trainings) == 2 and COPIED_FROM not in fresh


def test_the_dry_run_counts_stored_records_made_on_another_machine(
    root, synth, tmp_path, float_path
):
    float_path("portable")
    results = tmp_path / "results"
    (source,) = _run(root, results, synth, "mini")
    planned = plan(
        load_matrix("mini", root), load_profile("tiny", root), [0], results, data_path=str(synth)
    )
    assert "another CPU type" not in dry_run_text(planned, results, version=code_version())
    path = results / "mini" / f"code-{source['key']}-s0.json"
    rec = json.loads(path.read_text())
    rec["environment"]["cpu"]["model"] = "Some Other CPU"
    path.write_text(json.dumps(rec))
    text = dry_run_text(planned, results, version=code_version())
    assert "to do: 0 of 1 runs" in text
    assert "machine: of the 1 stored and current records, 1 made on another CPU model" in text
    del rec["environment"]["cpu"]  # a record from before the runner stamped the CPU
    path.write_text(json.dumps(rec))
    text = dry_run_text(planned, results, version=code_version())
    assert "records, 1 made before records named their CPU; runs made here" in text


KEY = "0123456789abcdef"
CPU = {"model": "A CPU", "torch_capability": "AVX2", "numpy_dispatch": [],
       "overrides": {"SEPS_FLOAT_PATH": "portable", **FLOAT_PATHS["portable"]}}  # fmt: skip
MACHINE = bits_key(CPU)


def _write(results: Path, matrix: str, name: str, **fields) -> Path:
    rec = {
        "schema": SCHEMA,
        VERSION_KEY: "v1",
        "status": "done",
        "key": KEY,
        "seed": 0,
        **{k: f"{matrix}-{k}" for k in LABELS},
        "metrics": {"rsum": 1.0},
        "environment": {"cpu": CPU},
    }
    rec.update(fields)
    path = results / matrix / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rec))
    return path


@pytest.mark.parametrize(
    "fields",
    [
        {VERSION_KEY: "v0"},
        {"status": "failed"},
        {"status": "diverged"},
        {"seed": 1},
        {"environment": {"cpu": {**CPU, "model": "Another CPU"}}},
        {"environment": {}},
    ],
    ids=[
        "other-version",
        "failed",
        "diverged",
        "other-seed-inside",
        "other-cpu-model",
        "cpu-not-recorded",
    ],
)
def test_only_done_records_of_this_version_key_and_seed_are_twins(tmp_path, fields):
    results = tmp_path / "results"
    _write(results, "a", f"code-{KEY}-s0.json", **fields)
    assert find_twin(results, "b", KEY, 0, "v1", MACHINE) is None


def test_records_of_the_same_matrix_stale_copies_and_unreadable_files_are_not_twins(tmp_path):
    results = tmp_path / "results"
    _write(results, "b", f"code-{KEY}-s0.json")  # the same matrix: the run itself
    _write(results, "a", f"code-{KEY}-s0.stale.json")  # set aside as stale
    _write(results, "_work", f"code-{KEY}-s0.json")  # training state, not a record
    (results / "c").mkdir()
    (results / "c" / f"code-{KEY}-s0.json").write_text("{truncated")
    assert find_twin(results, "b", KEY, 0, "v1", MACHINE) is None
    good = _write(results, "d", f"laps-{KEY}-s0.json")
    assert find_twin(results, "b", KEY, 0, "v1", None) is None  # this machine unknown
    path, rec = find_twin(results, "b", KEY, 0, "v1", MACHINE)
    assert path == good and rec["matrix"] == "d-matrix"


def test_a_copy_takes_every_label_from_its_run_and_the_rest_from_its_twin(tmp_path):
    results = tmp_path / "results"
    path = _write(results, "a", f"code-{KEY}-s0.json")
    twin = read_record(path)
    labels = {k: f"b-{k}" for k in LABELS}
    rec = copy_record(twin, path, results, labels)
    assert {k: rec[k] for k in LABELS} == labels
    assert rec["metrics"] == twin["metrics"] and rec[COPIED_FROM] == f"a/code-{KEY}-s0.json"
    with pytest.raises(ValueError, match="labels lack run_id"):
        copy_record(twin, path, results, {k: v for k, v in labels.items() if k != "run_id"})
