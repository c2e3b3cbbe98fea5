"""Where a profile sums the triplet in every epoch (``standard``), the official schedule
is its own run (``align/official-schedule``): Table 2 labels the two trainings apart
and the ratio grid keeps only the profile's schedule."""

from __future__ import annotations

import pandas as pd

from seps.core.config import get_config
from seps.report.loss_records import SUMMED_TRIPLET, align_rows, completed_runs, ratio_rows


def _record(run_id: str, key: str, seed: int, hardest_from: int, rsum: float, **head) -> dict:
    cfg = get_config("paper")
    head_config = {
        k: getattr(cfg, k)
        for k in ("decision", "ratio_loss", "ratio_criterion", "ratio_weight", "sparse_ratio")
    }
    head_config["align_loss"] = "triplet"
    head_config.update(head)
    return {
        "run_id": run_id,
        "key": key,
        "seed": seed,
        "profile": "standard",
        "status": "done",
        "rsum": rsum,
        "head_config": head_config,
        "train_config": {"epochs": 2, "max_violation_from": hardest_from},
        "dense_source": "candidate",
        "history": [],
    }


def _frame() -> pd.DataFrame:
    rows = []
    for seed in (0, 1):
        # The profile's own schedule (99: never the hardest negative), stored under two
        # run ids with one key, as the matrix stores the paper default.
        rows.append(_record("align/triplet", "aaa", seed, 99, 150.0 + seed))
        rows.append(_record("ratio/topk/mse/unified", "aaa", seed, 99, 150.0 + seed))
        rows.append(_record("align/official-schedule", "bbb", seed, 1, 120.0 + seed))
        rows.append(
            _record("align/triplet_sum", "ccc", seed, 99, 150.0 + seed, align_loss="triplet_sum")
        )
    return pd.DataFrame(rows)


def test_official_schedule_is_table_2s_triplet_row_and_the_profiles_is_labelled_summed():
    rows = {r["align_loss"]: r for r in align_rows(completed_runs(_frame()))}
    assert set(rows) == {"triplet", SUMMED_TRIPLET, "triplet_sum"}
    assert rows["triplet"]["rsum_by_seed"] == {0: 120.0, 1: 121.0}
    assert rows[SUMMED_TRIPLET]["rsum_by_seed"] == {0: 150.0, 1: 151.0}
    assert rows["triplet"]["seeds"] == 2 and rows[SUMMED_TRIPLET]["seeds"] == 2


def test_ratio_grid_keeps_only_the_profiles_schedule():
    paper = get_config("paper")
    (cell,) = ratio_rows(completed_runs(_frame()))
    assert (cell["decision"], cell["criterion"], cell["form"]) == (
        paper.decision,
        paper.ratio_criterion,
        paper.ratio_loss,
    )
    assert cell["rsum_by_seed"] == {0: 150.0, 1: 151.0} and cell["seeds"] == 2


def test_the_official_schedule_keeps_the_triplet_label_where_the_profile_uses_it():
    # A `synth48` record (2 epochs, the hardest negative from epoch 1) and a
    # one-epoch `smoke` record at the default: neither chose to sum in every epoch.
    frame = pd.DataFrame(
        [
            {**_record("align/triplet", "ddd", 0, 1, 200.0), "profile": "synth48"},
            {
                **_record("align/triplet", "eee", 1, 1, 201.0),
                "profile": "smoke",
                "train_config": {"epochs": 1, "max_violation_from": 1},
            },
        ]
    )
    rows = {r["align_loss"]: r for r in align_rows(completed_runs(frame))}
    assert set(rows) == {"triplet"} and rows["triplet"]["seeds"] == 2
