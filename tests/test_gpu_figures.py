"""The latency report's GPU section (seps.bench.gpu_figures): read from the GPU check's
files, labelled with the card, silent when there are none."""

from __future__ import annotations

import json
from pathlib import Path

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
    train = {"profile": "paper", "rows": [{"preset": "laps", "batch": 64, "step_ms_median": 209.4}]}
    for name, data in (("kernels", kernels), ("eval", evals), ("train", train)):
        (folder / f"{name}.json").write_text(json.dumps(data))


def test_each_call_folder_is_labelled_with_its_card_and_figures(tmp_path):
    _call(tmp_path / "gpu" / "h200-abc")
    text = "\n".join(gpu_lines(tmp_path / "gpu"))
    assert "### NVIDIA H200: `h200-abc`" in text
    assert "| 1000 x 5000 evaluation, `candidate` | 10.3 s (485,610 pairs/s) |" in text
    assert "batched 6.0x" in text and "loop 1.0x" not in text
    assert "`laps` 209 ms" in text and "B = 64" in text
    assert "partial" not in text


def test_a_step_stopped_by_its_limit_is_marked_partial(tmp_path):
    _call(tmp_path / "gpu" / "h200-abc", partial_eval=True)
    assert "| eval step | stopped by its time limit (partial) |" in gpu_lines(tmp_path / "gpu")


def test_folders_are_listed_in_name_order(tmp_path):
    _call(tmp_path / "gpu" / "b")
    _call(tmp_path / "gpu" / "a")
    heads = [line for line in gpu_lines(tmp_path / "gpu") if line.startswith("### ")]
    assert [h.split("`")[1] for h in heads] == ["a", "b"]


def test_no_gpu_files_means_no_section(tmp_path):
    assert gpu_lines(tmp_path / "missing") == []
    (tmp_path / "gpu" / "empty").mkdir(parents=True)
    (tmp_path / "gpu" / "README.md").write_text("x")
    assert gpu_lines(tmp_path / "gpu") == []


def test_unreadable_json_is_skipped_not_raised(tmp_path):
    folder = tmp_path / "gpu" / "broken"
    folder.mkdir(parents=True)
    (folder / "eval.json").write_text("{not json")
    assert gpu_lines(tmp_path / "gpu") == []
