"""A record made under an earlier definition of its matrix or profile is not current:
a report never pairs it with a record of the definition as it stands."""

from __future__ import annotations

import dataclasses

import pandas as pd

from seps.experiments.definitions import config_key, load_matrix, load_profile, resolve
from seps.report.definition import off_definition
from seps.report.records import current_records


def _record(
    run_id: str, seed: int, started: float, head_changes: dict | None = None, **train_changes
) -> dict:
    matrix = load_matrix("controls")
    train_cfg, head = resolve(matrix.run(run_id), load_profile("standard"), seed)
    train_cfg = dataclasses.replace(train_cfg, **train_changes)
    head = dataclasses.replace(head, **(head_changes or {}))
    train = train_cfg.to_dict()
    return {
        "key": config_key(train_cfg, head),
        "run_id": run_id,
        "seed": seed,
        "profile": "standard",
        "started": started,
        "file": f"{run_id}-{seed}-{started}.json",
        "status": "done",
        "train_config": train,
        "head_config": head.to_dict(),
    }


def test_a_record_of_the_profiles_earlier_schedule_is_superseded_without_a_newer_one():
    matrix = load_matrix("controls")
    frame = pd.DataFrame(
        [
            _record("laps", 0, 2.0),  # the definition now
            _record("laps/untrained", 0, 1.0, max_violation_from=1),  # an earlier one
        ]
    )
    assert list(off_definition(frame, matrix)) == [False, True]
    cur, old = current_records(frame, matrix)
    assert list(cur["run_id"]) == ["laps"] and list(old["run_id"]) == ["laps/untrained"]
    # Without the matrix, the latest record of each run and seed is current, as before.
    cur, old = current_records(frame)
    assert len(cur) == 2 and old.empty


def test_a_field_the_definition_does_not_set_is_not_compared():
    # --set of a field neither the profile nor the run sets: the definition's run with an
    # addition, not an earlier definition.
    frame = pd.DataFrame([_record("laps", 0, 1.0, eval_image_shard=7)])
    assert list(off_definition(frame, load_matrix("controls"))) == [False]


def test_a_record_of_an_undefined_profile_is_kept():
    frame = pd.DataFrame([{**_record("laps", 0, 1.0, lr=1.0), "profile": "nowhere"}])
    assert list(off_definition(frame, load_matrix("controls"))) == [False]


def test_a_record_written_by_hand_is_taken_as_it_is():
    # Its key is not the key of the configs it stores: nothing says which run made it.
    rec = {**_record("laps/untrained", 0, 1.0, max_violation_from=1), "key": "k0"}
    assert list(off_definition(pd.DataFrame([rec]), load_matrix("controls"))) == [False]


def test_a_record_of_the_profiles_earlier_loss_is_superseded():
    # The standard profile sets head.align_loss (InfoNCE since 2026-11-28): a laps record
    # made under the summed triplet before that is another definition's run.
    rec = _record("laps", 0, 1.0)
    earlier = _record("laps", 0, 0.5, head_changes={"align_loss": "triplet"})
    frame = pd.DataFrame([rec, earlier])
    assert rec["head_config"]["align_loss"] == "infonce"
    assert list(off_definition(frame, load_matrix("controls"))) == [False, True]
