"""The latency report's GPU section (seps.bench.gpu_figures): read from the GPU check's
files, labelled with the card, silent when there are none."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from seps.bench.gpu_figures import gpu_lines


def _call(folder: Path, partial_eval: bool = False) -> None:
    folder.mkdir(parents=True)
    env = {"gpu": "NVIDIA H200", "torch": "2.11.0", "cuda": "13.0"}
    kernels = {"env": env, "images": 16, "texts": 128, "rows": [
        {"impl": "loop", "head_eval_speedup_vs_loop": 1.0, "sims_equal": True},
        {"impl": "batched", "head_eval_speedup_vs_loop": 6.04, "sims_equal": True},
    ]}  # fmt: skip
    rows = [{"layout": "candidate (fair)", "images": 1000, "texts": 5000, "seconds": 10.3,
             "pairs_per_s": 485610.0}]  # fmt: skip
    evals = {"rows": rows, "partial": partial_eval}
    train = {
        "profile": "paper",
        "precision": "bf16 autocast",
        "rows": [{"preset": "laps", "batch": 64, "step_ms_median": 209.4}],
    }
    for name, data in (("kernels", kernels), ("eval", evals), ("train", train)):
        (folder / f"{name}.json").write_text(json.dumps(data))


def test_each_call_folder_is_labelled_with_its_card_and_figures(tmp_path):
    _call(tmp_path / "gpu" / "h200-abc")
    text = "\n".join(gpu_lines(tmp_path / "gpu"))
    assert "### NVIDIA H200 (torch 2.11.0, CUDA 13.0): `h200-abc`" in text
    assert "| 1000 x 5000 evaluation, `candidate` | 10.3 s (485,610 pairs/s) |" in text
    assert "batched 6.0x" in text and "loop 1.0x" not in text
    assert "`laps` 209 ms" in text and "B = 64, bf16 autocast" in text
    assert "partial" not in text


def test_a_preset_timed_both_ways_is_one_entry_with_its_per_image_time(tmp_path):
    _call(tmp_path / "gpu" / "h200-abc")
    train = {"profile": "paper", "precision": "bf16 autocast", "rows": [
        {"preset": "code", "alignment": "blocks", "batch": 64, "step_ms_median": 213.6},
        {"preset": "code", "alignment": "per image", "batch": 64, "step_ms_median": 483.2},
    ]}  # fmt: skip
    (tmp_path / "gpu" / "h200-abc" / "train.json").write_text(json.dumps(train))
    text = "\n".join(gpu_lines(tmp_path / "gpu"))
    assert "| `code` 214 ms (483 ms one image per call) |" in text


def test_a_step_stopped_by_its_limit_is_marked_partial(tmp_path):
    _call(tmp_path / "gpu" / "h200-abc", partial_eval=True)
    assert "| eval step | stopped by its time limit (partial) |" in gpu_lines(tmp_path / "gpu")


def test_folders_are_listed_in_the_order_their_summaries_date_them(tmp_path):
    for name, written in (("a-late", "2026-11-28 10:00:00"), ("z-early", "2026-11-27 09:00:00")):
        _call(tmp_path / "gpu" / name)
        (tmp_path / "gpu" / name / "summary.md").write_text(
            f"# GPU check\n\nWritten {written} UTC.\n"
        )
    heads = [line for line in gpu_lines(tmp_path / "gpu") if line.startswith("### ")]
    assert [h.split("`")[1] for h in heads] == ["z-early", "a-late"]


def test_a_step_that_failed_or_timed_out_is_listed_from_steps_json(tmp_path):
    folder = tmp_path / "gpu" / "h200-abc"
    _call(folder)
    steps = [
        {"step": "eval", "status": "ok", "exit_code": "0", "seconds": 41},
        {"step": "bench-report", "status": "TIMEOUT", "exit_code": "124", "seconds": 101},
    ]
    (folder / "steps.json").write_text(json.dumps(steps))
    text = "\n".join(gpu_lines(tmp_path / "gpu"))
    assert "| bench-report step | TIMEOUT (exit 124 after 101 s) |" in text
    assert "| eval step |" not in text


def test_a_timed_out_step_is_one_row_not_two(tmp_path):
    folder = tmp_path / "gpu" / "h200-abc"
    _call(folder, partial_eval=True)
    steps = [{"step": "eval", "status": "TIMEOUT", "exit_code": "124", "seconds": 240}]
    (folder / "steps.json").write_text(json.dumps(steps))
    eval_rows = [x for x in gpu_lines(tmp_path / "gpu") if x.startswith("| eval step")]
    assert eval_rows == ["| eval step | TIMEOUT (exit 124 after 240 s) |"]


def test_the_card_comes_from_the_summary_when_kernels_json_is_missing(tmp_path):
    folder = tmp_path / "gpu" / "h100-abc"
    _call(folder)
    (folder / "kernels.json").unlink()
    (folder / "summary.md").write_text("# GPU check\n\n- gpu: NVIDIA H100 80GB HBM3\n")
    assert "### NVIDIA H100 80GB HBM3: `h100-abc`" in gpu_lines(tmp_path / "gpu")


def test_the_card_comes_from_another_step_file_when_kernels_json_is_missing(tmp_path):
    folder = tmp_path / "gpu" / "h200-abc"
    _call(folder)
    (folder / "kernels.json").unlink()
    train = json.loads((folder / "train.json").read_text())
    train["env"] = {"gpu": "NVIDIA H200", "torch": "2.11.0", "cuda": "13.0"}
    (folder / "train.json").write_text(json.dumps(train))
    assert "### NVIDIA H200 (torch 2.11.0, CUDA 13.0): `h200-abc`" in gpu_lines(tmp_path / "gpu")


def test_no_gpu_files_means_no_section(tmp_path):
    assert gpu_lines(tmp_path / "missing") == []
    (tmp_path / "gpu" / "empty").mkdir(parents=True)
    (tmp_path / "gpu" / "README.md").write_text("x")
    assert gpu_lines(tmp_path / "gpu") == []


@pytest.mark.parametrize(
    "eval_json",
    [
        {"rows": None},
        {"rows": [None, "x"]},
        {"rows": [{"seconds": 1.0, "pairs_per_s": None}]},
        {"rows": [{"seconds": "1.0"}]},
    ],
    ids=["rows-null", "rows-not-dicts", "rate-null", "seconds-text"],
)
def test_odd_fields_never_raise(tmp_path, eval_json):
    folder = tmp_path / "gpu" / "odd"
    _call(folder)
    (folder / "eval.json").write_text(json.dumps(eval_json))
    (folder / "kernels.json").write_text(json.dumps({"rows": [{"head_eval_speedup_vs_loop": 2}]}))
    (folder / "train.json").write_text(json.dumps({"rows": [{"preset": None}], "profile": 3}))
    gpu_lines(tmp_path / "gpu")  # no exception: the report it is appended to survives


def test_unreadable_json_is_skipped_not_raised(tmp_path):
    folder = tmp_path / "gpu" / "broken"
    folder.mkdir(parents=True)
    (folder / "eval.json").write_text("{not json")
    assert gpu_lines(tmp_path / "gpu") == []
