"""The `protocols` report section (seps.report.protocols): the preset x protocol pivot."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from seps.report.protocols import PAIRS, protocol_cells, protocol_section


def _records(rows):
    out = []
    for run_id, preset, describe, train, ev, values in rows:
        for seed, rsum in enumerate(values):
            out.append(
                dict(
                    profile="standard",
                    run_id=run_id,
                    preset=preset,
                    describe=describe,
                    status="done",
                    seed=seed,
                    rsum=rsum,
                    train_dense_source=train,
                    eval_dense_source=ev,
                )
            )
    return pd.DataFrame(out)


RECORDS = _records(
    [
        ("laps", "laps", "(preset)", "candidate", "candidate", [170.0, 172.0, 174.0]),
        # detach_selection=True is the code preset's own value: the plain preset.
        ("code/d=true", "code", "detach_selection=True", "candidate", "candidate", [160.0, 162.0]),
        # A real switch: not a protocol-only run, never in the pivot.
        ("code/d=false", "code", "detach_selection=False", "candidate", "candidate", [1.0, 2.0]),
        ("code/q", "code", "dense_source=query", "query", "query", [330.0, 340.0]),
        (
            "code/q/c",
            "code",
            "dense_source=query, eval_dense_source=candidate",
            "query",
            "candidate",
            [158.0, 159.0],
        ),
        ("paper/none", "paper", "dense_source=none", "none", "none", [177.0, 178.0]),
    ]
)


def test_cells_keep_protocol_only_runs_and_skip_runs_with_a_real_switch():
    cells = protocol_cells(RECORDS)["standard"]
    assert list(cells) == ["code", "paper", "laps"]  # registry order
    assert cells["code"][("candidate", "candidate")] == ("code/d=true", [160.0, 162.0])
    assert cells["code"][("query", "query")][1] == [330.0, 340.0]
    assert cells["code"][("query", "candidate")][1] == [158.0, 159.0]
    assert set(cells["paper"]) == {("none", "none")}
    assert set(cells["laps"]) == {("candidate", "candidate")}


def test_failed_records_do_not_enter():
    frame = RECORDS.copy()
    frame.loc[frame["run_id"] == "code/q", "status"] = "failed"
    assert ("query", "query") not in protocol_cells(frame)["standard"]["code"]


def test_section_table_and_plot_show_the_means(tmp_path):
    lines, plots, drawn = protocol_section(RECORDS, "m", tmp_path, family=None)
    text = "\n".join(lines)
    assert "## Dense-caption protocols" in text
    row = next(line for line in text.splitlines() if line.startswith("| `code`"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1].startswith("335.0 ± ")  # query / query
    assert cells[2].startswith("161.0 ± ")  # candidate / candidate, from code/d=true
    assert cells[3] == "—"  # none / none: not measured
    assert list(plots.values()) == ["m-protocols.png"]
    assert (tmp_path / "m-protocols.png").stat().st_size > 0
    heights = drawn["standard"]["code"]
    assert heights[PAIRS.index(("query", "query"))] == pytest.approx(335.0)
    assert math.isnan(heights[PAIRS.index(("none", "none"))])
    assert drawn["standard"]["laps"][PAIRS.index(("candidate", "candidate"))] == pytest.approx(
        172.0
    )


def test_no_protocol_runs_gives_no_section_and_removes_a_stale_plot(tmp_path):
    stale = tmp_path / "m-protocols.png"
    stale.write_bytes(b"old")
    only_switch = RECORDS[RECORDS["run_id"] == "code/d=false"]
    assert protocol_section(only_switch, "m", tmp_path, family=None) == ([], {}, {})
    assert not stale.exists()
