"""`seps-bench same-bits`: a rerun's records against the stored ones, bit for bit."""

from __future__ import annotations

import json

import pytest

from seps.cli import main
from seps.io.store import SCHEMA
from seps.report.same_bits import compare_records, compare_stores, numbers
from seps.runtime.float_path import FLOAT_PATHS

AMD = {"model": "AMD EPYC", "torch_capability": "AVX2", "numpy_dispatch": ["X86_V3"],
       "overrides": {}}  # fmt: skip


def _record(rsum=180.0, loss=1.5, seconds=10.0, cpu=AMD, version="v1", weights="w1"):
    return {
        "schema": SCHEMA,
        "status": "done",
        "code_version": version,
        "pretrain_fingerprint": weights,
        "train_config": {"pretrain": "synth-48"},
        "environment": {"cpu": cpu},
        "wall_seconds": seconds,
        "metrics": {"i2t_r1": 10.0, "rsum": rsum},
        "history": [{"loss": loss, "seconds": seconds, "train_pairs_per_second": 1 / seconds,
                     "steps_log": [{"loss": loss, "step": 0}], "val": {"rsum": rsum}}],
    }  # fmt: skip


def _store(root, records):
    for name, rec in records.items():
        path = root / "m" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(rec))
    return root


def test_numbers_are_the_metrics_and_history_without_times():
    got = numbers(_record())
    assert got == {
        "metrics.i2t_r1": 10.0,
        "metrics.rsum": 180.0,
        "history.0.loss": 1.5,
        "history.0.steps_log.0.loss": 1.5,
        "history.0.steps_log.0.step": 0,
        "history.0.val.rsum": 180.0,
    }


def test_a_rerun_that_differs_only_in_its_times_has_the_same_bits():
    pair = compare_records("m/r", _record(seconds=10.0), _record(seconds=99.0))
    assert pair.same and pair.first_difference is None


def test_a_difference_names_rsum_first_and_what_else_differs():
    other_cpu = {**AMD, "model": "Intel Xeon"}
    pair = compare_records("m/r", _record(), _record(rsum=186.4, loss=1.25, cpu=other_cpu))
    assert not pair.same
    assert pair.first_difference == "metrics.rsum: 180.0 vs 186.4"
    assert pair.same_code and pair.same_machine is False and pair.same_weights
    # Pinned to one float path, another CPU model is still another machine.
    pinned = {**AMD, "overrides": {"SEPS_FLOAT_PATH": "portable", **FLOAT_PATHS["portable"]}}
    pair = compare_records(
        "m/r", _record(cpu=pinned), _record(rsum=186.4, cpu={**pinned, "model": "Intel Xeon"})
    )
    assert pair.same_machine is False
    assert compare_records("m/r", _record(cpu=pinned), _record(rsum=1.0, cpu=pinned)).same_machine
    # One last bit in one step's loss is a difference too.
    pair = compare_records("m/r", _record(), _record(loss=1.5000000000000002, weights="w2"))
    assert pair.first_difference == "history.0.loss: 1.5 vs 1.5000000000000002"
    assert pair.same_weights is False
    # Records made before the stamps cannot say.
    old = {**_record(), "environment": {}, "pretrain_fingerprint": None}
    pair = compare_records("m/r", old, _record(rsum=1.0))
    assert pair.same_machine is None and pair.same_weights is None


def test_stores_are_paired_by_record_name_and_the_rest_counted(tmp_path):
    a = _store(tmp_path / "a", {"x-0123456789abcdef-s0.json": _record(),
                                "y-0123456789abcdef-s0.json": _record()})  # fmt: skip
    b = _store(tmp_path / "b", {"x-0123456789abcdef-s0.json": _record(seconds=5.0)})
    pairs, only_a, only_b = compare_stores(a, b)
    assert [p.name for p in pairs] == ["m/x-0123456789abcdef-s0.json"]
    assert pairs[0].same and (only_a, only_b) == (1, 0)


def test_same_bits_exits_0_when_all_match_1_when_any_differs_2_on_bad_input(tmp_path, capsys):
    a = _store(tmp_path / "a", {"x-0123456789abcdef-s0.json": _record()})
    b = _store(tmp_path / "b", {"x-0123456789abcdef-s0.json": _record(seconds=3.0)})
    c = _store(tmp_path / "c", {"x-0123456789abcdef-s0.json": _record(rsum=1.0)})
    assert main(["same-bits", str(a), str(b)]) == 0
    assert "1 record in both stores: 1 with the same bits, 0 different" in capsys.readouterr().out
    assert main(["same-bits", str(a), str(c)]) == 1
    assert "metrics.rsum: 180.0 vs 1.0" in capsys.readouterr().out
    assert main(["same-bits", str(a), str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("seps-bench same-bits: error: ") and "none: not a folder" in err
    (tmp_path / "c" / "m" / "x-0123456789abcdef-s0.json").write_text("{trunc")
    assert main(["same-bits", str(a), str(c)]) == 2
    assert "invalid JSON" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_same_bits_help_explains_both_stores(flag, capsys):
    with pytest.raises(SystemExit):
        main(["same-bits", flag])
    out = capsys.readouterr().out
    assert "--results NEWDIR" in out and "exit 1 when any record differs" in out


def test_a_record_without_an_environment_compares_with_its_float_path_unknown():
    bare = {**_record(), "environment": None}
    pair = compare_records("m/r", bare, _record(rsum=181.0))
    assert not pair.same and pair.same_machine is None


def test_a_history_field_only_newer_code_records_is_not_a_difference_but_a_metric_is():
    old = {"metrics": {"rsum": 186.4}, "history": [{"loss": 1.5}]}
    new = {"metrics": {"rsum": 186.4}, "history": [{"loss": 1.5, "grad_share": {"a": 1.0}}]}
    pair = compare_records("m/r-k-s0.json", old, new)
    assert pair.same and pair.added == ("history.0.grad_share.a",)
    changed = {"metrics": {"rsum": 186.4}, "history": [{"loss": 1.6, "grad_share": {"a": 1.0}}]}
    assert not compare_records("m/r-k-s0.json", old, changed).same
    extra_metric = {"metrics": {"rsum": 186.4, "r1": 1.0}, "history": [{"loss": 1.5}]}
    assert not compare_records("m/r-k-s0.json", old, extra_metric).same
    extra_epoch = {"metrics": {"rsum": 186.4}, "history": [{"loss": 1.5}, {"loss": 1.2}]}
    assert not compare_records("m/r-k-s0.json", old, extra_epoch).same
    steps = {"metrics": {"rsum": 186.4}, "history": [{"loss": 1.5, "log": [1.0, 2.0]}]}
    fewer = {"metrics": {"rsum": 186.4}, "history": [{"loss": 1.5, "log": [1.0]}]}
    assert not compare_records("m/r-k-s0.json", steps, fewer).same


def test_stores_with_no_record_in_common_are_refused_not_passed(tmp_path, capsys):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    assert main(["same-bits", str(first), str(second)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "no record is in both stores" in err


def test_a_scorecard_of_a_missing_store_is_refused(tmp_path, capsys):
    out = tmp_path / "card.md"
    assert main(["scorecard", "--results", str(tmp_path / "none"), "--output", str(out)]) == 2
    assert "--results" in capsys.readouterr().err and not out.exists()
